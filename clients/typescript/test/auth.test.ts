/*
 * auth.test.ts — the client against a tallyd with --auth: the token goes
 * in `Authorization: Bearer` on writes, reads and the event stream; none
 * or another one is RefusedRequest `unauthenticated` (401), a grant the
 * principal lacks `forbidden` (403), on the stream too.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TallyClient, RefusedRequest } from "../src/index.js";
import { startTallyd, type Tallyd } from "./support.js";

const sha256 = (t: string): string => createHash("sha256").update(t).digest("hex");
let server: Tallyd;
let dir: string;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "tally-ts-auth-"));
  const file = join(dir, "auth");
  writeFileSync(file, `shop ${sha256("shop-token")} write:shop,read\nviewer ${sha256("viewer-token")} read\n`, { mode: 0o600 });
  server = await startTallyd(["--auth", file, "--backup-dir", join(dir, "backups")]);
});
after(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const refused = (code: string, status: number) => (e: unknown) => e instanceof RefusedRequest && e.code === code && e.status === status;

test("the token on writes, reads and the stream", async () => {
  const shop = new TallyClient({ baseUrl: server.url, token: "shop-token", consumer: "shop" });
  const w = await shop.accountOpen({ id: 1, ledger: 1, code: 10 });
  assert.equal(w.code, "ok");
  assert.equal((await shop.accountGet(1))?.id, 1);
  for await (const e of shop.events({ from: 1 })) {
    assert.equal(e.seq, w.seq);
    break;
  }
});

test("no token, an unknown one, a missing grant: refused, nothing applied", async () => {
  const anonymous = new TallyClient({ baseUrl: server.url, consumer: "shop" });
  const stranger = new TallyClient({ baseUrl: server.url, token: "nope", consumer: "shop" });
  const viewer = new TallyClient({ baseUrl: server.url, token: "viewer-token", consumer: "shop" });
  await assert.rejects(anonymous.accountOpen({ id: 2, ledger: 1, code: 10 }), refused("unauthenticated", 401));
  await assert.rejects(stranger.accountGet(1), refused("unauthenticated", 401));
  await assert.rejects(viewer.accountOpen({ id: 2, ledger: 1, code: 10 }), refused("forbidden", 403));
  await assert.rejects(
    (async () => {
      for await (const _ of anonymous.events({ from: 1 })) break;
    })(),
    refused("unauthenticated", 401),
  );
  assert.equal(await viewer.accountGet(2), null, "nothing applied");
});
