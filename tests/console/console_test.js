// tests/console/console_test.js — the web console in headless Chromium
// (run by check_console.sh, which starts tallyd and fills its store):
//
//   node console_test.js BASE_URL ADMIN_TOKEN VIEWER_TOKEN WRITER_TOKEN
//
// Every page loads without a console error, a page error, a refused
// request or a CSP violation; the numbers shown equal the API's; the
// accounts page's filter form (ledger, code, user data, a time range),
// used from the page, lists the accounts GET /v1/accounts/query answers,
// page after page by its cursor, and an account's page its transfers as
// GET /v1/accounts/{id}/transfers gives them; inputs
// and charts are labelled; replaying a dead letter from the page moves it
// back to its subscriber (its next fetch delivers it as a replay); a token
// without the admin grant sees no replay or discard button, and one
// without the read grant is told so and shown nothing. With
// TALLY_CONSOLE_SCREENSHOTS=DIR, a PNG of each page goes there.
// Waits are on facts (an element, a text), each bounded.
'use strict';
const path = require('path');
const puppeteer = require('puppeteer-core');

const [base, adminToken, viewerToken, writerToken] = process.argv.slice(2);
const shots = process.env.TALLY_CONSOLE_SCREENSHOTS || '';
const slowdown = Number(process.env.TALLY_TEST_SLOWDOWN || 1);
const WAIT_MS = 30000 * slowdown;
let failures = 0, passes = 0;

function ok(what) { passes++; console.log('ok: ' + what); }
function fail(what) { failures++; console.error('FAIL: ' + what); }
function expect(what, want, got) {
  if (String(want) === String(got)) ok(what);
  else fail(what + ': wanted ' + want + ', got ' + got);
}

async function api(token, method, route, body) {
  const headers = { Authorization: 'Bearer ' + token };
  if (body) headers['Content-Type'] = 'application/json';
  const res = await fetch(base + '/v1/' + route, { method, headers, body: body ? JSON.stringify(body) : undefined });
  const json = await res.json();
  if (!res.ok) throw new Error(method + ' /v1/' + route + ': ' + res.status + ' ' + JSON.stringify(json));
  return json;
}

// The problems a page reports: console errors, uncaught errors, requests
// that failed or were answered 4xx/5xx (the tail's event stream, closed by
// leaving the page, is no problem).
function watch(page, problems) {
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warn') problems.push('console ' + m.type() + ': ' + m.text()); });
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('requestfailed', (r) => {
    const why = r.failure() ? r.failure().errorText : '';
    if (why === 'net::ERR_ABORTED' && r.url().includes('/v1/events')) return; // the tail's stream, closed by leaving
    problems.push('request failed: ' + r.url() + ' ' + why);
  });
  page.on('response', (r) => { if (r.status() >= 400) problems.push('HTTP ' + r.status() + ': ' + r.url()); });
}

async function textOf(page, selector) {
  await page.waitForSelector(selector, { timeout: WAIT_MS });
  return page.$eval(selector, (e) => e.textContent.trim());
}

// Wait until selector's text is want (a page polls: it may show an older value first).
async function waitText(page, selector, want) {
  try {
    await page.waitForFunction((s, w) => { const e = document.querySelector(s); return e && e.textContent.trim() === w; },
      { timeout: WAIT_MS }, selector, String(want));
    return String(want);
  } catch (err) {
    return page.$eval(selector, (e) => e.textContent.trim()).catch(() => '(no ' + selector + ')');
  }
}

