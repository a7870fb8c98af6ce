// The fleet's accounts (live operators only): every user with its tenant,
// operator bit, origin, last sign-in and roles; creating a user (a
// tenant's, or an operator in the platform tenant), setting and removing
// roles, granting and withdrawing the operator bit; inviting an address to
// a cluster by e-mail, and the fleet's pending invitations. The server
// checks the caller's operator bit where each change commits.

import { post, put, del } from '../api.js';
import { h, table, timeEl } from '../dom.js';
import { ROLES } from './members.js';

function roleSelect(attrs, current) {
	return h('select', attrs, ROLES.map(([value, label]) => h('option', { value, selected: value === current }, label)));
}

// clustersOf are the clusters of a tenant, from the fleet's tenant list.
function clustersOf(tenants, tenantID) {
	const t = tenants.find((x) => x.id === tenantID || x.slug === tenantID);
	return t ? t.clusters : [];
}

function createForm(tenants, ctx, act) {
	const platform = tenants.find((t) => t.is_platform);
	const email = h('input', { id: 'fleet-user-email', type: 'email', required: true, autocomplete: 'off', 'data-testid': 'fleet-user-email' });
	const name = h('input', { id: 'fleet-user-name', type: 'text', autocomplete: 'off', 'data-testid': 'fleet-user-name' });
	const tenant = h('select', { id: 'fleet-user-tenant', 'data-testid': 'fleet-user-tenant' },
		tenants.map((t) => h('option', { value: t.slug, selected: platform ? t === platform : false }, t.is_platform ? `${t.slug} (operators)` : t.slug)));
	const password = h('input', { id: 'fleet-user-password', type: 'password', autocomplete: 'new-password', minlength: 12, maxlength: 128, 'data-testid': 'fleet-user-password' });
	const operator = h('input', { id: 'fleet-user-operator', type: 'checkbox', 'data-testid': 'fleet-user-operator' });
	const cluster = h('select', { id: 'fleet-user-cluster', 'data-testid': 'fleet-user-cluster' });
	const role = roleSelect({ id: 'fleet-user-role', 'data-testid': 'fleet-user-role' }, 'viewer');
	const fillClusters = () => {
		cluster.replaceChildren(h('option', { value: '' }, 'no role yet'),
			...clustersOf(tenants, tenant.value).map((c) => h('option', { value: c.id }, c.slug)));
		role.disabled = cluster.value === '';
	};
	tenant.addEventListener('change', fillClusters);
	cluster.addEventListener('change', () => { role.disabled = cluster.value === ''; });
	fillClusters();
	const submit = h('button', { type: 'submit', class: 'button', 'data-testid': 'fleet-user-create' }, 'Create user');
	const form = h('form', { class: 'inline', 'data-testid': 'fleet-user-form' },
		h('div', { class: 'field' }, h('label', { for: 'fleet-user-email' }, 'Email'), email),
		h('div', { class: 'field' }, h('label', { for: 'fleet-user-name' }, 'Name (optional)'), name),
		h('div', { class: 'field' }, h('label', { for: 'fleet-user-tenant' }, 'Tenant'), tenant),
		h('div', { class: 'field' }, h('label', { for: 'fleet-user-password' }, 'Password (optional, 12+)'), password),
		h('div', { class: 'field' }, h('label', { for: 'fleet-user-cluster' }, 'Cluster'), cluster),
		h('div', { class: 'field' }, h('label', { for: 'fleet-user-role' }, 'Role'), role),
		h('div', { class: 'field' }, h('label', { for: 'fleet-user-operator' }, operator, ' Operator')),
		submit);
	form.addEventListener('submit', (e) => {
		e.preventDefault();
		const body = { email: email.value.trim().toLowerCase(), tenant: tenant.value, operator: operator.checked };
		if (name.value.trim()) body.name = name.value.trim();
		if (password.value) body.password = password.value;
		if (cluster.value) { body.cluster = cluster.value; body.role = role.value; }
		act(submit, () => post('/api/operator/accounts', body),
			(u) => ctx.notify(`${u.email} created in ${u.tenant_slug}${u.is_operator ? ' as an operator' : ''}${u.role ? `, ${u.role}` : ''}.${verificationWords(u.verification_email)}`));
	});
	return form;
}

