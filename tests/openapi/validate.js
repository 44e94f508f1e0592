// tests/openapi/validate.js — validates docs/openapi.json (made by
// `tallyd --openapi`) with @apidevtools/swagger-parser, a real OpenAPI 3.1
// validator, then checks it against docs/PROTOCOL.md:
//   - every op of the reference ("### `op` (kind; ...)") but the control
//     ops is a POST /v1/<op>, and every path of the reads table a GET;
//   - every ```json-example block (the ones tests/net/check_json replays):
//     its route is in the document, its request body validates against
//     the route's request schema, and its reply body against the schema
//     of its status (Ajv, JSON Schema 2020-12, the dialect of OpenAPI
//     3.1; a ".." wildcard of the examples matches any value).
//   - with --replies FILE (lines of {method, path, status, body}, as
//     tests/net/check_json records them): every JSON reply to a route of
//     the document has a status the document lists for that route and
//     passes its schema (replies to paths that are no route, and plain
//     text answers of the HTTP listener, are counted, not validated);
//   - with --server BASE_URL TOKEN, every route of the document against that
//     running tallyd: each POST /v1/<op> and each GET path (parameters
//     "1") is a route the server has (not 404 unknown_op, not 404 "no
//     such resource"), so the document names no route the server lacks,
//     and its reply validates against the document's schema of its status.
// Usage: node validate.js OPENAPI_JSON PROTOCOL_MD [--replies FILE]
// [--server BASE_URL TOKEN]. Exit 0 when all pass; prints each failure and
// the counts.
'use strict';
const fs = require('fs');
const SwaggerParser = require('@apidevtools/swagger-parser');
const Ajv2020 = require('ajv/dist/2020').default;

const [docPath, protocolPath, ...options] = process.argv.slice(2);
let baseUrl = null, token = null, repliesPath = null;
for (let i = 0; i < options.length; i++) {
    if (options[i] === '--server') { baseUrl = options[++i]; token = options[++i]; }
    else if (options[i] === '--replies') repliesPath = options[++i];
    else { console.error('validate.js: unknown option ' + options[i]); process.exit(2); }
}
if (!docPath || !protocolPath) {
    console.error('usage: node validate.js OPENAPI_JSON PROTOCOL_MD');
    process.exit(2);
}
let failures = 0;
let passed = 0;
const fail = (what) => { console.error('FAIL: ' + what); failures++; };
const ok = () => { passed++; };

function opsOfReference(md) {
    const ops = [];
    const re = /^### `([a-z_]+)` \(([a-z ]+); auth: [a-z]+\)$/gm;
    for (let m; (m = re.exec(md)) !== null;)
        ops.push({ name: m[1], kind: m[2] });
    return ops;
}

