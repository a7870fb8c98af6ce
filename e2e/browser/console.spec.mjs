// Acceptance test of the cluster console in a real browser (Debian's
// headless Chromium driven by playwright-core). A plain Node script: it
// runs its steps in order, prints one line per step, writes a screenshot
// of each, and exits 1 on the first failure with the reason.
//
// e2e/browser_test.go starts the gateway, provisions the cluster and the
// user, pushes QG_PUSHED messages, runs this script and reads back the
// lines it prints that start with "RESULT ". Run by hand with the same
// environment against any gateway:
//
//   QG_CONSOLE_URL   the cluster's own origin, e.g. http://acme.eu1.example.test:8080
//   QG_GATEWAY_ADDR  where that host really listens, e.g. 127.0.0.1:8080 (the
//                    browser and this script resolve the host to it; no DNS)
//   QG_EMAIL, QG_PASSWORD  an admin of the cluster
//   QG_PUSHED        push messages the cluster's usage must show in the last hour
//   QG_PUSHED_QUEUE  the queue those messages went to, listed in the queues view (default orders)
//   QG_QUEUE         queue the script pushes to with the key it creates (default browser-e2e)
//   QG_OUTPUT_DIR    screenshots (default test-output/ beside this file)
//   QG_CHROMIUM      browser executable (default /usr/bin/chromium)
//   QG_USAGE_WAIT_MS how long usage may take to show the pushes (default 100000;
//                    the console counts the open minute too, so this is a ceiling)
//   QG_READ_KEY_ID, QG_FORBIDDEN  a key whose QG_FORBIDDEN pushes were refused
//                    (403): the requests view must count them against it
//   QG_OPERATOR_EMAIL, QG_OPERATOR_PASSWORD  a live operator with no role on
//                    the cluster, who signs in after the admin for the fleet view
//   QG_CLUSTER_KEY   a produce key of the cluster (pushes while suspended)
//   QG_MEMBER        a user of the cluster's tenant with no role on it, whom
//                    the admin adds (an address without an account is refused)
//   QG_CELL, QG_CELL_USED, QG_CELL_CAPACITY  the cluster's cell as the fleet
//                    view must show it
//   QG_OIDC_ISSUER, QG_OIDC_LABEL  optional: an OpenID Connect provider the
//                    gateway offers under that label, whose login step signs in
//                    QG_EMAIL; the script signs in through it last

import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const env = (name, fallback) => {
	const v = process.env[name];
	if (v === undefined || v === '') {
		if (fallback === undefined) fail('setup', `environment variable ${name} is required`);
		return fallback;
	}
	return v;
};

const consoleURL = new URL(env('QG_CONSOLE_URL'));
const origin = consoleURL.origin;
const [gwHost, gwPortText] = env('QG_GATEWAY_ADDR', `127.0.0.1:${consoleURL.port || 80}`).split(':');
const gwPort = Number(gwPortText);
const email = env('QG_EMAIL');
const password = env('QG_PASSWORD');
const pushed = Number(env('QG_PUSHED'));
const queue = env('QG_QUEUE', 'browser-e2e');
const pushedQueue = env('QG_PUSHED_QUEUE', 'orders');
const outDir = path.resolve(env('QG_OUTPUT_DIR', path.join(here, 'test-output')));
const chromiumPath = env('QG_CHROMIUM', '/usr/bin/chromium');
const usageWait = Number(env('QG_USAGE_WAIT_MS', '100000'));
const readKeyId = env('QG_READ_KEY_ID');
const forbidden = Number(env('QG_FORBIDDEN'));
const operatorEmail = env('QG_OPERATOR_EMAIL');
const operatorPassword = env('QG_OPERATOR_PASSWORD');
const clusterKey = env('QG_CLUSTER_KEY');
const member = env('QG_MEMBER');
const cellSlug = env('QG_CELL');
const cellUsed = env('QG_CELL_USED');
const cellCapacity = env('QG_CELL_CAPACITY');
const oidcIssuer = env('QG_OIDC_ISSUER', '');
const oidcLabel = env('QG_OIDC_LABEL', '');
// The one other origin the browser may reach: the provider it signs in at.
const oidcOrigin = oidcIssuer ? new URL(oidcIssuer).origin : null;

