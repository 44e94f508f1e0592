// subscribers.js — durable subscribers: each one's backlog, oldest
// unacknowledged age, redeliveries and dead letters now (GET
// /v1/subscribers) and over the last hour (GET /v1/figures), and a
// subscriber's dead letters with replay and discard — offered only to a
// token with the admin grant, as tallyd allows them only to it.

import * as api from './api.js';
import * as figures from './figures.js';
import { lineChart } from './chart.js';
import { el, fill, int, seconds, time, table, errorBox } from './format.js';

const POLL_MS = 2000;

function subscriberRows(list) {
  return list.map((s) => [el('a', { href: '#subscribers/' + encodeURIComponent(s.name), text: s.name }),
    int(s.pending), int(s.in_flight), seconds(s.oldest_unacked_age_s), int(s.redelivered),
    int(s.dead_letters), seconds(s.last_fetch_age_s)]);
}

const COLUMNS = [{ label: 'name' }, { label: 'pending', num: true }, { label: 'in flight', num: true },
  { label: 'oldest unacked', num: true }, { label: 'redelivered', num: true }, { label: 'dead letters', num: true },
  { label: 'last fetch', num: true }];

function listPage(main, ctx) {
  let stopped = false, timer = null;
  main.append(el('h1', { text: 'Subscribers' }), el('p', { class: 'muted', text: 'Loading…' }));
  async function tick() {
    try {
      const [r, f] = await Promise.all([api.get('subscribers'), figures.refresh()]);
      if (stopped) return;
      const sampled = f.subscribers.filter((s) => r.subscribers.some((x) => x.name === s.name));
      const total = f.subscribers_total.length ? f.subscribers_total[f.subscribers_total.length - 1] : r.subscribers.length;
      fill(main, el('h1', { text: 'Subscribers' }),
        table(null, COLUMNS, subscriberRows(r.subscribers), 'No durable subscribers.'),
        el('h2', { text: 'The last hour' }),
        total > f.subscribers_max ? el('p', { class: 'note', text: `tallyd samples the first ${f.subscribers_max} subscribers by name; the others have no history here.` }) : null,
        el('div', { class: 'charts' },
          lineChart('Pending events', f.t_ms, sampled.map((s) => ({ label: s.name, values: s.pending })), int),
          lineChart('Oldest unacked age', f.t_ms, sampled.map((s) => ({ label: s.name, values: s.oldest_unacked_age_s })), seconds),
          lineChart('Redeliveries (total)', f.t_ms, sampled.map((s) => ({ label: s.name, values: s.redelivered_total })), int)));
    } catch (err) {
      if (!stopped) fill(main, el('h1', { text: 'Subscribers' }), errorBox(err));
    }
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  }
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}

function deadLetterActions(name, d, reload, ctx) {
  if (!ctx.who.admin) return '';
  const replay = el('button', { type: 'button', class: 'secondary', 'data-action': 'replay', text: 'Replay',
    'aria-label': 'Replay dead letter ' + d.seq, onclick: async () => {
      replay.disabled = true;
      try {
        await api.post('dlq_replay', { name, seq: d.seq });
        ctx.status('Dead letter ' + d.seq + ' goes back to ' + name + ' at its next fetch.');
      } catch (err) {
        ctx.status('Replay refused: ' + err.message);
      }
      reload();
    } });
  const confirm = el('button', { type: 'button', class: 'danger', hidden: true, 'data-action': 'confirm-discard', text: 'Confirm discard',
    'aria-label': 'Confirm: discard dead letter ' + d.seq + ' for good', onclick: async () => {
      confirm.disabled = true;
      try {
        await api.post('dlq_discard', { name, seq: d.seq });
        ctx.status('Dead letter ' + d.seq + ' discarded.');
      } catch (err) {
        ctx.status('Discard refused: ' + err.message);
      }
      reload();
    } });
  const discard = el('button', { type: 'button', class: 'secondary', 'data-action': 'discard', text: 'Discard',
    'aria-label': 'Discard dead letter ' + d.seq, onclick: () => { discard.hidden = true; confirm.hidden = false; confirm.focus(); } });
  return el('span', { class: 'pager' }, d.replaying ? el('span', { class: 'muted', text: 'replaying' }) : replay, discard, confirm);
}

