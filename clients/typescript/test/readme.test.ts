/*
 * readme.test.ts — README.md's first example ("A transfer, its retry, a
 * read") runs as it is written against a real tallyd (its import pointed
 * at this build, its baseUrl at the test's tallyd) and prints what its
 * comments say.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { startTallyd, type Tallyd } from "./support.js";

const here = dirname(fileURLToPath(import.meta.url));
let server: Tallyd;

before(async () => {
  server = await startTallyd();
});
after(async () => {
  await server?.stop();
});

/** clients/typescript/README.md: in the source tree ($TALLY_SRCDIR under make check), else beside package.json. */
function readmePath(): string {
  if (process.env.TALLY_SRCDIR) return join(process.env.TALLY_SRCDIR, "clients/typescript/README.md");
  return resolve(here, "../../README.md");
}

test("README's transfer example runs and prints what it says", () => {
  const readme = readFileSync(readmePath(), "utf8");
  const block = /## A transfer, its retry, a read\n\n```ts\n([\s\S]*?)```/.exec(readme);
  assert.ok(block, "README.md has the example");
  const index = pathToFileURL(join(here, "../src/index.js")).href;
  const program = block[1]!
    .replace('from "@tally/client"', `from ${JSON.stringify(index)}`)
    .replace('"http://127.0.0.1:7452"', JSON.stringify(server.url));
  const file = join(server.dir, "readme-example.mjs");
  writeFileSync(file, program);
  const out = execFileSync(process.execPath, [file], { encoding: "utf8" }).trim().split("\n");
  assert.equal(out[0], "false true");
  assert.match(out[1]!, /^[0-9a-f]{32}$/);
  assert.equal(out[2], "500");
  assert.equal(out[3], "idempotency_key_reused 409");
  assert.equal(out.length, 4);
});
