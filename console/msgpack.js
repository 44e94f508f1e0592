// msgpack.js — a small msgpack decoder for the events the log gives as
// base64 (docs/EVENTS.md): nil, booleans, integers (beyond 2^53 as
// BigInt), floats, strings, binary (Uint8Array), arrays and maps (string
// keys as object keys, other maps as Map). Throws on bytes that are not
// one whole value.

export function base64Bytes(text) {
  const s = atob(text);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

export function decode(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  const need = (n) => { if (at + n > bytes.length) throw new Error('msgpack: truncated'); };
  const u8 = () => { need(1); return bytes[at++]; };
  const big = (v) => (v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= -BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v);
  const read = (n, f) => { need(n); const v = f(at); at += n; return v; };
  const str = (n) => { need(n); const v = new TextDecoder().decode(bytes.subarray(at, at + n)); at += n; return v; };
  const bin = (n) => { need(n); const v = bytes.slice(at, at + n); at += n; return v; };
  const array = (n) => { const a = []; for (let i = 0; i < n; i++) a.push(value()); return a; };
  const map = (n) => {
    const entries = [];
    for (let i = 0; i < n; i++) entries.push([value(), value()]);
    if (entries.every(([k]) => typeof k === 'string')) return Object.fromEntries(entries);
    return new Map(entries);
  };
  function value() {
    const b = u8();
    if (b <= 0x7f) return b;
    if (b >= 0xe0) return b - 256;
    if ((b & 0xf0) === 0x80) return map(b & 0x0f);
    if ((b & 0xf0) === 0x90) return array(b & 0x0f);
    if ((b & 0xe0) === 0xa0) return str(b & 0x1f);
    switch (b) {
      case 0xc0: return null;
      case 0xc2: return false;
      case 0xc3: return true;
      case 0xc4: return bin(u8());
      case 0xc5: return bin(read(2, (o) => view.getUint16(o)));
      case 0xc6: return bin(read(4, (o) => view.getUint32(o)));
      case 0xca: return read(4, (o) => view.getFloat32(o));
      case 0xcb: return read(8, (o) => view.getFloat64(o));
      case 0xcc: return u8();
      case 0xcd: return read(2, (o) => view.getUint16(o));
      case 0xce: return read(4, (o) => view.getUint32(o));
      case 0xcf: return big(read(8, (o) => view.getBigUint64(o)));
      case 0xd0: return read(1, (o) => view.getInt8(o));
      case 0xd1: return read(2, (o) => view.getInt16(o));
      case 0xd2: return read(4, (o) => view.getInt32(o));
      case 0xd3: return big(read(8, (o) => view.getBigInt64(o)));
      case 0xd9: return str(u8());
      case 0xda: return str(read(2, (o) => view.getUint16(o)));
      case 0xdb: return str(read(4, (o) => view.getUint32(o)));
      case 0xdc: return array(read(2, (o) => view.getUint16(o)));
      case 0xdd: return array(read(4, (o) => view.getUint32(o)));
      case 0xde: return map(read(2, (o) => view.getUint16(o)));
      case 0xdf: return map(read(4, (o) => view.getUint32(o)));
      default: throw new Error('msgpack: type 0x' + b.toString(16) + ' not read here');
    }
  }
  const v = value();
  if (at !== bytes.length) throw new Error('msgpack: bytes after the value');
  return v;
}
