// Drives a queengate cluster from Node with exactly the requests the Queen
// JavaScript SDK (queen-mq 0.15.0) sends, as recorded on the wire in
// testdata/broker/sdk-js-session.jsonl, to the URL and with the bearer
// token the Connect page tells a customer to give the SDK. The SDK itself
// is not on the npm registry this project's machines reach, so its
// requests are replayed instead: Node's own fetch, the SDK's method, path,
// query, Content-Type and body, and `Authorization: Bearer <key>`.
//
//   QUEEN_URL=http://127.0.0.1:8080 QUEEN_API_KEY=qk_... node session.mjs <session.jsonl>
//
// Each recorded request starts at its recorded offset (so a long poll is
// parked while the push that wakes it arrives, as recorded) and must get
// the broker's recorded status. IDs the broker chose are mapped from the
// recorded answers to the ones this cluster gives. Then the SDK's consume
// loop as a customer writes it: push 100, pop them in one batch, and
// acknowledge each message on its own, all at once: every request must be
// answered, none refused with 429.

import { readFileSync } from 'node:fs';

const base = process.env.QUEEN_URL;
const token = process.env.QUEEN_API_KEY;
const file = process.argv[2];
if (!base || !token || !file) {
	console.error('usage: QUEEN_URL=... QUEEN_API_KEY=... node session.mjs <session.jsonl>');
	process.exit(2);
}

const exchanges = readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
const ids = new Map(); // recorded id -> this run's id
const idLike = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function learn(recorded, actual) {
	if (typeof recorded === 'string' && typeof actual === 'string') {
		if (idLike.test(recorded) && idLike.test(actual) && !ids.has(recorded)) ids.set(recorded, actual);
		return;
	}
	if (Array.isArray(recorded) && Array.isArray(actual)) {
		recorded.forEach((r, i) => learn(r, actual[i]));
		return;
	}
	if (recorded && actual && typeof recorded === 'object' && typeof actual === 'object') {
		for (const k of Object.keys(recorded)) learn(recorded[k], actual[k]);
	}
}

function mapIds(text) {
	return text.replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, (id) => ids.get(id) ?? id);
}

async function send(method, path, query, contentType, body) {
	const url = new URL(base.replace(/\/$/, '') + mapIds(path));
	for (const [k, v] of Object.entries(query || {})) url.searchParams.set(k, v);
	const headers = { Authorization: `Bearer ${token}` };
	if (contentType) headers['Content-Type'] = contentType;
	const res = await fetch(url, { method, headers, body: body == null ? undefined : mapIds(JSON.stringify(body)) });
	const text = await res.text();
	let json = null;
	try { json = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
	return { status: res.status, json, text };
}

const failures = [];
const t0 = Date.now();
const first = exchanges[0].started_at_ms;
await Promise.all(exchanges.map(async (ex) => {
	const wait = ex.started_at_ms - first - (Date.now() - t0);
	if (wait > 0) await new Promise((r) => setTimeout(r, wait));
	// Requests that the recorded session sent after an answer they used
	// (an ack after its pop) must see that answer's ids: wait for every
	// earlier request that had finished when this one started.
	for (const prev of exchanges) {
		if (prev.seq < ex.seq && prev.started_at_ms + prev.elapsed_ms <= ex.started_at_ms) await prev.done;
	}
	const r = await send(ex.method, ex.path, ex.query, ex.request_headers['content-type'], ex.request_body);
	if (r.json) learn(ex.response_body, r.json);
	if (r.status !== ex.status) failures.push(`S${ex.seq} ${ex.method} ${ex.path}: ${r.status} ${r.text.slice(0, 200)}, recorded ${ex.status}`);
	return r;
}).map((p, i) => (exchanges[i].done = p)));

// The consume loop that lost acknowledgements to 429s: a pop of 100, and
// one ack per message, sent together.
const queue = `sdk-consume-${Date.now()}`;
const items = Array.from({ length: 100 }, (_, i) => ({ queue, partition: 'Default', payload: { n: i } }));
const push = await send('POST', '/api/v1/push', {}, 'application/json', { items });
if (push.status !== 200) failures.push(`push of 100: ${push.status} ${push.text.slice(0, 200)}`);
const pop = await send('GET', `/api/v1/pop/queue/${queue}`, { batch: '100', wait: 'false' }, null, null);
const messages = (pop.json && pop.json.messages) || [];
if (pop.status !== 200 || messages.length !== 100) failures.push(`pop of 100: ${pop.status}, ${messages.length} messages`);
const acks = await Promise.all(messages.map((m) => send('POST', '/api/v1/ack', {}, 'application/json', {
	transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, status: 'completed', error: null, consumerGroup: null,
})));
const refused = acks.filter((a) => a.status === 429).length;
const notOK = acks.filter((a) => a.status !== 200);
if (notOK.length > 0) failures.push(`${notOK.length} of ${acks.length} acks not answered 200 (${refused} with 429): ${notOK[0].status} ${notOK[0].text.slice(0, 200)}`);

console.log(JSON.stringify({ replayed: exchanges.length, acks: acks.length, refused, failures }));
process.exit(failures.length === 0 ? 0 : 1);
