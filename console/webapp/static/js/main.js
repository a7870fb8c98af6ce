// The console's entry point: loads the cluster overview (which also tells
// whether there is a session and the caller's role), then routes
// /console/<view> on the client.

import { get, ApiError, goToLogin, actAs } from './api.js';
import { h, clear } from './dom.js';
import * as overview from './views/overview.js';
import * as connect from './views/connect.js';
import * as usage from './views/usage.js';
import * as queues from './views/queues.js';
import * as keys from './views/keys.js';
import * as members from './views/members.js';
import * as requests from './views/requests.js';
import * as fleet from './views/fleet.js';
import * as account from './views/account.js';

const views = { overview, connect, usage, requests, queues, keys, members, fleet, account };
const adminViews = new Set(['keys', 'members']);
// The fleet view is for live operators; the server refuses its routes to
// everyone else whatever the app shows.
const operatorViews = new Set(['fleet']);

const main = document.getElementById('main');
const notice = document.querySelector('[data-testid="notice"]');
let cleanup = null;
let routeSeq = 0;
let noticeTimer = null;

const ctx = {
	overview: null,
	me: null,
	// fleetOnly: a live operator with no cluster to act on (a fleet's first
	// day) gets the fleet view alone; there is no cluster overview to load.
	fleetOnly: false,
	get isAdmin() { return Boolean(this.overview && this.overview.role === 'admin'); },
	// isOperator: the fleet answers the caller (a live operator with the
	// operator API on, as /auth/me says; the overview's operator flag when
	// /auth/me could not be read).
	get isOperator() {
		if (this.me && this.me.principal === 'user') return Boolean(this.me.fleet_view);
		return Boolean(this.overview && this.overview.operator);
	},
	// notify shows a short message in the live region (read by screen readers).
	notify(message, { error = false } = {}) {
		clearTimeout(noticeTimer);
		notice.textContent = message;
		notice.classList.toggle('error', error);
		notice.hidden = false;
		notice.setAttribute('role', error ? 'alert' : 'status');
		noticeTimer = setTimeout(() => { notice.hidden = true; }, error ? 12000 : 6000);
	},
	fail(err) {
		if (err instanceof ApiError && err.status === 401) return;
		ctx.notify(err.message || String(err), { error: true });
	},
	async refreshOverview() {
		ctx.overview = await get('/api/console/overview');
		showIdentity();
		return ctx.overview;
	},
};

function showIdentity() {
	if (ctx.fleetOnly) {
		showFleetIdentity();
		return;
	}
	const o = ctx.overview;
	const slug = document.querySelector('[data-testid="cluster-slug"]');
	if (slug) slug.textContent = o.slug || '';
	const badge = document.querySelector('[data-testid="cluster-status"]');
	badge.textContent = (o.status || 'unknown').replace('_', ' ');
	badge.className = `badge ${o.status || ''}`;
	badge.hidden = false;
	document.title = `${o.slug} · Queen console`;
	for (const a of document.querySelectorAll('.tabs a[data-admin]')) a.hidden = !ctx.isAdmin;
	for (const a of document.querySelectorAll('.tabs a[data-operator]')) a.hidden = !ctx.isOperator;
	const email = ctx.me && (ctx.me.email || (ctx.me.user && ctx.me.user.email));
	document.querySelector('[data-testid="user-email"]').textContent = email ? `${email} · ${o.role}` : (o.role || '');
}

// showFleetIdentity is the top bar of the fleet-only console: no cluster,
// the fleet tab alone.
function showFleetIdentity() {
	const slug = document.querySelector('[data-testid="cluster-slug"]');
	if (slug) slug.textContent = 'Fleet';
	document.querySelector('[data-testid="cluster-status"]').hidden = true;
	document.title = 'Fleet · Queen console';
	for (const a of document.querySelectorAll('.tabs a')) a.hidden = !operatorViews.has(a.dataset.view);
	const me = ctx.me;
	document.querySelector('[data-testid="user-email"]').textContent = `${me.email || ''} · operator`;
}

function viewFromPath(pathname) {
	const rest = pathname.replace(/^\/console\/?/, '').split('/')[0];
	return rest || 'overview';
}

