// Overview: the cluster's status, plan, month-to-date messages against the
// monthly quota, storage, the effective limits and the plan's features.

import { h, add, fmtInt, fmtBytes, table } from '../dom.js';

const LIMITS = [
	['max_req_per_sec', 'Requests per second', 'count'],
	['req_burst', 'Request burst', 'count'],
	['max_msgs_per_sec', 'Messages per second', 'count'],
	['msgs_burst', 'Message burst', 'count'],
	['max_queues', 'Queues', 'count'],
	['max_partitions_per_queue', 'Partitions per queue', 'count'],
	['max_parked_pops', 'Parked consumers (long polls)', 'count'],
	['max_payload_bytes', 'Max payload size', 'bytes'],
	['max_batch_items', 'Max batch items', 'count'],
	['max_retained_bytes', 'Retained storage', 'bytes'],
	['max_retention_seconds', 'Retention', 'seconds'],
];

function fmtSeconds(n) {
	n = Number(n);
	if (n % 86400 === 0) return `${fmtInt(n / 86400)} days`;
	if (n % 3600 === 0) return `${fmtInt(n / 3600)} hours`;
	return `${fmtInt(n)} s`;
}

function limitValue(v, kind) {
	if (v === null || v === undefined) return h('span', { class: 'muted' }, 'Unlimited');
	if (typeof v === 'object') v = v.value ?? v.limit ?? null;
	if (v === null || v === undefined) return h('span', { class: 'muted' }, 'Unlimited');
	if (kind === 'bytes') return fmtBytes(v);
	if (kind === 'seconds') return fmtSeconds(v);
	return fmtInt(v);
}

function banners(o) {
	const out = [];
	const block = o.push_block;
	if (o.status === 'suspended') {
		out.push(h('div', { class: 'banner danger', role: 'alert' }, 'This cluster is suspended: the gateway refuses its traffic. Contact your operator.'));
	} else if (o.status === 'deleting') {
		out.push(h('div', { class: 'banner danger', role: 'alert' }, 'This cluster is being deleted.'));
	} else if (o.status === 'push_blocked' && !block) {
		out.push(h('div', { class: 'banner warn', role: 'alert' }, 'Pushes are blocked by the control plane; consumers keep working.'));
	}
	if (block === 'storage' || (o.storage && o.storage.over_quota)) {
		out.push(h('div', { class: 'banner warn', role: 'alert', 'data-testid': 'banner-storage' },
			'Retained storage is over the plan cap: pushes are refused until consumers catch up or the cap is raised. Consumers keep working.'));
	}
	if (block === 'monthly_quota') {
		out.push(h('div', { class: 'banner warn', role: 'alert', 'data-testid': 'banner-quota' },
			'The monthly message quota is used up: pushes are refused until next month or a higher quota.'));
	}
	if (block === 'billing') {
		out.push(h('div', { class: 'banner warn', role: 'alert', 'data-testid': 'banner-billing' },
			'Pushes are on hold for billing; consumers keep working. Contact your operator.'));
	}
	return out;
}

export async function render(root, ctx) {
	const o = await ctx.refreshOverview();
	const plan = o.plan || {};
	const usage = o.usage || {};
	const quota = plan.monthly_msgs_quota ?? null;
	const used = Number(usage.billable_msgs ?? usage.msgs ?? 0);
	const pct = quota ? Math.min(100, (used / quota) * 100) : 0;
	const storage = o.storage || {};
	const features = o.features || {};
	// The storage cap is not enforced while the broker reports no retained
	// bytes (brokers before 0.16): say so wherever the cap is shown.
	const storageInactive = storage.quota_active === false;
	const inactiveNote = h('span', { class: 'muted', 'data-testid': 'storage-inactive' }, ' (inactive: the broker reports no retained bytes)');

	add(root, 
		h('h1', {}, 'Overview'),
		...banners(o),
		h('div', { class: 'grid' },
			h('section', { class: 'panel', 'aria-labelledby': 'ov-cluster' },
				h('h2', { id: 'ov-cluster' }, 'Cluster'),
				h('dl', { class: 'facts' },
					h('dt', {}, 'Name'), h('dd', { class: 'mono', 'data-testid': 'overview-slug' }, o.slug),
					h('dt', {}, 'Status'), h('dd', {}, h('span', { class: `badge ${o.status}`, 'data-testid': 'overview-status' }, String(o.status || 'unknown').replace('_', ' '))),
					o.tenant_slug ? [h('dt', {}, 'Organisation'), h('dd', { class: 'mono' }, o.tenant_slug)] : null,
					h('dt', {}, 'Your role'), h('dd', { 'data-testid': 'overview-role' }, o.role),
					o.gateway && o.gateway.name ? [h('dt', {}, 'Served by'), h('dd', { class: 'mono', 'data-testid': 'overview-gateway' },
						o.gateway.name, o.gateway.group ? h('span', { class: 'muted' }, ` (group ${o.gateway.group})`) : null)] : null)),
			h('section', { class: 'panel', 'aria-labelledby': 'ov-plan' },
				h('h2', { id: 'ov-plan' }, 'Plan and quota'),
				h('dl', { class: 'facts' },
					h('dt', {}, 'Plan'), h('dd', {}, h('span', { class: 'badge on', 'data-testid': 'overview-plan' }, plan.code || '—')),
					h('dt', {}, `Billable messages in ${usage.month || 'this month'}`),
					h('dd', { 'data-testid': 'overview-month-msgs', 'data-value': used },
						fmtInt(used), quota ? h('span', { class: 'muted' }, ` of ${fmtInt(quota)}`) : h('span', { class: 'muted' }, ' (no monthly quota)')),
					h('dt', {}, 'Retained storage cap'),
					h('dd', { 'data-testid': 'overview-storage-cap' }, storage.max_retained_bytes ? fmtBytes(storage.max_retained_bytes) : 'Unlimited',
						storage.retained_bytes !== undefined && storage.retained_bytes !== null ? h('span', { class: 'muted' }, ` (${fmtBytes(storage.retained_bytes)} used)`) : null,
						storageInactive && storage.max_retained_bytes ? inactiveNote.cloneNode(true) : null)),
				quota ? h('div', {
					class: 'meter', role: 'meter', 'aria-label': 'Monthly quota used',
					'aria-valuemin': 0, 'aria-valuemax': quota, 'aria-valuenow': used,
					'aria-valuetext': `${pct.toFixed(1)} percent`,
				}, meterFill(pct)) : null)),
		h('section', { class: 'panel', 'aria-labelledby': 'ov-limits' },
			h('h2', { id: 'ov-limits' }, 'Limits'),
			table({
				testid: 'limits-table',
				columns: [{ label: 'Limit' }, { label: 'Value', num: true }],
				rows: LIMITS.map(([key, label, kind]) => [label, key === 'max_retained_bytes' && storageInactive && (o.limits || {})[key] !== null
					? h('span', {}, limitValue((o.limits || {})[key], kind), inactiveNote.cloneNode(true))
					: limitValue((o.limits || {})[key], kind)]),
			})),
		h('section', { class: 'panel', 'aria-labelledby': 'ov-features' },
			h('h2', { id: 'ov-features' }, 'Features'),
			h('ul', { class: 'legend' }, Object.keys(features).sort().map((f) =>
				h('li', {}, h('span', { class: `badge ${features[f] ? 'on' : ''}` }, `${f}: ${features[f] ? 'on' : 'off'}`))))),
	);
}

function meterFill(pct) {
	const fill = h('span', { class: `meter-fill${pct >= 90 ? ' hot' : ''}` });
	fill.style.width = `${pct}%`;
	return fill;
}
