/*
 * tail.test.ts — the SSE tail against the stream's contract
 * (docs/PROTOCOL.md, GET /v1/events), served by an HTTP server of the
 * test's that ends streams, replays an event, splits lines across
 * chunks, sends heartbeats and goes silent; against a real tallyd whose
 * streams end after a second (--http-stream-max-s 1); and the parser
 * alone.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { TallyClient, SseParser, RefusedRequest, Fault, type EventDocument } from "../src/index.js";
import { startTallyd, waitFor, slowdown } from "./support.js";

function doc(seq: number): EventDocument {
  return {
    seq, event_id: `0000000${seq}-0000-7000-8000-000000000000`, type: "account.opened", entity_kind: "account",
    entity: { kind: "account", id: seq }, entity_version: 1, time: "2026-12-03T08:30:00.250Z", time_ms: 1796286600250,
    consumer: "shop", key: `open-${seq}`, data: {},
  };
}

type Script = (req: IncomingMessage, res: ServerResponse, n: number) => void;

async function serve(script: Script): Promise<{ url: string; requests: IncomingMessage[]; close: () => Promise<void> }> {
  const requests: IncomingMessage[] = [];
  const server = createServer((req, res) => {
    if (req.url?.startsWith("/v1/stats")) {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ v: 1, code: "ok", head_seq: 4 }));
      return;
    }
    requests.push(req);
    script(req, res, requests.length);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => {
      server.closeAllConnections();
      return new Promise((r) => server.close(() => r()));
    },
  };
}

const streamHead = (res: ServerResponse): void => {
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-store" });
};
const frame = (seq: number, eol = "\n"): string => `id: ${seq}${eol}data: ${JSON.stringify(doc(seq))}${eol}${eol}`;

test("each event once, in order, across reconnects with Last-Event-ID", { timeout: 60000 * slowdown }, async () => {
  // The log is events 1-7; each connection starts where the client asked
  // (Last-Event-ID + 1, else from), and its number decides its shape.
  const resume = (req: IncomingMessage): number => {
    const id = req.headers["last-event-id"];
    if (typeof id === "string") return Number(id) + 1;
    return Number(new URL(req.url!, "http://x").searchParams.get("from") ?? 1);
  };
  const upTo = (from: number, last: number, eol = "\n"): string => {
    let text = "";
    for (let seq = from; seq <= Math.min(last, 7); seq++) text += frame(seq, seq % 3 === 2 ? "\r\n" : seq % 3 === 0 ? "\r" : eol);
    return text;
  };
  const srv = await serve((req, res, n) => {
    streamHead(res);
    const start = resume(req);
    if (n === 1) {
      // a heartbeat, three events with lines split across writes (LF, CRLF, CR), then the end
      res.write(": keepalive\n\n");
      const text = upTo(start, start + 2);
      for (let i = 0; i < text.length; i += 7) res.write(text.slice(i, i + 7));
      res.end();
    } else if (n === 2) {
      // the one before the resume point again (the client drops it), two more, the end
      res.end(upTo(Math.max(1, start - 1), start + 1));
    } else if (n === 3) {
      res.write(": keepalive\n\n"); // then silence: the client's idle bound reconnects
    } else {
      res.write(upTo(start, 7)); // the rest, and the stream stays open
    }
  });
  try {
    const client = new TallyClient({ baseUrl: srv.url });
    const seen: number[] = [];
    for await (const e of client.events({ from: 1, idleTimeoutMs: 1000 * slowdown, reconnectDelayMs: 10 })) {
      seen.push(Number(e.seq));
      if (seen.length === 7) break;
    }
    assert.deepEqual(seen, [1, 2, 3, 4, 5, 6, 7]);
    const [first, ...rest] = srv.requests;
    assert.equal(first!.url, "/v1/events?from=1");
    assert.equal(first!.headers["last-event-id"], undefined);
    assert.equal(first!.headers.accept, "text/event-stream");
    assert.ok(srv.requests.length >= 4, `the silent stream was left: ${srv.requests.length} requests`);
    for (const r of rest) {
      assert.equal(r.url, "/v1/events", "a reconnect asks by Last-Event-ID alone");
      assert.match(String(r.headers["last-event-id"]), /^[1-7]$/);
    }
    const ids = rest.map((r) => Number(r.headers["last-event-id"]));
    assert.deepEqual(ids, [...ids].sort((x, y) => x - y), "each reconnect resumes at or after the one before");
  } finally {
    await srv.close();
  }
});

test("without from: only new events, from the head at the start, also across a reconnect", { timeout: 30000 * slowdown }, async () => {
  const srv = await serve((_req, res, n) => {
    streamHead(res);
    if (n === 1) res.end(": keepalive\n\n"); // ends before any event
    else res.end(frame(5));
  });
  try {
    const client = new TallyClient({ baseUrl: srv.url, token: "t" });
    for await (const e of client.events({ reconnectDelayMs: 10 })) {
      assert.equal(e.seq, 5);
      break;
    }
    assert.equal(srv.requests[0]!.url, "/v1/events?from=5", "the head (4) + 1");
    assert.equal(srv.requests[1]!.url, "/v1/events?from=5", "not 'new from the reconnect'");
    assert.equal(srv.requests[0]!.headers.authorization, "Bearer t");
  } finally {
    await srv.close();
  }
});

test("an error reply before the stream: a refusal throws, 503 is retried", { timeout: 30000 * slowdown }, async () => {
  const srv = await serve((_req, res, n) => {
    if (n === 1) {
      res.writeHead(503, { "Content-Type": "application/json", "Retry-After": "0" });
      res.end(JSON.stringify({ v: 1, code: "overloaded", message: "busy" }));
    } else {
      res.writeHead(401, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ v: 1, code: "unauthenticated", message: "no auth token" }));
    }
  });
  try {
    const client = new TallyClient({ baseUrl: srv.url });
    await assert.rejects(
      (async () => {
        for await (const _ of client.events({ from: 1, reconnectDelayMs: 10 })) break;
      })(),
      (e: unknown) => e instanceof RefusedRequest && e.code === "unauthenticated" && e.status === 401,
    );
    assert.equal(srv.requests.length, 2);
  } finally {
    await srv.close();
  }
});

test("data that is not an event document throws, rather than reconnecting to it forever", { timeout: 30000 * slowdown }, async () => {
  const srv = await serve((_req, res) => {
    streamHead(res);
    res.end("id: 1\ndata: {not json\n\n");
  });
  try {
    const client = new TallyClient({ baseUrl: srv.url });
    await assert.rejects(
      (async () => {
        for await (const _ of client.events({ from: 1, reconnectDelayMs: 10 })) break;
      })(),
      (e: unknown) => e instanceof Fault && e.code === "corrupt_record",
    );
    assert.equal(srv.requests.length, 1);
  } finally {
    await srv.close();
  }
});

test("an abort ends the iterator", { timeout: 30000 * slowdown }, async () => {
  const srv = await serve((_req, res) => {
    streamHead(res);
    res.write(frame(1)); // then keeps the stream open
  });
  try {
    const client = new TallyClient({ baseUrl: srv.url });
    const stop = new AbortController();
    const seen: number[] = [];
    for await (const e of client.events({ from: 1, signal: stop.signal })) {
      seen.push(Number(e.seq));
      stop.abort();
    }
    assert.deepEqual(seen, [1]);
  } finally {
    await srv.close();
  }
});

test("the parser: BOM, CR/LF/CRLF split across chunks, comments, multi-line data, retry, no id", () => {
  const p = new SseParser();
  const out = [
    ...p.push("\uFEFF: hello\r"),
    ...p.push("\nid: 7\r"),
    ...p.push("\ndata: a\ndata:b\n"),
    ...p.push("\n"),
    ...p.push("retry: 1500\nevent: other\ndata: x\n\ndata: y\n\n"),
    ...p.push("data: cut off"),
  ];
  assert.deepEqual(out, [
    { id: "7", event: "message", data: "a\nb" },
    { id: "7", event: "other", data: "x" },
    { id: "7", event: "message", data: "y" },
  ]);
  assert.equal(p.retry, 1500);
});

test("tallyd ends the stream (--http-stream-max-s): the tail reconnects with Last-Event-ID, each event once", { timeout: 60000 * slowdown }, async () => {
  const server = await startTallyd(["--http-stream-max-s", "1", "--http-stream-heartbeat-ms", "100"]);
  try {
    const lastIds: Array<string | null> = [];
    const client = new TallyClient({
      baseUrl: server.url,
      fetch: (input, init) => {
        if (String(input).includes("/v1/events")) lastIds.push(new Headers(init?.headers).get("Last-Event-ID"));
        return fetch(input, init);
      },
    });
    const ended = async (): Promise<number> => {
      const text = await (await fetch(`${server.url}/metrics`)).text();
      const m = /^tally_http_streams_ended_total\{reason="max_duration"\} (\d+)/m.exec(text);
      return m ? Number(m[1]) : 0;
    };
    const it = client.events({ from: 1, reconnectDelayMs: 10 });
    await client.accountOpen({ id: 1, ledger: 1, code: 10 });
    const first = await it.next();
    assert.equal(first.value?.seq, 1);
    // a stream has ended by tallyd's bound (a fact in its metrics), then the next event
    await waitFor("a stream ended by --http-stream-max-s", 30, async () => ((await ended()) >= 1 ? true : undefined));
    await client.accountOpen({ id: 2, ledger: 1, code: 10 });
    await client.accountOpen({ id: 3, ledger: 1, code: 10 });
    const seqs = [Number((await it.next()).value?.seq), Number((await it.next()).value?.seq)];
    await it.return();
    assert.deepEqual(seqs, [2, 3], "each event once, in order, across the server's end of the stream");
    assert.equal(lastIds[0], null, "the first connection asks by from");
    assert.ok(lastIds.length >= 2, "reconnected");
    assert.equal(lastIds[1], "1", "the reconnect resumes after the last event seen");
  } finally {
    await server.stop();
  }
});
