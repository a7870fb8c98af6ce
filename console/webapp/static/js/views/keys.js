// API keys: the cluster's keys, a form that issues one (its plaintext is
// shown once, with a copy button) and revocation with an inline
// confirmation. Admins only.

import { get, post, del } from '../api.js';
import { h, add, clear, timeEl, table } from '../dom.js';

const SCOPES = [
	['produce', 'Produce', 'push messages'],
	['consume', 'Consume', 'pop and acknowledge'],
	['read', 'Read', 'list queues and messages'],
	['admin', 'Admin', 'configure and delete queues'],
];

async function copyText(input) {
	const text = input.value;
	if (navigator.clipboard && window.isSecureContext) {
		try {
			await navigator.clipboard.writeText(text);
			return true;
		} catch {
			// fall through to the selection copy
		}
	}
	input.focus();
	input.select();
	try {
		return document.execCommand('copy');
	} catch {
		return false;
	}
}

function expired(k) {
	return k.expires_at && Date.parse(k.expires_at) <= Date.now();
}

export async function render(root, ctx) {
	const reveal = h('div', { 'data-testid': 'key-reveal-slot' });
	const list = h('div', {}, h('p', { class: 'loading' }, 'Loading keys…'));

	const nameInput = h('input', { id: 'key-name', name: 'name', type: 'text', required: true, maxlength: 200, autocomplete: 'off', 'data-testid': 'key-name' });
	const boxes = SCOPES.map(([scope, label, hint]) => h('label', { class: 'check', title: hint },
		h('input', { type: 'checkbox', name: 'scopes', value: scope, checked: scope === 'read', 'data-testid': `key-scope-${scope}` }),
		label));
	const submit = h('button', { type: 'submit', class: 'button', 'data-testid': 'key-create' }, 'Create key');
	const form = h('form', { class: 'inline', 'aria-labelledby': 'keys-create-h', 'data-testid': 'key-form' },
		h('div', { class: 'field' }, h('label', { for: 'key-name' }, 'Name'), nameInput),
		h('fieldset', {}, h('legend', {}, 'Scopes'), boxes),
		submit);

	form.addEventListener('submit', async (e) => {
		e.preventDefault();
		const name = nameInput.value.trim();
		const scopes = boxes.map((l) => l.querySelector('input')).filter((i) => i.checked).map((i) => i.value);
		if (!name) { ctx.notify('Give the key a name.', { error: true }); nameInput.focus(); return; }
		if (scopes.length === 0) { ctx.notify('Choose at least one scope.', { error: true }); return; }
		submit.disabled = true;
		try {
			const created = await post('/api/console/keys', { name, scopes });
			showReveal(created, name);
			form.reset();
			await loadList();
			ctx.notify(`Key “${name}” created.`);
		} catch (err) {
			ctx.fail(err);
		} finally {
			submit.disabled = false;
		}
	});

	function showReveal(created, name) {
		const plaintext = created.key ?? created.plaintext ?? created.secret ?? '';
		const input = h('input', {
			id: 'new-key-value', type: 'text', class: 'secret', readonly: true, value: plaintext,
			'data-testid': 'new-key-value', 'aria-describedby': 'new-key-help', spellcheck: 'false',
		});
		const status = h('span', { class: 'muted', role: 'status', 'data-testid': 'copy-status' });
		const copy = h('button', {
			type: 'button', class: 'button', 'data-testid': 'copy-key',
			onClick: async () => {
				status.textContent = (await copyText(input)) ? 'Copied.' : 'Select the key and copy it by hand.';
			},
		}, 'Copy');
		const panel = h('section', { class: 'panel reveal', 'aria-labelledby': 'new-key-h', 'data-testid': 'key-reveal', 'data-key-id': created.id },
			h('h2', { id: 'new-key-h' }, `New key “${name}”`),
			h('p', { id: 'new-key-help' }, 'Copy this key now: it is shown only once and cannot be shown again.'),
			h('div', { class: 'secret-row' },
				h('label', { for: 'new-key-value', class: 'visually-hidden' }, 'New API key'),
				input, copy,
				h('button', { type: 'button', class: 'button secondary', 'data-testid': 'key-reveal-done', onClick: () => clear(reveal) }, 'Done'),
				status));
		clear(reveal).append(panel);
		input.focus();
		input.select();
	}

	async function revoke(key, row) {
		try {
			await del(`/api/console/keys/${encodeURIComponent(key.id)}`);
			ctx.notify(`Key “${key.name}” revoked.`);
			const shown = reveal.querySelector('[data-key-id]');
			if (shown && shown.dataset.keyId === key.id) clear(reveal);
			await loadList();
		} catch (err) {
			ctx.fail(err);
			row.restore();
		}
	}

	function actions(key) {
		const cell = h('div', { class: 'actions' });
		if (key.revoked_at) return cell;
		const start = h('button', {
			type: 'button', class: 'button danger secondary small', 'data-testid': 'key-revoke',
			'aria-label': `Revoke key ${key.name}`,
		}, 'Revoke');
		const restore = () => { clear(cell).append(start); start.focus(); };
		start.addEventListener('click', () => {
			const yes = h('button', {
				type: 'button', class: 'button danger small', 'data-testid': 'key-revoke-confirm',
				onClick: () => { yes.disabled = true; revoke(key, { restore }); },
			}, 'Revoke');
			const no = h('button', { type: 'button', class: 'button secondary small', 'data-testid': 'key-revoke-cancel', onClick: restore }, 'Cancel');
			clear(cell).append(h('span', { class: 'confirm', role: 'group', 'aria-label': 'Confirm revocation' },
				h('span', {}, `Revoke “${key.name}”? Clients using it are refused at once.`), yes, no));
			no.focus();
		});
		cell.append(start);
		return cell;
	}

	async function loadList() {
		const data = await get('/api/console/keys');
		const keys = Array.isArray(data) ? data : (data && (data.keys || data.items)) || [];
		clear(list).append(table({
			testid: 'keys-table',
			caption: 'Keys of this cluster',
			columns: [{ label: 'Name' }, { label: 'Scopes' }, { label: 'Created' }, { label: 'Last used' }, { label: 'Status' }, { label: 'Actions' }],
			rows: keys.map((k) => [
				h('span', { 'data-testid': 'key-name-cell' }, k.name, h('br'), h('small', { class: 'muted mono' }, k.id)),
				(k.scopes || []).join(', '),
				timeEl(k.created_at),
				timeEl(k.last_used_at),
				k.revoked_at
					? [h('span', { class: 'badge revoked' }, 'revoked'), h('br'), h('small', { class: 'muted' }, timeEl(k.revoked_at))]
					: expired(k) ? h('span', { class: 'badge warn' }, 'expired') : h('span', { class: 'badge active' }, 'active'),
				actions(k),
			]),
			rowAttrs: (i) => ({
				'data-testid': 'key-row', 'data-key-id': keys[i].id, 'data-key-name': keys[i].name,
				'data-revoked': keys[i].revoked_at ? 'true' : 'false', class: keys[i].revoked_at ? 'revoked' : null,
			}),
			empty: 'No keys yet.',
		}));
	}

	add(root, 
		h('h1', {}, 'API keys'),
		reveal,
		h('section', { class: 'panel', 'aria-labelledby': 'keys-create-h' },
			h('h2', { id: 'keys-create-h' }, 'Create a key'),
			form),
		h('section', { class: 'panel', 'aria-labelledby': 'keys-list-h' },
			h('h2', { id: 'keys-list-h', class: 'visually-hidden' }, 'Keys'),
			list));
	await loadList();
}
