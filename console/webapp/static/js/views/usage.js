// Usage: messages (or requests) per minute or per day, by operation
// class, as a stacked bar chart, with exact totals for the window as text.

import { get } from '../api.js';
import { h, add, clear, fmtInt, fmtBytes, table } from '../dom.js';
import { stackedBars } from '../chart.js';
import { bucketize as requestBuckets } from './requests.js';

// The refusals drawn next to usage (the requests view has them all, and
// what was served).
const REFUSALS = ['403', '429', '4xx', '5xx'];
const REFUSAL_LABELS = { 403: '403 forbidden', 429: '429 rate limited', '4xx': 'Other 4xx', '5xx': '5xx' };

export const OPS = ['push', 'delivery', 'txn', 'configure', 'read'];
const OP_LABELS = { push: 'Push', delivery: 'Delivery', txn: 'Transaction', configure: 'Configure', read: 'Read' };
// What is billed: the messages of pushes and transactions (docs/metering.md);
// the other classes' messages are counted, not billed.
const BILLED = new Set(['push', 'txn']);

const WINDOWS = [
	{ id: '1h', label: '1 h', res: 'minute', span: 1 },
	{ id: '6h', label: '6 h', res: 'minute', span: 6 },
	{ id: '24h', label: '24 h', res: 'minute', span: 24 },
	{ id: '7d', label: '7 d', res: 'day', span: 7 },
	{ id: '30d', label: '30 d', res: 'day', span: 30 },
	{ id: '90d', label: '90 d', res: 'day', span: 90 },
];
const METRICS = [
	{ id: 'msgs', label: 'Messages', unit: 'messages' },
	{ id: 'reqs', label: 'Requests', unit: 'requests' },
];
const MINUTE = 60_000;
const DAY = 86_400_000;
const REFRESH_MS = 15_000;

// normalize turns API rows into {t (ms), op, msgs, reqs, bytes_in, bytes_out}.
export function normalize(rows, res) {
	return rows.map((r) => {
		const when = r[res] ?? r.minute ?? r.day ?? r.time ?? r.bucket;
		const t = Date.parse(typeof when === 'string' && /^\d{4}-\d\d-\d\d$/.test(when) ? `${when}T00:00:00Z` : when);
		return {
			t,
			op: r.op ?? r.op_class ?? r.class,
			msgs: Number(r.msgs || 0),
			reqs: Number(r.reqs || 0),
			bytes_in: Number(r.bytes_in || 0),
			bytes_out: Number(r.bytes_out || 0),
			live: r.live === true,
		};
	}).filter((r) => Number.isFinite(r.t));
}

function pad(n) { return String(n).padStart(2, '0'); }

// buckets lays the rows on a continuous UTC time line ending now.
export function bucketize(rows, win, metric, now = Date.now()) {
	const step = win.res === 'minute' ? MINUTE : DAY;
	const count = win.res === 'minute' ? win.span * 60 : win.span;
	const last = Math.floor(now / step) * step;
	const first = last - (count - 1) * step;
	const out = [];
	for (let i = 0; i < count; i++) {
		const d = new Date(first + i * step);
		const label = win.res === 'minute'
			? `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`
			: `${d.toLocaleString('en-US', { month: 'short', timeZone: 'UTC' })} ${d.getUTCDate()}`;
		const title = win.res === 'minute'
			? `${d.toISOString().slice(0, 16).replace('T', ' ')} UTC`
			: `${d.toISOString().slice(0, 10)} (UTC)`;
		out.push({ label, title, values: {} });
	}
	for (const r of rows) {
		const i = Math.floor((Math.floor(r.t / step) * step - first) / step);
		if (i < 0 || i >= count) continue;
		out[i].values[r.op] = (out[i].values[r.op] || 0) + r[metric];
		if (r.live && !out[i].live) {
			// Counted by the gateway but not written yet: the open minute.
			out[i].live = true;
			out[i].title += ', so far';
		}
	}
	return out;
}

function sum(rows, field, op) {
	return rows.reduce((n, r) => n + (op === undefined || r.op === op ? r[field] : 0), 0);
}

