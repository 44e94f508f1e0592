// tail.js — the live event tail: the last events of the log, then each new
// one as it commits, by long-poll (GET /v1/log?from=…&wait_ms=…: tallyd
// answers as soon as an event after `from` exists, or empty after the
// wait), each event its JSON document. A long-poll carries the token in
// its Authorization header, which a browser's EventSource cannot send.

import * as api from './api.js';
import { entityText, entityHref, causeText } from './event.js';
import { el, fill, int, time, errorBox } from './format.js';

const BACKLOG = 20;      // events shown at the start
const ROWS_MAX = 200;    // rows kept on the page
const WAIT_MS = 25000;   // each long-poll's wait (tallyd's limit: 30000)

function row(ev) {
  const href = entityHref(ev);
  const about = href ? el('a', { href, text: entityText(ev) }) : entityText(ev);
  return el('tr', { 'data-seq': String(ev.seq) },
    el('td', { class: 'num', text: int(ev.seq) }), el('td', { text: time(ev.time_ms) }),
    el('td', { text: ev.type }), el('td', {}, about), el('td', { text: causeText(ev) }));
}

export function render(main, ctx) {
  const body = el('tbody', {});
  const count = el('span', { id: 'tail-count', text: '0' });
  const state = el('span', { class: 'muted', text: 'connecting…' });
  let paused = false, stopped = false, controller = null, next = 1;
  const pause = el('button', { type: 'button', class: 'secondary', 'aria-pressed': 'false', text: 'Pause',
    onclick: () => {
      paused = !paused;
      pause.textContent = paused ? 'Resume' : 'Pause';
      pause.setAttribute('aria-pressed', String(paused));
      if (paused && controller) controller.abort();
      if (!paused) poll();
    } });
  const error = el('div', {});
  main.append(el('h1', { text: 'Live events' }),
    el('p', {}, 'Events shown: ', count, ' (newest first, the last ' + ROWS_MAX + ' kept) — ', state, ' ', pause),
    error,
    el('table', {}, el('caption', { class: 'muted', text: 'The log as it commits' }),
      el('thead', {}, el('tr', {}, ['seq', 'committed', 'type', 'about', 'caused by (consumer / key)'].map((h) =>
        el('th', { scope: 'col', text: h })))), body));

  function add(events) {
    for (const ev of events) {
      body.prepend(row(ev));
      next = Number(ev.seq) + 1;
    }
    while (body.rows.length > ROWS_MAX) body.lastElementChild.remove();
    count.textContent = String(body.rows.length);
  }

  async function poll() {
    while (!stopped && !paused) {
      controller = new AbortController();
      try {
        state.textContent = 'waiting for events';
        const r = await api.get('log', { from: next, limit: 100, wait_ms: WAIT_MS }, controller.signal);
        fill(error);
        add(r.events);
      } catch (err) {
        if (stopped || paused || err.name === 'AbortError') return;
        fill(error, errorBox(err));
        state.textContent = 'retrying';
        await new Promise((done) => setTimeout(done, 2000)); // a poll interval after a failure
      }
    }
  }

  (async () => {
    try {
      const stats = await api.get('stats');
      next = Math.max(1, Number(stats.head_seq) - BACKLOG + 1);
      const r = await api.get('log', { from: next, limit: BACKLOG });
      add(r.events);
      if (Number(stats.head_seq) < next) next = Number(stats.head_seq) + 1;
    } catch (err) {
      fill(error, errorBox(err));
    }
    poll();
  })();
  return () => { stopped = true; if (controller) controller.abort(); };
}
