// accounts.js — accounts and transfers: search by id, the accounts in id
// order (paged), accounts by ledger, code, user data and creation time
// (GET /v1/accounts/query, paged by its cursor), an account's balances,
// user data, paged history and paged transfers (GET
// /v1/accounts/{id}/transfers), a transfer's detail with its events (read
// from the log by their seqs).

import * as api from './api.js';
import { causeText } from './event.js';
import { el, fill, int, time, table, errorBox } from './format.js';

const PAGE = 20;

function searchForms() {
  const id = el('input', { id: 'account-id', inputmode: 'numeric', pattern: '[0-9]+', required: true, size: 20 });
  const tid = el('input', { id: 'transfer-id', pattern: '[0-9A-Fa-f-]{32,36}', required: true, size: 36 });
  const byAccount = el('form', { class: 'inline', role: 'search', 'aria-label': 'Find an account' },
    el('label', { for: 'account-id', text: 'Account id' }), id, el('button', { type: 'submit', text: 'Show account' }));
  byAccount.addEventListener('submit', (e) => { e.preventDefault(); location.hash = '#accounts/' + id.value.trim(); });
  const byTransfer = el('form', { class: 'inline', role: 'search', 'aria-label': 'Find a transfer' },
    el('label', { for: 'transfer-id', text: 'Transfer id' }), tid, el('button', { type: 'submit', text: 'Show transfer' }));
  byTransfer.addEventListener('submit', (e) => { e.preventDefault(); location.hash = '#accounts/transfer/' + tid.value.trim().replace(/-/g, ''); });
  return [byAccount, byTransfer];
}

function accountLink(id) {
  return el('a', { href: '#accounts/' + id, text: String(id) });
}

function transferLink(id) {
  return el('a', { href: '#accounts/transfer/' + id, class: 'mono', text: id });
}

// user_data_128 as shown: its hex without leading zeros ("0": none).
export function hex128(v) {
  return v ? String(v).replace(/^0+(?=.)/, '') : '—';
}

function userData(r) {
  return [el('span', { class: 'mono', text: hex128(r.user_data_128) }), int(r.user_data_64), int(r.user_data_32)];
}

const USER_DATA_COLUMNS = [{ label: 'user data 128' }, { label: 'user data 64', num: true }, { label: 'user data 32', num: true }];

// The filter form's fields: [id, label, query argument, pattern, help].
const FILTERS = [
  ['q-ledger', 'Ledger', 'ledger', '[0-9]+'],
  ['q-code', 'Code', 'code', '[0-9]+'],
  ['q-ud128', 'User data 128 (hex)', 'user_data_128', '[0-9A-Fa-f]{1,32}'],
  ['q-ud64', 'User data 64', 'user_data_64', '[0-9]+'],
  ['q-ud32', 'User data 32', 'user_data_32', '[0-9]+'],
];

// A datetime-local value (read as UTC) as Unix ms; the end of its minute
// (or second) for an inclusive upper bound.
export function utcMs(value, end) {
  if (!value) return undefined;
  const ms = Date.parse(value + 'Z');
  if (Number.isNaN(ms)) return undefined;
  if (!end) return ms;
  return ms + (value.length > 16 ? 999 : 59999);
}

function utcInput(ms) {
  if (!ms) return '';
  const iso = new Date(Number(ms)).toISOString();
  return Number(ms) % 60000 === 0 || Number(ms) % 60000 === 59999 ? iso.slice(0, 16) : iso.slice(0, 19);
}

// The filters in the URL's fragment (#accounts/query?ledger=1&code=20):
// the page can be bookmarked and Back returns to it.
function filterForm(given) {
  const inputs = {};
  const fields = FILTERS.map(([id, label, arg, pattern]) => {
    inputs[arg] = el('input', { id, name: arg, pattern, inputmode: arg === 'user_data_128' ? null : 'numeric',
      size: arg === 'user_data_128' ? 32 : 12, value: given.get(arg) || '' });
    return el('p', { class: 'field' }, el('label', { for: id, text: label }), inputs[arg]);
  });
  const from = el('input', { id: 'q-from', type: 'datetime-local', step: 1, value: utcInput(given.get('timestamp_min_ms')) });
  const to = el('input', { id: 'q-to', type: 'datetime-local', step: 1, value: utcInput(given.get('timestamp_max_ms')) });
  const newest = el('input', { id: 'q-reversed', type: 'checkbox', checked: given.get('reversed') === 'true' });
  const form = el('form', { class: 'filters', role: 'search', 'aria-labelledby': 'filter-title' },
    el('h2', { id: 'filter-title', text: 'Find accounts by ledger, code, user data, creation time' }),
    el('div', { class: 'fields' }, fields,
      el('p', { class: 'field' }, el('label', { for: 'q-from', text: 'Created from (UTC)' }), from),
      el('p', { class: 'field' }, el('label', { for: 'q-to', text: 'Created to (UTC, inclusive)' }), to),
      el('p', { class: 'field check' }, newest, el('label', { for: 'q-reversed', text: 'Newest first' }))),
    el('p', { class: 'muted', text: 'Empty fields do not filter. The accounts that match all the others are listed in creation order.' }),
    el('p', {}, el('button', { type: 'submit', text: 'Find accounts' }), ' ',
      el('a', { href: '#accounts', text: 'Clear' })));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [, , arg] of FILTERS) {
      const v = inputs[arg].value.trim();
      if (v) q.set(arg, arg === 'user_data_128' ? v.toLowerCase().padStart(32, '0') : v);
    }
    const min = utcMs(from.value, false), max = utcMs(to.value, true);
    if (min !== undefined) q.set('timestamp_min_ms', min);
    if (max !== undefined) q.set('timestamp_max_ms', max);
    if (newest.checked) q.set('reversed', 'true');
    location.hash = '#accounts/query?' + q.toString();
  });
  return form;
}