// Every input has a label, every button and chart a name.
async function accessible(page, what) {
  const unnamed = await page.evaluate(() => {
    const bad = [];
    for (const i of document.querySelectorAll('input')) if (!i.labels || i.labels.length === 0) bad.push('input#' + i.id);
    for (const b of document.querySelectorAll('button')) if (!(b.getAttribute('aria-label') || b.textContent.trim())) bad.push('button');
    for (const s of document.querySelectorAll('svg[role="img"]')) if (!s.getAttribute('aria-label')) bad.push('chart');
    if (!document.documentElement.lang) bad.push('html lang');
    return bad;
  });
  expect(what + ': every input, button and chart has a name', '', unnamed.join(', '));
  // WCAG 2 contrast of every text shown against the background behind it
  const low = await page.evaluate(() => {
    const rgb = (c) => (c.match(/[\d.]+/g) || []).map(Number);
    const lum = ([r, g, b]) => [r, g, b].map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); })
      .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
    const background = (e) => {
      for (; e; e = e.parentElement) {
        const c = rgb(getComputedStyle(e).backgroundColor);
        if (c.length === 3 || (c.length === 4 && c[3] > 0)) return c;
      }
      return [255, 255, 255];
    };
    const bad = [];
    for (const e of document.querySelectorAll('body *')) {
      if (e.closest('svg') || !e.offsetParent && getComputedStyle(e).position !== 'fixed') continue;
      const own = Array.from(e.childNodes).some((n) => n.nodeType === 3 && n.textContent.trim());
      if (!own) continue;
      const a = lum(rgb(getComputedStyle(e).color)), b = lum(background(e));
      const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
      if (ratio < 7) bad.push(e.tagName.toLowerCase() + ' "' + e.textContent.trim().slice(0, 30) + '" ' + ratio.toFixed(2));
    }
    return bad;
  });
  expect(what + ': every text has a contrast of 7:1 or more', '', low.join('; '));
}

async function shot(page, name) {
  if (!shots) return;
  await page.screenshot({ path: path.join(shots, name + '.png'), type: 'png' });
}

async function go(page, hash) {
  await page.evaluate((h) => { location.hash = h; }, hash);
}

async function signIn(page, token, who) {
  await page.goto(base + '/console/', { waitUntil: 'load' });
  await page.waitForSelector('#token', { timeout: WAIT_MS });
  await accessible(page, 'sign-in');
  await page.type('#token', token);
  await page.keyboard.press('Enter'); // the form is usable from the keyboard
  expect('signed in as ' + who, true, (await textOf(page, '#who')).includes(who));
}

async function overview(page) {
  await go(page, '#overview');
  const stats = await api(adminToken, 'GET', 'stats');
  const num = (v) => Number(v).toLocaleString('en-US');
  expect('overview: head seq', num(stats.head_seq), await waitText(page, '[data-field="head_seq"]', num(stats.head_seq)));
  expect('overview: accounts', num(stats.accounts), await waitText(page, '[data-field="accounts"]', num(stats.accounts)));
  expect('overview: transfers', num(stats.transfers), await waitText(page, '[data-field="transfers"]', num(stats.transfers)));
  expect('overview: events', num(stats.events), await waitText(page, '[data-field="events"]', num(stats.events)));
  const ready = await (await fetch(base + '/readyz')).json();
  expect('overview: health', ready.status, await textOf(page, '[data-field="status"]'));
  await page.waitForFunction(() => document.querySelectorAll('figure.chart svg path').length >= 3, { timeout: WAIT_MS });
  ok('overview: the charts have lines');
  await accessible(page, 'overview');
  await shot(page, 'overview');
}

async function accounts(page) {
  await go(page, '#accounts');
  await page.waitForSelector('table tbody tr a[href="#accounts/2"]', { timeout: WAIT_MS });
  ok('accounts: the list links account 2');
  await accessible(page, 'accounts');
  await page.click('#account-id');
  await page.type('#account-id', '1');
  await page.keyboard.press('Enter');
  const a = (await api(adminToken, 'GET', 'accounts/1')).account;
  for (const f of ['debits_posted', 'credits_posted', 'debits_pending', 'credits_pending'])
    expect('account 1: ' + f, Number(a[f]).toLocaleString('en-US'), await waitText(page, `[data-field="${f}"]`, Number(a[f]).toLocaleString('en-US')));
  const h = await api(adminToken, 'GET', 'accounts/1/history?limit=20&reverse=true');
  await page.waitForFunction((n) => document.querySelectorAll('#account-history table tbody tr').length === n, { timeout: WAIT_MS }, h.entries.length)
    .catch(() => {});
  expect('account 1: history rows', h.entries.length, await page.$$eval('#account-history table tbody tr', (r) => r.length));
  expect('account 1: newest history row', String(h.entries[0].seq), await page.$eval('#account-history table tbody tr td', (e) => e.textContent.trim()));
  await shot(page, 'account');
  const id = '00000000000000000000000000000006';
  await go(page, '#accounts/transfer/' + id);
  const t = (await api(adminToken, 'GET', 'transfers/' + id)).transfer;
  await page.waitForFunction(() => document.querySelectorAll('table tbody tr').length >= 2, { timeout: WAIT_MS });
  const rows = await page.$$eval('table tbody tr', (rs) => rs.map((r) => Array.from(r.cells, (c) => c.textContent.trim())));
  expect('transfer 6: its events\' seqs', [t.created_seq, t.resolved_seq].join(','), rows.map((r) => r[0]).join(','));
  expect('transfer 6: its events\' types', 'transfer.created,transfer.voided', rows.map((r) => r[1]).join(','));
  expect('transfer 6: caused by (consumer / key)', 'http / hold-6', rows[0][3]);
  await accessible(page, 'transfer');
  await shot(page, 'transfer');
}

