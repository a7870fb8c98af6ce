// Queues: the cluster's queues as its broker lists them, with partitions,
// messages and the bytes they retain, against the plan's storage cap.

import { get } from '../api.js';
import { h, add, fmtInt, fmtBytes, table } from '../dom.js';

function num(v) {
	if (v === null || v === undefined || v === '') return null;
	const n = Number(v);
	return Number.isFinite(n) ? n : null;
}

const dash = (n, f = fmtInt) => (n === null ? h('span', { class: 'muted' }, '—') : f(n));

export async function render(root, ctx) {
	const data = await get('/api/console/queues');
	const queues = (data.queues || []).map((q) => {
		const m = q.messages || {};
		return {
			name: String(q.name ?? ''),
			// The broker reports a queue created without a namespace as
			// its own namespace: that is no namespace to show.
			namespace: q.namespace && q.namespace !== q.name ? q.namespace : '',
			task: q.task || '',
			partitions: num(q.partitions),
			pending: num(m.pending),
			processing: num(m.processing),
			total: num(m.total),
			retained: num(q.retained_bytes),
		};
	}).sort((a, b) => a.name.localeCompare(b.name));
	const o = ctx.overview || {};
	const cap = num(data.max_retained_bytes);
	const retained = num(data.retained_bytes);
	const maxQueues = o.limits ? num(o.limits.max_queues) : null;

	add(root, 
		h('h1', {}, 'Queues'),
		data.over_quota ? h('div', { class: 'banner warn', role: 'alert', 'data-testid': 'queues-over-quota' },
			'Pushes are blocked: retained storage is over the plan cap. Consumers keep working; the block lifts as they catch up.') : null,
		h('section', { class: 'panel', 'aria-labelledby': 'queues-sum-h' },
			h('h2', { id: 'queues-sum-h', class: 'visually-hidden' }, 'Summary'),
			h('dl', { class: 'facts' },
				h('dt', {}, 'Queues'),
				h('dd', { 'data-testid': 'queues-count', 'data-value': queues.length }, fmtInt(queues.length),
					maxQueues ? h('span', { class: 'muted' }, ` of ${fmtInt(maxQueues)}`) : null),
				h('dt', {}, 'Retained'),
				h('dd', { 'data-testid': 'queues-retained' }, retained === null ? 'not reported by the broker' : fmtBytes(retained),
					cap ? h('span', { class: 'muted' }, ` of ${fmtBytes(cap)}`) : h('span', { class: 'muted' }, ' (no cap)')))),
		h('section', { class: 'panel', 'aria-labelledby': 'queues-h' },
			h('h2', { id: 'queues-h', class: 'visually-hidden' }, 'Queue list'),
			table({
				testid: 'queues-table',
				caption: 'Queues of this cluster',
				columns: [
					{ label: 'Name' }, { label: 'Namespace / task' }, { label: 'Partitions', num: true }, { label: 'Pending', num: true },
					{ label: 'Processing', num: true }, { label: 'Total', num: true }, { label: 'Retained', num: true },
				],
				rows: queues.map((q) => [
					h('span', { class: 'mono' }, q.name),
					q.namespace || q.task ? h('span', { class: 'muted' }, [q.namespace, q.task].filter(Boolean).join(' / ')) : dash(null),
					dash(q.partitions), dash(q.pending),
					dash(q.processing), dash(q.total), dash(q.retained, fmtBytes),
				]),
				rowAttrs: (i) => ({ 'data-testid': 'queue-row', 'data-queue': queues[i].name }),
				empty: 'No queues yet: a queue appears after its first push or configure.',
			})));
}