function verificationWords(v) {
	if (v === 'sent') return ' A link to confirm the address was sent to it.';
	if (v === 'failed') return ' The link to confirm the address could not be sent.';
	return '';
}

// inviteForm invites an address no account has to a cluster with a role;
// the account is made in the cluster's tenant when the link is accepted.
function inviteForm(tenants, ctx, act) {
	const email = h('input', { id: 'fleet-invite-email', type: 'email', required: true, autocomplete: 'off', 'data-testid': 'fleet-invite-email' });
	const clusters = tenants.flatMap((t) => t.clusters.map((c) => ({ id: c.id, label: `${t.slug} / ${c.slug}`, slug: c.slug })));
	const cluster = h('select', { id: 'fleet-invite-cluster', required: true, 'data-testid': 'fleet-invite-cluster' },
		clusters.map((c) => h('option', { value: c.id }, c.label)));
	const role = roleSelect({ id: 'fleet-invite-role', 'data-testid': 'fleet-invite-role' }, 'viewer');
	const submit = h('button', { type: 'submit', class: 'button', 'data-testid': 'fleet-invite-send', disabled: clusters.length === 0 }, 'Invite');
	const form = h('form', { class: 'inline', 'data-testid': 'fleet-invite-form' },
		h('div', { class: 'field' }, h('label', { for: 'fleet-invite-email' }, 'Email'), email),
		h('div', { class: 'field' }, h('label', { for: 'fleet-invite-cluster' }, 'Cluster'), cluster),
		h('div', { class: 'field' }, h('label', { for: 'fleet-invite-role' }, 'Role'), role),
		submit);
	form.addEventListener('submit', (e) => {
		e.preventDefault();
		act(submit, () => post('/api/operator/accounts/invitations', { email: email.value.trim().toLowerCase(), cluster: cluster.value, role: role.value }),
			(r) => ctx.notify(`Invitation sent to ${r.email} for ${r.cluster} as ${r.role}.`));
	});
	return form;
}

function invitationsTable(invitations, ctx, act) {
	return table({
		testid: 'fleet-invitations',
		columns: [{ label: 'Email' }, { label: 'Tenant' }, { label: 'Cluster' }, { label: 'Role' }, { label: 'Invited by' },
			{ label: 'Expires' }, { label: 'Actions' }],
		rows: invitations.map((i) => {
			const revoke = h('button', { type: 'button', class: 'button small danger', 'data-testid': 'fleet-invitation-revoke',
				'aria-label': `Revoke the invitation of ${i.email} to ${i.cluster_slug}` }, 'Revoke');
			revoke.addEventListener('click', () => act(revoke,
				() => del(`/api/operator/accounts/invitations/${i.id}`),
				() => ctx.notify(`The invitation of ${i.email} to ${i.cluster_slug} is revoked.`)));
			return [h('span', { class: 'mono' }, i.email), i.tenant_slug, i.cluster_slug, i.role,
				i.invited_by || h('span', { class: 'muted' }, '—'), timeEl(i.expires_at), revoke];
		}),
		rowAttrs: (n) => ({ 'data-testid': 'fleet-invitation-row', 'data-email': invitations[n].email,
			'data-cluster': invitations[n].cluster_slug, 'data-role': invitations[n].role, 'data-invitation-id': invitations[n].id }),
		empty: 'No pending invitations.',
	});
}

function rolesCell(u, ctx, act) {
	if (u.roles.length === 0) return h('span', { class: 'muted' }, 'none');
	return h('span', {}, u.roles.map((r) => {
		const remove = h('button', {
			type: 'button', class: 'button small secondary', 'data-testid': 'fleet-user-role-revoke', 'data-cluster': r.cluster_slug,
			'aria-label': `Remove ${u.email}'s role on ${r.cluster_slug}`,
		}, '×');
		remove.addEventListener('click', () => act(remove,
			() => del(`/api/operator/accounts/${u.id}/roles/${r.cluster_id}`),
			() => ctx.notify(`${u.email} no longer has a role on ${r.cluster_slug}.`)));
		return h('span', { class: 'role-chip', 'data-testid': 'fleet-user-role-chip', 'data-cluster': r.cluster_slug, 'data-role': r.role },
			`${r.cluster_slug}: ${r.role} `, remove, ' ');
	}));
}