// The rows of the table in box (each a list of its cells' text), once it
// shows n rows (or its "none" line when n is 0).
async function rowsIn(page, box, n) {
  await page.waitForFunction((b, k) => {
    const e = document.querySelector(b);
    if (!e) return false;
    return k === 0 ? e.querySelector('p.muted') !== null : e.querySelectorAll('table tbody tr').length === k;
  }, { timeout: WAIT_MS }, box, n).catch(() => {});
  return page.$$eval(box + ' table tbody tr', (rs) => rs.map((r) => Array.from(r.cells, (c) => c.textContent.trim())));
}

const num = (v) => (typeof v === 'string' ? v : Number(v).toLocaleString('en-US'));
const hex = (v) => String(v).replace(/^0+(?=.)/, '');
// An account of the API as its row on the page: id, ledger, code, user data.
const accountRow = (a) => [String(a.id), num(a.ledger), num(a.code), hex(a.user_data_128), num(a.user_data_64), num(a.user_data_32)].join(' | ');
const shownRow = (r) => r.slice(0, 6).join(' | ');

// Fill the filter form (fields by id: value; the others emptied) and
// submit it with Enter; wait for the page of its results.
async function filter(page, fields, query) {
  await page.evaluate((f) => {
    for (const id of ['q-ledger', 'q-code', 'q-ud128', 'q-ud64', 'q-ud32', 'q-from', 'q-to'])
      document.getElementById(id).value = id === 'q-from' || id === 'q-to' ? (f[id] || '') : '';
    document.getElementById('q-reversed').checked = !!f['q-reversed'];
  }, fields);
  for (const [id, v] of Object.entries(fields))
    if (!['q-from', 'q-to', 'q-reversed'].includes(id)) await page.type('#' + id, v);
  await page.focus('#q-ledger');
  await page.keyboard.press('Enter');
  await page.waitForFunction((q) => decodeURIComponent(location.hash) === '#accounts/query?' + q, { timeout: WAIT_MS }, query)
    .then(() => ok('filter ' + query + ': the page\'s address holds it'), () => fail('filter ' + query + ': the address is not #accounts/query?' + query));
}

