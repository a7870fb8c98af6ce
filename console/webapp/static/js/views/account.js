// Account: the signed-in user's own password. Changing it needs the
// current one and ends every other session of the user; this one goes on
// with the fresh session cookie the answer sets.

import { post } from '../api.js';
import { h, add } from '../dom.js';

export async function render(root, ctx) {
	const current = h('input', { id: 'current-password', type: 'password', autocomplete: 'current-password', required: true, 'data-testid': 'current-password' });
	const next = h('input', { id: 'new-password', type: 'password', autocomplete: 'new-password', required: true, minlength: 12, maxlength: 128, 'data-testid': 'new-password' });
	const again = h('input', { id: 'new-password-again', type: 'password', autocomplete: 'new-password', required: true, minlength: 12, maxlength: 128, 'data-testid': 'new-password-again' });
	const submit = h('button', { type: 'submit', class: 'button', 'data-testid': 'password-change' }, 'Change password');
	const form = h('form', { 'data-testid': 'password-form' },
		h('div', { class: 'field' }, h('label', { for: 'current-password' }, 'Current password'), current),
		h('div', { class: 'field' }, h('label', { for: 'new-password' }, 'New password (12 to 128 characters)'), next),
		h('div', { class: 'field' }, h('label', { for: 'new-password-again' }, 'New password again'), again),
		submit);
	form.addEventListener('submit', async (e) => {
		e.preventDefault();
		if (next.value !== again.value) {
			ctx.notify('The two new passwords differ.', { error: true });
			again.focus();
			return;
		}
		submit.disabled = true;
		try {
			await post('/auth/password', { current_password: current.value, new_password: next.value });
			form.reset();
			ctx.notify('Your password was changed; every other session of your account has ended.');
		} catch (err) {
			ctx.fail(err);
		} finally {
			submit.disabled = false;
		}
	});
	add(root,
		h('h1', {}, 'Account'),
		h('section', { class: 'panel', 'aria-labelledby': 'account-password-h' },
			h('h2', { id: 'account-password-h' }, 'Change your password'),
			form,
			h('p', { class: 'muted' }, 'Forgot it? Sign out and use “Forgot your password?” on the sign-in page.')));
}
