// figures.js — the last hour of figures (GET /v1/figures): asked whole
// once, then only the samples after the newest held; kept to the ring's
// size, as tallyd keeps them.

import * as api from './api.js';

const COLUMNS = ['t_ms', 'head_seq', 'commits_per_s', 'commands_per_s', 'map_used_bytes',
  'map_size_bytes', 'disk_free_bytes', 'subscribers_total'];
const SUB_COLUMNS = ['pending', 'oldest_unacked_age_s', 'redelivered_total', 'dead_letters'];

let held = null;

function trim(f, max) {
  const extra = f.t_ms.length - max;
  if (extra <= 0) return;
  for (const c of COLUMNS) f[c].splice(0, extra);
  for (const s of f.subscribers) for (const c of SUB_COLUMNS) s[c].splice(0, extra);
}

function append(reply) {
  if (held === null) { held = reply; return; }
  const n = held.t_ms.length;
  for (const c of COLUMNS) held[c].push(...reply[c]);
  for (const s of reply.subscribers) {
    let mine = held.subscribers.find((h) => h.name === s.name);
    if (!mine) {
      mine = { name: s.name };
      for (const c of SUB_COLUMNS) mine[c] = new Array(n).fill(null);
      held.subscribers.push(mine);
    }
    for (const c of SUB_COLUMNS) mine[c].push(...s[c]);
  }
  for (const mine of held.subscribers) // not in this reply: not sampled since
    for (const c of SUB_COLUMNS)
      while (mine[c].length < held.t_ms.length) mine[c].push(null);
  held.map_max_bytes = reply.map_max_bytes;
  trim(held, reply.samples_max);
}

// The figures, with the samples taken since the last call.
export async function refresh() {
  const since = held && held.t_ms.length ? held.t_ms[held.t_ms.length - 1] : undefined;
  append(await api.get('figures', { since_ms: since }));
  return held;
}

export function subscriber(f, name) {
  return f.subscribers.find((s) => s.name === name) || null;
}
