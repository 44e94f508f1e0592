/*
 * subscriber.test.ts — the shared scenario's subscriber part: a durable
 * subscriber loop (runSubscriber + exactlyOnce over the caller's store, a
 * JSON file written atomically) is killed with SIGKILL in the middle of
 * its handler, restarted, killed again after its store committed an event
 * but before the ack, restarted: every event's effect is applied exactly
 * once, the event committed-but-unacked is skipped when it comes again,
 * and tallyd's cursor reaches the head.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { existsSync, readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { TallyClient, runSubscriber, Park, Retry } from "../src/index.js";
import { startTallyd, slowdown, waitFor, type Tallyd } from "./support.js";

const childScript = join(dirname(fileURLToPath(import.meta.url)), "subscriber_child.js");
let server: Tallyd;

before(async () => {
  server = await startTallyd();
});
const children: ChildProcess[] = [];
after(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL"); // a test that failed midway
  await server?.stop();
});

interface Child {
  process: ChildProcess;
  lines: string[];
  /** resolves with the first line equal to `line` (or rejects when the child exits first or the bound passes) */
  waitLine: (line: string, seconds: number) => Promise<void>;
  exited: Promise<number | null>;
}

function runChild(args: string[]): Child {
  const p = spawn(process.execPath, [childScript, ...args], { stdio: ["ignore", "pipe", "inherit"] });
  children.push(p);
  const lines: string[] = [];
  const waiters: Array<() => void> = [];
  createInterface({ input: p.stdout! }).on("line", (l) => {
    lines.push(l);
    for (const w of waiters) w();
  });
  const exited = new Promise<number | null>((r) => p.once("exit", (code) => r(code)));
  const waitLine = (line: string, seconds: number): Promise<void> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no "${line}" within ${seconds * slowdown} s; saw: ${lines.join(" | ")}`)), seconds * slowdown * 1000);
      const check = (): void => {
        if (lines.includes(line)) {
          clearTimeout(timer);
          resolve();
        }
      };
      waiters.push(check);
      check();
      void exited.then(() => {
        clearTimeout(timer);
        if (!lines.includes(line)) reject(new Error(`the child exited before "${line}"; saw: ${lines.join(" | ")}`));
      });
    });
  return { process: p, lines, waitLine, exited };
}

async function kill9(c: Child): Promise<void> {
  c.process.kill("SIGKILL");
  await c.exited;
}

test("a subscriber killed mid-handler and after a commit, restarted: every event handled exactly once", { timeout: 120000 * slowdown }, async () => {
  const client = new TallyClient({ baseUrl: server.url, consumer: "shop" });
  for (const id of [1, 2, 3]) await client.accountOpen({ id, ledger: 1, code: 10 });
  for (let i = 0; i < 7; i++) await client.transfer({ debit_account_id: 1, credit_account_id: 1 + (i % 2) + 1, amount: 10 + i, ledger: 1, code: 1 });
  await client.subCreate("mirror");
  const head = Number((await client.stats()).head_seq);
  assert.equal(head, 10);
  const store = join(server.dir, "mirror-store.json");
  const args = [server.url, store, "mirror", String(head)];

  // 1: killed inside the handler of event 4, its transaction not committed
  const a = runChild([...args, "handler", "4"]);
  await a.waitLine("hang handler 4", 30);
  await kill9(a);
  assert.deepEqual(a.lines, ["handled 1", "handled 2", "handled 3", "hang handler 4"]);

  // 2: event 4 again (its effect was rolled back with the kill), killed after event 7 committed, before its ack
  const b = runChild([...args, "after-commit", "7"]);
  await b.waitLine("hang after-commit 7", 30);
  await kill9(b);
  assert.deepEqual(b.lines, ["handled 4", "handled 5", "handled 6", "handled 7", "hang after-commit 7"]);

  // 3: event 7 comes again and is skipped; the rest handled; exits once all are in the store
  const c = runChild(args);
  await c.waitLine("done", 30);
  assert.equal(await c.exited, 0);
  assert.deepEqual(c.lines, ["skipped 7", "handled 8", "handled 9", "handled 10", "done"]);

  assert.ok(existsSync(store));
  const state = JSON.parse(readFileSync(store, "utf8")) as { handled: Record<string, number>; applied: number[] };
  assert.deepEqual(state.applied, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "every event's effect once, in order");
  assert.deepEqual(Object.values(state.handled).sort((x, y) => x - y), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  const sub = await client.subGet("mirror");
  assert.equal(sub.ack_floor, head, "every event acked");
});

test("a handler that throws naks the event (Retry chooses when), Park parks it", async () => {
  const client = new TallyClient({ baseUrl: server.url });
  await client.subCreate("flaky", { start: "now" });
  const w = await client.accountOpen({ id: 40, ledger: 1, code: 10 });
  const p = await client.accountOpen({ id: 41, ledger: 1, code: 10 });
  const stop = new AbortController();
  const seen: string[] = [];
  const errors: string[] = [];
  const counters = await runSubscriber(client, {
    name: "flaky",
    waitMs: 1000,
    signal: stop.signal,
    onError: (e) => errors.push(String(e)),
    handler: (d) => {
      seen.push(`${d.seq}/${d.attempt}`);
      if (d.seq === p.seq) throw new Park("bad address");
      if (d.attempt === 1) throw new Retry("smtp down", 0);
      stop.abort();
    },
  });
  assert.deepEqual(seen, [`${w.seq}/1`, `${p.seq}/1`, `${w.seq}/2`]);
  assert.equal(counters.done, 1);
  assert.equal(counters.retried, 1);
  assert.equal(counters.parked, 1);
  assert.match(errors[0]!, /smtp down/);
  const dead = await client.dlqList("flaky");
  assert.deepEqual(dead.entries.map((e) => [e.seq, e.error]), [[p.seq, "bad address"]]);
  assert.equal((await client.subGet("flaky")).ack_floor, p.seq, "acked, and the parked one past");
});

test("untilIdle: the loop returns after a fetch that brings nothing", async () => {
  const client = new TallyClient({ baseUrl: server.url });
  await client.subCreate("once", { start: "now" });
  await client.accountOpen({ id: 50, ledger: 1, code: 10 });
  const counters = await runSubscriber(client, { name: "once", waitMs: 0, untilIdle: true, handler: () => undefined });
  assert.equal(counters.done, 1);
  assert.equal(counters.fetches, 2);
});

test("a handler running past the ack wait keeps its events: the loop sends sub_progress", { timeout: 120000 * slowdown }, async () => {
  const client = new TallyClient({ baseUrl: server.url });
  await client.subCreate("slow", { start: "now", ack_wait_ms: 1500 });
  const w = await client.accountOpen({ id: 60, ledger: 1, code: 10 });
  const progressed: string[][] = [];
  let takenByOther = -1;
  const errors: string[] = [];
  const counters = await runSubscriber(client, {
    name: "slow",
    instance: "slow-1",
    onError: (e) => errors.push(String(e)),
    waitMs: 0,
    untilIdle: true,
    onProgress: (r, seqs) => progressed.push([String(r.extended), ...seqs.map(String)]),
    handler: async () => {
      // work for more than the ack wait since the fetch: four progresses
      // come every third of it (2000 ms and more)
      await waitFor("four sub_progress calls", 60, () => (progressed.length >= 4 ? true : undefined));
      // the lease was kept: another instance's fetch does not get the event
      takenByOther = (await client.subFetch("slow", { max: 10, wait_ms: 0, instance: "slow-2" })).events.length;
    },
  });
  assert.deepEqual(errors, [], "the handler returned");
  assert.equal(takenByOther, 0, "the event in hand was not delivered to another instance");
  assert.deepEqual(progressed.slice(0, 4), Array(4).fill(["1", String(w.seq)]));
  assert.equal(counters.done, 1);
  assert.ok(counters.progress >= 4);
  const sub = await client.subGet("slow");
  assert.equal(sub.ack_floor, w.seq);
  assert.equal(sub.redelivered, 0, "delivered once");
});
