// chart.js — a line chart of the last hour as inline SVG (no library):
// time on x (up to an hour before the newest sample; less while tallyd
// has sampled for less, at least a minute), one line a series, gaps
// where a value is null. The figure's caption and the SVG's label say the
// newest values, for those who do not see the lines.

import { el } from './format.js';

const SVG = 'http://www.w3.org/2000/svg';
const W = 420, H = 170, LEFT = 64, RIGHT = 8, TOP = 10, BOTTOM = 22;
const COLORS = ['#0b4f9c', '#a34700', '#1b5e20', '#6a1b9a'];
const WINDOW_MS = 3600 * 1000, WINDOW_MIN_MS = 60 * 1000;

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// A round upper bound for the y axis.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function ago(ms) {
  const s = Math.round(ms / 1000);
  return s < 120 ? s + ' s' : Math.round(s / 60) + ' min';
}

function lastValue(values) {
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null && values[i] !== undefined) return values[i];
  return null;
}

// title; t: sample times (ms); series: [{label, values}]; format: a value as text.
export function lineChart(title, t, series, format) {
  const end = t.length ? t[t.length - 1] : Date.now();
  const span = Math.min(WINDOW_MS, Math.max(WINDOW_MIN_MS, t.length ? end - t[0] : 0));
  const start = end - span;
  let max = 0;
  for (const s of series)
    for (let i = 0; i < s.values.length; i++)
      if (t[i] >= start && s.values[i] !== null) max = Math.max(max, Number(s.values[i]));
  max = niceMax(max);
  const x = (ms) => LEFT + ((ms - start) / span) * (W - LEFT - RIGHT);
  const y = (v) => TOP + (1 - Number(v) / max) * (H - TOP - BOTTOM);
  const latest = series.map((s) => s.label + ' ' + format(lastValue(s.values))).join(', ');
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title + ', the last ' + ago(span) + '; now: ' + latest });
  for (const f of [0, 0.5, 1]) {
    const gy = y(max * f);
    root.append(svg('line', { x1: LEFT, x2: W - RIGHT, y1: gy, y2: gy, stroke: '#c8c8c8', 'stroke-width': 1 }));
    root.append(svg('text', { x: LEFT - 6, y: gy + 4, 'text-anchor': 'end', 'font-size': 11, fill: '#4a4a4a' }, format(max * f)));
  }
  const labels = [[start, '−' + ago(span)], [start + span / 2, '−' + ago(span / 2)], [end, 'now']];
  for (const [ms, text] of labels)
    root.append(svg('text', { x: x(ms), y: H - 6, 'text-anchor': ms === start ? 'start' : ms === end ? 'end' : 'middle', 'font-size': 11, fill: '#4a4a4a' }, text));
  series.forEach((s, k) => {
    let d = '', pen = false;
    for (let i = 0; i < t.length; i++) {
      const v = s.values[i];
      if (t[i] < start || v === null || v === undefined) { pen = false; continue; }
      d += (pen ? 'L' : 'M') + x(t[i]).toFixed(1) + ' ' + y(v).toFixed(1);
      pen = true;
    }
    if (d) root.append(svg('path', { d, fill: 'none', stroke: COLORS[k % COLORS.length], 'stroke-width': 2 }));
  });
  const legend = el('p', { class: 'legend' }, series.map((s, k) =>
    el('span', {}, el('span', { class: 'swatch', style: null, 'data-color': k }), s.label + ': ' + format(lastValue(s.values)))));
  // the swatch colour: set as a property (the CSP allows no style attributes)
  legend.querySelectorAll('.swatch').forEach((sw) => { sw.style.background = COLORS[Number(sw.dataset.color)]; });
  return el('figure', { class: 'chart' }, el('figcaption', { text: title }), root, legend);
}
