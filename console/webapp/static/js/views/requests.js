// Requests: what the gateway answered this cluster per minute, refusals
// (403, 429, other 4xx, 5xx) stacked on what was served, and the same
// counts per API key. The fleet view draws it for any cluster too.

import { get } from '../api.js';
import { h, add, clear, fmtInt, table, timeEl } from '../dom.js';
import { stackedBars } from '../chart.js';

export const OUTCOMES = ['ok', '403', '429', '4xx', '5xx'];
const LABELS = { ok: 'Served', 403: '403 forbidden', 429: '429 rate limited', '4xx': 'Other 4xx', '5xx': '5xx' };
const WINDOWS = [
	{ id: '1h', label: '1 h', hours: 1 },
	{ id: '6h', label: '6 h', hours: 6 },
	{ id: '24h', label: '24 h', hours: 24 },
];
const MINUTE = 60_000;
const REFRESH_MS = 15_000;

function pad(n) { return String(n).padStart(2, '0'); }

// bucketize lays the minutes on a continuous UTC line ending at `end`.
export function bucketize(minutes, hours, end) {
	const count = hours * 60;
	const last = Math.floor(end / MINUTE) * MINUTE;
	const first = last - (count - 1) * MINUTE;
	const out = [];
	for (let i = 0; i < count; i++) {
		const d = new Date(first + i * MINUTE);
		out.push({
			label: `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`,
			title: `${d.toISOString().slice(0, 16).replace('T', ' ')} UTC`,
			values: {},
		});
	}
	for (const m of minutes) {
		const i = Math.floor((Date.parse(m.minute) - first) / MINUTE);
		if (i < 0 || i >= count) continue;
		out[i].values[m.outcome] = (out[i].values[m.outcome] || 0) + Number(m.reqs || 0);
		if (m.live && !out[i].live) {
			out[i].live = true;
			out[i].title += ', so far';
		}
	}
	return out;
}

function total(label, value, testid) {
	return h('div', { class: 'total' },
		h('div', { class: 'label' }, label),
		h('div', { class: 'value', 'data-testid': testid, 'data-value': value }, fmtInt(value)));
}