const ACCOUNT_COLUMNS = [{ label: 'id' }, { label: 'ledger', num: true }, { label: 'code', num: true },
  { label: 'debits posted', num: true }, { label: 'credits posted', num: true },
  { label: 'debits pending', num: true }, { label: 'credits pending', num: true }];

// Pages by cursor: load(after) gives {rows, next}; back keeps the cursors seen.
function pager(box, load, caption, columns, empty) {
  const cursors = [undefined];
  async function show() {
    try {
      const { rows, next } = await load(cursors[cursors.length - 1]);
      const prev = el('button', { type: 'button', class: 'secondary', text: 'Previous page', disabled: cursors.length === 1,
        onclick: () => { cursors.pop(); show(); } });
      const more = el('button', { type: 'button', class: 'secondary', text: 'Next page', disabled: next === null || next === undefined,
        onclick: () => { cursors.push(next); show(); } });
      fill(box, table(caption, columns, rows, empty),
        el('div', { class: 'pager' }, prev, more, el('span', { class: 'muted', text: 'page ' + cursors.length })));
    } catch (err) {
      fill(box, errorBox(err));
    }
  }
  show();
}

const QUERY_COLUMNS = [{ label: 'id' }, { label: 'ledger', num: true }, { label: 'code', num: true },
  ...USER_DATA_COLUMNS, { label: 'created' }, { label: 'debits posted', num: true }, { label: 'credits posted', num: true }];

function queryPage(main, search) {
  const given = new URLSearchParams(search);
  main.append(el('h1', { text: 'Accounts' }), ...searchForms(), filterForm(given),
    el('h2', { id: 'matching', text: 'Matching accounts' }));
  const box = el('div', { id: 'query-results', 'aria-labelledby': 'matching' });
  main.append(box);
  const filters = {};
  for (const [k, v] of given) filters[k] = v;
  pager(box, async (cursor) => {
    const r = await api.get('accounts/query', Object.assign({}, filters, { limit: PAGE, cursor }));
    return {
      next: r.next,
      rows: r.entries.map((a) => [accountLink(a.id), int(a.ledger), int(a.code), ...userData(a), time(a.created_ms),
        int(a.debits_posted), int(a.credits_posted)]),
    };
  }, null, QUERY_COLUMNS, 'No account matches.');
}

function listPage(main) {
  main.append(el('h1', { text: 'Accounts' }), ...searchForms(), filterForm(new URLSearchParams()),
    el('h2', { text: 'All accounts, by id' }));
  const box = el('div', { id: 'all-accounts' });
  main.append(box);
  pager(box, async (after) => {
    const r = await api.get('accounts', { after_id: after, limit: PAGE });
    return {
      next: r.next,
      rows: r.entries.map((a) => [accountLink(a.id), int(a.ledger), int(a.code), int(a.debits_posted),
        int(a.credits_posted), int(a.debits_pending), int(a.credits_pending)]),
    };
  }, null, ACCOUNT_COLUMNS, 'No accounts yet.');
}

function balances(a) {
  const rows = [['Debits posted', a.debits_posted, 'debits_posted'], ['Credits posted', a.credits_posted, 'credits_posted'],
    ['Debits pending', a.debits_pending, 'debits_pending'], ['Credits pending', a.credits_pending, 'credits_pending']];
  return el('dl', { class: 'tiles' }, rows.map(([label, v, field]) =>
    el('div', {}, el('dt', { text: label }), el('dd', { 'data-field': field, text: int(v) }))));
}

function userDataTiles(r) {
  return el('dl', { class: 'tiles' }, [['User data 128', hex128(r.user_data_128), 'user_data_128'],
    ['User data 64', int(r.user_data_64), 'user_data_64'], ['User data 32', int(r.user_data_32), 'user_data_32']]
    .map(([label, v, field]) => el('div', {}, el('dt', { text: label }), el('dd', { 'data-field': field, class: field === 'user_data_128' ? 'mono' : null, text: v }))));
}