function deadLetters(box, name, ctx) {
  async function load() {
    try {
      const r = await api.get('subscribers/' + encodeURIComponent(name) + '/dead_letters', { limit: 100 });
      const rows = r.entries.map((d) => [int(d.seq), d.type, int(d.attempts), time(d.parked_ms), d.error || '—',
        d.replaying ? 'yes' : 'no', deadLetterActions(name, d, load, ctx)]);
      const all = ctx.who.admin && r.entries.length > 1 ? el('button', { type: 'button', 'data-action': 'replay-all', text: 'Replay all',
        onclick: async () => {
          try { await api.post('dlq_replay', { name }); ctx.status('Every dead letter of ' + name + ' goes back at its next fetch.'); } catch (err) { ctx.status('Replay refused: ' + err.message); }
          load();
        } }) : null;
      fill(box,
        ctx.who.admin ? null : el('p', { class: 'note', text: 'Replay and discard need the admin grant; this token does not hold it.' }),
        table('Dead letters of ' + name + (r.next !== null && r.next !== undefined ? ' (the first 100)' : ''),
          [{ label: 'seq', num: true }, { label: 'event' }, { label: 'attempts', num: true }, { label: 'parked' },
            { label: 'last error' }, { label: 'replaying' }, { label: ctx.who.admin ? 'actions' : '' }], rows, 'No dead letters.'),
        all);
    } catch (err) {
      fill(box, errorBox(err));
    }
  }
  load();
}

function detailPage(main, ctx, name) {
  let stopped = false, timer = null;
  const now = el('div', {}), charts = el('div', { class: 'charts' }), dlq = el('div', {});
  main.append(el('h1', { text: 'Subscriber ' + name }), el('p', {}, el('a', { href: '#subscribers', text: '← all subscribers' })),
    now, el('h2', { text: 'The last hour' }), charts, el('h2', { text: 'Dead letters' }), dlq);
  async function tick() {
    try {
      const [r, f] = await Promise.all([api.get('subscribers/' + encodeURIComponent(name)), figures.refresh()]);
      if (stopped) return;
      const s = r.subscriber;
      fill(now, el('dl', { class: 'tiles' }, [['Pending', int(s.pending), 'pending'], ['In flight', int(s.in_flight), 'in_flight'],
        ['Oldest unacked', seconds(s.oldest_unacked_age_s), 'oldest_unacked_age_s'], ['Redelivered', int(s.redelivered), 'redelivered'],
        ['Dead letters', int(s.dead_letters), 'dead_letters'], ['Replaying', int(s.replaying), 'replaying'],
        ['Acked up to', int(s.ack_floor), 'ack_floor'], ['Last fetch', seconds(s.last_fetch_age_s), 'last_fetch_age_s']]
        .map(([k, v, field]) => el('div', {}, el('dt', { text: k }), el('dd', { 'data-field': field, text: v })))));
      const h = figures.subscriber(f, name);
      fill(charts, ...(h ? [
        lineChart('Pending events', f.t_ms, [{ label: 'pending', values: h.pending }], int),
        lineChart('Oldest unacked age', f.t_ms, [{ label: 'age', values: h.oldest_unacked_age_s }], seconds),
        lineChart('Redeliveries and dead letters', f.t_ms, [{ label: 'redelivered (total)', values: h.redelivered_total },
          { label: 'dead letters', values: h.dead_letters }], int)]
        : [el('p', { class: 'note', text: 'No history: tallyd samples the first ' + f.subscribers_max + ' subscribers by name, and has not sampled this one.' })]));
    } catch (err) {
      if (!stopped) fill(now, errorBox(err));
    }
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  }
  tick();
  deadLetters(dlq, name, ctx);
  return () => { stopped = true; clearTimeout(timer); };
}

export function render(main, ctx) {
  return ctx.arg ? detailPage(main, ctx, ctx.arg) : listPage(main, ctx);
}