const started = Date.now();
const timings = {};
let page = null;
let shot = 0;
let currentStep = 'setup';

function log(line) {
	process.stdout.write(`${line}\n`);
}

function fail(step, message) {
	log(`FAIL [${step}] ${message}`);
	process.exitCode = 1;
	throw new StepFailure(message);
}

class StepFailure extends Error {}

async function screenshot(name) {
	if (!page) return null;
	shot++;
	const file = path.join(outDir, `${String(shot).padStart(2, '0')}-${name}.png`);
	await page.screenshot({ path: file, fullPage: true });
	return file;
}

// step runs one named step, times it and shoots the page after it.
async function step(name, fn) {
	currentStep = name;
	const t0 = Date.now();
	try {
		await fn();
	} catch (err) {
		if (!(err instanceof StepFailure)) log(`FAIL [${name}] ${err && err.stack ? err.stack : err}`);
		process.exitCode = 1;
		try { await screenshot(`FAILED-${name}`); } catch { /* the page may be gone */ }
		throw new StepFailure(String(err && err.message));
	}
	timings[name] = Date.now() - t0;
	const file = await screenshot(name);
	log(`ok   ${name} (${timings[name]} ms)${file ? ` → ${path.basename(file)}` : ''}`);
}

function check(cond, message) {
	if (!cond) fail(currentStep, message);
}

// gateway sends one request to the gateway's address with the cluster's
// Host, as a client on the network would; no DNS involved.
function gateway(method, pathname, { headers = {}, body } = {}) {
	return new Promise((resolve, reject) => {
		const data = body === undefined ? undefined : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
		const req = http.request({
			host: gwHost, port: gwPort, method, path: pathname, timeout: 10_000,
			headers: {
				host: consoleURL.host,
				accept: 'application/json',
				...(data ? { 'content-type': 'application/json', 'content-length': data.length } : {}),
				...headers,
			},
		}, (res) => {
			let text = '';
			res.setEncoding('utf8');
			res.on('data', (c) => { text += c; });
			res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
		});
		req.on('timeout', () => req.destroy(new Error(`${method} ${pathname}: no answer in 10 s`)));
		req.on('error', reject);
		if (data) req.write(data);
		req.end();
	});
}

function pushWith(key, n, to = queue) {
	return gateway('POST', '/api/v1/push', {
		headers: { authorization: `Bearer ${key}` },
		body: { items: [{ queue: to, payload: { from: 'console.spec.mjs', n } }] },
	});
}

// signIn fills the sign-in page the browser is on and waits for the app.
async function signIn(who, secret) {
	const field = (id, name) => page.locator(`${byTestId(id)}, form input[name="${name}"]`).first();
	await field('login-email', 'email').fill(who);
	await field('login-password', 'password').fill(secret);
	await Promise.all([
		page.waitForURL((u) => u.pathname.startsWith('/console'), { timeout: 15_000 }),
		page.locator(`${byTestId('login-submit')}, form button[type="submit"]`).first().click(),
	]);
	check(new URL(page.url()).pathname.startsWith('/console'), `signing in led to ${page.url()}, not back to the console`);
	try {
		await page.waitForSelector(`body[data-ready="true"], ${byTestId('boot-error')}`);
	} catch {
		fail(currentStep, `${page.url()} is not the console app (page title ${JSON.stringify(await page.title())}): it did not start within 15 s`);
	}
	if (await page.$(byTestId('boot-error'))) {
		fail(currentStep, `the console could not open: ${(await page.textContent(byTestId('boot-error'))).trim()}`);
	}
}

// inPage fetches from the page, with its cookie, as the app would.
function inPage(method, pathname) {
	return page.evaluate(async ([m, p]) => {
		const r = await fetch(p, { method: m, credentials: 'same-origin', headers: { 'X-Requested-With': 'queengate', Accept: 'application/json' } });
		return { status: r.status, text: await r.text() };
	}, [method, pathname]);
}

const byTestId = (id) => `[data-testid="${id}"]`;

