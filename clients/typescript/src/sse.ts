/*
 * sse.ts — the live event stream, GET /v1/events (Server-Sent Events),
 * read from fetch's body (so it runs on Node without EventSource, and
 * can send the Authorization header, which EventSource cannot).
 *
 * The stream (docs/PROTOCOL.md): each event is an `id: <seq>` line, a
 * `data: <event document>` line and an empty line; `: keepalive` comment
 * lines are heartbeats; the server may end a stream at any time. The
 * iterator reconnects with `Last-Event-ID: <last seq>` and yields each
 * event once, in seq order (anything not above the last seq it yielded
 * is dropped). Parsing follows the WHATWG EventSource rules: lines end in
 * LF, CRLF or CR, `field: value` with one optional space, a leading BOM
 * ignored, `retry:` sets the reconnection delay.
 */

import { Fault, TallyError, errorFor } from "./errors.js";
import type { EventDocument, Int, IntInput } from "./types.js";

export interface TailOptions {
  /** The first seq wanted; default: only events committed from now on. */
  from?: IntInput;
  /** Resume after this seq (a `Last-Event-ID` kept from an earlier tail); wins over `from`. */
  lastEventId?: IntInput;
  signal?: AbortSignal;
  /** Reconnect when nothing (not even a heartbeat) came for this long (default 60000 ms). */
  idleTimeoutMs?: number;
  /** The first wait before reconnecting after a failure (default 100 ms, doubling to 5000). */
  reconnectDelayMs?: number;
}

/** One dispatched SSE message. */
export interface SseMessage {
  id: string | undefined;
  event: string;
  data: string;
}

/** What the tail needs of the client. */
export interface TailTransport {
  baseUrl: string;
  fetch: typeof fetch;
  headers: () => Record<string, string>;
  /** The current head seq (for "only new events" that survive a reconnect). */
  head: (signal: AbortSignal) => Promise<Int>;
}

/**
 * An SSE parser: feed it decoded text as it comes, get the messages each
 * chunk completes. `retry` is the last `retry:` value seen.
 */
export class SseParser {
  private buffer = "";
  private data: string[] = [];
  private event = "";
  private id: string | undefined;
  private lastId: string | undefined;
  private started = false;
  private pendingCr = false;
  retry: number | undefined;

  /** The messages completed by `chunk`. */
  push(chunk: string): SseMessage[] {
    let text = chunk;
    if (!this.started && text.length > 0) {
      this.started = true;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    if (this.pendingCr && text.startsWith("\n")) text = text.slice(1); // the LF of a CRLF split across chunks
    this.pendingCr = false;
    this.buffer += text;
    const out: SseMessage[] = [];
    let start = 0;
    for (let i = 0; i < this.buffer.length; i++) {
      const c = this.buffer.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      this.line(this.buffer.slice(start, i), out);
      if (c === 13) {
        if (i + 1 < this.buffer.length) {
          if (this.buffer.charCodeAt(i + 1) === 10) i++;
        } else {
          this.pendingCr = true;
        }
      }
      start = i + 1;
    }
    this.buffer = this.buffer.slice(start);
    return out;
  }

  private line(line: string, out: SseMessage[]): void {
    if (line === "") {
      if (this.id !== undefined) this.lastId = this.id;
      if (this.data.length > 0) out.push({ id: this.lastId, event: this.event || "message", data: this.data.join("\n") });
      this.data = [];
      this.event = "";
      this.id = undefined;
      return;
    }
    if (line.startsWith(":")) return; // a comment: the heartbeat
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "data":
        this.data.push(value);
        break;
      case "event":
        this.event = value;
        break;
      case "id":
        if (!value.includes("\0")) this.id = value;
        break;
      case "retry":
        if (/^\d+$/.test(value)) this.retry = Number(value);
        break;
      default:
        break; // unknown fields are ignored
    }
  }
}

/** Parse a body stream into SSE messages. */
async function* sseMessages(body: ReadableStream<Uint8Array>, parser: SseParser, onChunk: () => void): AsyncGenerator<SseMessage> {
  const reader = body.getReader();
  const decoder = new TextDecoder("utf-8");
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      onChunk();
      for (const m of parser.push(decoder.decode(value, { stream: true }))) yield m;
    }
    // An event cut off before its empty line is not dispatched (WHATWG).
    for (const m of parser.push(decoder.decode())) yield m;
  } finally {
    reader.cancel().catch(() => undefined);
  }
}

