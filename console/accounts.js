// accounts.js — accounts and transfers: search by id, the accounts in id
// order (paged), an account's balances and paged history, a transfer's
// detail with its events (read from the log by their seqs).

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

function listPage(main) {
  main.append(el('h1', { text: 'Accounts' }), ...searchForms(), el('h2', { text: 'All accounts, by id' }));
  const box = el('div', {});
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

async function accountPage(main, id) {
  main.append(el('h1', { text: 'Account ' + id }), ...searchForms());
  let a;
  try {
    a = (await api.get('accounts/' + encodeURIComponent(id))).account;
  } catch (err) {
    main.append(errorBox(err));
    return;
  }
  main.append(el('p', { class: 'muted', text: `ledger ${a.ledger}, code ${a.code}, flags ${a.flags}, version ${a.version}, opened at seq ${a.created_seq}` }),
    el('h2', { text: 'Balances' }), balances(a), el('h2', { text: 'History, newest first' }));
  const box = el('div', {});
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
  main.append(el('dl', { class: 'tiles' }, fields.map(([k, v]) => el('div', {}, el('dt', { text: k }), el('dd', {}, v)))));
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
  else if (arg) accountPage(main, arg);
  else listPage(main);
}
