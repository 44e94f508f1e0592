// event.js — one event of the log as the pages show it, from its JSON
// document (docs/PROTOCOL.md, "The event document": GET /v1/log gives
// each event so): what it is about, where the console shows that, and
// what caused it.

// What the event is about, as a short text ("transfer 0a…", "account 1").
export function entityText(ev) {
  const en = ev.entity || {};
  return Object.values(en).map(String).join(' ');
}

// The console's page of the event's entity (accounts and transfers), or null.
export function entityHref(ev) {
  const en = ev.entity || {};
  if (en.kind === 'transfer') return '#accounts/transfer/' + en.id;
  if (en.kind === 'account') return '#accounts/' + en.id;
  if (en.kind === 'dead_letter') return '#subscribers/' + encodeURIComponent(en.subscriber);
  return null;
}

// The command that caused it (consumer / key), or the expiry sweep's.
export function causeText(ev) {
  return ev.consumer !== null && ev.consumer !== undefined ? ev.consumer + ' / ' + ev.key : 'the expiry sweep';
}
