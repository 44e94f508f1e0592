// relay.js — tally-relay as tallyd sees it. tallyd does not know the
// relay's endpoints (their URLs, attempts, circuit state live in
// tally-relay and its own /metrics, docs/RELAY.md); each relay sink is a
// durable subscriber, so what tallyd knows is each subscriber's last fetch
// (the relay's liveness), backlog and dead letters.

import * as api from './api.js';
import { el, fill, int, seconds, table, errorBox } from './format.js';

const POLL_MS = 2000;
const LIVE_S = 60; // a sink that fetched within this is live

function state(s) {
  if (s.last_fetch_age_s <= LIVE_S) return el('span', { class: 'ok', text: 'fetching' });
  if (s.pending > 0) return el('span', { class: 'bad', text: 'stalled: events wait' });
  return el('span', { class: 'muted', text: 'idle' });
}

export function render(main) {
  let stopped = false, timer = null;
  const box = el('div', {});
  main.append(el('h1', { text: 'Relay' }),
    el('p', { class: 'note', text: 'tallyd does not know tally-relay\'s endpoints: their URLs, attempts and circuit state are in tally-relay\'s own /metrics (docs/RELAY.md). Each relay sink is a durable subscriber of tallyd; this page shows what tallyd knows of them: when each last fetched, what waits and what was parked.' }),
    box);
  async function tick() {
    try {
      const r = await api.get('subscribers');
      if (stopped) return;
      fill(box, table('Subscribers as relay sinks',
        [{ label: 'subscriber' }, { label: 'state' }, { label: 'last fetch', num: true }, { label: 'pending', num: true },
          { label: 'in flight', num: true }, { label: 'dead letters', num: true }],
        r.subscribers.map((s) => [el('a', { href: '#subscribers/' + encodeURIComponent(s.name), text: s.name }), state(s),
          seconds(s.last_fetch_age_s), int(s.pending), int(s.in_flight), int(s.dead_letters)]),
        'No durable subscribers: no relay sink has started.'));
    } catch (err) {
      if (!stopped) fill(box, errorBox(err));
    }
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  }
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}
