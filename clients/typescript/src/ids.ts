/*
 * ids.ts — idempotency keys and transfer ids.
 *
 * uuidv7() makes the key of a write (RFC 9562 UUIDv7 text, as libtally and
 * the CLI make them): it carries its creation time, so tallyd can refuse a
 * retry that comes after its dedupe window (`key_expired`) instead of
 * applying it twice, and keys made one after another sort in that order
 * (tallyd's inbox grows at its right edge; docs/PROTOCOL.md "Requests").
 *
 * transferIdFromKey() is the id tallyd gives a `POST /v1/transfer` without
 * `id`: the first 16 bytes of SHA-256("tally.transfer-id.v1" || consumer ||
 * 0x00 || key), with a UUIDv7 key's time and version bits laid over it
 * (common/transfer_id.c is the definition; the tests check both agree).
 *
 * Both use Web Crypto (globalThis.crypto: browsers, Node 19+; on Node 18
 * node:crypto's webcrypto).
 */

interface WebCrypto {
  getRandomValues<T extends ArrayBufferView>(array: T): T;
  subtle: SubtleCrypto;
}

/*
 * The Web Crypto object: the global one (browsers, Node 19+), else, on
 * Node 18, node:crypto's, loaded once when this module loads (a variable
 * name keeps bundlers for browsers from following that import).
 */
const crypto: WebCrypto = await (async (): Promise<WebCrypto> => {
  const global = (globalThis as { crypto?: WebCrypto }).crypto;
  if (global !== undefined && typeof global.getRandomValues === "function") return global;
  const name = "node:crypto";
  return ((await import(name)) as { webcrypto: WebCrypto }).webcrypto;
})();

const HEX: readonly string[] = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

/** 16 bytes as 32 lower-case hex digits. */
export function toHex(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += HEX[b];
  return s;
}

/** 32 hex digits, dashes anywhere allowed (as tallyd reads them), as 16 bytes; undefined when not that. */
export function fromHex(text: string): Uint8Array | undefined {
  const digits = text.replace(/-/g, "");
  if (!/^[0-9a-fA-F]{32}$/.test(digits)) return undefined;
  const out = new Uint8Array(16);
  for (let i = 0; i < 16; i++) out[i] = parseInt(digits.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function uuidText(b: Uint8Array): string {
  const h = toHex(b);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

let lastMs = 0;
let sequence = 0;

/**
 * A new UUIDv7 (text, with dashes): 48 bits of Unix milliseconds, then a
 * 12-bit sequence that grows within one millisecond (so keys made by one
 * process sort in the order they were made), then 62 random bits.
 */
export function uuidv7(nowMs: number = Date.now()): string {
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  let ms = Math.max(nowMs, lastMs);
  if (ms === lastMs) {
    sequence++;
    if (sequence > 0xfff) {
      ms++; // borrow the next millisecond rather than repeat or go back
      sequence = bytes[6]! & 0x07;
    }
  } else {
    sequence = ((bytes[6]! & 0x07) << 8) | bytes[7]!; // start low: room to grow
  }
  lastMs = ms;
  for (let i = 5; i >= 0; i--) {
    bytes[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  bytes[6] = 0x70 | (sequence >> 8);
  bytes[7] = sequence & 0xff;
  bytes[8] = 0x80 | (bytes[8]! & 0x3f);
  return uuidText(bytes);
}

/**
 * A new 16-byte id (a UUIDv7) as 32 hex digits: a transfer id for a
 * `chain` or `batch` member, where the server derives none.
 */
export function newId(): string {
  return uuidv7().replace(/-/g, "");
}

/** Whether `key` is UUIDv7 text (32 hex digits, dashes allowed, version 7, variant 10). */
export function isUuidv7(key: string): boolean {
  const b = fromHex(key);
  return b !== undefined && b[6]! >> 4 === 7 && b[8]! >> 6 === 2;
}

/**
 * The id tallyd gives a transfer sent without `id` under (consumer, key):
 * 32 hex digits (common/transfer_id.c, docs/PROTOCOL.md "JSON API").
 */
export async function transferIdFromKey(consumer: string, key: string): Promise<string> {
  const enc = new TextEncoder();
  const domain = enc.encode("tally.transfer-id.v1");
  const c = enc.encode(consumer);
  const k = enc.encode(key);
  const input = new Uint8Array(domain.length + c.length + 1 + k.length);
  input.set(domain, 0);
  input.set(c, domain.length);
  input[domain.length + c.length] = 0;
  input.set(k, domain.length + c.length + 1);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", input));
  const id = digest.slice(0, 16);
  const timeKey = fromHex(key);
  if (timeKey !== undefined && timeKey[6]! >> 4 === 7 && timeKey[8]! >> 6 === 2) {
    id.set(timeKey.subarray(0, 6), 0);
    id[6] = 0x70 | (id[6]! & 0x0f);
    id[8] = 0x80 | (id[8]! & 0x3f);
  }
  return toHex(id);
}