async function accountPage(main, id) {
  main.append(el('h1', { text: 'Account ' + id }), ...searchForms());
  let a;
  try {
    a = (await api.get('accounts/' + encodeURIComponent(id))).account;
  } catch (err) {
    main.append(errorBox(err));
    return;
  }
  main.append(el('p', { class: 'muted', text: `ledger ${a.ledger}, code ${a.code}, flags ${a.flags}, version ${a.version}, opened at seq ${a.created_seq}, ${time(a.created_ms)}` }),
    el('h2', { text: 'User data' }), userDataTiles(a),
    el('h2', { text: 'Balances' }), balances(a), el('h2', { text: 'Transfers, newest first' }));
  const transfers = el('div', { id: 'account-transfers' });
  main.append(transfers);
  pager(transfers, async (cursor) => {
    const r = await api.get('accounts/' + encodeURIComponent(id) + '/transfers', { limit: PAGE, reversed: true, cursor });
    return {
      next: r.next,
      rows: r.entries.map((t) => [transferLink(t.id), time(t.created_ms), accountLink(t.debit_account_id),
        accountLink(t.credit_account_id), int(t.amount), t.state, int(t.code), ...userData(t)]),
    };
  }, null, [{ label: 'transfer' }, { label: 'created' }, { label: 'debit account' }, { label: 'credit account' },
    { label: 'amount', num: true }, { label: 'state' }, { label: 'code', num: true }, ...USER_DATA_COLUMNS],
  'No transfer debits or credits this account.');
  main.append(el('h2', { text: 'History, newest first' }));
  const box = el('div', { id: 'account-history' });
  main.append(box);
  pager(box, async (after) => {
    const r = await api.get('accounts/' + encodeURIComponent(id) + '/history', { after_seq: after, limit: PAGE, reverse: true });
    return {
      next: r.next,
      rows: r.entries.map((e) => {
        const t = e.transfer;
        const other = String(t.debit_account_id) === String(id) ? t.credit_account_id : t.debit_account_id;
        const sign = String(t.debit_account_id) === String(id) ? '−' : '+';
        return [int(e.seq), e.type, time(e.time_ms), transferLink(t.id), accountLink(other), sign + int(t.amount), t.state,
          int(BigInt(e.account.credits_posted) - BigInt(e.account.debits_posted))];
      }),
    };
  }, null, [{ label: 'seq', num: true }, { label: 'event' }, { label: 'time' }, { label: 'transfer' },
    { label: 'other account' }, { label: 'amount', num: true }, { label: 'state' }, { label: 'credits − debits after', num: true }],
  'No transfers have moved this account.');
}

async function logEvent(seq) {
  const r = await api.get('log', { from: seq, limit: 1 });
  const ev = r.events[0];
  return ev && Number(ev.seq) === Number(seq) ? ev : null;
}

async function transferPage(main, id) {
  main.append(el('h1', { text: 'Transfer' }), el('p', { class: 'mono', text: id }), ...searchForms());
  let t;
  try {
    t = (await api.get('transfers/' + encodeURIComponent(id))).transfer;
  } catch (err) {
    main.append(errorBox(err));
    return;
  }
  const fields = [['Debit account', accountLink(t.debit_account_id)], ['Credit account', accountLink(t.credit_account_id)],
    ['Amount', int(t.amount)], ['State', t.state], ['Ledger / code', t.ledger + ' / ' + t.code], ['Flags', String(t.flags)],
    ['Posted amount', int(t.posted_amount)], ['Timeout', t.timeout_s ? t.timeout_s + ' s' : 'none'],
    ['Created', time(t.created_ms) + ' (seq ' + t.created_seq + ')'], ['Resolved at seq', t.resolved_seq ? String(t.resolved_seq) : '—']];
  main.append(el('dl', { class: 'tiles' }, fields.map(([k, v]) => el('div', {}, el('dt', { text: k }), el('dd', {}, v)))),
    el('h2', { text: 'User data' }), userDataTiles(t));
  main.append(el('h2', { text: 'Its events' }));
  const seqs = [t.created_seq, t.resolved_seq].filter((s) => s && Number(s) > 0);
  const rows = [];
  for (const seq of seqs) {
    try {
      const ev = await logEvent(seq);
      if (!ev) { rows.push([String(seq), 'no longer in the log (retention)', '', '', '']); continue; }
      rows.push([String(ev.seq), ev.type, time(ev.time_ms), causeText(ev), el('pre', { text: JSON.stringify(ev.data, null, 1) })]);
    } catch (err) {
      rows.push([String(seq), errorBox(err), '', '', '']);
    }
  }
  main.append(table(null, [{ label: 'seq' }, { label: 'event' }, { label: 'time' }, { label: 'caused by (consumer / key)' }, { label: 'body' }], rows));
}

export function render(main, ctx) {
  const arg = ctx.arg;
  if (arg.startsWith('transfer/')) transferPage(main, arg.slice('transfer/'.length));
  else if (arg === 'query' || arg.startsWith('query?')) queryPage(main, arg.slice('query'.length));
  else if (arg) accountPage(main, arg);
  else listPage(main);
}
