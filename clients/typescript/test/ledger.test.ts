/*
 * ledger.test.ts — the ledger's queries and transfer kinds by
 * @tally/client against a real tallyd: user data on accounts and
 * transfers, accountQuery / transferQuery / accountTransfers with their
 * filters and cursors, transferReverse (partial, the rest, one too many,
 * its retry), balancing and closing transfers (TransferFlags), imported
 * history with accountBalances and balanceAt, and subProgress; cluster()
 * on a single node.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { TallyClient, BusinessRejection, RefusedRequest, AccountFlags, TransferFlags, newId } from "../src/index.js";
import { startTallyd, type Tallyd } from "./support.js";

let server: Tallyd;
let client: TallyClient;

before(async () => {
  server = await startTallyd();
  client = new TallyClient({ baseUrl: server.url, consumer: "ledger" });
});
after(async () => {
  await server?.stop();
});

const INVOICE = "0123456789abcdef0123456789abcdef";

test("user data: written, read back, and queried by; pages by cursor", async () => {
  await client.accountOpen({ id: 1, ledger: 7, code: 10 });
  await client.accountOpen({ id: 2, ledger: 7, code: 10, user_data_128: INVOICE, user_data_64: 42n, user_data_32: 3 });
  await client.accountOpen({ id: 3, ledger: 7, code: 20, user_data_64: "42" });
  const a = await client.accountGet(2);
  assert.ok(a !== null);
  assert.equal(a.user_data_128, INVOICE);
  assert.equal(a.user_data_64, 42);
  assert.equal(a.user_data_32, 3);
  assert.equal((await client.accountGet(1))!.user_data_128, "0".repeat(32));

  const byCustomer = await client.accountQuery({ user_data_64: 42 });
  assert.deepEqual(byCustomer.entries.map((e) => Number(e.id)), [2, 3]);
  const byBoth = await client.accountQuery({ user_data_64: 42, code: 20 });
  assert.deepEqual(byBoth.entries.map((e) => Number(e.id)), [3]);
  assert.deepEqual((await client.accountQuery({ user_data_128: INVOICE })).entries.map((e) => Number(e.id)), [2]);

  // two at a time, then the rest from the cursor; newest first reversed
  const first = await client.accountQuery({ ledger: 7, limit: 2 });
  assert.deepEqual(first.entries.map((e) => Number(e.id)), [1, 2]);
  assert.match(String(first.next), /^[0-9a-f]{32}$/);
  const rest = await client.accountQuery({ ledger: 7, limit: 2, cursor: first.next! });
  assert.deepEqual(rest.entries.map((e) => Number(e.id)), [3]);
  assert.equal(rest.next, null);
  const newest = await client.accountQuery({ ledger: 7, reversed: true });
  assert.deepEqual(newest.entries.map((e) => Number(e.id)), [3, 2, 1]);

  const t1 = await client.transfer({ debit_account_id: 1, credit_account_id: 2, amount: 100, ledger: 7, code: 1, user_data_32: 9 });
  const t2 = await client.transfer({ debit_account_id: 3, credit_account_id: 1, amount: 5, ledger: 7, code: 2, user_data_128: INVOICE });
  const read = await client.transferGet(t1.transfer_id);
  assert.ok(read !== null);
  assert.equal(read.user_data_32, 9);
  assert.equal(read.reversed_amount, 0);
  assert.equal(read.reverses, "0".repeat(32));
  assert.deepEqual((await client.transferQuery({ user_data_32: 9 })).entries.map((t) => t.id), [t1.transfer_id]);
  assert.deepEqual((await client.transferQuery({ user_data_128: INVOICE })).entries.map((t) => t.id), [t2.transfer_id]);
  assert.deepEqual((await client.transferQuery({ ledger: 7, code: 2 })).entries.map((t) => t.id), [t2.transfer_id]);

  // account 1's transfers: both; only those that debit it; only those that credit it
  assert.deepEqual((await client.accountTransfers(1)).entries.map((t) => t.id), [t1.transfer_id, t2.transfer_id]);
  assert.deepEqual((await client.accountTransfers(1, { credits: false })).entries.map((t) => t.id), [t1.transfer_id]);
  assert.deepEqual((await client.accountTransfers(1, { debits: false })).entries.map((t) => t.id), [t2.transfer_id]);
  assert.deepEqual((await client.accountTransfers(1, { reversed: true, limit: 1 })).entries.map((t) => t.id), [t2.transfer_id]);
});

test("transferReverse: part, the rest, one too many (stored), a retry replayed", async () => {
  await client.accountOpen({ id: 10, ledger: 8, code: 10 });
  await client.accountOpen({ id: 11, ledger: 8, code: 10 });
  const paid = await client.transfer({ debit_account_id: 10, credit_account_id: 11, amount: 500, ledger: 8, code: 3 });

  const part = await client.transferReverse({ reverses: paid.transfer_id, amount: 200, user_data_64: 77 }, { key: "refund-1" });
  assert.match(part.transfer_id, /^[0-9a-f]{32}$/);
  const reversal = await client.transferGet(part.transfer_id);
  assert.ok(reversal !== null);
  assert.equal(reversal.reverses, paid.transfer_id);
  assert.equal(Number(reversal.debit_account_id), 11, "the other way");
  assert.equal(Number(reversal.credit_account_id), 10);
  assert.equal(reversal.amount, 200);
  assert.equal(reversal.code, 3, "the original's code");
  assert.equal(reversal.user_data_64, 77);
  assert.equal((await client.transferGet(paid.transfer_id))!.reversed_amount, 200);

  const again = await client.transferReverse({ reverses: paid.transfer_id, amount: 200, user_data_64: 77 }, { key: "refund-1" });
  assert.equal(again.replayed, true);
  assert.equal(again.transfer_id, part.transfer_id, "the same id, derived from the same key");
  assert.equal((await client.transferGet(paid.transfer_id))!.reversed_amount, 200, "applied once");

  const id = newId();
  const rest = await client.transferReverse({ id, reverses: paid.transfer_id });
  assert.equal(rest.transfer_id, id);
  assert.equal((await client.transferGet(id))!.amount, 300, "all that was left");
  assert.equal((await client.transferGet(paid.transfer_id))!.reversed_amount, 500);
  assert.deepEqual(
    (await client.accountGet(10))!.credits_posted,
    500,
    "account 10 got all of it back",
  );

  const key = client.newKey();
  await assert.rejects(client.transferReverse({ reverses: paid.transfer_id, amount: 1 }, { key }), (e: unknown) => {
    assert.ok(e instanceof BusinessRejection, String(e));
    assert.equal(e.code, "exceeds_unreversed_amount");
    assert.equal(e.key, key);
    return true;
  });
  await assert.rejects(client.transferReverse({ reverses: newId() }), (e: unknown) => e instanceof BusinessRejection && e.code === "reversed_transfer_not_found");
});

test("balancing and closing transfers by their TransferFlags", async () => {
  await client.accountOpen({ id: 20, ledger: 9, code: 10 });
  await client.accountOpen({ id: 21, ledger: 9, code: 10, flags: AccountFlags.debits_must_not_exceed_credits });
  await client.accountOpen({ id: 22, ledger: 9, code: 10 });
  await client.transfer({ debit_account_id: 20, credit_account_id: 21, amount: 70, ledger: 9, code: 1 });

  // at most 10000 from account 21, which has 70: it moves 70
  const all = await client.transfer({ debit_account_id: 21, credit_account_id: 22, amount: 10000, ledger: 9, code: 1, flags: TransferFlags.balancing_debit });
  const moved = await client.transferGet(all.transfer_id);
  assert.equal(moved!.amount, 70);
  assert.equal(moved!.flags, TransferFlags.balancing_debit);
  assert.equal((await client.accountGet(21))!.debits_posted, 70);

  // a closing hold closes account 22 for debits: a new transfer from it is refused
  const close = await client.hold({ debit_account_id: 22, credit_account_id: 20, amount: 1, ledger: 9, code: 1, flags: TransferFlags.closing_debit });
  assert.equal((await client.transferGet(close.transfer_id))!.flags, TransferFlags.pending | TransferFlags.closing_debit);
  assert.equal((await client.accountGet(22))!.flags & AccountFlags.closed, AccountFlags.closed);
  await assert.rejects(
    client.transfer({ debit_account_id: 22, credit_account_id: 20, amount: 1, ledger: 9, code: 1 }),
    (e: unknown) => e instanceof BusinessRejection && e.code === "debit_account_already_closed",
  );
  // voiding the closing hold reopens it
  await client.void({ pending_id: close.transfer_id });
  assert.equal((await client.accountGet(22))!.flags & AccountFlags.closed, 0);
  await client.transfer({ debit_account_id: 22, credit_account_id: 20, amount: 1, ledger: 9, code: 1 });
});

test("imported history (its own tallyd: imports come first) and balances at a point in time", async () => {
  const fresh = await startTallyd();
  try {
    const c = new TallyClient({ baseUrl: fresh.url, consumer: "import" });
    const t0 = 1577836800000; // 2020-01-01
    const day = 86400000;
    await c.accountOpen({ id: 1, ledger: 1, code: 10, flags: AccountFlags.imported, timestamp_ms: t0 });
    await c.accountOpen({ id: 2, ledger: 1, code: 10, flags: AccountFlags.imported, timestamp_ms: t0 + 1 });
    for (let i = 1; i <= 3; i++)
      await c.transfer({ debit_account_id: 1, credit_account_id: 2, amount: 10 * i, ledger: 1, code: 1, flags: TransferFlags.imported, timestamp_ms: t0 + i * day });
    const page = await c.accountBalances(2, { limit: 2 });
    assert.deepEqual(page.balances.map((b) => Number(b.credits_posted)), [10, 30]);
    assert.deepEqual(page.balances.map((b) => Number(b.timestamp_ms)), [t0 + day, t0 + 2 * day]);
    const rest = await c.accountBalances(2, { limit: 2, after_seq: page.next! });
    assert.deepEqual(rest.balances.map((b) => Number(b.credits_posted)), [60]);
    assert.equal(rest.next, null);
    assert.equal(Number((await c.balanceAt(2, { timestamp_ms: t0 + 2 * day + 5 })).credits_posted), 30);
    assert.equal(Number((await c.balanceAt(2, { timestamp_ms: t0 })).seq), 0);
    await assert.rejects(
      c.transfer({ debit_account_id: 1, credit_account_id: 2, amount: 1, ledger: 1, code: 1, flags: TransferFlags.imported, timestamp_ms: t0 + day }),
      (e: unknown) => e instanceof BusinessRejection && e.code === "imported_event_timestamp_must_not_regress",
    );
  } finally {
    await fresh.stop();
  }
});

test("subProgress starts the lease of in-flight events again", async () => {
  await client.subCreate("progress", { start: "now", ack_wait_ms: 60000 });
  const w = await client.accountOpen({ id: 30, ledger: 9, code: 10 });
  const page = await client.subFetch("progress", { max: 10, wait_ms: 5000, instance: "p-1" });
  assert.deepEqual(page.events.map((d) => d.seq), [w.seq]);
  const seq = page.events[0]!.seq;
  const before = Date.now();
  const r = await client.subProgress("progress", [seq], "p-1");
  assert.equal(r.extended, 1);
  assert.ok(Number(r.deliver_after_ms) >= before + 60000 - 1000, `deliver_after_ms ${r.deliver_after_ms}`);
  assert.equal((await client.subProgress("progress", [seq], "p-2")).extended, 0, "held by another instance");
  await client.subAck("progress", { done: [seq] });
  assert.equal((await client.subProgress("progress", [seq])).extended, 0, "acked");
});

test("cluster(): a single node answers not_in_cluster_mode", async () => {
  await assert.rejects(client.cluster(), (e: unknown) => e instanceof RefusedRequest && e.code === "not_in_cluster_mode" && e.status === 400);
});
