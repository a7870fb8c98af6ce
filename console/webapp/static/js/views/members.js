// Members: who holds a role on this cluster, adding a member by email
// with a role (an address without an account is invited by e-mail when
// the gateway sends e-mail), changing a member's role, removing a member
// (with an inline confirmation), and the pending invitations, which can
// be revoked. Admins only; the server keeps the last admin.

import { get, post, patch, del } from '../api.js';
import { h, add, clear, timeEl, table } from '../dom.js';

export const ROLES = [
	['admin', 'Admin'],
	['producer', 'Producer'],
	['consumer', 'Consumer'],
	['viewer', 'Viewer'],
];

function roleSelect(attrs, current) {
	return h('select', attrs, ROLES.map(([value, label]) =>
		h('option', { value, selected: value === current }, label)));
}

export async function render(root, ctx) {
	const list = h('div', {}, h('p', { class: 'loading' }, 'Loading members…'));
	const pending = h('div', {}, h('p', { class: 'loading' }, 'Loading invitations…'));
	const myEmail = () => (ctx.me && (ctx.me.email || (ctx.me.user && ctx.me.user.email)) || '').toLowerCase();

	const email = h('input', { id: 'member-email', name: 'email', type: 'email', required: true, autocomplete: 'off', 'data-testid': 'member-email', 'aria-describedby': 'member-help' });
	const role = roleSelect({ id: 'member-role', name: 'role', 'data-testid': 'member-role' }, 'viewer');
	const submit = h('button', { type: 'submit', class: 'button', 'data-testid': 'member-add' }, 'Add member');
	const form = h('form', { class: 'inline', 'data-testid': 'member-form' },
		h('div', { class: 'field' }, h('label', { for: 'member-email' }, 'Email'), email),
		h('div', { class: 'field' }, h('label', { for: 'member-role' }, 'Role'), role),
		submit);

	form.addEventListener('submit', async (e) => {
		e.preventDefault();
		const address = email.value.trim().toLowerCase();
		if (!address.includes('@')) { ctx.notify('Enter an email address.', { error: true }); email.focus(); return; }
		submit.disabled = true;
		try {
			const res = await post('/api/console/members', { email: address, role: role.value });
			ctx.notify(res && res.invited
				? `An invitation to join as ${role.value} was sent to ${address}.`
				: res && res.created
					? `${address} added as ${role.value}: they sign in with Google or GitHub using that address, or an operator sets a password.`
					: `${address} is now ${role.value} on this cluster.`);
			form.reset();
			await Promise.all([loadList(), loadPending()]);
		} catch (err) {
			ctx.fail(err);
		} finally {
			submit.disabled = false;
		}
	});

	async function afterOwnChange() {
		// The caller changed their own role: the admin views may be gone.
		await ctx.refreshOverview();
		if (!ctx.isAdmin) ctx.navigate('/console/overview');
	}

	async function changeRole(m, select) {
		const previous = m.role;
		select.disabled = true;
		try {
			await patch('/api/console/members', { email: m.email, role: select.value });
			m.role = select.value;
			select.closest('tr').dataset.role = m.role;
			ctx.notify(`${m.email} is now ${select.value}.`);
			if (m.email.toLowerCase() === myEmail()) await afterOwnChange();
		} catch (err) {
			select.value = previous;
			ctx.fail(err);
		} finally {
			select.disabled = false;
		}
	}

	function removeCell(m) {
		const cell = h('div', { class: 'actions' });
		const start = h('button', {
			type: 'button', class: 'button danger secondary small', 'data-testid': 'member-remove',
			'aria-label': `Remove ${m.email}`,
		}, 'Remove');
		const restore = () => { clear(cell).append(start); start.focus(); };
		start.addEventListener('click', () => {
			const yes = h('button', {
				type: 'button', class: 'button danger small', 'data-testid': 'member-remove-confirm',
				onClick: async () => {
					yes.disabled = true;
					try {
						await del('/api/console/members', { email: m.email });
						ctx.notify(`${m.email} removed from this cluster.`);
						if (m.email.toLowerCase() === myEmail()) { await afterOwnChange(); return; }
						await loadList();
					} catch (err) {
						ctx.fail(err);
						restore();
					}
				},
			}, 'Remove');
			const no = h('button', { type: 'button', class: 'button secondary small', 'data-testid': 'member-remove-cancel', onClick: restore }, 'Cancel');
			clear(cell).append(h('span', { class: 'confirm', role: 'group', 'aria-label': 'Confirm removal' },
				h('span', {}, `Remove ${m.email} from this cluster?`), yes, no));
			no.focus();
		});
		cell.append(start);
		return cell;
	}

	async function loadList() {
		const data = await get('/api/console/members');
		const members = Array.isArray(data) ? data : (data && (data.members || data.items)) || [];
		clear(list).append(table({
			testid: 'members-table',
			caption: 'Members of this cluster',
			columns: [{ label: 'Member' }, { label: 'Role' }, { label: 'Member since' }, { label: 'Last sign-in' }, { label: 'Actions' }],
			rows: members.map((m, i) => {
				const select = roleSelect({ class: 'compact', id: `member-role-${i}`, 'aria-label': `Role of ${m.email}`, 'data-testid': 'member-role-select' }, m.role);
				select.addEventListener('change', () => changeRole(m, select));
				return [
					h('span', {},
						m.name ? [m.name, h('br')] : null,
						h('span', { class: 'mono' }, m.email),
						m.email.toLowerCase() === myEmail() ? h('span', { class: 'muted' }, ' (you)') : null,
						m.can_login === false ? [' ', h('span', { class: 'badge warn', title: 'No password and no linked Google or GitHub sign-in yet' }, 'invited')] : null),
					select,
					timeEl(m.granted_at),
					timeEl(m.last_login_at),
					removeCell(m),
				];
			}),
			rowAttrs: (i) => ({ 'data-testid': 'member-row', 'data-email': members[i].email, 'data-role': members[i].role }),
			empty: 'No members.',
		}));
	}

	async function loadPending() {
		const data = await get('/api/console/invitations');
		const items = Array.isArray(data) ? data : [];
		clear(pending).append(table({
			testid: 'invitations-table',
			caption: 'Pending invitations',
			columns: [{ label: 'Address' }, { label: 'Role' }, { label: 'Invited by' }, { label: 'Expires' }, { label: 'Actions' }],
			rows: items.map((inv) => [
				h('span', { class: 'mono' }, inv.email),
				inv.role,
				inv.invited_by || '',
				timeEl(inv.expires_at),
				h('button', {
					type: 'button', class: 'button danger secondary small', 'data-testid': 'invitation-revoke',
					'aria-label': `Revoke the invitation of ${inv.email}`,
					onClick: async (e) => {
						e.currentTarget.disabled = true;
						try {
							await del('/api/console/invitations/' + encodeURIComponent(inv.id));
							ctx.notify(`The invitation of ${inv.email} was revoked.`);
						} catch (err) {
							ctx.fail(err);
						}
						await loadPending();
					},
				}, 'Revoke'),
			]),
			rowAttrs: (i) => ({ 'data-testid': 'invitation-row', 'data-email': items[i].email }),
			empty: 'No pending invitations.',
		}));
	}

	add(root, 
		h('h1', {}, 'Members'),
		h('section', { class: 'panel', 'aria-labelledby': 'members-add-h' },
			h('h2', { id: 'members-add-h' }, 'Add a member'),
			form,
			h('p', { id: 'member-help', class: 'muted' }, 'Add someone who has an account in this cluster’s organisation, or change a member’s role. An address without an account is sent an invitation by e-mail when this gateway sends e-mail; otherwise an operator creates the account.')),
		h('section', { class: 'panel', 'aria-labelledby': 'members-list-h' },
			h('h2', { id: 'members-list-h', class: 'visually-hidden' }, 'Members'),
			list),
		h('section', { class: 'panel', 'aria-labelledby': 'members-pending-h' },
			h('h2', { id: 'members-pending-h', class: 'visually-hidden' }, 'Pending invitations'),
			pending));
	await Promise.all([loadList(), loadPending()]);
}