async function query(page) {
  await go(page, '#accounts');
  await page.waitForSelector('#q-code', { timeout: WAIT_MS });
  // more than a page: the pager follows the API's cursor
  await filter(page, { 'q-code': '40' }, 'code=40');
  const first = await api(adminToken, 'GET', 'accounts/query?code=40&limit=20');
  expect('query code=40: the API has a next page', true, first.entries.length === 20 && first.next !== null);
  let rows = await rowsIn(page, '#query-results', first.entries.length);
  expect('query code=40: page 1 rows equal the API\'s', first.entries.map(accountRow).join('\n'), rows.map(shownRow).join('\n'));
  const second = await api(adminToken, 'GET', 'accounts/query?code=40&limit=20&cursor=' + first.next);
  await accessible(page, 'accounts query');
  const next = await page.$('#query-results .pager button:nth-of-type(2)');
  await next.focus();
  await page.keyboard.press('Enter'); // the pager from the keyboard
  await page.waitForFunction(() => /page 2/.test(document.querySelector('#query-results .pager').textContent), { timeout: WAIT_MS }).catch(() => {});
  rows = await rowsIn(page, '#query-results', second.entries.length);
  expect('query code=40: page 2 rows equal the API\'s (by its cursor)', second.entries.map(accountRow).join('\n'), rows.map(shownRow).join('\n'));
  expect('query code=40: 23 accounts in all', 23, first.entries.length + second.entries.length);
  // user data
  for (const [fields, q, want] of [
    [{ 'q-code': '20', 'q-ud64': '42' }, 'code=20&user_data_64=42', '3,4'],
    [{ 'q-ud128': 'CAFE' }, 'user_data_128=0000000000000000000000000000cafe', '3'],
    [{ 'q-ledger': '1', 'q-ud32': '2' }, 'ledger=1&user_data_32=2', null],
    [{ 'q-code': '20', 'q-ud64': '42', 'q-reversed': true }, 'code=20&user_data_64=42&reversed=true', '4,3']]) {
    await filter(page, fields, q);
    const r = await api(adminToken, 'GET', 'accounts/query?' + q + '&limit=20');
    if (want) expect('query ' + q + ': the API\'s ids', want, r.entries.map((a) => a.id).join(','));
    rows = await rowsIn(page, '#query-results', r.entries.length);
    expect('query ' + q + ': rows equal the API\'s', r.entries.map(accountRow).join('\n'), rows.map(shownRow).join('\n'));
  }
  // a creation time range, in UTC minutes as the form takes them
  const a3 = (await api(adminToken, 'GET', 'accounts/3')).account;
  const minute = new Date(Math.floor(a3.created_ms / 60000) * 60000).toISOString().slice(0, 16);
  const lo = Math.floor(a3.created_ms / 60000) * 60000, hi = lo + 59999;
  await filter(page, { 'q-code': '20', 'q-from': minute, 'q-to': minute },
    `code=20&timestamp_min_ms=${lo}&timestamp_max_ms=${hi}`);
  let r = await api(adminToken, 'GET', `accounts/query?code=20&timestamp_min_ms=${lo}&timestamp_max_ms=${hi}&limit=20`);
  expect('query in account 3\'s minute: it is found', true, r.entries.some((a) => a.id === 3));
  rows = await rowsIn(page, '#query-results', r.entries.length);
  expect('query in account 3\'s minute: rows equal the API\'s', r.entries.map(accountRow).join('\n'), rows.map(shownRow).join('\n'));
  await shot(page, 'accounts');
  const future = '2999-01-01T00:00';
  const far = Date.parse(future + 'Z');
  await filter(page, { 'q-from': future }, 'timestamp_min_ms=' + far);
  r = await api(adminToken, 'GET', 'accounts/query?timestamp_min_ms=' + far);
  expect('query from 2999: the API finds none', 0, r.entries.length);
  await rowsIn(page, '#query-results', 0);
  expect('query from 2999: the page says none match', 'No account matches.', await textOf(page, '#query-results p.muted'));
  // an account's user data and its transfers
  await go(page, '#accounts/3');
  expect('account 3: user data 128', 'cafe', await waitText(page, '[data-field="user_data_128"]', 'cafe'));
  expect('account 3: user data 64', '42', await textOf(page, '[data-field="user_data_64"]'));
  expect('account 3: user data 32', '3', await textOf(page, '[data-field="user_data_32"]'));
  for (const id of [3, 1]) {
    if (id !== 3) await go(page, '#accounts/' + id);
    const t = await api(adminToken, 'GET', `accounts/${id}/transfers?reversed=true&limit=20`);
    rows = await rowsIn(page, '#account-transfers', t.entries.length);
    const tRow = (x) => [x.id, String(x.debit_account_id), String(x.credit_account_id), num(x.amount), x.state, num(x.code),
      hex(x.user_data_128), num(x.user_data_64), num(x.user_data_32)].join(' | ');
    expect(`account ${id}: its transfers equal the API's (newest first)`, t.entries.map(tRow).join('\n'),
      rows.map((c) => [c[0], ...c.slice(2)].join(' | ')).join('\n'));
  }
  await accessible(page, 'account 1 with its transfers');
  await go(page, '#accounts/transfer/00000000000000000000000000000abc');
  expect('transfer abc: user data 128', 'beef0', await waitText(page, '[data-field="user_data_128"]', 'beef0'));
  expect('transfer abc: user data 64', '9', await textOf(page, '[data-field="user_data_64"]'));
  expect('transfer abc: user data 32', '1', await textOf(page, '[data-field="user_data_32"]'));
}