/** An event's document; a data line that is not one would come again on every reconnect, so it throws. */
function parseEvent(data: string): EventDocument {
  try {
    const doc: unknown = JSON.parse(data);
    if (doc !== null && typeof doc === "object" && !Array.isArray(doc)) return doc as EventDocument;
  } catch {
    /* below */
  }
  throw new Fault("corrupt_record", `the event stream sent data that is not an event document: ${data.slice(0, 120)}`);
}

function seqOf(doc: EventDocument, id: string | undefined): bigint | undefined {
  const v = doc.seq ?? id;
  if (v === undefined || v === null) return undefined;
  try {
    return BigInt(v as string | number);
  } catch {
    return undefined;
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done(): void {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

/** Statuses after which a reconnect may succeed. */
const RETRY_STATUSES = new Set([502, 503, 504]);

/**
 * The iterator behind TallyClient.events: connect, yield what comes,
 * reconnect from the last seq; an error reply before the stream starts
 * throws (4xx, 500) or is retried (502-504, no reply).
 */
export async function* tailEvents(t: TailTransport, options: TailOptions): AsyncGenerator<EventDocument, void, undefined> {
  const stop = new AbortController();
  const onAbort = (): void => stop.abort();
  options.signal?.addEventListener("abort", onAbort, { once: true });
  if (options.signal?.aborted) stop.abort();
  const idleMs = options.idleTimeoutMs ?? 60000;
  const firstDelay = options.reconnectDelayMs ?? 100;
  let last: bigint | undefined = options.lastEventId !== undefined ? BigInt(options.lastEventId) : undefined;
  let from: bigint | undefined = options.from !== undefined ? BigInt(options.from) : undefined;
  let wait = firstDelay;
  try {
    // "Only new events" must survive a reconnect before the first event:
    // it is "from the head + 1 at the start", fixed once.
    if (last === undefined && from === undefined) from = BigInt(await t.head(stop.signal)) + 1n;
    while (!stop.signal.aborted) {
      const attempt = new AbortController();
      const abortAttempt = (): void => attempt.abort();
      stop.signal.addEventListener("abort", abortAttempt, { once: true });
      let idle: ReturnType<typeof setTimeout> | undefined;
      const touch = (): void => {
        clearTimeout(idle);
        idle = setTimeout(() => attempt.abort(), idleMs);
      };
      const parser = new SseParser();
      try {
        const headers: Record<string, string> = { Accept: "text/event-stream", ...t.headers() };
        let url = `${t.baseUrl}/v1/events`;
        if (last !== undefined) headers["Last-Event-ID"] = last.toString();
        else url += `?from=${from!.toString()}`;
        touch();
        const res = await t.fetch(url, { headers, signal: attempt.signal });
        const type = res.headers.get("Content-Type") ?? "";
        if (!res.ok || !type.startsWith("text/event-stream") || res.body === null) {
          const text = await res.text().catch(() => "");
          let body: Record<string, unknown> = {};
          try {
            body = JSON.parse(text) as Record<string, unknown>;
          } catch {
            /* not JSON */
          }
          const code = typeof body.code === "string" ? body.code : res.ok ? "malformed_request" : "unreachable";
          const err = errorFor(code, typeof body.message === "string" ? body.message : `HTTP ${res.status} ${type}`, {
            status: res.status,
            reply: body,
          });
          if (!RETRY_STATUSES.has(res.status)) throw err;
          throw new RetryableTail(err);
        }
        wait = firstDelay;
        for await (const m of sseMessages(res.body, parser, touch)) {
          if (m.event !== "message") continue;
          const doc = parseEvent(m.data);
          const seq = seqOf(doc, m.id);
          if (seq === undefined) continue;
          if (last !== undefined && seq <= last) continue; // seen before a reconnect: once only
          if (last === undefined && from !== undefined && seq < from) continue;
          last = seq;
          yield doc;
        }
      } catch (e) {
        if (stop.signal.aborted) return;
        if (e instanceof TallyError) throw e; // refused: reconnecting will not help
        // the connection broke, went idle, or the server is busy: reconnect
      } finally {
        clearTimeout(idle);
        stop.signal.removeEventListener("abort", abortAttempt);
        attempt.abort();
      }
      if (stop.signal.aborted) return;
      await sleep(Math.max(wait, parser.retry ?? 0), stop.signal);
      wait = Math.min(wait * 2, 5000);
    }
  } finally {
    options.signal?.removeEventListener("abort", onAbort);
    stop.abort();
  }
}

/** A refusal worth a reconnect (502-504): not a TallyError, so the loop retries. */
class RetryableTail extends Error {
  constructor(readonly error: TallyError) {
    super(error.message);
  }
}
