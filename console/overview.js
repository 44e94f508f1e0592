// overview.js — the store at a glance: head seq, counts, map and disk,
// health and alerts (GET /readyz), and the last hour's commits, commands,
// head and map use (GET /v1/figures).

import * as api from './api.js';
import * as figures from './figures.js';
import { lineChart } from './chart.js';
import { el, fill, int, bytes, rate, tiles, table, errorBox } from './format.js';

const POLL_MS = 2000;

function healthPart(ready) {
  const failing = (ready.checks || []).filter((c) => !c.ok);
  const head = el('p', {},
    'Status: ', el('span', { class: ready.status === 'ok' ? 'ok' : 'bad', 'data-field': 'status', text: ready.status }),
    ready.alerts_failing ? el('span', { class: 'warn', text: ' — ' + ready.alerts_failing + ' alert(s) failing' }) : null);
  const rows = failing.map((c) => [c.check, c.class || '', c.subscriber || '—', c.reason]);
  return el('section', { 'aria-labelledby': 'health-title' },
    el('h2', { id: 'health-title', text: 'Health and alerts' }), head,
    table('Failing checks', [{ label: 'check' }, { label: 'class' }, { label: 'subscriber' }, { label: 'why' }],
      rows, 'Every readiness check and alert passes.'));
}

function draw(box, stats, ready, f) {
  const last = f.t_ms.length - 1;
  const disk = last >= 0 ? f.disk_free_bytes[last] : null;
  fill(box,
    el('h1', { text: 'Overview' }),
    tiles([
      ['Head seq', int(stats.head_seq), 'head_seq'],
      ['Accounts', int(stats.accounts), 'accounts'],
      ['Transfers', int(stats.transfers), 'transfers'],
      ['Events stored', int(stats.events), 'events'],
      ['Map in use', bytes(stats.map_used_bytes), 'map_used_bytes'],
      ['Map size (max)', bytes(stats.map_size_bytes) + ' (' + bytes(stats.map_max_bytes) + ')', 'map_size_bytes'],
      ['Disk free', bytes(disk), 'disk_free_bytes'],
      ['Subscribers', int((stats.subscribers || []).length), 'subscribers'],
    ]),
    healthPart(ready),
    el('h2', { text: 'The last hour' }),
    el('div', { class: 'charts' },
      lineChart('Commits and commands per second', f.t_ms,
        [{ label: 'commits', values: f.commits_per_s }, { label: 'commands', values: f.commands_per_s }], rate),
      lineChart('Head seq', f.t_ms, [{ label: 'head', values: f.head_seq }], int),
      lineChart('Map use', f.t_ms,
        [{ label: 'map in use', values: f.map_used_bytes }, { label: 'map size', values: f.map_size_bytes }], bytes)));
}

export function render(main, ctx) {
  const box = el('div', {});
  main.append(el('h1', { text: 'Overview' }), el('p', { class: 'muted', text: 'Loading…' }));
  let timer = null, stopped = false;
  async function tick() {
    try {
      const [stats, ready, f] = await Promise.all([api.get('stats'), api.readiness(), figures.refresh()]);
      if (stopped) return;
      draw(box, stats, ready, f);
      if (!box.isConnected) fill(main, box);
      ctx.status('');
    } catch (err) {
      if (stopped) return;
      fill(main, errorBox(err));
    }
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  }
  tick();
  return () => { stopped = true; clearTimeout(timer); };
}
