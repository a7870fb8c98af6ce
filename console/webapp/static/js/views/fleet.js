// Fleet (live operators only): every cell with its use, tenancy verdict
// and serving gateway; every tenant's clusters with status, plan, month
// usage and quota, and the actions the operator API takes (suspend or
// resume, change the plan, issue a key); the plans; every user
// (fleetusers.js).

import { get, post, put } from '../api.js';
import { h, clear, fmtInt, table, fmtDate } from '../dom.js';
import { mount as mountRequests } from './requests.js';
import { usersPanel } from './fleetusers.js';

function badge(text, cls) {
	return h('span', { class: `badge ${cls || text}` }, String(text).replace('_', ' '));
}

function verdict(t) {
	const probed = t.probed === 'unknown' ? 'not probed yet' : t.probed;
	const parts = [`stated ${t.stated}`, `probed ${probed}`];
	if (t.keeper_only) parts.push(`keeper only${t.keeper_cluster ? ` (${t.keeper_cluster})` : ''}`);
	return h('span', { class: t.contradicted || t.keeper_only ? 'warn-text' : null, title: t.detail || '' },
		parts.join(' · '), t.contradicted ? ' · CONTRADICTED' : '');
}

// gatewayCell is the group recorded as fronting the cell (written by its
// gateways at start), with its lease when it is a leader group.
function gatewayCell(c) {
	const front = c.gateway_group;
	if (!front) return h('span', { class: 'muted' }, 'no gateway has claimed this cell');
	const g = c.gateway;
	if (!g) return h('span', { title: `claimed by ${front.claimed_by}, last stated ${front.stated_at}` }, front.group);
	return h('span', { title: `claimed by ${front.claimed_by}, last stated ${front.stated_at}` }, `${front.group}: `,
		g.serving ? badge(`${g.holder} serving`, 'on') : badge(`${g.holder}: lease expired`, 'warn'),
		h('span', { class: 'muted' }, ` epoch ${g.epoch}`));
}

function cellsPanel(data) {
	return h('section', { class: 'panel', 'aria-labelledby': 'fleet-cells-h' },
		h('h2', { id: 'fleet-cells-h' }, 'Cells'),
		table({
			testid: 'fleet-cells',
			columns: [{ label: 'Cell' }, { label: 'URL' }, { label: 'Class' }, { label: 'Status' },
				{ label: 'Used / capacity', num: true }, { label: 'Tenancy' }, { label: 'Gateway' }],
			rows: data.cells.map((c) => [
				h('strong', {}, c.slug), h('code', {}, c.url), c.class, badge(c.status, c.status === 'active' ? 'active' : 'warn'),
				`${fmtInt(c.used_slots)} / ${c.capacity_slots ? fmtInt(c.capacity_slots) : '∞'}`,
				verdict(c.tenancy), gatewayCell(c)]),
			rowAttrs: (i) => ({
				'data-testid': 'fleet-cell-row', 'data-cell': data.cells[i].slug,
				'data-used': data.cells[i].used_slots, 'data-capacity': data.cells[i].capacity_slots,
				'data-probed': data.cells[i].tenancy.probed, 'data-stated': data.cells[i].tenancy.stated,
				'data-gateway-group': data.cells[i].gateway_group ? data.cells[i].gateway_group.group : '',
			}),
			empty: h('span', { 'data-testid': 'fleet-no-cells' }, 'No cells yet. A cell is a Queen broker this gateway fronts; register the first with ',
				h('code', {}, 'caddy queen cell add <slug> --region <region> --url <broker URL>'), '.'),
		}),
		h('h3', {}, 'Gateway groups'),
		table({
			testid: 'fleet-gateways',
			columns: [{ label: 'Group' }, { label: 'Cells' }, { label: 'Serving member' }, { label: 'Epoch', num: true }, { label: 'Lease expires' }],
			rows: data.gateway_groups.map((g) => [g.group, g.cells.length ? g.cells.join(', ') : h('span', { class: 'muted' }, 'none claimed'),
				g.serving ? g.holder : h('span', { class: 'muted' }, `none (${g.holder} expired)`),
				fmtInt(g.epoch), fmtDate(g.expires_at)]),
			empty: 'No gateway groups: every gateway serves on its own.',
		}),
		data.this_gateway ? h('p', { class: 'muted', 'data-testid': 'fleet-this-gateway' },
			`This page is served by ${data.this_gateway.name}${data.this_gateway.group ? ` (group ${data.this_gateway.group})` : ''}, ${data.this_gateway.role}, `
			+ (data.this_gateway.cells.length ? `fronting ${data.this_gateway.cells.join(', ')}.` : 'fronting every cell no group claimed.')) : null);
}