async function tail(page) {
  let streams = 0;
  const count = (r) => { if (r.url().includes('/v1/events')) streams++; };
  page.on('request', count);
  await go(page, '#tail');
  const stats = await api(adminToken, 'GET', 'stats');
  const shown = Math.min(20, Number(stats.head_seq));
  await page.waitForFunction((n) => document.querySelectorAll('table tbody tr').length === n, { timeout: WAIT_MS }, shown)
    .catch(() => {});
  expect('tail: the last events', shown, await page.$$eval('table tbody tr', (r) => r.length));
  expect('tail: newest first', String(stats.head_seq), await page.$eval('table tbody tr', (r) => r.dataset.seq));
  // an event committed now reaches the page by the event stream
  const res = await fetch(base + '/v1/account_open', { method: 'POST',
    headers: { Authorization: 'Bearer ' + adminToken, 'Idempotency-Key': 'open-9', 'Content-Type': 'application/json' },
    body: JSON.stringify({ id: 9, ledger: 1, code: 10 }) });
  const opened = await res.json();
  expect('open account 9', 'ok', opened.code);
  await page.waitForSelector(`table tbody tr[data-seq="${opened.seq}"]`, { timeout: WAIT_MS })
    .then(() => ok('tail: the new event ' + opened.seq + ' arrived live'),
      () => fail('tail: event ' + opened.seq + ' did not arrive'));
  expect('tail: its type', 'account.opened', await page.$eval('table tbody tr', (r) => r.cells[2].textContent));
  // tallyd ends each stream after --http-stream-max-s (2 s here): the page
  // opens it again from the seq after its last, losing and repeating none
  const streamsBefore = streams;
  await new Promise((done, failed) => {
    const deadline = setTimeout(() => failed(new Error('the stream was not opened again')), WAIT_MS);
    const check = () => { if (streams > streamsBefore) { clearTimeout(deadline); done(); } else setTimeout(check, 100); };
    check();
  }).then(() => ok('tail: the stream was opened again after tallyd ended it'), (err) => fail('tail: ' + err.message));
  const again = await fetch(base + '/v1/account_open', { method: 'POST',
    headers: { Authorization: 'Bearer ' + adminToken, 'Idempotency-Key': 'open-10', 'Content-Type': 'application/json' },
    body: JSON.stringify({ id: 10, ledger: 1, code: 10 }) }).then((r) => r.json());
  await page.waitForSelector(`table tbody tr[data-seq="${again.seq}"]`, { timeout: WAIT_MS })
    .then(() => ok('tail: event ' + again.seq + ' arrived on the reopened stream'),
      () => fail('tail: event ' + again.seq + ' did not arrive after the stream was reopened'));
  const seqs = await page.$$eval('table tbody tr', (rs) => rs.map((r) => Number(r.dataset.seq)));
  const gapless = seqs.every((q, i) => i === 0 || seqs[i - 1] === q + 1);
  expect('tail: every seq once, none missing (newest first)', true, gapless);
  page.off('request', count);
  await accessible(page, 'tail');
  await shot(page, 'tail');
}

async function subscribers(page) {
  await go(page, '#subscribers');
  const list = (await api(adminToken, 'GET', 'subscribers')).subscribers;
  await page.waitForSelector('table tbody tr a[href="#subscribers/mailer"]', { timeout: WAIT_MS });
  const rows = await page.$$eval('table tbody tr', (rs) => rs.map((r) => Array.from(r.cells, (c) => c.textContent.trim())));
  for (const s of list) {
    const r = rows.find((x) => x[0] === s.name);
    expect('subscribers: ' + s.name + ' pending', String(s.pending), r ? r[1] : '(no row)');
    expect('subscribers: ' + s.name + ' dead letters', String(s.dead_letters), r ? r[5] : '(no row)');
  }
  await page.waitForFunction(() => document.querySelectorAll('figure.chart svg path').length >= 6, { timeout: WAIT_MS });
  ok('subscribers: the charts of pending, oldest unacked and redeliveries have a line a subscriber');
  await accessible(page, 'subscribers');
  await shot(page, 'subscribers');
}

