/*
 * scenario.test.ts — the shared scenario of issue 32 (the Python client and
 * libtally run it too), by @tally/client against a real tallyd: open
 * accounts; transfer; the same call retried → replayed; the key reused
 * with another body → IdempotencyKeyReused; a validation refusal, then the
 * corrected call with the same key → applied; hold, partial post, void;
 * grant, extend, check an entitlement. The subscriber and the SSE tail
 * have their own files (subscriber.test.ts, tail.test.ts).
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import {
  TallyClient,
  BusinessRejection,
  InvalidCommand,
  IdempotencyKeyReused,
  RefusedRequest,
  Fault,
  isUuidv7,
  newId,
  transferIdFromKey,
} from "../src/index.js";
import { startTallyd, slowdown, type Tallyd } from "./support.js";

let server: Tallyd;
let client: TallyClient;

/** The read's entity, which must exist. */
function must<T>(what: string, v: T | null): T {
  assert.ok(v !== null, `${what} exists`);
  return v;
}
const account = async (id: number) => must(`account ${id}`, await client.accountGet(id));
const transferOf = async (id: string) => must(`transfer ${id}`, await client.transferGet(id));
const entitlement = async (s: string, f: string) => must(`${s}/${f}`, await client.entitlementGet(s, f));

before(async () => {
  server = await startTallyd();
  client = new TallyClient({ baseUrl: server.url, consumer: "shop" });
});

after(async () => {
  await server?.stop();
});

test("open accounts", async () => {
  const a = await client.accountOpen({ id: 1, ledger: 1, code: 10 });
  assert.equal(a.code, "ok");
  assert.equal(a.replayed, false);
  assert.ok(isUuidv7(a.key), `a key made per call is a UUIDv7: ${a.key}`);
  const b = await client.accountOpen({ id: 2n, ledger: 1, code: 10, flags: 1 });
  assert.equal(b.replayed, false);
  assert.notEqual(a.key, b.key, "each call its own key");
  const acc = must("account 2", await client.accountGet(2, { minSeq: undefined })); // not sent: tallyd without min_seq takes it
  assert.equal(acc.id, 2);
  assert.equal(acc.flags, 1);
  assert.equal(await client.accountGet(99), null, "no such account: null");
  assert.equal(await client.transferGet("0000000000000000000000000000ffff"), null);
  assert.equal(await client.entitlementGet("nobody", "pro"), null);
  await assert.rejects(client.accountHistory(99), (e: unknown) => e instanceof Fault && e.code === "not_found" && e.status === 404);
});

test("transfer, the same call retried is replayed, the key reused with another body is a conflict", async () => {
  const key = client.newKey();
  const pay = { id: "0000000000000000000000000000000a", debit_account_id: 1, credit_account_id: 2, amount: 500, ledger: 1, code: 1 };
  const first = await client.transfer(pay, { key });
  assert.equal(first.replayed, false);
  assert.equal(first.key, key);
  const again = await client.transfer(pay, { key });
  assert.equal(again.replayed, true, "the retry is answered from the inbox");
  assert.equal(again.seq, first.seq);
  const acc = await account(2);
  assert.equal(acc.credits_posted, 500, "applied once");
  await assert.rejects(client.transfer({ ...pay, amount: 501 }, { key }), (e: unknown) => {
    assert.ok(e instanceof IdempotencyKeyReused, String(e));
    assert.ok(e instanceof RefusedRequest);
    assert.equal(e.code, "idempotency_key_reused");
    assert.equal(e.codeClass, "R");
    assert.equal(e.status, 409);
    assert.equal(e.key, key);
    return true;
  });
  assert.equal((await account(2)).credits_posted, 500, "the conflict changed nothing");
});

test("a business rejection is stored and replays", async () => {
  const key = client.newKey();
  const refund = { id: "0000000000000000000000000000000b", debit_account_id: 2, credit_account_id: 1, amount: 900, ledger: 1, code: 1 };
  const check = (replayed: boolean) => (e: unknown) => {
    assert.ok(e instanceof BusinessRejection, String(e));
    assert.equal(e.code, "exceeds_credits");
    assert.equal(e.codeClass, "B");
    assert.equal(e.status, 422);
    assert.equal(e.replayed, replayed);
    return true;
  };
  await assert.rejects(client.transfer(refund, { key }), check(false));
  await assert.rejects(client.transfer(refund, { key }), check(true));
});