function quotaText(q) {
	if (q.state === 'unlimited') return h('span', { class: 'muted' }, 'unlimited');
	return h('span', { class: q.state === 'ok' ? null : 'warn-text' }, `${q.percent}% of ${fmtInt(q.monthly_msgs_quota)} (${q.state})`);
}

// nextSteps is what a fleet without clusters does next, on the command
// line (the console does not create cells, tenants or clusters).
function nextSteps(haveCell) {
	const steps = [];
	if (!haveCell) steps.push(['Register the broker cell the clusters will live on:', 'caddy queen cell add eu1-a --region eu1 --url <broker URL>']);
	steps.push(['Create a customer\'s tenant:', 'caddy queen tenant create acme --name "Acme Inc"']);
	steps.push(['Create its first cluster (its hostname is <slug>.<base domain>):', 'caddy queen cluster create acme-prod --tenant acme --plan pro']);
	steps.push(['Give the customer\'s first user the admin role on it:', 'caddy queen user create ada@acme.example --tenant acme --password-stdin\ncaddy queen user grant ada@acme.example --cluster acme-prod --role admin']);
	return h('div', { 'data-testid': 'fleet-next-step' },
		h('p', {}, h('strong', {}, 'No clusters yet.'), ' Every cluster appears here once created; then reload this page.'),
		h('ol', {}, steps.map(([what, cmd]) => h('li', {}, what, h('pre', {}, h('code', {}, cmd))))),
		h('p', { class: 'muted' }, 'docs/operations.md describes each command.'));
}

