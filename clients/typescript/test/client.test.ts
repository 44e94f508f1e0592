/*
 * client.test.ts — what the client does on its own, with a fetch of the
 * test's: retries (backoff, Retry-After, the deadline, which codes), the
 * same key on every attempt, min_seq sent only when given, the error
 * classes, and CODE_CLASSES against tallyd's own table.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
  TallyClient,
  CODE_CLASSES,
  Fault,
  DeadlineExceeded,
  BusinessRejection,
  InvalidCommand,
  RefusedRequest,
  IdempotencyKeyReused,
  errorFor,
  uuidv7,
  isUuidv7,
  transferIdFromKey,
} from "../src/index.js";
import { tallydPath, slowdown } from "./support.js";

interface Seen {
  url: string;
  method: string;
  headers: Headers;
  body: string | undefined;
  at: number;
}

function fake(replies: Array<() => Response | Promise<Response>>): { fetch: typeof fetch; seen: Seen[] } {
  const seen: Seen[] = [];
  let i = 0;
  const f = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    seen.push({ url: String(input), method: init?.method ?? "GET", headers: new Headers(init?.headers), body: init?.body as string | undefined, at: Date.now() });
    const r = replies[Math.min(i++, replies.length - 1)]!;
    return r();
  };
  return { fetch: f as typeof fetch, seen };
}

const json = (status: number, body: unknown, headers: Record<string, string> = {}) => () =>
  new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", ...headers } });
const okWrite = (key: string) => json(200, { v: 1, code: "ok", replayed: false, seq: 1, events: 1, key });

test("503 with Retry-After: waited at least that long, the same key again", async () => {
  const { fetch, seen } = fake([json(503, { v: 1, code: "overloaded", message: "busy" }, { "Retry-After": "1" }), okWrite("k")]);
  const c = new TallyClient({ fetch, retry: { initialDelayMs: 1 } });
  const r = await c.accountOpen({ id: 1, ledger: 1, code: 1 }, { key: "k-1" });
  assert.equal(r.code, "ok");
  assert.equal(seen.length, 2);
  assert.equal(seen[0]!.headers.get("Idempotency-Key"), "k-1");
  assert.equal(seen[1]!.headers.get("Idempotency-Key"), "k-1");
  assert.ok(seen[1]!.at - seen[0]!.at >= 990, `waited ${seen[1]!.at - seen[0]!.at} ms for Retry-After: 1`);
});

test("no reply, then a reply: retried with the key made for the call", async () => {
  const { fetch, seen } = fake([() => Promise.reject(new TypeError("fetch failed")), () => Promise.reject(new TypeError("fetch failed")), okWrite("x")]);
  const c = new TallyClient({ fetch, retry: { initialDelayMs: 1 } });
  await c.grant({ subject: "s", feature: "f" });
  assert.equal(seen.length, 3);
  const key = seen[0]!.headers.get("Idempotency-Key")!;
  assert.ok(isUuidv7(key));
  assert.ok(seen.every((s) => s.headers.get("Idempotency-Key") === key));
});

test("the deadline: a fault that does not pass is thrown with the key", async () => {
  const { fetch, seen } = fake([json(503, { v: 1, code: "shutting_down", message: "" })]);
  const c = new TallyClient({ fetch, retry: { deadlineMs: 300, initialDelayMs: 10, maxDelayMs: 40 } });
  const t0 = Date.now();
  await assert.rejects(c.transfer({ id: "01", debit_account_id: 1, credit_account_id: 2, amount: 1, ledger: 1, code: 1 }, { key: "dl" }), (e: unknown) => {
    assert.ok(e instanceof DeadlineExceeded, String(e));
    assert.ok(e instanceof Fault);
    assert.equal(e.code, "shutting_down");
    assert.equal(e.key, "dl");
    assert.equal(e.attempts, seen.length);
    assert.equal(e.last.status, 503);
    return true;
  });
  assert.ok(Date.now() - t0 < 5000 * slowdown, "the deadline ended the retries");
  assert.ok(seen.length >= 3, `attempts: ${seen.length}`);
});

test("answers are not retried: business, invalid, refused, conflict, 500", async () => {
  for (const [status, code, cls] of [
    [422, "exceeds_credits", BusinessRejection],
    [422, "amount_must_not_be_zero", InvalidCommand],
    [400, "unknown_field", RefusedRequest],
    [409, "idempotency_key_reused", IdempotencyKeyReused],
    [500, "internal", Fault],
  ] as const) {
    const { fetch, seen } = fake([json(status, { v: 1, code, message: "m" })]);
    const c = new TallyClient({ fetch });
    await assert.rejects(c.post({ pending_id: "01" }), (e: unknown) => e instanceof cls && (e as Fault).code === code);
    assert.equal(seen.length, 1, code);
  }
});

test("a sub_fetch whose reply was lost is retried with restart, for its instance only", async () => {
  const page = json(200, { v: 1, code: "ok", events: [], ack_floor: 0, head: 0 });
  const lost = () => Promise.reject(new TypeError("fetch failed"));
  const { fetch, seen } = fake([lost, page, lost, page]);
  const c = new TallyClient({ fetch, retry: { initialDelayMs: 1 } });
  await c.subFetch("s", { max: 5, instance: "i-1" });
  assert.deepEqual(JSON.parse(seen[0]!.body!), { name: "s", max: 5, instance: "i-1" });
  assert.deepEqual(JSON.parse(seen[1]!.body!), { name: "s", max: 5, instance: "i-1", restart: true });
  await c.subFetch("s", { max: 5 });
  assert.deepEqual(JSON.parse(seen[3]!.body!), { name: "s", max: 5 }, "without an instance a restart would release every consumer's events");
});

test("min_seq is sent only when given", async () => {
  const { fetch, seen } = fake([json(200, { v: 1, code: "ok", account: { id: 1 } })]);
  const c = new TallyClient({ fetch, baseUrl: "http://h:1/" });
  await c.accountGet(1);
  await c.accountGet(1, { minSeq: 42 });
  await c.entitlementGet("a/b", "f", { minSeq: 7n });
  await c.logRead({ from: 3 });
  assert.equal(seen[0]!.url, "http://h:1/v1/accounts/1");
  assert.equal(seen[1]!.url, "http://h:1/v1/accounts/1?min_seq=42");
  assert.equal(seen[2]!.url, "http://h:1/v1/entitlement_get?min_seq=7", "a subject with / is read by POST");
  assert.equal(seen[2]!.method, "POST");
  assert.equal(seen[3]!.url, "http://h:1/v1/log?from=3");
});

test("the token goes in Authorization, the consumer in Tally-Consumer, bigints as decimal strings", async () => {
  const { fetch, seen } = fake([okWrite("k")]);
  const c = new TallyClient({ fetch, token: "t0k", consumer: "billing" });
  await c.transfer({ id: "01", debit_account_id: 18446744073709551615n, credit_account_id: 2, amount: "9223372036854775807", ledger: 1, code: 1 }, { correlation: "order-9" });
  assert.equal(seen[0]!.headers.get("Authorization"), "Bearer t0k");
  assert.equal(seen[0]!.headers.get("Tally-Consumer"), "billing");
  assert.deepEqual(JSON.parse(seen[0]!.body!), {
    id: "01", debit_account_id: "18446744073709551615", credit_account_id: 2, amount: "9223372036854775807", ledger: 1, code: 1, correlation: "order-9",
  });
});

test("UUIDv7 keys: version, variant, in the order they were made", () => {
  const keys = Array.from({ length: 5000 }, () => uuidv7());
  for (const k of keys) assert.ok(isUuidv7(k), k);
  const sorted = [...keys].sort();
  assert.deepEqual(sorted, keys, "keys made one after another sort in that order");
  assert.equal(new Set(keys).size, keys.length);
});

test("transferIdFromKey: a UUIDv7 key lends the id its time", async () => {
  const key = "01890a5d-ac96-774b-bcce-b302099a8057";
  const id = await transferIdFromKey("shop", key);
  assert.match(id, /^[0-9a-f]{32}$/);
  assert.equal(id.slice(0, 12), "01890a5dac96");
  assert.equal(id[12], "7");
  assert.notEqual(await transferIdFromKey("shop", "order-1"), await transferIdFromKey("shop2", "order-1"));
});

test("CODE_CLASSES is tallyd's code table", () => {
  const ref = execFileSync(tallydPath(), ["--protocol-reference"], { encoding: "utf8" });
  const table: Record<string, string> = {};
  const start = ref.indexOf("### Error codes");
  for (const line of ref.slice(start).split("\n").slice(1)) {
    if (line.startsWith("### ")) break;
    const m = /^\| `([a-z_]+)` \| \d+ \| ([BVRF]) \|$/.exec(line);
    if (m) table[m[1]!] = m[2]!;
  }
  assert.ok(Object.keys(table).length > 100, "read the table");
  // the same codes, each with its class
  const rows = Object.entries(table).map(([code, cls]) => `  "${code}": "${cls}",`);
  assert.deepEqual({ ...CODE_CLASSES }, table, `src/errors.ts's CODE_CLASSES differs from tallyd's code table; its rows are:\n${rows.join("\n")}`);
  const classes = { B: BusinessRejection, V: InvalidCommand, R: RefusedRequest, F: Fault } as const;
  for (const [code, cls] of Object.entries(table)) {
    const e = errorFor(code, "", { status: 400 });
    assert.ok(e instanceof classes[cls as keyof typeof classes], code);
    assert.equal(e.codeClass, cls, code);
  }
  assert.ok(errorFor("idempotency_key_reused", "") instanceof IdempotencyKeyReused);
  // a code of a newer server: its class from the HTTP status
  assert.ok(errorFor("some_new_rejection", "", { status: 422 }) instanceof BusinessRejection);
  assert.ok(errorFor("some_new_fault", "", { status: 500 }) instanceof Fault);
});

/** docs/openapi.json: in the source tree ($TALLY_SRCDIR under make check), else above the package. */
function openapiPath(): string {
  if (process.env.TALLY_SRCDIR) return join(process.env.TALLY_SRCDIR, "docs/openapi.json");
  return resolve(dirname(fileURLToPath(import.meta.url)), "../../../../docs/openapi.json");
}

test("every op of docs/openapi.json is a method of TallyClient", () => {
  const doc = JSON.parse(readFileSync(openapiPath(), "utf8")) as { paths: Record<string, Record<string, unknown>> };
  const ops = Object.entries(doc.paths)
    .filter(([path, item]) => "post" in item && path.split("/").length === 3)
    .map(([path]) => path.slice("/v1/".length));
  assert.ok(ops.includes("transfer") && ops.includes("sub_fetch"));
  const camel = (op: string): string => op.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());
  const methods = TallyClient.prototype as unknown as Record<string, unknown>;
  const missing = ops.filter((op) => typeof methods[camel(op)] !== "function");
  assert.deepEqual(missing, [], "ops of docs/openapi.json without a TallyClient method (the op's name in camelCase)");
});
