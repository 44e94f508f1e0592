/*
 * subscriber_child.ts — a subscriber process for subscriber.test.ts: runs
 * runSubscriber with exactlyOnce over a JSON file written atomically (the
 * caller's store: its "transaction" reads the file, lets the handler
 * change a copy, and replaces the file by rename, so a SIGKILL leaves the
 * old state or the new one, never half). It can hang at one event, in
 * the handler (before the commit) or after the commit (before the ack),
 * for the test to kill it there.
 *
 *   node subscriber_child.js URL STORE NAME EXPECTED [handler|after-commit SEQ]
 *
 * Prints `handled SEQ` / `skipped SEQ` per event, `hang PHASE SEQ` when it
 * hangs, and exits 0 once the store holds EXPECTED event ids.
 */
import { closeSync, existsSync, fsyncSync, openSync, readFileSync, renameSync, writeSync } from "node:fs";
import { TallyClient, runSubscriber, exactlyOnce, type ExactlyOnceStore } from "../src/index.js";

interface State {
  /** event id → seq: the events handled (the helper's record) */
  handled: Record<string, number>;
  /** the effects: each event's seq, once per time it was applied */
  applied: number[];
}

const [url, storePath, name, expectedText, phase, hangSeqText] = process.argv.slice(2);
const expected = Number(expectedText);
const hangSeq = Number(hangSeqText ?? 0);

function load(): State {
  return existsSync(storePath!) ? (JSON.parse(readFileSync(storePath!, "utf8")) as State) : { handled: {}, applied: [] };
}

function commit(state: State): void {
  const tmp = `${storePath}.tmp`;
  const fd = openSync(tmp, "w");
  writeSync(fd, JSON.stringify(state));
  fsyncSync(fd);
  closeSync(fd);
  renameSync(tmp, storePath!);
}

const store: ExactlyOnceStore<State> = {
  async transaction(work) {
    const tx = load();
    const result = await work(tx); // a throw (or a kill) leaves the file as it was
    commit(tx);
    return result;
  },
  seen: (tx, eventId) => eventId in tx.handled,
  record: (tx, eventId, d) => {
    tx.handled[eventId] = Number(d.seq);
  },
};

const hang = (what: string, seq: number): Promise<never> => {
  process.stdout.write(`hang ${what} ${seq}\n`);
  return new Promise<never>(() => setInterval(() => undefined, 1 << 30)); // until killed
};

const client = new TallyClient({ baseUrl: url! });
const stop = new AbortController();
const apply = exactlyOnce(store, async (d, tx) => {
  tx.applied.push(Number(d.seq));
  if (phase === "handler" && Number(d.seq) === hangSeq) await hang("handler", hangSeq);
});

await runSubscriber(client, {
  name: name!,
  instance: "mirror-1", // stable: a restart gets what the killed run held, at once
  waitMs: 1000,
  signal: stop.signal,
  handler: async (d) => {
    const outcome = await apply(d);
    process.stdout.write(`${outcome} ${d.seq}\n`);
    if (phase === "after-commit" && Number(d.seq) === hangSeq) await hang("after-commit", hangSeq);
    if (Object.keys(load().handled).length >= expected) stop.abort();
  },
});
process.stdout.write("done\n");