test("a validation refusal, then the corrected call with the same key is applied", async () => {
  const key = client.newKey();
  const t = { debit_account_id: 1, credit_account_id: 2, ledger: 1, code: 1 };
  await assert.rejects(client.transfer({ ...t, amount: 0 }, { key }), (e: unknown) => {
    assert.ok(e instanceof InvalidCommand, String(e));
    assert.equal(e.code, "amount_must_not_be_zero");
    assert.equal(e.codeClass, "V");
    assert.equal(e.key, key, "the error carries the key to retry with");
    return true;
  });
  const fixed = await client.transfer({ ...t, amount: 7 }, { key });
  assert.equal(fixed.code, "ok");
  assert.equal(fixed.replayed, false, "the key was not used up by the refusal");
  // without `id`, tallyd derived it from (consumer, key): the client's id is the same
  assert.equal(fixed.transfer_id, await transferIdFromKey("shop", key));
  const got = await transferOf(fixed.transfer_id);
  assert.equal(got.amount, 7);
  assert.equal(got.state, "posted");
});

test("hold, partial post, void", async () => {
  const hold = await client.transfer({
    id: "0000000000000000000000000000000c", debit_account_id: 1, credit_account_id: 2, amount: 300, ledger: 1, code: 1, flags: 1, timeout_s: 3600,
  });
  assert.equal(hold.code, "ok");
  let acc = await account(2);
  assert.equal(acc.credits_pending, 300);
  const post = await client.post({ pending_id: "0000000000000000000000000000000c", amount: 100 });
  assert.equal(post.code, "ok");
  const posted = await transferOf("0000000000000000000000000000000c");
  assert.equal(posted.state, "pending_posted");
  assert.equal(posted.posted_amount, 100);
  // a second hold, voided
  await client.transfer({ id: "0000000000000000000000000000000d", debit_account_id: 1, credit_account_id: 2, amount: 50, ledger: 1, code: 1, flags: 1 });
  const voided = await client.void({ pending_id: "0000000000000000000000000000000d" });
  assert.equal(voided.code, "ok");
  assert.equal((await transferOf("0000000000000000000000000000000d")).state, "pending_voided");
  await assert.rejects(client.void({ pending_id: "0000000000000000000000000000000d" }), (e: unknown) => e instanceof BusinessRejection && e.code === "pending_transfer_already_voided");
  acc = await account(2);
  assert.equal(acc.credits_pending, 0);
  assert.equal(acc.credits_posted, 500 + 7 + 100);
});

test("grant, extend, check an entitlement", async () => {
  assert.equal(await client.hasEntitlement("user-7", "pro"), false);
  const g = await client.grant({ subject: "user-7", feature: "pro", duration_ms: 86400000, source_order: 1, grant_transfer_id: "0000000000000000000000000000000a" });
  assert.equal(g.code, "ok");
  const before = await entitlement("user-7", "pro");
  assert.equal(before.state, "active");
  const e = await client.extend({ subject: "user-7", feature: "pro", duration_ms: 86400000, source_order: 2 });
  assert.equal(e.code, "ok");
  const afterExtend = await entitlement("user-7", "pro");
  assert.equal(BigInt(afterExtend.valid_until_ms) - BigInt(before.valid_until_ms), 86400000n);
  assert.equal(await client.hasEntitlement("user-7", "pro"), true);
  const list = await client.entitlementList("user-7");
  assert.equal(list.length, 1);
  await assert.rejects(client.revoke({ subject: "user-7", feature: "pro", source_order: 1 }), (x: unknown) => x instanceof BusinessRejection && x.code === "stale");
});

test("chain and batch", async () => {
  const c = await client.chain([
    { op: "account_open", id: 3, ledger: 1, code: 10 },
    { op: "transfer", id: "0000000000000000000000000000000e", debit_account_id: 1, credit_account_id: 3, amount: 25, ledger: 1, code: 1 },
  ]);
  assert.deepEqual(c.codes, ["ok", "ok"]);
  // a chain that fails: the failing member's code, nothing applied
  const id = newId();
  await assert.rejects(
    client.chain([
      { op: "transfer", id, debit_account_id: 3, credit_account_id: 1, amount: 1, ledger: 1, code: 1 },
      { op: "transfer", id: newId(), debit_account_id: 1, credit_account_id: 99, amount: 1, ledger: 1, code: 1 },
    ]),
    (e: unknown) => e instanceof BusinessRejection && e.code === "credit_account_not_found" &&
      JSON.stringify(e.reply?.codes) === '["linked_operation_failed","credit_account_not_found"]' && e.reply?.failed_index === 1,
  );
  assert.equal(await client.transferGet(id), null, "the chain applied nothing");
  const b = await client.batch([
    { op: "account_open", id: 4, ledger: 1, code: 10 },
    { op: "account_open", id: 4, ledger: 1, code: 11, key: "other" },
  ]);
  assert.equal(b.results[0]!.code, "ok");
  assert.equal(b.results[1]!.code, "exists_with_different_code");
  const again = await client.batch([{ op: "account_open", id: 4, ledger: 1, code: 10 }], { key: b.key });
  assert.equal(again.results[0]!.replayed, true, "a retried batch replays member by member");
});

