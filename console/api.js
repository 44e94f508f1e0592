// api.js — the console's way to tallyd's JSON API (docs/PROTOCOL.md,
// "JSON API (HTTP)") on the same origin: the sign-in token, kept in this
// tab's session storage, goes in the Authorization header of each request.

const TOKEN_KEY = 'tally.console.token';

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// A reply other than 200: status, the reply's code and message.
export class ApiError extends Error {
  constructor(status, code, message) {
    super(code ? code + (message ? ': ' + message : '') : 'HTTP ' + status);
    this.status = status;
    this.code = code;
  }
}

function headers(extra) {
  const h = Object.assign({ Accept: 'application/json' }, extra || {});
  const t = token();
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

async function reply(res) {
  const text = await res.text();
  let body = null;
  try { body = JSON.parse(text); } catch (err) { body = null; }
  if (!res.ok) throw new ApiError(res.status, body && body.code, body ? body.message : text.trim());
  return body;
}

// GET /v1/PATH with query arguments (undefined ones left out).
export async function get(path, query, signal) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query || {}))
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const qs = q.toString();
  const res = await fetch('/v1/' + path + (qs ? '?' + qs : ''), { headers: headers(), signal });
  return reply(res);
}

// GET /v1/PATH as a stream (Server-Sent Events): the response, whose body
// the caller reads as it comes; an ApiError when it is refused.
export async function stream(path, query, signal) {
  const q = new URLSearchParams(query || {}).toString();
  const res = await fetch('/v1/' + path + (q ? '?' + q : ''),
    { headers: headers({ Accept: 'text/event-stream' }), signal, cache: 'no-store' });
  if (!res.ok) await reply(res);
  return res;
}

// POST /v1/OP with a JSON body (subscriber writes: no idempotency key).
export async function post(op, body) {
  const res = await fetch('/v1/' + op, {
    method: 'POST',
    headers: headers({ 'Content-Type': 'application/json' }),
    body: JSON.stringify(body),
  });
  return reply(res);
}

// GET /readyz: the health checks (no token needed; 503 is an answer too).
export async function readiness() {
  const res = await fetch('/readyz', { headers: { Accept: 'application/json' } });
  return res.json();
}