function actionsCell(u, tenants, ctx, act) {
	const self = ctx.me && ctx.me.user_id === u.id;
	const toggle = h('button', {
		type: 'button', class: `button small ${u.is_operator ? 'danger' : 'secondary'}`, 'data-testid': 'fleet-user-operator-toggle',
		disabled: self && u.is_operator, title: self && u.is_operator ? 'Another operator must withdraw your operator bit.' : null,
	}, u.is_operator ? 'Withdraw operator' : 'Make operator');
	toggle.addEventListener('click', () => act(toggle,
		() => put(`/api/operator/accounts/${u.id}/operator`, { operator: !u.is_operator }),
		() => ctx.notify(`${u.email} ${u.is_operator ? 'is no longer an operator' : 'is now an operator'}.`)));
	const clusters = clustersOf(tenants, u.tenant_id);
	if (clusters.length === 0) return h('span', { class: 'actions' }, toggle);
	const cluster = h('select', { class: 'compact', 'data-testid': 'fleet-user-grant-cluster', 'aria-label': `Cluster for ${u.email}` },
		clusters.map((c) => h('option', { value: c.id }, c.slug)));
	const role = roleSelect({ class: 'compact', 'data-testid': 'fleet-user-grant-role', 'aria-label': `Role for ${u.email}` }, 'viewer');
	const grant = h('button', { type: 'button', class: 'button small secondary', 'data-testid': 'fleet-user-grant' }, 'Set role');
	grant.addEventListener('click', () => act(grant,
		() => put(`/api/operator/accounts/${u.id}/roles/${cluster.value}`, { role: role.value }),
		() => ctx.notify(`${u.email} is now ${role.value} on ${cluster.selectedOptions[0].textContent}.`)));
	return h('span', { class: 'actions' }, toggle, cluster, role, grant);
}

// usersPanel is the fleet view's Users section.
export function usersPanel(accounts, invitations, tenants, ctx, act) {
	const users = accounts.users;
	const platform = new Set(tenants.filter((t) => t.is_platform).map((t) => t.id));
	return h('section', { class: 'panel', 'aria-labelledby': 'fleet-users-h', 'data-testid': 'fleet-users-panel' },
		h('h2', { id: 'fleet-users-h' }, 'Users'),
		h('p', { class: 'muted' }, 'Every account of every tenant. Operators live in the platform tenant; a new user without a password signs in with a provider.'),
		createForm(tenants, ctx, act),
		h('h3', {}, 'Invite by e-mail'),
		invitations.mail
			? [h('p', { class: 'muted' }, 'The address gets a link; accepting it creates the account in the cluster\'s tenant with the role.'),
				inviteForm(tenants, ctx, act)]
			: h('p', { class: 'muted', 'data-testid': 'fleet-invite-off' }, 'E-mail is not configured on this gateway, so it sends no invitations.'),
		invitationsTable(invitations.invitations, ctx, act),
		h('h3', {}, 'Accounts'),
		table({
			testid: 'fleet-users',
			columns: [{ label: 'User' }, { label: 'Tenant' }, { label: 'Operator' }, { label: 'Created from' },
				{ label: 'Last sign-in' }, { label: 'Roles' }, { label: 'Actions' }],
			rows: users.map((u) => [
				h('span', {}, u.name ? [u.name, h('br')] : null, h('span', { class: 'mono' }, u.email),
					ctx.me && ctx.me.user_id === u.id ? h('span', { class: 'muted' }, ' (you)') : null),
				platform.has(u.tenant_id) ? h('span', {}, u.tenant_slug, ' ', h('span', { class: 'badge muted' }, 'operators')) : u.tenant_slug,
				u.is_operator ? h('span', { class: 'badge on' }, 'operator') : h('span', { class: 'muted' }, '—'),
				h('span', {}, u.created_from.replace('_', ' '), u.created_by ? h('span', { class: 'muted' }, ` by ${u.created_by}`) : null),
				timeEl(u.last_login_at),
				rolesCell(u, ctx, act),
				actionsCell(u, tenants, ctx, act)]),
			rowAttrs: (i) => ({
				'data-testid': 'fleet-user-row', 'data-user-id': users[i].id, 'data-email': users[i].email,
				'data-operator': String(users[i].is_operator), 'data-created-from': users[i].created_from,
				'data-tenant': users[i].tenant_slug,
			}),
			empty: 'No users.',
		}));
}