// load asks for the window: minutes for the last `hours`, days for the last
// `days` (the other resolution is asked for at its smallest).
async function load(win) {
	const q = win.res === 'minute' ? `hours=${win.span}&days=1` : `hours=1&days=${win.span}`;
	const [data, requests] = await Promise.all([
		get(`/api/console/usage?${q}`),
		// Requests are counted per minute for a week at most.
		win.res === 'minute' ? get(`/api/console/requests?hours=${win.span}`) : Promise.resolve(null),
	]);
	const rows = win.res === 'minute' ? data.minutes : data.daily;
	// The server's clock ends the window: `to` is the end of the minutes
	// (exclusive), and the days run through today.
	let end = Date.now();
	if (win.res === 'minute' && data.to) end = Date.parse(data.to) - MINUTE;
	const out = normalize(Array.isArray(rows) ? rows : [], win.res);
	// Never leave a row the server sent off the chart.
	for (const r of out) end = Math.max(end, r.t);
	return { rows: out, end, requests };
}

// refusalsPanel charts the window's refusals per minute, beside usage.
function refusalsPanel(requests, win, width) {
	if (!requests) {
		return h('section', { class: 'panel', 'data-testid': 'usage-refusals' },
			h('h2', {}, 'Refusals'),
			h('p', { class: 'muted' }, 'Refusals are counted per minute for the last 7 days: pick a window of hours to see them, or open Requests.'));
	}
	const minutes = requests.minutes.filter((m) => REFUSALS.includes(m.outcome));
	const buckets = requestBuckets(minutes, requests.hours, Date.parse(requests.to) - MINUTE);
	const refused = REFUSALS.reduce((n, o) => n + requests.totals[o], 0);
	const chart = stackedBars({
		buckets, series: REFUSALS, unit: 'requests', testid: 'usage-refusals-chart', width,
		title: `Refused requests per minute, last ${win.label}`,
		description: REFUSALS.map((o) => `${REFUSAL_LABELS[o]} ${fmtInt(requests.totals[o])}`).join(', ') + '.',
	});
	chart.dataset.window = win.id;
	return h('section', { class: 'panel', 'data-testid': 'usage-refusals', 'aria-labelledby': 'usage-refusals-h' },
		h('h2', { id: 'usage-refusals-h' }, 'Refusals per minute'),
		h('p', {}, h('span', { 'data-testid': 'usage-refused', 'data-value': refused }, fmtInt(refused)),
			` of ${fmtInt(refused + requests.totals.ok)} requests refused in the window. `,
			h('a', { href: '/console/requests', 'data-view': 'requests' }, 'Per key, in Requests')),
		chart,
		h('ul', { class: 'legend', 'aria-label': 'Refusals' }, REFUSALS.map((o) =>
			h('li', {}, h('span', { class: `swatch series-${o}`, 'aria-hidden': 'true' }), REFUSAL_LABELS[o]))));
}

