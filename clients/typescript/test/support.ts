/*
 * support.ts — what the tests share: a real tallyd in a temp directory
 * with its HTTP face on a loopback port of the kernel's (read back from
 * its --ready-file), stopped after; and waits on facts with one deadline
 * scaled like the C suites' ($TALLY_TEST_SLOWDOWN).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

/** The factor of every bound (tests/support/wait.h's rule). */
export const slowdown = Number(process.env.TALLY_TEST_SLOWDOWN ?? (process.env.TALLYD_WRAPPER ? 6 : 1)) || 1;

/** tallyd: $TALLYD (make check sets it), else the source tree's build/tallyd. */
export function tallydPath(): string {
  if (process.env.TALLYD) return process.env.TALLYD;
  // out/test/ → clients/typescript → the source tree's top
  for (const up of ["../../../../build/tallyd", "../../../build/tallyd"]) {
    const p = resolve(here, up);
    if (existsSync(p)) return p;
  }
  throw new Error("no tallyd: set TALLYD (make check does) or build it in ./build");
}

/** Poll `check` every 20 ms until it returns a value that is not undefined, or fail naming `what`. */
export async function waitFor<T>(what: string, seconds: number, check: () => T | undefined | Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + seconds * 1000 * slowdown;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`waited ${seconds} s (times ${slowdown}) for ${what}`);
    await new Promise((r) => setTimeout(r, 20)); // a poll interval, not a synchronisation
  }
}

export interface Tallyd {
  url: string;
  dir: string;
  process: ChildProcess;
  log: () => string;
  stop: () => Promise<void>;
}

/** A tallyd serving HTTP on 127.0.0.1:<kernel's port>, its store in a new temp dir. */
export async function startTallyd(extra: string[] = []): Promise<Tallyd> {
  const dir = mkdtempSync(join(tmpdir(), "tally-ts-"));
  const logPath = join(dir, "tallyd.log");
  const ready = join(dir, "ready");
  const { openSync } = await import("node:fs");
  const out = openSync(logPath, "w");
  const wrapper = process.env.TALLYD_WRAPPER ? process.env.TALLYD_WRAPPER.split(" ").filter(Boolean) : [];
  const argv = [
    ...wrapper,
    tallydPath(),
    "--data", join(dir, "data"),
    "--listen", `ipc://${join(dir, "rep")}`,
    "--publish", `ipc://${join(dir, "pub")}`,
    "--http", "http://127.0.0.1:0",
    "--ready-file", ready,
    ...extra,
  ];
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ["ignore", out, out] });
  const log = (): string => (existsSync(logPath) ? readFileSync(logPath, "utf8") : "");
  let exited = false;
  child.on("exit", () => (exited = true));
  const url = await waitFor("tallyd's ready file", 30, () => {
    if (exited) throw new Error(`tallyd exited before it was ready:\n${log()}`);
    if (!existsSync(ready)) return undefined;
    const line = readFileSync(ready, "utf8").split("\n").find((l) => l.startsWith("http "));
    return line?.slice(5).trim();
  });
  const stop = async (): Promise<void> => {
    if (!exited) {
      const gone = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await gone;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  return { url, dir, process: child, log, stop };
}