async function main() {
	fs.rmSync(outDir, { recursive: true, force: true });
	fs.mkdirSync(outDir, { recursive: true });
	log(`console.spec: ${origin} (via ${gwHost}:${gwPort}) as ${email}; screenshots in ${outDir}`);

	let chromium;
	try {
		({ chromium } = await import('playwright-core'));
	} catch {
		fail('setup', `playwright-core is not installed: run npm ci --prefix ${path.relative(process.cwd(), here) || '.'}`);
	}
	check(fs.existsSync(chromiumPath), `no browser at ${chromiumPath}: apt-get install -y chromium`);

	const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'queengate-chromium-'));
	const args = [
		'--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
		'--disable-background-networking', '--disable-component-update', '--disable-sync',
	];
	if (consoleURL.hostname !== gwHost) args.push(`--host-resolver-rules=MAP ${consoleURL.hostname} ${gwHost}`);
	const context = await chromium.launchPersistentContext(profile, {
		executablePath: chromiumPath,
		headless: true,
		args,
		viewport: { width: 1280, height: 860 },
		timeout: 60_000,
	});
	const problems = [];
	try {
		page = context.pages()[0] || await context.newPage();
		page.setDefaultTimeout(15_000);
		page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
		page.on('console', (msg) => {
			const text = msg.text();
			if (msg.type() === 'error' && /Content Security Policy|Refused to/i.test(text)) problems.push(`console: ${text}`);
		});
		page.on('request', (req) => {
			const u = new URL(req.url());
			if (!['data:', 'blob:'].includes(u.protocol) && u.origin !== origin && u.origin !== oidcOrigin) problems.push(`request to another origin: ${req.url()}`);
		});
		await run(context);
		check(problems.length === 0, `the page misbehaved:\n  ${problems.join('\n  ')}`);
	} finally {
		await context.close().catch(() => {});
		fs.rmSync(profile, { recursive: true, force: true });
	}
}