export async function render(root, ctx) {
	root.append(h('h1', {}, 'Fleet'),
		h('p', { class: 'muted' }, 'Every cell, tenant and cluster of the control plane. Actions are audited with your user id.'));
	const body = h('div', { 'data-testid': 'fleet-body' }, h('p', { class: 'loading' }, 'Loading the fleet…'));
	const detail = h('div', { 'data-testid': 'fleet-detail' });
	root.append(body, detail);
	let stopDetail = null;

	async function act(button, fn, done) {
		button.disabled = true;
		try {
			const r = await fn();
			if (done) done(r);
			await load();
		} catch (err) {
			ctx.fail(err);
			button.disabled = false;
		}
	}

	function clusterRow(c, plans) {
		const suspended = c.cluster_status === 'suspended';
		const toggle = h('button', {
			type: 'button', class: `button small ${suspended ? 'secondary' : 'danger'}`,
			'data-testid': suspended ? 'fleet-resume' : 'fleet-suspend',
			disabled: c.cluster_status === 'deleting',
		}, suspended ? 'Resume' : 'Suspend');
		toggle.addEventListener('click', () => act(toggle,
			() => post(`/api/operator/clusters/${c.id}/${suspended ? 'resume' : 'suspend'}`),
			() => ctx.notify(`${c.slug} ${suspended ? 'resumed' : 'suspended'}.`)));
		// A push block (a billing hold) is lifted by resume as well.
		let lift = null;
		if (c.cluster_status === 'push_blocked') {
			lift = h('button', { type: 'button', class: 'button small secondary', 'data-testid': 'fleet-resume' }, 'Resume');
			lift.addEventListener('click', () => act(lift,
				() => post(`/api/operator/clusters/${c.id}/resume`),
				() => ctx.notify(`${c.slug} resumed.`)));
		}
		const plan = h('select', { class: 'compact', 'data-testid': 'fleet-plan', 'aria-label': `Plan of ${c.slug}` },
			plans.map((p) => h('option', { value: p.code, selected: p.code === c.plan }, p.code)));
		plan.addEventListener('change', () => act(plan,
			() => put(`/api/operator/clusters/${c.id}/plan`, { plan: plan.value }),
			() => ctx.notify(`${c.slug} is now on plan ${plan.value}.`)));
		const issue = h('button', { type: 'button', class: 'button small secondary', 'data-testid': 'fleet-issue-key' }, 'Issue key');
		issue.addEventListener('click', () => act(issue,
			() => post(`/api/operator/clusters/${c.id}/keys`, { name: `operator ${new Date().toISOString().slice(0, 10)}`, scopes: ['produce', 'consume', 'read'] }),
			(k) => showKey(c, k)));
		const requests = h('button', { type: 'button', class: 'button small secondary', 'data-testid': 'fleet-requests' }, 'Requests');
		requests.addEventListener('click', () => showRequests(c));
		return [h('strong', {}, c.slug), badge(c.status), c.plan, c.cell_slug, fmtInt(c.usage.msgs), quotaText(c.quota),
			c.push_block ? badge(c.push_block, 'warn') : h('span', { class: 'muted' }, '—'),
			h('span', { class: 'actions' }, toggle, lift, plan, issue, requests)];
	}

	function showKey(c, k) {
		if (stopDetail) { stopDetail(); stopDetail = null; }
		const value = h('input', { type: 'text', readonly: true, value: k.key, 'data-testid': 'fleet-new-key', class: 'key-value', 'aria-label': 'New API key' });
		clear(detail).append(h('section', { class: 'panel reveal', 'data-testid': 'fleet-key-reveal', 'data-key-id': k.id, 'data-cluster': c.slug },
			h('h2', {}, `New key for ${c.slug}`),
			h('p', {}, 'Shown this once: copy it now. It works at once.'), value));
	}

	async function showRequests(c) {
		if (stopDetail) { stopDetail(); stopDetail = null; }
		const panel = h('section', { class: 'panel', 'data-testid': 'fleet-requests-panel', 'data-cluster': c.slug });
		clear(detail).append(panel);
		try {
			stopDetail = await mountRequests(panel, ctx, `/api/operator/clusters/${c.id}/requests`, { heading: `Requests of ${c.slug}` });
		} catch (err) {
			ctx.fail(err);
		}
	}

	async function load() {
		const [cells, tenants, plans, accounts, invitations] = await Promise.all([
			get('/api/operator/cells'), get('/api/operator/tenants'), get('/api/operator/plans'), get('/api/operator/accounts'),
			get('/api/operator/accounts/invitations')]);
		const rows = [];
		const attrs = [];
		let clusterCount = 0;
		for (const t of tenants.tenants) {
			const tenantName = t.is_platform ? h('span', {}, t.slug, ' ', badge('operators', 'muted')) : t.slug;
			if (t.clusters.length === 0) {
				// A tenant without clusters still shows: it is where the
				// next cluster (or the operators, for the platform's) lives.
				rows.push([tenantName, h('span', { class: 'muted' }, 'no clusters'), '', '', '', '', '', '', '']);
				attrs.push({ 'data-testid': 'fleet-tenant-row', 'data-tenant': t.slug, 'data-platform': String(Boolean(t.is_platform)) });
			}
			for (const c of t.clusters) {
				clusterCount++;
				rows.push([tenantName, ...clusterRow(c, plans.plans)]);
				attrs.push({
					'data-testid': 'fleet-cluster-row', 'data-cluster': c.slug, 'data-tenant': t.slug,
					'data-status': c.status, 'data-plan': c.plan, 'data-msgs': c.usage.msgs, 'data-quota': c.quota.state,
				});
			}
		}
		clear(body).append(
			cellsPanel(cells),
			h('section', { class: 'panel', 'aria-labelledby': 'fleet-tenants-h' },
				h('h2', { id: 'fleet-tenants-h' }, `Tenants and clusters (usage of ${tenants.month})`),
				table({
					testid: 'fleet-clusters',
					columns: [{ label: 'Tenant' }, { label: 'Cluster' }, { label: 'Status' }, { label: 'Plan' }, { label: 'Cell' },
						{ label: 'Messages', num: true }, { label: 'Monthly quota' }, { label: 'Push block' }, { label: 'Actions' }],
					rows,
					rowAttrs: (i) => attrs[i],
					empty: 'No tenants.',
				}),
				clusterCount === 0 ? nextSteps(cells.cells.length > 0) : null),
			usersPanel(accounts, invitations, tenants.tenants, ctx, act),
			h('section', { class: 'panel', 'aria-labelledby': 'fleet-plans-h' },
				h('h2', { id: 'fleet-plans-h' }, 'Plans'),
				table({
					testid: 'fleet-plans',
					columns: [{ label: 'Plan' }, { label: 'Cell class' }, { label: 'Requests/s', num: true }, { label: 'Messages/s', num: true },
						{ label: 'Queues', num: true }, { label: 'Monthly quota', num: true }, { label: 'Features' }, { label: 'Clusters', num: true }],
					rows: plans.plans.map((p) => [h('strong', {}, p.code), p.cell_class, fmtInt(p.limits.max_req_per_sec),
						fmtInt(p.limits.max_msgs_per_sec), fmtInt(p.limits.max_queues),
						p.monthly_msgs_quota === null ? 'unlimited' : fmtInt(p.monthly_msgs_quota),
						Object.keys(p.features).filter((f) => p.features[f] === true).join(', ') || '—', fmtInt(p.clusters)]),
					rowAttrs: (i) => ({ 'data-testid': 'fleet-plan-row', 'data-plan': plans.plans[i].code }),
				})));
		body.dataset.loaded = String(Date.now());
	}

	await load();
	return () => { if (stopDetail) stopDetail(); };
}