function readPaths(md) {
    const paths = [];
    const re = /^\| `(\/v1\/[^`]*)` \| `[a-z_]+`/gm;
    for (let m; (m = re.exec(md)) !== null;)
        paths.push(m[1]);
    return paths;
}

// The json-example blocks, parsed as tests/net/check_json.c parses them.
function examples(md) {
    const out = [];
    const re = /```json-example ([a-z_]+)\n([\s\S]*?)```/g;
    for (let m; (m = re.exec(md)) !== null;) {
        const e = { op: m[1], requestLine: null, body: null, status: null, replyBody: null };
        let inBody = false, reply = false, replyBody = false;
        for (const line of m[2].split('\n')) {
            const v = line.length > 2 ? line.slice(2) : '';
            if (line[0] === '>') {
                if (e.requestLine === null) e.requestLine = v;
                else if (line.length <= 1) inBody = true;
                else if (inBody) e.body = v;
            } else if (line[0] === '<') {
                if (!reply) { e.status = v.trim(); reply = true; }
                else if (line.length <= 1) replyBody = true;
                else if (replyBody) e.replyBody = v;
            }
        }
        out.push(e);
    }
    return out;
}

const WILDCARD = 4503599627370497; // beyond 2^52, never a value of the examples

function isWildcard(value, pointer) {
    let v = value;
    for (const part of pointer.split('/').slice(1)) {
        if (v === null || typeof v !== 'object') return false;
        v = v[part.replace(/~1/g, '/').replace(/~0/g, '~')];
    }
    return v === WILDCARD;
}

// The errors a ".." wildcard does not explain: those about a wildcard go,
// and so does an anyOf's failure when one of its branches failed only on
// wildcards (with the errors of its other branches): an event of the
// examples is a document whose times are wildcards, or base64 bytes.
function unexplained(errors, value) {
    const wild = (err) => isWildcard(value, err.instancePath);
    let left = errors;
    for (const any of errors.filter((err) => err.keyword === 'anyOf')) {
        const base = any.schemaPath + '/';
        const branches = new Map();
        for (const err of errors)
            if (err.schemaPath.startsWith(base)) {
                const i = err.schemaPath.slice(base.length).split('/')[0];
                branches.set(i, (branches.get(i) || []).concat([err]));
            }
        const explained = [...branches.values()].some((errs) => errs.every(wild));
        if (explained)
            left = left.filter((err) => err !== any && !err.schemaPath.startsWith(base));
    }
    return left.filter((err) => !wild(err));
}

function routeOf(api, method, target) {
    const path = target.split('?')[0];
    for (const [template, item] of Object.entries(api.paths)) {
        const re = new RegExp('^' + template.replace(/\{[^}]+\}/g, '[^/]+') + '$');
        if (re.test(path) && item[method.toLowerCase()])
            return { template, operation: item[method.toLowerCase()] };
    }
    return null;
}

function jsonSchemaOf(holder) {
    return holder && holder.content && holder.content['application/json'] &&
        holder.content['application/json'].schema;
}

async function main() {
    const text = fs.readFileSync(docPath, 'utf8');
    const md = fs.readFileSync(protocolPath, 'utf8');
    try {
        await SwaggerParser.validate(JSON.parse(text));
        ok();
    } catch (err) {
        fail(docPath + ' is not a valid OpenAPI document: ' + err.message);
        return;
    }
    const api = await SwaggerParser.dereference(JSON.parse(text));
    if (api.openapi !== '3.1.0') fail('openapi is ' + api.openapi + ', not 3.1.0');

    const ops = opsOfReference(md);
    if (ops.length < 20) fail('only ' + ops.length + ' ops found in the reference');
    for (const op of ops) {
        const item = api.paths['/v1/' + op.name];
        if (op.kind === 'control') {
            if (item) fail('control op ' + op.name + ' is in the document (not offered over HTTP)');
            else ok();
        } else if (!item || !item.post) {
            fail('POST /v1/' + op.name + ' (' + op.kind + ') is missing');
        } else {
            ok();
        }
    }
    const reads = readPaths(md);
    if (reads.length < 8) fail('only ' + reads.length + ' GET paths found in the reads table');
    for (const p of reads) {
        if (api.paths[p] && api.paths[p].get) ok();
        else fail('GET ' + p + ' of the reads table is missing');
    }

    const ajv = new Ajv2020({ strict: false, allErrors: true });
    const compiled = new Map();
    const check = (schema, value, what) => {
        if (!compiled.has(schema)) compiled.set(schema, ajv.compile(schema));
        const validate = compiled.get(schema);
        if (validate(value)) return ok();
        const errors = unexplained(validate.errors, value);
        if (errors.length === 0) return ok();
        fail(what + ': ' + ajv.errorsText(errors));
    };
    let count = 0, wildcards = 0;
    for (const e of examples(md)) {
        count++;
        const [method, target] = e.requestLine.split(' ');
        const what = 'example ' + count + ' (' + e.requestLine + ')';
        const route = routeOf(api, method, target);
        if (!route && e.status === '404') { ok(); continue; } // an unknown op's example
        if (!route) { fail(what + ': no such route in the document'); continue; }
        if (e.body !== null) {
            let body;
            try { body = JSON.parse(e.body); } catch (err) { body = undefined; }
            const schema = jsonSchemaOf(route.operation.requestBody);
            // A body that is not JSON is an example of a refusal (400).
            if (body !== undefined && schema && e.status === '200')
                check(schema, body, what + ' request');
        }
        const response = route.operation.responses[e.status];
        if (!response) { fail(what + ': status ' + e.status + ' is not in the document'); continue; }
        if (e.replyBody === null) continue;
        // A ".." wildcard stands for a value of any type: it is parsed as
        // a sentinel number, and an error about a sentinel is not counted.
        const body = e.replyBody.replace(/([:,\[])\.\.(?=[,}\]])/g, '$1' + WILDCARD);
        if (body !== e.replyBody) wildcards++;
        let reply;
        try { reply = JSON.parse(body); } catch (err) {
            fail(what + ': the reply is not JSON'); continue;
        }
        const schema = jsonSchemaOf(response);
        if (!schema) { fail(what + ': status ' + e.status + ' has no JSON schema'); continue; }
        check(schema, reply, what + ' reply');
    }
    if (count < 20) fail('only ' + count + ' json-example blocks found');
    console.log('json examples: ' + count + ', replies with a wildcard: ' + wildcards);
    if (repliesPath) recordedReplies(api, check, repliesPath);
    if (baseUrl) await routesServed(api, check);
}

function recordedReplies(api, check, path) {
    let count = 0, noRoute = 0, notJson = 0;
    for (const line of fs.readFileSync(path, 'utf8').split('\n')) {
        if (line === '') continue;
        const r = JSON.parse(line);
        count++;
        const route = routeOf(api, r.method, r.path);
        if (!route || !r.path.startsWith('/v1/')) { noRoute++; continue; }
        let reply;
        try { reply = JSON.parse(r.body); } catch (err) { notJson++; continue; }
        const what = 'recorded ' + r.method + ' ' + r.path.slice(0, 80) + ' ' + r.status;
        const response = route.operation.responses[String(r.status)];
        const schema = response && jsonSchemaOf(response);
        if (!schema) fail(what + ': the status is not in the document for ' + route.template);
        else check(schema, reply, what + ' ' + r.body.slice(0, 200));
    }
    if (count < 50) fail('only ' + count + ' recorded replies in ' + path);
    console.log('recorded replies: ' + count + ', to no route: ' + noRoute +
        ', not JSON: ' + notJson);
}

// Each route of the document asked of the server: one it has answers
// anything but the 404 of an unknown op or resource, with a status the
// document lists and a reply its schema for that status passes.
// A Server-Sent Events route: it streams (200, text/event-stream; the
// connection is dropped once the headers are in), and a bad `from` is
// refused before any stream with a JSON reply of the document's schema.
async function streamServed(template, path, operation, check) {
    const headers = { Authorization: 'Bearer ' + token };
    const ctl = new AbortController();
    const res = await fetch(baseUrl + path, { headers, signal: ctl.signal });
    const type = res.headers.get('content-type') || '';
    if (res.status === 200 && type.startsWith('text/event-stream')) ok();
    else fail('GET ' + template + ': ' + res.status + ' ' + type + ', not a stream');
    ctl.abort();
    const bad = await fetch(baseUrl + path + '?from=x', { headers });
    const text = await bad.text();
    const response = operation.responses[String(bad.status)];
    const schema = response && jsonSchemaOf(response);
    if (!schema) fail('GET ' + template + '?from=x: status ' + bad.status + ' is not in the document');
    else check(schema, JSON.parse(text), 'GET ' + template + '?from=x reply ' + text.trim());
    return 2;
}

async function routesServed(api, check) {
    let asked = 0;
    for (const [template, item] of Object.entries(api.paths)) {
        for (const method of Object.keys(item)) {
            const path = template.replace(/\{[^}]+\}/g, '1');
            const ok200 = item[method].responses['200'];
            if (ok200 && ok200.content && ok200.content['text/event-stream']) {
                asked += await streamServed(template, path, item[method], check);
                continue;
            }
            const headers = { Authorization: 'Bearer ' + token, 'Idempotency-Key': 'openapi-walk-' + asked };
            const init = { method: method.toUpperCase(), headers };
            if (method === 'post') init.body = '{}';
            const res = await fetch(baseUrl + path, init);
            const text = await res.text();
            asked++;
            let reply = {};
            try { reply = JSON.parse(text); } catch (err) { reply = {}; }
            const unknown = res.status === 404 &&
                (reply.code === 'unknown_op' || /no such resource/.test(reply.message || ''));
            const what = method.toUpperCase() + ' ' + template;
            if (unknown || res.status === 405) {
                fail(what + ': the server has no such route (' + res.status + ' ' + text.trim() + ')');
                continue;
            }
            ok();
            const response = item[method].responses[String(res.status)];
            const schema = response && jsonSchemaOf(response);
            if (!schema) fail(what + ': status ' + res.status + ' is not in the document');
            else check(schema, reply, what + ' reply ' + text.trim().slice(0, 200));
        }
    }
    console.log('routes asked of the server: ' + asked);
}

main().catch((err) => fail(String(err && err.stack || err))).finally(() => {
    console.log(passed + ' passed, ' + failures + ' failed');
    process.exit(failures ? 1 : 0);
});