async function run(context) {
	await step('login-page', async () => {
		await page.goto(`${origin}/console/`);
		const u = new URL(page.url());
		check(u.pathname === '/auth/login', `without a session /console/ should lead to /auth/login, got ${page.url()}`);
		check(u.searchParams.get('next') && u.searchParams.get('next').startsWith('/console'), `the sign-in page should come back to the console (next=${u.searchParams.get('next')})`);
	});

	await step('signed-in-overview', async () => {
		const field = (id, name) => page.locator(`${byTestId(id)}, form input[name="${name}"]`).first();
		await field('login-email', 'email').fill(email);
		await field('login-password', 'password').fill(password);
		await Promise.all([
			page.waitForURL((u) => u.pathname.startsWith('/console'), { timeout: 15_000 }),
			page.locator(`${byTestId('login-submit')}, form button[type="submit"]`).first().click(),
		]);
		check(new URL(page.url()).pathname.startsWith('/console'), `signing in led to ${page.url()}, not back to the console`);
		try {
			await page.waitForSelector(`body[data-ready="true"], ${byTestId('boot-error')}`);
		} catch {
			fail(currentStep, `${page.url()} is not the console app (page title ${JSON.stringify(await page.title())}): it did not start within 15 s`);
		}
		if (await page.$(byTestId('boot-error'))) {
			fail(currentStep, `the console could not open: ${(await page.textContent(byTestId('boot-error'))).trim()}`);
		}
		await page.waitForSelector(byTestId('overview-slug'));
		const slug = consoleURL.hostname.split('.')[0];
		const shown = (await page.textContent(byTestId('overview-slug'))).trim();
		check(shown === slug, `the overview names cluster ${JSON.stringify(shown)}, want ${JSON.stringify(slug)}`);
		check((await page.textContent(byTestId('overview-role'))).trim() === 'admin', 'the overview should show the role admin');
		check(await page.isVisible(byTestId('nav-keys')), 'an admin should see the API keys tab');
		const cookies = await context.cookies(origin);
		check(cookies.some((c) => c.name === 'queen_session' && c.httpOnly), 'no HttpOnly queen_session cookie after signing in');
		check(!(await page.$(byTestId('overview-gateway'))), 'a cluster admin who is not an operator should not see which gateway serves the cell');
	});

	await step('connect-page', async () => {
		await page.click(byTestId('nav-connect'));
		await page.waitForSelector(byTestId('connect-url'));
		const url = (await page.textContent(byTestId('connect-url'))).trim();
		check(url === origin, `the Connect page gives the SDK ${JSON.stringify(url)}, want the cluster's own address ${origin}`);
		const js = await page.textContent(`${byTestId('snippet-js')} code`);
		check(js.includes(`url: '${origin}'`) && js.includes('bearerToken: process.env.QUEEN_API_KEY'),
			`the JavaScript snippet does not pass url ${origin} and bearerToken:\n${js}`);
		for (const lang of ['python', 'go', 'sh']) {
			const code = await page.textContent(`${byTestId(`snippet-${lang}`)} code`);
			check(code.includes(origin) && code.includes('QUEEN_API_KEY'), `the ${lang} snippet does not use ${origin} and QUEEN_API_KEY`);
		}
		const limits = await page.$$eval(`${byTestId('connect-limits')} tbody tr`, (rows) => rows.map((r) => r.cells[0].textContent));
		check(limits.includes('Requests per second') && limits.includes('Request burst') && limits.length === 7,
			`the Connect page's limits are ${JSON.stringify(limits)}`);
	});

	await step('usage-shows-pushes', async () => {
		await page.click(byTestId('nav-usage'));
		await page.click(byTestId('usage-window-1h'));
		const deadline = Date.now() + usageWait;
		let seen = -1;
		for (;;) {
			await page.waitForSelector(`svg${byTestId('usage-chart')}[data-window="1h"]`);
			seen = Number(await page.getAttribute(byTestId('usage-total-push'), 'data-value'));
			if (seen === pushed) break;
			check(seen < pushed, `the console shows ${seen} pushed messages, more than the ${pushed} pushed`);
			check(Date.now() < deadline, `after ${usageWait} ms the console shows ${seen} pushed messages, want ${pushed}`);
			await page.waitForTimeout(2_000);
			await page.click(byTestId('usage-refresh'));
			await page.waitForFunction((sel) => !document.querySelector(sel).disabled, byTestId('usage-refresh'));
		}
		timings.usageVisibleAfterMs = Date.now() - started;
		const text = (await page.textContent(byTestId('usage-total-push'))).replace(/,/g, '').trim();
		check(text === String(pushed), `the push total reads ${JSON.stringify(text)}, want ${pushed}`);
		const bars = await page.$$eval(`${byTestId('usage-chart')} rect[data-series="push"]`,
			(rects) => rects.map((r) => Number(r.dataset.value)));
		const drawn = bars.reduce((a, b) => a + b, 0);
		check(bars.length > 0 && drawn === pushed, `the chart draws ${drawn} pushed messages in ${bars.length} bars, want ${pushed}`);
		log(`     usage: ${pushed} pushed messages shown as text and in ${bars.length} bar(s)`);
		// What is billed has one name, and here it is the pushes.
		const billable = Number(await page.getAttribute(byTestId('usage-total-billable'), 'data-value'));
		const billableLabel = (await page.textContent('#usage-total-billable-label')).trim();
		check(billable === pushed && billableLabel === 'Billable messages',
			`the usage view shows ${billable} under ${JSON.stringify(billableLabel)}, want ${pushed} billable messages`);
		// Beside usage, the refusals of the same window: the read-only
		// key's pushes, refused with 403.
		await page.waitForSelector(`svg${byTestId('usage-refusals-chart')}[data-window="1h"]`);
		const refusedText = Number(await page.getAttribute(byTestId('usage-refused'), 'data-value'));
		const refusedBars = await page.$$eval(`${byTestId('usage-refusals-chart')} rect[data-series="403"]`,
			(rects) => rects.map((r) => Number(r.dataset.value)));
		check(refusedText === forbidden && refusedBars.reduce((a, b) => a + b, 0) === forbidden,
			`beside usage the console shows ${refusedText} refusals and draws ${refusedBars.reduce((a, b) => a + b, 0)} (403), want ${forbidden}`);
	});

	await step('requests-show-refusals', async () => {
		check(!(await page.isVisible(byTestId('nav-fleet'))), 'an admin who is not an operator should not see the Fleet tab');
		for (const [m, p] of [['GET', '/api/operator/cells'], ['GET', '/api/operator/tenants'], ['POST', '/api/operator/clusters/' + consoleURL.hostname.split('.')[0] + '/suspend']]) {
			const r = await inPage(m, p);
			check(r.status === 404 && JSON.parse(r.text).code === 'route_blocked', `${m} ${p} as a non-operator: ${r.status} ${r.text}, want 404 route_blocked`);
		}
		await page.click(byTestId('nav-requests'));
		const row = `${byTestId('requests-key-row')}[data-key-id="${readKeyId}"]`;
		await page.waitForSelector(row);
		const seen = Number(await page.getAttribute(row, 'data-forbidden'));
		check(seen === forbidden, `the requests view counts ${seen} refusals (403) of the read-only key, want ${forbidden}`);
		check(Number(await page.getAttribute(row, 'data-ok')) === 0, 'the read-only key has no served requests');
		const refused = Number(await page.getAttribute(byTestId('requests-total-403'), 'data-value'));
		check(refused >= forbidden, `the 403 total reads ${refused}, want at least ${forbidden}`);
		const bars = await page.$$eval(`${byTestId('requests-chart')} rect[data-series="403"]`, (rects) => rects.map((r) => Number(r.dataset.value)));
		check(bars.reduce((a, b) => a + b, 0) === refused, `the chart draws ${bars.reduce((a, b) => a + b, 0)} refusals (403), the total says ${refused}`);
		// One key's chart.
		await page.selectOption(byTestId('requests-key'), readKeyId);
		await page.waitForSelector(`svg${byTestId('requests-chart')}[data-key="${readKeyId}"]`);
		const own = await page.$$eval(`${byTestId('requests-chart')} rect`, (rects) => rects.map((r) => [r.dataset.series, Number(r.dataset.value)]));
		check(own.every(([series]) => series === '403') && own.reduce((a, [, v]) => a + v, 0) === forbidden,
			`the read-only key's chart draws ${JSON.stringify(own)}, want ${forbidden} refusals (403) only`);
		log(`RESULT requests_forbidden=${seen}`);
	});

	await step('queues-listed', async () => {
		await page.click(byTestId('nav-queues'));
		await page.waitForSelector(byTestId('queues-table'));
		const names = await page.$$eval(byTestId('queue-row'), (rows) => rows.map((r) => r.dataset.queue));
		check(names.includes(pushedQueue), `the queues view lists ${JSON.stringify(names)}, want ${pushedQueue} among them`);
		// A queue created by its first push has no namespace of its own (the
		// broker reports its name there): the column does not repeat it.
		const namespace = await page.$eval(`${byTestId('queue-row')}[data-queue="${pushedQueue}"]`, (r) => r.cells[1].textContent.trim());
		check(namespace === '—', `the queue ${pushedQueue} shows namespace / task ${JSON.stringify(namespace)}, want none`);
	});

	await step('members-managed', async () => {
		const other = member;
		const row = (who) => page.locator(`${byTestId('member-row')}[data-email="${who}"]`);
		await page.click(byTestId('nav-members'));
		await page.waitForSelector(byTestId('members-table'));
		check(await row(email).getAttribute('data-role') === 'admin', `the members list does not show ${email} as admin`);
		// An address without an account is refused, and the app says why.
		const stranger = `stranger-${Date.now()}@elsewhere.test`;
		await page.fill(byTestId('member-email'), stranger);
		await page.selectOption(byTestId('member-role'), 'viewer');
		await page.click(byTestId('member-add'));
		await page.waitForSelector(`${byTestId('notice')}.error`);
		const refusal = await page.textContent(byTestId('notice'));
		check(/operator/i.test(refusal), `adding an address without an account should be refused with a reason, the app says ${JSON.stringify(refusal)}`);
		check(await row(stranger).count() === 0, `${stranger} was added`);
		// Add a user of the tenant, change the role, and remove.
		await page.fill(byTestId('member-email'), other);
		await page.selectOption(byTestId('member-role'), 'viewer');
		await page.click(byTestId('member-add'));
		await row(other).waitFor();
		check(await row(other).getAttribute('data-role') === 'viewer', `${other} was not added as viewer`);
		await row(other).locator(byTestId('member-role-select')).selectOption('producer');
		await page.waitForSelector(`${byTestId('member-row')}[data-email="${other}"][data-role="producer"]`);
		// The last admin cannot demote themself: the app says why and keeps the role.
		await row(email).locator(byTestId('member-role-select')).selectOption('viewer');
		await page.waitForSelector(`${byTestId('notice')}.error`);
		const why = await page.textContent(byTestId('notice'));
		check(/last admin/i.test(why), `demoting the last admin should be refused with a reason, the app says ${JSON.stringify(why)}`);
		await page.waitForFunction((sel) => document.querySelector(sel).value === 'admin',
			`${byTestId('member-row')}[data-email="${email}"] ${byTestId('member-role-select')}`);
		await row(other).locator(byTestId('member-remove')).click();
		await row(other).locator(byTestId('member-remove-confirm')).click();
		await row(other).waitFor({ state: 'detached' });
		log(`     members: an address without an account refused; added ${other} as viewer, made producer, removed; last-admin demotion refused`);
	});

	let key = '';
	let keyId = '';
	await step('key-created', async () => {
		await page.click(byTestId('nav-keys'));
		await page.waitForSelector(byTestId('keys-table'));
		await page.fill(byTestId('key-name'), 'browser-e2e');
		await page.check(byTestId('key-scope-produce'));
		await page.uncheck(byTestId('key-scope-read'));
		await page.click(byTestId('key-create'));
		await page.waitForSelector(byTestId('new-key-value'));
		key = await page.inputValue(byTestId('new-key-value'));
		keyId = await page.getAttribute(byTestId('key-reveal'), 'data-key-id');
		check(/^qk_/.test(key), `the revealed key ${JSON.stringify(key)} does not look like an API key`);
		check(keyId, 'the reveal names no key id');
		await page.click(byTestId('copy-key'));
		await page.waitForFunction((sel) => document.querySelector(sel).textContent !== '', byTestId('copy-status'));
		const row = page.locator(`${byTestId('key-row')}[data-key-id="${keyId}"]`);
		check(await row.count() === 1, 'the new key is not in the list');
		check(await row.getAttribute('data-revoked') === 'false', 'the new key is listed as revoked');
		log(`RESULT key_id=${keyId}`);
	});

	await step('push-with-new-key', async () => {
		const r = await pushWith(key, 1);
		check(r.status === 200 || r.status === 201, `push with the new key: ${r.status} ${r.text}`);
		const items = JSON.parse(r.text);
		check(Array.isArray(items) && items[0] && ['queued', 'buffered'].includes(items[0].status), `push with the new key was not stored: ${r.text}`);
		log('RESULT pushed_with_key=1');
	});

	await step('key-revoked', async () => {
		const row = page.locator(`${byTestId('key-row')}[data-key-id="${keyId}"]`);
		await row.locator(byTestId('key-revoke')).click();
		await row.locator(byTestId('key-revoke-confirm')).waitFor();
		const answered = page.waitForResponse((res) => res.request().method() === 'DELETE' && res.url().includes(`/api/console/keys/${keyId}`));
		await row.locator(byTestId('key-revoke-confirm')).click();
		const res = await answered;
		const revokedAt = Date.now();
		check(res.status() === 200, `DELETE /api/console/keys/${keyId}: ${res.status()}`);
		let last;
		let attempts = 0;
		let accepted = 0;
		for (;;) {
			attempts++;
			last = await pushWith(key, 2);
			if (last.status === 401) break;
			if (last.status === 200 || last.status === 201) accepted++;
			check(Date.now() - revokedAt <= 1000, `a push with the revoked key still got ${last.status} ${Date.now() - revokedAt} ms after the revocation`);
			await new Promise((r) => setTimeout(r, 20));
		}
		timings.refusedAfterRevokeMs = Date.now() - revokedAt;
		check(timings.refusedAfterRevokeMs <= 1000, `the revoked key was refused only after ${timings.refusedAfterRevokeMs} ms`);
		const body = JSON.parse(last.text);
		check(body.code === 'unauthorized', `the refusal's code is ${JSON.stringify(body.code)}, want "unauthorized"`);
		await page.waitForSelector(`${byTestId('key-row')}[data-key-id="${keyId}"][data-revoked="true"]`);
		log(`     revoked key refused with 401 after ${timings.refusedAfterRevokeMs} ms (${attempts} push${attempts > 1 ? 'es' : ''})`);
		log(`RESULT refused_after_ms=${timings.refusedAfterRevokeMs}`);
		log(`RESULT accepted_after_revoke=${accepted}`);
	});

	let oldCookie = '';
	await step('logged-out', async () => {
		const cookies = await context.cookies(origin);
		const session = cookies.find((c) => c.name === 'queen_session');
		check(session, 'no session cookie before logging out');
		oldCookie = `${session.name}=${session.value}`;
		const before = await gateway('GET', '/api/console/overview', { headers: { cookie: oldCookie } });
		check(before.status === 200, `the saved cookie should work before logging out: ${before.status} ${before.text}`);
		await Promise.all([
			page.waitForURL((u) => u.pathname === '/auth/login'),
			page.click(byTestId('logout')),
		]);
		const after = await context.cookies(origin);
		check(!after.some((c) => c.name === 'queen_session' && c.value), 'the session cookie is still in the browser after logging out');
	});

	await step('old-cookie-refused', async () => {
		const r = await gateway('GET', '/api/console/overview', { headers: { cookie: oldCookie } });
		check(r.status === 401, `the console API answered ${r.status} to the old cookie, want 401: ${r.text}`);
		check(JSON.parse(r.text).code === 'unauthorized', `the refusal's code: ${r.text}`);
		// The browser, given the old cookie back, is sent to sign in again.
		await context.addCookies([{ name: 'queen_session', value: oldCookie.split('=').slice(1).join('='), url: origin }]);
		await page.goto(`${origin}/console/keys`);
		check(new URL(page.url()).pathname === '/auth/login', `with the old cookie /console/keys led to ${page.url()}, want /auth/login`);
		log('RESULT old_cookie_status=401');
	});

	const slug = consoleURL.hostname.split('.')[0];
	const clusterRow = `${byTestId('fleet-cluster-row')}[data-cluster="${slug}"]`;
	await step('operator-fleet', async () => {
		await page.goto(`${origin}/console/`);
		check(new URL(page.url()).pathname === '/auth/login', `signed out, /console/ led to ${page.url()}`);
		await signIn(operatorEmail, operatorPassword);
		await page.waitForSelector(`${byTestId('nav-fleet')}:not([hidden])`);
		await page.click(byTestId('nav-fleet'));
		const cell = `${byTestId('fleet-cell-row')}[data-cell="${cellSlug}"]`;
		await page.waitForSelector(cell);
		check(await page.getAttribute(cell, 'data-used') === cellUsed && await page.getAttribute(cell, 'data-capacity') === cellCapacity,
			`the fleet shows cell ${cellSlug} at ${await page.getAttribute(cell, 'data-used')}/${await page.getAttribute(cell, 'data-capacity')}, want ${cellUsed}/${cellCapacity}`);
		check(['scoped', 'unscoped', 'unknown'].includes(await page.getAttribute(cell, 'data-probed')), 'the cell shows no probed tenancy');
		await page.waitForSelector(clusterRow);
		check(await page.getAttribute(clusterRow, 'data-plan') === 'pro', 'the cluster is not shown on plan pro');
		check(Number(await page.getAttribute(clusterRow, 'data-msgs')) >= pushed, 'the cluster\'s month usage is below what was pushed');
		check(await page.isVisible(`${byTestId('fleet-plan-row')}[data-plan="dev"]`), 'the plans table does not list dev');
	});

	await step('operator-suspends-and-resumes', async () => {
		await page.click(`${clusterRow} ${byTestId('fleet-suspend')}`);
		await page.waitForSelector(`${clusterRow}[data-status="suspended"]`);
		const refused = await pushWith(clusterKey, 1, 'fleet-e2e');
		check(refused.status === 403 && JSON.parse(refused.text).code === 'cluster_suspended', `a push to the suspended cluster: ${refused.status} ${refused.text}`);
		log(`RESULT suspended_push_status=${refused.status}`);
		await page.click(`${clusterRow} ${byTestId('fleet-resume')}`);
		await page.waitForSelector(`${clusterRow}[data-status="active"]`);
		const deadline = Date.now() + 2000;
		let r;
		for (;;) {
			r = await pushWith(clusterKey, 2, 'fleet-e2e');
			if (r.status === 200 || r.status === 201 || Date.now() > deadline) break;
			await new Promise((res) => setTimeout(res, 50));
		}
		check(r.status === 200 || r.status === 201, `a push after resuming: ${r.status} ${r.text}`);
	});

	await step('operator-changes-plan', async () => {
		await page.selectOption(`${clusterRow} ${byTestId('fleet-plan')}`, 'dev');
		await page.waitForSelector(`${clusterRow}[data-plan="dev"]`);
	});

	await step('operator-issues-key', async () => {
		await page.click(`${clusterRow} ${byTestId('fleet-issue-key')}`);
		await page.waitForSelector(byTestId('fleet-new-key'));
		const issued = await page.inputValue(byTestId('fleet-new-key'));
		const id = await page.getAttribute(byTestId('fleet-key-reveal'), 'data-key-id');
		check(/^qk_/.test(issued) && id, `the fleet revealed ${JSON.stringify(issued)} (id ${id})`);
		const r = await pushWith(issued, 3, 'fleet-e2e');
		check(r.status === 200 || r.status === 201, `a push with the operator's key: ${r.status} ${r.text}`);
		log(`RESULT fleet_key_id=${id}`);
	});

	await step('operator-reads-requests', async () => {
		await page.click(`${clusterRow} ${byTestId('fleet-requests')}`);
		const row = `${byTestId('fleet-requests-panel')} ${byTestId('requests-key-row')}[data-key-id="${readKeyId}"]`;
		await page.waitForSelector(row);
		check(Number(await page.getAttribute(row, 'data-forbidden')) === forbidden, 'the operator\'s requests view does not count the read-only key\'s refusals');
	});

	if (!oidcIssuer) return;
	await step('oidc-sign-in', async () => {
		await context.clearCookies();
		await page.goto(`${origin}/console/`);
		check(new URL(page.url()).pathname === '/auth/login', `signed out, /console/ led to ${page.url()}`);
		const button = page.locator('a.provider', { hasText: oidcLabel });
		check(await button.count() === 1, `the sign-in page does not offer "${oidcLabel}"`);
		const href = await button.getAttribute('href');
		check(href.startsWith('/auth/oidc/'), `the "${oidcLabel}" button goes to ${href}`);
		const seen = [];
		const onRequest = (req) => { if (req.isNavigationRequest()) seen.push(new URL(req.url()).origin); };
		page.on('request', onRequest);
		await Promise.all([
			page.waitForURL((u) => u.origin === origin && u.pathname.startsWith('/console'), { timeout: 15_000 }),
			button.click(),
		]);
		page.off('request', onRequest);
		check(seen.includes(oidcOrigin), `the browser never went to the provider (navigations: ${seen.join(', ')})`);
		await page.waitForSelector(`body[data-ready="true"], ${byTestId('boot-error')}`);
		check(!(await page.$(byTestId('boot-error'))), 'the console could not open after the provider\'s sign-in');
		await page.waitForSelector(byTestId('overview-role'));
		check((await page.textContent(byTestId('overview-role'))).trim() === 'admin', 'signed in through the provider, the overview should show the role admin');
		const me = await inPage('GET', '/auth/me');
		const doc = JSON.parse(me.text);
		check(me.status === 200 && doc.email === email, `/auth/me after the provider's sign-in: ${me.status} ${me.text}`);
		log(`RESULT oidc_user_id=${doc.user_id}`);
	});
}

try {
	await main();
	log(`PASS console.spec: ${Object.keys(timings).filter((k) => !k.endsWith('Ms')).length} steps in ${Date.now() - started} ms; ` +
		`usage visible ${timings.usageVisibleAfterMs} ms after start, revoked key refused after ${timings.refusedAfterRevokeMs} ms`);
	log(`screenshots: ${outDir}`);
} catch (err) {
	if (!(err instanceof StepFailure)) log(`FAIL [${currentStep}] ${err && err.stack ? err.stack : err}`);
	log(`screenshots: ${outDir}`);
	process.exitCode = 1;
}