test("reads: list, history, log, stats", async () => {
  const page = await client.accountList({ limit: 2 });
  assert.equal(page.entries.length, 2);
  assert.equal(page.next, 2);
  const hist = await client.accountHistory(1, { limit: 2, reverse: true });
  assert.equal(hist.entries.length, 2);
  const stats = await client.stats();
  const log = await client.logRead({ from: 1, limit: 3 });
  assert.equal(log.head, stats.head_seq);
  assert.equal(log.events.length, 3);
  const [first] = log.events;
  assert.equal(first!.seq, 1);
  assert.equal(first!.type, "account.opened");
  assert.equal(first!.consumer, "shop");
  assert.equal(first!.data.account!.id, 1);
  assert.match(first!.event_id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  const pay = log.events[2]!;
  assert.equal(pay.type, "transfer.created");
  assert.equal(pay.data.transfer!.id, "0000000000000000000000000000000a");
  assert.equal(pay.data.credit_account!.credits_posted, 500);
});

test("a reply lost on the way: the client retries with the same key, the write applies once", async () => {
  let calls = 0;
  const keys: string[] = [];
  const lossy = new TallyClient({
    baseUrl: server.url,
    consumer: "shop",
    retry: { initialDelayMs: 10 },
    fetch: async (input, init) => {
      calls++;
      keys.push(new Headers(init?.headers).get("Idempotency-Key") ?? "");
      const res = await fetch(input, init); // tallyd applies it...
      const text = await res.text();
      if (calls === 1) throw new TypeError("fetch failed (the reply was lost)"); // ...and the caller never hears
      return new Response(text, { status: res.status, headers: res.headers });
    },
  });
  const before = await account(3);
  const r = await lossy.transfer({ id: "0000000000000000000000000000000f", debit_account_id: 1, credit_account_id: 3, amount: 5, ledger: 1, code: 1 });
  assert.equal(calls, 2);
  assert.equal(keys[0], keys[1], "the retry sent the same key");
  assert.equal(r.key, keys[0]);
  assert.equal(r.replayed, true, "the retry was answered from the inbox");
  const afterLoss = await account(3);
  assert.equal(BigInt(afterLoss.credits_posted) - BigInt(before.credits_posted), 5n, "applied once");
});

test("the SSE tail sees each new event once, in order, across a reconnect with Last-Event-ID", { timeout: 60000 * slowdown }, async () => {
  // The first stream is cut (as a network would) after two events; the
  // tail reconnects to tallyd with Last-Event-ID and goes on from there.
  const streams: Array<{ url: string; lastEventId: string | null }> = [];
  const cutting = new TallyClient({
    baseUrl: server.url,
    fetch: async (input, init) => {
      const res = await fetch(input, init);
      if (!String(input).includes("/v1/events")) return res;
      streams.push({ url: String(input), lastEventId: new Headers(init?.headers).get("Last-Event-ID") });
      if (streams.length > 1 || res.body === null) return res;
      // Pass on the bytes up to the end of the second event, then fail (the
      // documents are ASCII, so a character is a byte).
      const reader = res.body.getReader();
      let text = "";
      let broken = false;
      const cut = new ReadableStream<Uint8Array>({
        async pull(controller) {
          // the failure after the second event's bytes were read (an error
          // at once would drop them from the queue)
          if (broken) return controller.error(new TypeError("terminated (the connection broke)"));
          const { done, value } = await reader.read();
          if (done) return controller.close();
          const before = text.length;
          text += new TextDecoder().decode(value);
          const ends = [...text.matchAll(/data: [^\n]*\n\n/g)].map((m) => m.index! + m[0].length);
          if (ends.length < 2) return controller.enqueue(value);
          controller.enqueue(value.slice(0, ends[1]! - before));
          await reader.cancel();
          broken = true;
        },
      });
      return new Response(cut, { status: res.status, headers: res.headers });
    },
  });
  const head = Number((await client.stats()).head_seq);
  const stop = new AbortController();
  const seen: number[] = [];
  const tailing = (async () => {
    for await (const e of cutting.events({ from: head + 1, signal: stop.signal, reconnectDelayMs: 10 })) {
      seen.push(Number(e.seq));
      assert.equal(e.type, "account.opened");
      if (seen.length === 5) break;
    }
  })();
  tailing.catch(() => undefined); // awaited below; a failure must not be an unhandled rejection meanwhile
  for (let id = 100; id < 105; id++) await client.accountOpen({ id, ledger: 1, code: 10 });
  await tailing;
  stop.abort();
  assert.deepEqual(seen, [head + 1, head + 2, head + 3, head + 4, head + 5], "each new event once, in order");
  assert.ok(streams.length >= 2, `reconnected: ${JSON.stringify(streams)}`);
  assert.equal(streams[0]!.url, `${server.url}/v1/events?from=${head + 1}`);
  assert.equal(streams[1]!.lastEventId, String(head + 2), "resumed after the last event seen");
});
