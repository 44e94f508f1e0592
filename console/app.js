// app.js — the console's shell: sign-in (a token kept in this tab's
// session storage), who the token is (GET /v1/whoami: its grants decide
// what the pages offer), and the pages by the URL's fragment.

import * as api from './api.js';
import { el, fill, errorBox } from './format.js';
import * as overview from './overview.js';
import * as accounts from './accounts.js';
import * as tail from './tail.js';
import * as subscribers from './subscribers.js';
import * as relay from './relay.js';

const PAGES = { overview, accounts, tail, subscribers, relay };
const main = document.getElementById('main');
const session = document.getElementById('session');
let who = null;      // GET /v1/whoami's reply
let leave = null;    // the current page's clean-up (stops its polls)

function status(text) {
  document.getElementById('status').textContent = text || '';
}

function signInForm(message) {
  const input = el('input', { id: 'token', type: 'password', autocomplete: 'off', required: true, 'aria-describedby': 'token-help' });
  const form = el('form', { class: 'signin', 'aria-labelledby': 'signin-title' },
    el('h1', { id: 'signin-title', text: 'Sign in' }),
    message ? el('p', { class: 'error', role: 'alert', text: message }) : null,
    el('p', { id: 'token-help', text: 'A token of a principal of tallyd\'s --auth file. It is kept in this tab only (session storage) and sent with each request.' }),
    el('p', {}, el('label', { for: 'token', text: 'Token' }), input, ' ', el('button', { type: 'submit', text: 'Sign in' })));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    api.setToken(input.value.trim());
    start();
  });
  fill(main, form);
  fill(session);
  input.focus();
}

function sessionBar() {
  const grants = ['read', 'admin'].filter((g) => who[g]).join(', ') || 'no read grant';
  const text = who.auth ? 'Signed in as ' + who.principal + ' (' + grants + ')'
    : 'No --auth: read-write on loopback';
  const out = who.auth ? el('button', { type: 'button', class: 'secondary', text: 'Sign out', onclick: () => { api.setToken(null); start(); } }) : null;
  fill(session, el('span', { id: 'who', text }), out);
}

function route() {
  if (!who) return;
  if (leave) { leave(); leave = null; }
  status(''); // a word about what was done on the page left
  const hash = decodeURIComponent(location.hash.replace(/^#/, '')) || 'overview';
  const [page, ...rest] = hash.split('/');
  const mod = PAGES[page] || overview;
  for (const a of document.querySelectorAll('.top nav a'))
    if (a.getAttribute('href') === '#' + (PAGES[page] ? page : 'overview')) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  // each visit its own box: a page still loading after the reader left
  // fills a box no longer shown
  const box = el('div', {});
  fill(main, box);
  if (!who.read) {
    box.append(el('h1', { text: 'Nothing to show' }),
      el('p', { class: 'note', text: 'This token does not hold the read grant, which every page needs. Sign in with another.' }));
    return;
  }
  try {
    leave = mod.render(box, { who, arg: rest.join('/'), status }) || null;
  } catch (err) {
    box.append(errorBox(err));
  }
  main.focus({ preventScroll: true });
}

async function start() {
  who = null;
  try {
    who = await api.get('whoami');
  } catch (err) {
    if (err.status === 401) return signInForm(api.token() ? 'That token is not one tallyd knows.' : null);
    fill(main, errorBox(err));
    return;
  }
  if (who.auth && who.principal === null) return signInForm(null);
  sessionBar();
  route();
}

window.addEventListener('hashchange', route);
start();
