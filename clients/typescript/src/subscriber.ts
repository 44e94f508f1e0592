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
import type { Delivery, SubCreateOptions } from "./types.js";

/** What the loop calls for each event; a throw naks it (it comes again later). */
export type Handler = (delivery: Delivery) => Promise<unknown> | unknown;

export interface SubscriberOptions {
  /** The subscriber's name (created with `create` when given). */
  name: string;
  handler: Handler;
  /** Create the subscriber first with these settings (an identical one existing is fine). */
  create?: SubCreateOptions;
  /** This process's instance id: what it is handed is leased to it. */
  instance?: string;
  /** Events per fetch (default 100). */
  max?: number;
  /** How long a fetch waits for an event (default 5000 ms). */
  waitMs?: number;
  /** Redeliver a failed event after this long (default: the subscriber's backoff rule). */
  nakDelayMs?: number;
  /** Stop: the loop returns after the event in hand (acked or naked). */
  signal?: AbortSignal;
  /** Called when a handler threw (after the nak was sent). */
  onError?: (error: unknown, delivery: Delivery) => void;
}

/** What a run did, when it returns. */
export interface RunStats {
  handled: number;
  failed: number;
}

function truncateUtf8(text: string, maxBytes: number): string {
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= maxBytes) return text;
  return new TextDecoder().decode(bytes.slice(0, maxBytes)).replace(/\uFFFD$/, "");
}

/**
 * Run a durable subscriber until `signal` aborts: fetch (the first fetch
 * with `restart`, so that what an earlier run of this instance left in
 * flight is due at once), call the handler on each event in order, ack
 * it when the handler returned, nak it with the error's message when it
 * threw. The loop itself never skips an event: one that fails
 * `max_deliver` times is parked by tallyd (dead letters).
 */
export async function runSubscriber(client: TallyClient, o: SubscriberOptions): Promise<RunStats> {
  const stats: RunStats = { handled: 0, failed: 0 };
  // The signal ends a fetch's wait; the ack or nak of the event in hand
  // is still sent.
  const call: CallOptions = o.signal !== undefined ? { signal: o.signal } : {};
  const stopped = (): boolean => o.signal?.aborted === true;
  if (o.create !== undefined) await client.subCreate(o.name, o.create, call);
  let restart = true;
  try {
    while (!stopped()) {
      const page = await client.subFetch(
        o.name,
        { max: o.max ?? 100, wait_ms: o.waitMs ?? 5000, restart, ...(o.instance !== undefined ? { instance: o.instance } : {}) },
        call,
      );
      restart = false;
      for (const d of page.events) {
        try {
          await o.handler(d);
        } catch (e) {
          stats.failed++;
          const error = truncateUtf8(e instanceof Error ? e.message : String(e), 256);
          await client.subNak(o.name, d.seq, { error, ...(o.nakDelayMs !== undefined ? { delay_ms: o.nakDelayMs } : {}) });
          o.onError?.(e, d);
          continue;
        }
        await client.subAck(o.name, { done: [d.seq] });
        stats.handled++;
        if (stopped()) break;
      }
    }
  } catch (e) {
    if (!stopped()) throw e;
  }
  return stats;
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