export async function render(root, ctx) {
	const state = { win: WINDOWS[0], metric: METRICS[0], rows: [], end: Date.now(), loadedAt: null, requests: null };
	const body = h('div', { 'data-testid': 'usage-body' }, h('p', { class: 'loading' }, 'Loading usage…'));
	const stamp = h('span', { class: 'muted', 'data-testid': 'usage-updated' });
	const refresh = h('button', { type: 'button', class: 'button secondary small', 'data-testid': 'usage-refresh', onClick: () => reload() }, 'Refresh');

	function segmented(label, options, current, testid, pick) {
		return h('div', { class: 'segmented', role: 'group', 'aria-label': label },
			options.map((o) => h('button', {
				type: 'button', 'aria-pressed': String(o === current()), 'data-testid': `${testid}-${o.id}`,
				onClick: (e) => {
					for (const b of e.currentTarget.parentNode.children) b.setAttribute('aria-pressed', 'false');
					e.currentTarget.setAttribute('aria-pressed', 'true');
					pick(o);
				},
			}, o.label)));
	}

	add(root, 
		h('h1', {}, 'Usage'),
		h('div', { class: 'toolbar' },
			segmented('Time window', WINDOWS, () => state.win, 'usage-window', (w) => { state.win = w; reload(); }),
			segmented('Measure', METRICS, () => state.metric, 'usage-metric', (m) => { state.metric = m; draw(); }),
			h('span', { class: 'spacer' }),
			stamp, refresh),
		body);

	// The chart is drawn at its panel's width (less the panel's padding).
	function chartWidth() {
		const w = body.clientWidth || root.clientWidth || 900;
		return w - (w < 640 ? 30 : 42);
	}

	function draw() {
		const { win, metric, rows } = state;
		const per = win.res === 'minute' ? 'minute' : 'day (UTC)';
		const buckets = bucketize(rows, win, metric.id, state.end);
		const opsSeen = OPS.filter((op) => rows.some((r) => r.op === op)).concat(
			[...new Set(rows.map((r) => r.op))].filter((op) => !OPS.includes(op)));
		const series = opsSeen.length ? opsSeen : ['push'];
		const billableMsgs = [...BILLED].reduce((n, op) => n + sum(rows, 'msgs', op), 0);
		const chart = stackedBars({
			buckets, series, unit: metric.unit, testid: 'usage-chart', width: chartWidth(),
			title: `${metric.label} per ${per}, last ${win.label}, by operation class`,
			description: `${fmtInt(sum(rows, metric.id))} ${metric.unit} in the window: ` +
				series.map((op) => `${op} ${fmtInt(sum(rows, metric.id, op))}`).join(', ') + '.',
		});
		chart.dataset.window = win.id;
		chart.dataset.metric = metric.id;
		const nonEmpty = buckets.filter((b) => Object.values(b.values).some((v) => v));
		clear(body).append(
			h('section', { class: 'panel', 'aria-labelledby': 'usage-totals-h' },
				h('h2', { id: 'usage-totals-h' }, `Totals, last ${win.label}`),
				h('div', { class: 'totals' },
					total('Billable messages', billableMsgs, 'usage-total-billable'),
					OPS.map((op) => total(`${OP_LABELS[op]} messages${BILLED.has(op) ? ' (billed)' : ' (not billed)'}`, sum(rows, 'msgs', op), `usage-total-${op}`)),
					total('Requests', sum(rows, 'reqs'), 'usage-total-reqs'),
					total('Bytes in', sum(rows, 'bytes_in'), 'usage-total-bytes-in', fmtBytes),
					total('Bytes out', sum(rows, 'bytes_out'), 'usage-total-bytes-out', fmtBytes))),
			h('section', { class: 'panel', 'aria-labelledby': 'usage-chart-h' },
				h('h2', { id: 'usage-chart-h' }, `${metric.label} per ${per}`),
				chart,
				h('ul', { class: 'legend', 'aria-label': 'Operation classes' }, series.map((op) =>
					h('li', {}, h('span', { class: `swatch series-${op}`, 'aria-hidden': 'true' }), OP_LABELS[op] || op)),
					buckets.some((b) => b.live) ? h('li', { class: 'muted' }, 'Lighter: the current minute, so far') : null),
				h('details', { class: 'data' },
					h('summary', {}, 'Show the numbers as a table'),
					table({
						testid: 'usage-table',
						columns: [{ label: win.res === 'minute' ? 'Minute (UTC)' : 'Day (UTC)' }, ...series.map((op) => ({ label: OP_LABELS[op] || op, num: true })), { label: 'Total', num: true }],
						rows: nonEmpty.map((b) => [b.title, ...series.map((op) => fmtInt(b.values[op] || 0)),
							fmtInt(series.reduce((n, op) => n + (b.values[op] || 0), 0))]),
						empty: `No ${metric.unit} in this window.`,
					}))),
			refusalsPanel(state.requests, win, chartWidth()));
		const link = body.querySelector('a[data-view="requests"]');
		if (link && ctx.navigate) {
			link.addEventListener('click', (e) => { e.preventDefault(); ctx.navigate('/console/requests'); });
		}
	}

	let timer = null;
	let seq = 0;
	async function reload() {
		const mine = ++seq;
		refresh.disabled = true;
		try {
			const { rows, end, requests } = await load(state.win);
			if (mine !== seq) return;
			state.rows = rows;
			state.end = end;
			state.requests = requests;
			state.loadedAt = new Date();
			stamp.textContent = `Updated ${state.loadedAt.toISOString().slice(11, 19)} UTC`;
			draw();
		} catch (err) {
			if (mine === seq) ctx.fail(err);
		} finally {
			if (mine === seq) refresh.disabled = false;
		}
	}

	await reload();
	timer = setInterval(() => { if (!document.hidden) reload(); }, REFRESH_MS);
	let lastWidth = chartWidth();
	let resizeTimer = null;
	const onResize = () => {
		clearTimeout(resizeTimer);
		resizeTimer = setTimeout(() => {
			if (Math.abs(chartWidth() - lastWidth) < 8 || !state.loadedAt) return;
			lastWidth = chartWidth();
			draw();
		}, 150);
	};
	window.addEventListener('resize', onResize);
	return () => {
		clearInterval(timer);
		clearTimeout(resizeTimer);
		window.removeEventListener('resize', onResize);
	};
}

function total(label, value, testid, format = fmtInt) {
	return h('div', { class: 'total' },
		h('div', { class: 'label', id: `${testid}-label` }, label),
		h('div', { class: 'value', 'data-testid': testid, 'data-value': value }, format(value)));
}
