/*
 * subscriber.ts — a durable subscriber's loop (docs/SUBSCRIBERS.md):
 * fetch → handler → ack, or nak when the handler throws; and exactlyOnce,
 * which turns at-least-once delivery into exactly-once effects.
 *
 * tally delivers at least once: an event handed out and not acked (the
 * process died, the ack was lost) is delivered again. A handler whose
 * effects live in the caller's own store makes them exactly once with
 * exactlyOnce: in one transaction of that store it checks whether the
 * event's id is recorded, and if not runs the handler and records the id.
 * Whatever kills the process, the effects and the record commit together
 * or not at all, so a redelivered event is skipped, never applied twice.
 */

import type { TallyClient, CallOptions } from "./client.js";
import { delay } from "./client.js";
import { Fault } from "./errors.js";
import { uuidv7 } from "./ids.js";
import type { Delivery, Int, ProgressResult, SubCreateOptions } from "./types.js";

/**
 * What the loop calls for each event. Returning is done (acked); throwing
 * `Park` parks the event (dead letters); any other throw naks it (it comes
 * again later; `Retry` chooses when).
 */
export type Handler = (delivery: Delivery) => Promise<unknown> | unknown;

/** Thrown by a handler for an event it can never handle: parked at once (`sub_park`, the message as reason). */
export class Park extends Error {
  constructor(message = "") {
    super(message);
    this.name = "Park";
  }
}

/** Thrown by a handler to have the event delivered again after `delayMs` (undefined: the subscriber's backoff rule). */
export class Retry extends Error {
  constructor(
    message = "",
    readonly delayMs?: number,
  ) {
    super(message);
    this.name = "Retry";
  }
}

export interface SubscriberOptions {
  /** The subscriber's name (1-64 of A-Z a-z 0-9 . _ - :). */
  name: string;
  handler: Handler;
  /** Create the subscriber first with these settings (an identical one existing is fine). */
  create?: SubCreateOptions;
  /**
   * This consumer's instance id: what it is handed is leased to it
   * (default: a new UUIDv7). A stable one (`billing-worker-1`) gets its
   * unacked events back at once after a crash; a new one leaves them to
   * fall due after the subscriber's ack wait.
   */
  instance?: string;
  /** Events per fetch, 1-1000 (default 100). */
  max?: number;
  /** How long a fetch waits for an event, 0-30000 (default 5000 ms). */
  waitMs?: number;
  /** Return after a fetch that brings nothing. */
  untilIdle?: boolean;
  /** Faults of fetch in a row (after the client's own retries) before run throws (default 10). */
  failuresMax?: number;
  /** Stop: the loop returns after the event in hand (acked, naked or parked). */
  signal?: AbortSignal;
  /** Called when a handler threw (after the nak or park was sent). */
  onError?: (error: unknown, delivery: Delivery) => void;
  /**
   * How often, while a fetched batch is being handled, its events not
   * answered yet have their lease started again (`sub_progress`), so that
   * a handler running longer than the ack wait keeps them (default: a
   * third of the subscriber's ack wait, read when the run starts; 1000 ms
   * when it cannot be read).
   */
  progressEveryMs?: number;
  /** Called after each `sub_progress` the loop sent. */
  onProgress?: (result: ProgressResult, seqs: Int[]) => void;
}

/** What a run did (the Python client's RunCounters). */
export interface RunCounters {
  fetches: number;
  deliveries: number;
  done: number;
  retried: number;
  parked: number;
  failures: number;
  /** `sub_progress` calls that kept leases of a batch being handled. */
  progress: number;
}

/** sub_nak's `error` and sub_park's `reason`: at most 256 bytes of UTF-8. */
const ERROR_TEXT_BYTES_MAX = 256;

function errorText(e: unknown): string {
  let text = e instanceof Error ? e.message || e.name : String(e);
  if (e instanceof Error && !(e instanceof Park) && !(e instanceof Retry)) text = `${e.name}: ${text}`;
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= ERROR_TEXT_BYTES_MAX) return text;
  return new TextDecoder().decode(bytes.slice(0, ERROR_TEXT_BYTES_MAX)).replace(/\uFFFD$/, "");
}

/**
 * Run a durable subscriber until `signal` aborts (or, `untilIdle`, a fetch
 * brings nothing): fetch (the first with `restart`, so that what an
 * earlier run of this instance left in flight is due at once), hand each
 * event to the handler in order, and ack it when the handler returned,
 * park it when it threw `Park`, nak it when it threw anything else. The
 * loop never drops an event: one that fails `max_deliver` times is parked
 * by tallyd. A fetch's fault (after the client's own retries) is retried
 * after a pause doubling from 100 ms to 5 s, `failuresMax` times in a
 * row, then thrown; a refusal (e.g. `subscriber_not_found`) at once.
 * While a fetched batch is handled, its events not answered yet have their
 * lease (the ack wait) started again every third of it (`sub_progress`).
 */