// mount draws the requests of the cluster that `path` (the console's or
// the operator's requests route) answers for, under root.
export async function mount(root, ctx, path, { heading = 'Requests' } = {}) {
	const state = { win: WINDOWS[0], key: null, data: null };
	const body = h('div', { 'data-testid': 'requests-body' }, h('p', { class: 'loading' }, 'Loading requests…'));
	const refresh = h('button', { type: 'button', class: 'button secondary small', 'data-testid': 'requests-refresh', onClick: () => reload() }, 'Refresh');
	const windows = h('div', { class: 'segmented', role: 'group', 'aria-label': 'Time window' },
		WINDOWS.map((w) => h('button', {
			type: 'button', 'aria-pressed': String(w === state.win), 'data-testid': `requests-window-${w.id}`,
			onClick: (e) => {
				for (const b of e.currentTarget.parentNode.children) b.setAttribute('aria-pressed', 'false');
				e.currentTarget.setAttribute('aria-pressed', 'true');
				state.win = w;
				reload();
			},
		}, w.label)));
	add(root, h('h2', { class: heading === 'Requests' ? 'view-title' : null }, heading),
		h('div', { class: 'toolbar' }, windows, h('span', { class: 'spacer' }), refresh), body);

	function keyLabel(k) {
		if (k.key_id === null) return 'No key (sessions, refusals before a key was known)';
		return k.name || k.key_id;
	}

	function draw() {
		const d = state.data;
		const end = Date.parse(d.to) - MINUTE;
		const buckets = bucketize(d.minutes, d.hours, end);
		const chosen = state.key === null ? null : d.keys.find((k) => (k.key_id ?? '') === state.key);
		const refused = (t) => t['403'] + t['429'] + t['4xx'] + t['5xx'];
		const sums = chosen ? chosen.reqs : d.totals;
		const chart = stackedBars({
			buckets, series: OUTCOMES, unit: 'requests', testid: 'requests-chart',
			width: (body.clientWidth || root.clientWidth || 900) - 42,
			title: `Requests per minute by outcome, last ${state.win.label}${chosen ? `, ${keyLabel(chosen)}` : ''}`,
			description: OUTCOMES.map((o) => `${LABELS[o]} ${fmtInt(sums[o])}`).join(', ') + '.',
		});
		chart.dataset.window = state.win.id;
		chart.dataset.key = state.key ?? 'all';
		const select = h('select', { 'data-testid': 'requests-key', class: 'compact', 'aria-label': 'Chart one key' },
			h('option', { value: '*', selected: state.key === null }, 'All keys'),
			d.keys.map((k) => h('option', { value: k.key_id ?? '', selected: state.key === (k.key_id ?? '') }, keyLabel(k))));
		select.addEventListener('change', () => {
			state.key = select.value === '*' ? null : select.value;
			reload();
		});
		clear(body).append(
			h('section', { class: 'panel' },
				h('h3', {}, `Totals, last ${state.win.label}`),
				h('div', { class: 'totals' },
					OUTCOMES.map((o) => total(LABELS[o], d.totals[o], `requests-total-${o}`)),
					total('Refused', refused(d.totals), 'requests-total-refused'))),
			h('section', { class: 'panel' },
				h('div', { class: 'toolbar' }, h('h3', {}, 'Per minute'), h('span', { class: 'spacer' }), select),
				chart,
				h('ul', { class: 'legend', 'aria-label': 'Outcomes' }, OUTCOMES.map((o) =>
					h('li', {}, h('span', { class: `swatch series-${o}`, 'aria-hidden': 'true' }), LABELS[o])))),
			h('section', { class: 'panel' },
				h('h3', {}, 'Per API key'),
				table({
					testid: 'requests-keys',
					columns: [{ label: 'Key' }, { label: 'Last used' }, ...OUTCOMES.map((o) => ({ label: LABELS[o], num: true })), { label: 'Total', num: true }],
					rows: d.keys.map((k) => [
						h('span', {}, keyLabel(k), k.revoked ? h('span', { class: 'badge revoked' }, 'revoked') : null),
						k.key_id === null ? '—' : timeEl(k.last_used_at),
						...OUTCOMES.map((o) => fmtInt(k.reqs[o])), fmtInt(k.total)]),
					rowAttrs: (i) => ({
						'data-testid': 'requests-key-row', 'data-key-id': d.keys[i].key_id ?? '',
						'data-total': d.keys[i].total, 'data-refused': refused(d.keys[i].reqs),
						'data-forbidden': d.keys[i].reqs['403'], 'data-ok': d.keys[i].reqs.ok,
					}),
					empty: 'This cluster has no API keys.',
				})));
	}

	let seq = 0;
	async function reload() {
		const mine = ++seq;
		refresh.disabled = true;
		try {
			const q = `hours=${state.win.hours}${state.key === null ? '' : `&key=${encodeURIComponent(state.key)}`}`;
			const data = await get(`${path}?${q}`);
			if (mine !== seq) return;
			state.data = data;
			draw();
		} catch (err) {
			if (mine === seq) ctx.fail(err);
		} finally {
			if (mine === seq) refresh.disabled = false;
		}
	}
	await reload();
	const timer = setInterval(() => { if (!document.hidden) reload(); }, REFRESH_MS);
	return () => clearInterval(timer);
}

export async function render(root, ctx) {
	root.append(h('h1', {}, 'Requests'),
		h('p', { class: 'muted' }, 'Every request the gateway answered for this cluster, by what the client got: refusals next to what was served.'));
	return mount(root, ctx, '/api/console/requests', { heading: 'By minute and key' });
}