async function replay(page) {
  await go(page, '#subscribers/mailer');
  const button = 'button[data-action="replay"]';
  await page.waitForSelector(button, { timeout: WAIT_MS });
  const before = (await api(adminToken, 'GET', 'subscribers/mailer/dead_letters')).entries;
  expect('mailer: one dead letter, seq 1', '1', before.map((d) => d.seq).join(','));
  expect('mailer: dead letters shown', '1', await page.$eval('[data-field="dead_letters"]', (e) => e.textContent.trim()));
  await accessible(page, 'subscriber mailer');
  await shot(page, 'subscriber');
  await page.focus(button);
  await page.keyboard.press('Enter'); // replay from the keyboard
  await page.waitForFunction(() => /goes back to mailer/.test(document.getElementById('status').textContent), { timeout: WAIT_MS })
    .then(() => ok('replay: the page says so'), () => fail('replay: no word on the page'));
  const after = (await api(adminToken, 'GET', 'subscribers/mailer/dead_letters')).entries;
  expect('replay: the dead letter is replaying', 'true', after.length ? String(after[0].replaying) : '(gone)');
  const fetched = await api(adminToken, 'POST', 'sub_fetch', { name: 'mailer', max: 10 });
  const back = fetched.events.find((e) => e.seq === 1);
  expect('replay: mailer\'s next fetch delivers seq 1 again, as a replay', 'true', back ? String(back.replay) : '(not delivered)');
  // parked again, for the viewer to see
  await api(adminToken, 'POST', 'sub_park', { name: 'mailer', seq: 1, reason: 'bad address, again' });
}

async function relay(page) {
  await go(page, '#relay');
  await page.waitForSelector('table tbody tr a[href="#subscribers/audit"]', { timeout: WAIT_MS });
  ok('relay: the sinks tallyd knows are listed');
  await accessible(page, 'relay');
  await shot(page, 'relay');
}

async function viewer(browser) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.setViewport({ width: 1200, height: 900 });
  const problems = [];
  watch(page, problems);
  await signIn(page, viewerToken, 'viewer');
  await go(page, '#subscribers/mailer');
  await page.waitForFunction(() => Array.from(document.querySelectorAll('table caption')).some((c) => /Dead letters of mailer/.test(c.textContent)),
    { timeout: WAIT_MS });
  await page.waitForFunction(() => /need the admin grant/.test(document.body.textContent), { timeout: WAIT_MS })
    .then(() => ok('viewer: the page says replay needs the admin grant'), () => fail('viewer: no note about the admin grant'));
  expect('viewer: no replay, discard or replay-all button', 0, await page.$$eval('button[data-action]', (b) => b.length));
  expect('viewer: the dead letter is listed', true, await page.$$eval('table tbody tr', (r) => r.length) >= 1);
  expect('viewer: no console errors', '', problems.join('\n'));
  await context.close();
}

async function writer(browser) {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  const problems = [];
  watch(page, problems);
  await signIn(page, writerToken, 'writer');
  await page.waitForFunction(() => /does not hold the read grant/.test(document.body.textContent), { timeout: WAIT_MS })
    .then(() => ok('writer: told it has no read grant'), () => fail('writer: not told about the read grant'));
  expect('writer: no page asked anything of the API', '', problems.join('\n'));
  await context.close();
}

async function main() {
  const browser = await puppeteer.launch({
    executablePath: process.env.TALLY_CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1200, height: 900 });
    const problems = [];
    watch(page, problems);
    await signIn(page, adminToken, 'ops');
    for (const step of [overview, accounts, query, tail, subscribers, replay, relay]) {
      try {
        await step(page);
      } catch (err) {
        fail(step.name + ': ' + (err && err.stack || err));
        await page.screenshot({ path: path.join(process.env.TMPDIR || '/tmp', 'console-failed-' + step.name + '.png') }).catch(() => {});
      }
      expect(step.name + ': no console errors', '', problems.splice(0).join('\n'));
    }
    await viewer(browser);
    await writer(browser);
  } finally {
    await browser.close();
  }
  console.log(passes + ' passed, ' + failures + ' failed');
  process.exit(failures ? 1 : 0);
}

main().catch((err) => { console.error('FAIL: ' + (err && err.stack || err)); process.exit(1); });