export async function runSubscriber(client: TallyClient, o: SubscriberOptions): Promise<RunCounters> {
  const counters: RunCounters = { fetches: 0, deliveries: 0, done: 0, retried: 0, parked: 0, failures: 0, progress: 0 };
  // The signal ends a fetch's wait; the verdict on the event in hand is
  // still sent.
  const call: CallOptions = o.signal !== undefined ? { signal: o.signal } : {};
  const stopped = (): boolean => o.signal?.aborted === true;
  const instance = o.instance ?? uuidv7();
  const created = o.create !== undefined ? await client.subCreate(o.name, o.create, call) : undefined;
  const progressEveryMs = o.progressEveryMs ?? Math.max(1, Math.floor((await ackWaitMs(client, o.name, created?.subscriber.ack_wait_ms, call)) / 3));
  let restart = true;
  let failures = 0;
  try {
    while (!stopped()) {
      let page;
      try {
        page = await client.subFetch(o.name, { max: o.max ?? 100, wait_ms: o.waitMs ?? 5000, restart, instance }, call);
      } catch (e) {
        if (!(e instanceof Fault) || stopped()) throw e;
        counters.failures++;
        if (++failures >= (o.failuresMax ?? 10)) throw e;
        await delay(Math.min(5000, 100 * 2 ** (failures - 1)), o.signal);
        restart = true;
        continue;
      }
      failures = 0;
      restart = false;
      counters.fetches++;
      if (page.events.length === 0 && o.untilIdle) break;
      // What is fetched is leased for the ack wait, counted from the
      // fetch: the events not answered yet keep their lease while the
      // batch is handled, however long its handlers run.
      const open = new Map<string, Int>(page.events.map((d) => [String(d.seq), d.seq]));
      const keeper = keepLeases(client, o, instance, open, progressEveryMs, counters);
      try {
        for (const d of page.events) {
          if (stopped()) break; // not handed out: it comes again
          counters.deliveries++;
          await handleOne(client, o, d, counters);
          open.delete(String(d.seq));
        }
      } finally {
        await keeper.stop();
      }
    }
  } catch (e) {
    if (!stopped()) throw e;
  }
  return counters;
}

/** The subscriber's ack wait: `known`, else read (`sub_get`); 1000 ms when a fault keeps it from being read. */
async function ackWaitMs(client: TallyClient, name: string, known: number | undefined, call: CallOptions): Promise<number> {
  if (known !== undefined) return known;
  try {
    return (await client.subGet(name, call)).ack_wait_ms;
  } catch (e) {
    if (e instanceof Fault) return 1000;
    throw e;
  }
}

/**
 * Every `everyMs` until stopped, `sub_progress` for the seqs in `open`
 * (one call at a time). A progress that fails is left: the next tick sends
 * it again, and an event whose lease ran out is only delivered again.
 */
function keepLeases(
  client: TallyClient,
  o: SubscriberOptions,
  instance: string,
  open: Map<string, Int>,
  everyMs: number,
  counters: RunCounters,
): { stop: () => Promise<void> } {
  let inFlight: Promise<void> | undefined;
  const tick = (): void => {
    if (inFlight !== undefined || open.size === 0) return;
    const seqs = [...open.values()];
    inFlight = client
      .subProgress(o.name, seqs, instance, { deadlineMs: everyMs })
      .then((r) => {
        counters.progress++;
        o.onProgress?.(r, seqs);
      })
      .catch(() => undefined)
      .finally(() => (inFlight = undefined));
  };
  const timer = setInterval(tick, everyMs);
  return {
    stop: async () => {
      clearInterval(timer);
      await inFlight;
    },
  };
}

/** One delivery: the handler, then its verdict to tallyd. */
async function handleOne(client: TallyClient, o: SubscriberOptions, d: Delivery, counters: RunCounters): Promise<void> {
  try {
    await o.handler(d);
  } catch (e) {
    if (e instanceof Park) {
      await client.subPark(o.name, d.seq, errorText(e));
      counters.parked++;
    } else {
      const delayMs = e instanceof Retry ? e.delayMs : undefined;
      await client.subNak(o.name, d.seq, { error: errorText(e), ...(delayMs !== undefined ? { delay_ms: delayMs } : {}) });
      counters.retried++;
    }
    o.onError?.(e, d);
    return;
  }
  await client.subAck(o.name, { done: [d.seq] });
  counters.done++;
}

/**
 * The caller's store, as exactlyOnce needs it. `transaction` runs `work`
 * in one transaction of that store (commit when it resolves, roll back
 * when it throws); `seen` and `record` read and write the handled event
 * ids inside it (a table keyed by event id).
 */
export interface ExactlyOnceStore<Tx> {
  transaction<R>(work: (tx: Tx) => Promise<R>): Promise<R>;
  seen(tx: Tx, eventId: string): boolean | Promise<boolean>;
  record(tx: Tx, eventId: string, delivery: Delivery): void | Promise<void>;
}

/** What an exactly-once handler did with a delivery. */
export type Outcome = "handled" | "skipped";

/**
 * A handler for runSubscriber that applies each event's effects exactly
 * once: in one `store.transaction`, an event whose id is recorded is
 * skipped; else `handler(delivery, tx)` makes its effects through `tx`
 * and the id is recorded. The loop acks either way.
 */
export function exactlyOnce<Tx>(
  store: ExactlyOnceStore<Tx>,
  handler: (delivery: Delivery, tx: Tx) => Promise<void> | void,
): (delivery: Delivery) => Promise<Outcome> {
  return (delivery) =>
    store.transaction(async (tx): Promise<Outcome> => {
      const id = delivery.event.event_id;
      if (typeof id !== "string" || id === "") throw new Error(`event ${String(delivery.seq)} has no event_id`);
      if (await store.seen(tx, id)) return "skipped";
      await handler(delivery, tx);
      await store.record(tx, id, delivery);
      return "handled";
    });
}
