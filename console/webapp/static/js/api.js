// The console's only way to the server: same-origin fetches of
// /api/console/* and /auth/* with the session cookie. Every request says
// X-Requested-With: queengate, which the server requires of
// cookie-authenticated writes (with the browser's Origin) against CSRF.

export class ApiError extends Error {
	constructor(status, code, message) {
		super(message);
		this.status = status;
		this.code = code;
	}
}

let redirecting = false;

// On a shared host the console names its cluster in a header (its name
// comes from /auth/me); on a cluster's own host it sends none.
const acting = { header: null, cluster: null };

export function actAs(header, cluster) {
	acting.header = header;
	acting.cluster = cluster;
}

export function loginURL() {
	const next = location.pathname.startsWith('/console') ? location.pathname : '/console/';
	return '/auth/login?next=' + encodeURIComponent(next);
}

// goToLogin leaves the app for the sign-in page; it is where every 401 ends.
export function goToLogin() {
	if (redirecting) return;
	redirecting = true;
	location.assign(loginURL());
}

export async function request(method, path, body) {
	const headers = { Accept: 'application/json', 'X-Requested-With': 'queengate' };
	if (acting.header && acting.cluster && path.startsWith('/api/')) headers[acting.header] = acting.cluster;
	const init = { method, headers, credentials: 'same-origin', cache: 'no-store', redirect: 'manual' };
	if (body !== undefined) {
		headers['Content-Type'] = 'application/json';
		init.body = JSON.stringify(body);
	}
	let res;
	try {
		res = await fetch(path, init);
	} catch (err) {
		throw new ApiError(0, 'network', `The gateway did not answer (${err.message}).`);
	}
	const text = await res.text();
	let data = null;
	if (text) {
		try { data = JSON.parse(text); } catch { data = null; }
	}
	if (res.status === 401) {
		goToLogin();
		throw new ApiError(401, 'unauthorized', 'Your session has ended; signing in again…');
	}
	if (!res.ok) {
		const message = (data && data.error) || `The gateway answered ${res.status}.`;
		throw new ApiError(res.status, data && data.code, message);
	}
	return data;
}

export const get = (path) => request('GET', path);
export const post = (path, body) => request('POST', path, body === undefined ? {} : body);
export const patch = (path, body) => request('PATCH', path, body);
export const put = (path, body) => request('PUT', path, body);
export const del = (path, body) => request('DELETE', path, body);
