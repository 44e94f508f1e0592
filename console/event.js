// event.js — one event of the log as the pages show it: from the base64
// msgpack bytes the log gives (docs/EVENTS.md, formats 2 and 1), or from a
// JSON event document as it is. The result: {seq, id, type, entity,
// entity_version, time_ms, causation: {consumer, key} or null,
// correlation, body: {part name: {field: value}}}.

import { base64Bytes, decode } from './msgpack.js';

const ACCOUNT = ['id', 'ledger', 'code', 'flags', 'debits_posted', 'credits_posted',
  'debits_pending', 'credits_pending', 'version', 'created_seq'];
const TRANSFER = ['id', 'debit_account_id', 'credit_account_id', 'amount', 'ledger', 'code',
  'flags', 'state', 'timeout_s', 'expires_at_ms', 'posted_amount', 'version', 'created_seq',
  'resolved_seq', 'created_ms'];
const ENTITLEMENT = ['subject', 'feature', 'state', 'valid_until_ms', 'version', 'source_order',
  'granted_ms', 'updated_ms', 'grant_transfer_id'];
const DEAD_LETTER = ['subscriber', 'seq', 'attempts', 'parked_ms', 'error'];
const WEBHOOK = ['source', 'event_id', 'event_type', 'signed_at_s', 'body'];
const TRANSFER_STATES = [null, 'posted', 'pending', 'pending_posted', 'pending_voided', 'pending_expired'];
const ENTITLEMENT_STATES = [null, 'active', 'revoked', 'expired'];

// Each entity kind (format 2's number): its name and its body's parts.
const KINDS = {
  1: ['account', [['account', ACCOUNT]]],
  2: ['transfer', [['transfer', TRANSFER], ['debit_account', ACCOUNT], ['credit_account', ACCOUNT]]],
  3: ['entitlement', [['entitlement', ENTITLEMENT]]],
  4: ['dead_letter', [['dead_letter', DEAD_LETTER]]],
  5: ['webhook', [['webhook', WEBHOOK]]],
};

export function hex(v) {
  if (!(v instanceof Uint8Array)) return v;
  return Array.from(v, (b) => b.toString(16).padStart(2, '0')).join('');
}

// Binary values as hex, recursively (ids, hashes, webhook bodies).
function plain(v) {
  if (v instanceof Uint8Array) return hex(v);
  if (Array.isArray(v)) return v.map(plain);
  if (typeof v === 'bigint') return v.toString();
  if (v && typeof v === 'object' && !(v instanceof Map))
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  return v;
}

function row(fields, values, part) {
  const o = {};
  fields.forEach((f, i) => { o[f] = plain(values[i]); });
  if (part === 'transfer') o.state = TRANSFER_STATES[o.state] || o.state;
  if (part === 'entitlement') o.state = ENTITLEMENT_STATES[o.state] || o.state;
  return o;
}

function fromFormat2(a) {
  const [kindName, parts] = KINDS[a[4][0]] || ['unknown', []];
  const body = {};
  parts.forEach(([name, fields], i) => { if (a[9][i]) body[name] = row(fields, a[9][i], name); });
  return {
    seq: a[1], id: hex(a[2]), type: a[3],
    entity: [kindName, ...a[4].slice(1).map(plain)],
    entity_version: a[5], time_ms: a[6],
    causation: a[7] ? { consumer: a[7][0], key: a[7][1] } : null,
    correlation: a[8], body, hash: hex(a[11]),
  };
}

function fromFormat1(m) {
  return {
    seq: m.seq, id: hex(m.id), type: m.type, entity: plain(m.entity),
    entity_version: m.entity_version, time_ms: m.time_ms,
    causation: m.causation || null, correlation: m.correlation, body: plain(m.body), hash: hex(m.hash),
  };
}

export function eventOf(e) {
  if (e && typeof e === 'object') return e; // a JSON event document
  const v = decode(base64Bytes(e));
  return Array.isArray(v) ? fromFormat2(v) : fromFormat1(v);
}

// What the event is about, as a short text ("transfer 0a…", "account 1").
export function entityText(ev) {
  const en = ev.entity;
  if (Array.isArray(en)) return en.map(String).join(' ');
  if (en && typeof en === 'object') return Object.values(en).map(String).join(' ');
  return String(en ?? '');
}