async function route() {
	let name = viewFromPath(location.pathname);
	const home = ctx.fleetOnly ? 'fleet' : 'overview';
	if (!views[name] || (adminViews.has(name) && !ctx.isAdmin) || (operatorViews.has(name) && !ctx.isOperator)
		|| (ctx.fleetOnly && !operatorViews.has(name))) {
		name = home;
		history.replaceState(null, '', `/console/${home}`);
	}
	for (const a of document.querySelectorAll('.tabs a')) {
		if (a.dataset.view === name) a.setAttribute('aria-current', 'page');
		else a.removeAttribute('aria-current');
	}
	if (cleanup) { cleanup(); cleanup = null; }
	clear(main);
	main.dataset.view = name;
	const container = h('div', { 'data-testid': `view-${name}` });
	main.append(container);
	const mine = ++routeSeq;
	try {
		const done = await views[name].render(container, ctx);
		if (typeof done === 'function') {
			// A view left before it finished loading stops at once.
			if (mine === routeSeq) cleanup = done;
			else done();
		}
	} catch (err) {
		if (mine !== routeSeq) return;
		ctx.fail(err);
		container.append(h('p', { class: 'error-text' }, err.message || String(err)));
	}
}

export function navigate(path) {
	if (path !== location.pathname) history.pushState(null, '', path);
	route().then(() => main.focus({ preventScroll: true }));
}
ctx.navigate = navigate;

document.querySelector('.tabs').addEventListener('click', (e) => {
	const a = e.target.closest('a[data-view]');
	if (!a || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
	e.preventDefault();
	navigate(a.getAttribute('href'));
});
window.addEventListener('popstate', () => route());

document.getElementById('logout').addEventListener('click', async (e) => {
	e.currentTarget.disabled = true;
	try {
		await fetch('/auth/logout', {
			method: 'POST', credentials: 'same-origin',
			headers: { 'X-Requested-With': 'queengate', Accept: 'application/json' },
		});
	} catch {
		// Logging out always ends at the sign-in page.
	}
	location.assign('/auth/login');
});

// On a shared host (/auth/me names no acting cluster) the console works on
// one of the caller's clusters, chosen in a picker and kept for the tab.
function chooseCluster(me) {
	if (!me || me.acting_cluster || !Array.isArray(me.clusters) || me.clusters.length === 0) return;
	const wanted = new URLSearchParams(location.search).get('cluster') || sessionStorage.getItem('queengate.cluster');
	const pick = me.clusters.find((c) => c.slug === wanted || c.id === wanted) || me.clusters[0];
	actAs(me.act_cluster_header || 'x-queen-act-cluster', pick.slug);
	const select = h('select', { id: 'cluster-picker', class: 'compact', 'data-testid': 'cluster-picker' },
		me.clusters.map((c) => h('option', { value: c.slug, selected: c.slug === pick.slug }, `${c.slug} (${c.role})`)));
	select.addEventListener('change', () => {
		sessionStorage.setItem('queengate.cluster', select.value);
		location.assign('/console/overview');
	});
	document.querySelector('[data-testid="cluster-slug"]').replaceWith(
		h('label', { for: 'cluster-picker', class: 'visually-hidden' }, 'Cluster'), select);
}

// fleetOnly: the caller may read the fleet and has no cluster to open
// (none in the fleet yet, on a host that names none). An operator with
// clusters opens one of them as before, with the fleet one tab away.
function fleetOnly(me) {
	return Boolean(me && me.principal === 'user' && me.fleet_view && !me.acting_cluster
		&& Array.isArray(me.clusters) && me.clusters.length === 0);
}

async function boot() {
	try {
		ctx.me = await get('/auth/me').catch((err) => {
			if (err instanceof ApiError && err.status === 401) throw err;
			return null;
		});
		ctx.fleetOnly = fleetOnly(ctx.me);
		if (!ctx.fleetOnly) {
			chooseCluster(ctx.me);
			ctx.overview = await get('/api/console/overview');
		}
	} catch (err) {
		if (err instanceof ApiError && err.status === 401) return; // on the way to the sign-in page
		const noCluster = ctx.me && ctx.me.principal === 'user' && !ctx.me.acting_cluster
			&& Array.isArray(ctx.me.clusters) && ctx.me.clusters.length === 0;
		clear(main).append(h('div', { class: 'panel', 'data-testid': 'boot-error' },
			h('h1', {}, 'The console cannot open'),
			h('p', { class: 'error-text' }, err.message),
			noCluster ? h('p', { 'data-testid': 'boot-no-cluster' },
				'Your account has no role on any cluster yet. Ask an admin of your cluster to add you, or an operator to create a cluster for your tenant.') : null,
			err.status === 403 && !noCluster ? h('p', {}, 'Sign in with an account that is a member of this cluster.') : null,
			h('p', {}, h('a', { href: '/auth/login?next=/console/', onClick: (ev) => { ev.preventDefault(); goToLogin(); } }, 'Sign in again'))));
		return;
	}
	showIdentity();
	document.body.dataset.ready = 'true';
	await route();
}

boot();
