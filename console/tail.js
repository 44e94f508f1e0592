// tail.js — the live event tail: the last events of the log, then each new
// one as it commits, from the event stream (GET /v1/events?from=SEQ:
// Server-Sent Events, each event once, in order, each its JSON document).
// The stream is read with fetch, which sends the token in the
// Authorization header (a browser's EventSource cannot); when it ends or
// breaks, the page opens it again from the seq after the last it showed.

import * as api from './api.js';
import { entityText, entityHref, causeText } from './event.js';
import { el, fill, int, time, errorBox } from './format.js';

const BACKLOG = 20;      // events shown at the start
const ROWS_MAX = 200;    // rows kept on the page
const RETRY_MS = 2000;   // a poll interval after a refused or broken stream

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
  let removed = null; // the note of events retention removed before the page saw them
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

  // Each message's data lines, as the event it carries.
  function messages(text) {
    const events = [];
    for (const message of text.split('\n\n')) {
      const data = message.split('\n').filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(l.startsWith('data: ') ? 6 : 5)).join('\n');
      if (data) events.push(JSON.parse(data));
    }
    return events;
  }

  async function poll() {
    while (!stopped && !paused) {
      controller = new AbortController();
      try {
        const res = await api.stream('events', { from: next }, controller.signal);
        state.textContent = 'live';
        fill(error, removed);
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let held = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break; // the stream's time is up: open it again
          held += value;
          const end = held.lastIndexOf('\n\n');
          if (end < 0) continue;
          add(messages(held.slice(0, end)));
          held = held.slice(end + 2);
        }
      } catch (err) {
        if (stopped || paused || err.name === 'AbortError') return;
        if (err.code === 'value_out_of_range') { // retention removed `next`: go on from the log's start
          try {
            const first = Number((await api.get('stats')).first_seq);
            if (first > next) {
              removed = el('p', { class: 'note', text: 'Events ' + next + ' to ' + (first - 1) + ' were removed by retention before this page saw them.' });
              next = first;
              continue;
            }
          } catch (e) { /* shown below */ }
        }
        fill(error, errorBox(err));
        state.textContent = 'reconnecting';
        await new Promise((done) => setTimeout(done, RETRY_MS));
      }
    }
  }

  (async () => {
    try {
      const stats = await api.get('stats');
      next = Math.max(1, Number(stats.first_seq) || 1, Number(stats.head_seq) - BACKLOG + 1);
    } catch (err) {
      fill(error, errorBox(err));
    }
    poll();
  })();
  return () => { stopped = true; if (controller) controller.abort(); };
}
