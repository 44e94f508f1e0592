// format.js — numbers, sizes, times and elements as the pages show them.

export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// Replace box's children with those given, leaving out null and false.
export function fill(box, ...children) {
  box.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
}

// An integer as the API gives it (a number, or a decimal string beyond 2^53).
export function int(v) {
  if (v === null || v === undefined) return '—';
  return typeof v === 'string' ? v : v.toLocaleString('en-US');
}

export function bytes(v) {
  if (v === null || v === undefined) return '—';
  const n = Number(v);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0, x = n;
  while (x >= 1024 && i < units.length - 1) { x /= 1024; i++; }
  return (i === 0 ? String(x) : x.toFixed(1)) + ' ' + units[i];
}

export function seconds(s) {
  if (s === null || s === undefined) return '—';
  const n = Number(s);
  if (n < 120) return n + ' s';
  if (n < 7200) return Math.round(n / 60) + ' min';
  return (n / 3600).toFixed(1) + ' h';
}

export function time(ms) {
  if (!ms) return '—';
  return new Date(Number(ms)).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
}

export function rate(v) {
  return v === null || v === undefined ? '—' : Number(v).toFixed(1) + '/s';
}

// A definition list of tiles: [label, value, field] — field names the API's
// field the value shows (data-field, for the tests and for scripts).
export function tiles(rows) {
  return el('dl', { class: 'tiles' },
    rows.map(([label, value, field]) =>
      el('div', {}, el('dt', { text: label }), el('dd', { 'data-field': field, text: value }))));
}

// A table: columns [{label, num}], rows of cells (strings or nodes).
export function table(caption, columns, rows, empty) {
  if (rows.length === 0) return el('p', { class: 'muted', text: empty || 'None.' });
  return el('table', {},
    caption ? el('caption', { text: caption }) : null,
    el('thead', {}, el('tr', {}, columns.map((c) =>
      el('th', { scope: 'col', class: c.num ? 'num' : null, text: c.label })))),
    el('tbody', {}, rows.map((r) => el('tr', {}, r.map((cell, i) =>
      el('td', { class: columns[i].num ? 'num' : null }, cell))))));
}

export function errorBox(err) {
  const text = err && err.status === 403
    ? 'Not allowed for this token: ' + err.message
    : 'Could not load: ' + (err && err.message ? err.message : String(err));
  return el('p', { class: 'error', role: 'alert', text });
}
