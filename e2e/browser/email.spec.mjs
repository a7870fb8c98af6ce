// Acceptance test of the console's e-mail flows in a real browser
// (Debian's headless Chromium driven by playwright-core), against a real
// SMTP server (Mailpit), whose HTTP API this script reads the messages
// from: a cluster admin invites an address no account has, the invitee
// follows the e-mailed link, chooses a password and lands signed in; signs
// out, asks for a reset link, follows it, sets a new password and signs in
// with it; then changes the password in the console and signs in with that
// one. Plain Node, one line per step, a screenshot of each, exit 1 on the
// first failure.
//
// e2e/browser_email_test.go starts the gateway and Mailpit and runs it:
//
//   QG_CONSOLE_URL   the cluster's own origin (also the gateway's public_url)
//   QG_GATEWAY_ADDR  where that host really listens (no DNS)
//   QG_EMAIL, QG_PASSWORD  an admin of the cluster
//   QG_INVITEE       an address no account has
//   QG_MAILPIT_API   Mailpit's HTTP API, e.g. http://127.0.0.1:8025
//   QG_OUTPUT_DIR    screenshots (default test-output-email/ beside this file)
//   QG_CHROMIUM      browser executable (default /usr/bin/chromium)

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
class StepFailure extends Error {}
let currentStep = 'setup';
const log = (line) => process.stdout.write(`${line}\n`);
function fail(message) {
	log(`FAIL [${currentStep}] ${message}`);
	process.exitCode = 1;
	throw new StepFailure(message);
}
const check = (cond, message) => { if (!cond) fail(message); };
const env = (name, fallback) => {
	const v = process.env[name];
	if (v === undefined || v === '') {
		if (fallback === undefined) fail(`environment variable ${name} is required`);
		return fallback;
	}
	return v;
};

const consoleURL = new URL(env('QG_CONSOLE_URL'));
const origin = consoleURL.origin;
const [gwHost] = env('QG_GATEWAY_ADDR').split(':');
const adminEmail = env('QG_EMAIL');
const adminPassword = env('QG_PASSWORD');
const invitee = env('QG_INVITEE');
const mailpit = env('QG_MAILPIT_API').replace(/\/$/, '');
const outDir = path.resolve(env('QG_OUTPUT_DIR', path.join(here, 'test-output-email')));
const chromiumPath = env('QG_CHROMIUM', '/usr/bin/chromium');
const byTestId = (id) => `[data-testid="${id}"]`;

let page = null;
let shot = 0;
const started = Date.now();

async function step(name, fn) {
	currentStep = name;
	const t0 = Date.now();
	try {
		await fn();
	} catch (err) {
		if (!(err instanceof StepFailure)) log(`FAIL [${name}] ${err && err.stack ? err.stack : err}`);
		process.exitCode = 1;
		try { await page.screenshot({ path: path.join(outDir, `FAILED-${name}.png`), fullPage: true }); } catch { /* gone */ }
		throw new StepFailure(String(err && err.message));
	}
	shot++;
	const file = path.join(outDir, `${String(shot).padStart(2, '0')}-${name}.png`);
	await page.screenshot({ path: file, fullPage: true });
	log(`ok   ${name} (${Date.now() - t0} ms) → ${path.basename(file)}`);
}

// messagesTo reads what Mailpit received for an address, newest first.
async function messagesTo(address) {
	const r = await fetch(`${mailpit}/api/v1/search?query=${encodeURIComponent(`to:"${address}"`)}`);
	check(r.ok, `Mailpit search answered ${r.status}`);
	const list = (await r.json()).messages || [];
	return Promise.all(list.map(async (m) => (await fetch(`${mailpit}/api/v1/message/${encodeURIComponent(m.ID)}`)).json()));
}

// linkInMessage waits for the n-th message to an address and returns the
// one link to this gateway it carries (in both bodies).
async function linkInMessage(address, n, pathname) {
	const deadline = Date.now() + 20_000;
	for (;;) {
		const got = await messagesTo(address);
		if (got.length >= n) {
			const m = got[0];
			const re = new RegExp(`${origin.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}${pathname}\\?token=[A-Za-z0-9_-]{43}`);
			const link = (m.Text || '').match(re);
			check(link, `message "${m.Subject}" has no ${pathname} link to ${origin}:\n${m.Text}`);
			check((m.HTML || '').includes(link[0]), `the HTML body of "${m.Subject}" does not carry the text's link`);
			return { link: link[0], subject: m.Subject };
		}
		check(Date.now() < deadline, `no message ${n} to ${address} within 20 s`);
		await new Promise((r) => setTimeout(r, 200));
	}
}

async function waitForApp() {
	await page.waitForURL((u) => u.pathname.startsWith('/console'), { timeout: 15_000 });
	await page.waitForSelector(`body[data-ready="true"], ${byTestId('boot-error')}`);
	check(!(await page.$(byTestId('boot-error'))), 'the console could not open');
}

async function signIn(who, secret) {
	await page.fill(byTestId('login-email'), who);
	await page.fill(byTestId('login-password'), secret);
	await Promise.all([waitForApp(), page.click(byTestId('login-submit'))]);
	const shown = (await page.textContent(byTestId('user-email'))) || '';
	check(shown.includes(who), `signed in, the console shows "${shown}", not ${who}`);
}

async function signOut() {
	await Promise.all([
		page.waitForURL((u) => u.pathname === '/auth/login', { timeout: 15_000 }),
		page.click(byTestId('logout')),
	]);
}

async function run() {
	const firstPassword = 'invited horse battery staple';
	const resetPassword = 'reset horse battery staple';
	const changedPassword = 'changed horse battery staple';

	await step('admin-signs-in', async () => {
		await page.goto(`${origin}/console/`);
		check(new URL(page.url()).pathname === '/auth/login', `without a session /console/ led to ${page.url()}`);
		await signIn(adminEmail, adminPassword);
	});

	await step('admin-invites', async () => {
		await page.click(byTestId('nav-members'));
		await page.waitForSelector(byTestId('member-form'));
		await page.fill(byTestId('member-email'), invitee);
		await page.selectOption(byTestId('member-role'), 'producer');
		await page.click(byTestId('member-add'));
		await page.waitForSelector(`${byTestId('invitation-row')}[data-email="${invitee}"]`);
		const notice = (await page.textContent(byTestId('notice'))) || '';
		check(notice.includes('invitation') && notice.includes(invitee), `after inviting, the console says "${notice}"`);
	});

	let invitation;
	await step('invitation-arrives', async () => {
		invitation = await linkInMessage(invitee, 1, '/auth/invitation');
		check(invitation.subject.includes(consoleURL.hostname.split('.')[0]), `invitation subject "${invitation.subject}" does not name the cluster`);
		await signOut();
	});

	await step('invitee-accepts', async () => {
		await page.goto(invitation.link);
		const intro = (await page.textContent(byTestId('link-intro'))) || '';
		check(intro.includes(invitee) && intro.includes('producer'), `the invitation page says "${intro}"`);
		await page.fill(byTestId('new-password'), firstPassword);
		await Promise.all([waitForApp(), page.click(byTestId('set-password-submit'))]);
		const shown = (await page.textContent(byTestId('user-email'))) || '';
		check(shown.includes(invitee) && shown.includes('producer'), `after accepting, the console shows "${shown}"`);
		log('RESULT invitee_signed_in=1');
	});

	await step('invitation-spent', async () => {
		await signOut();
		const r = await page.goto(invitation.link);
		check(r.status() === 400, `the accepted invitation's link answered ${r.status()}, want 400`);
	});

	await step('forgot-password', async () => {
		await page.goto(`${origin}/auth/login`);
		await Promise.all([page.waitForURL((u) => u.pathname === '/auth/forgot'), page.click(byTestId('forgot-link'))]);
		await page.fill(byTestId('forgot-email'), invitee);
		await page.click(byTestId('forgot-submit'));
		await page.waitForSelector(byTestId('page-notice'));
	});

	let reset;
	await step('reset-arrives', async () => {
		reset = await linkInMessage(invitee, 2, '/auth/reset');
	});

	await step('reset-password', async () => {
		await page.goto(reset.link);
		await page.fill(byTestId('new-password'), resetPassword);
		await Promise.all([
			page.waitForURL((u) => u.pathname === '/auth/login' && u.searchParams.get('done') === 'reset'),
			page.click(byTestId('set-password-submit')),
		]);
		await page.waitForSelector(byTestId('page-notice'));
	});

	await step('old-password-refused', async () => {
		await page.fill(byTestId('login-email'), invitee);
		await page.fill(byTestId('login-password'), firstPassword);
		await page.click(byTestId('login-submit'));
		await page.waitForSelector(byTestId('login-error'));
	});

	await step('sign-in-after-reset', async () => {
		await signIn(invitee, resetPassword);
		log('RESULT reset_signed_in=1');
	});

	await step('change-password', async () => {
		await page.click(byTestId('nav-account'));
		await page.waitForSelector(byTestId('password-form'));
		await page.fill(byTestId('current-password'), resetPassword);
		await page.fill(byTestId('new-password'), changedPassword);
		await page.fill(byTestId('new-password-again'), changedPassword);
		await page.click(byTestId('password-change'));
		await page.waitForFunction((sel) => (document.querySelector(sel)?.textContent || '').includes('password was changed'), byTestId('notice'));
		// The session the change handed out still works.
		const me = await page.evaluate(async () => (await fetch('/auth/me', { credentials: 'same-origin' })).status);
		check(me === 200, `after the change, /auth/me answered ${me}`);
	});

	await step('sign-in-after-change', async () => {
		await signOut();
		await page.goto(`${origin}/console/`);
		check(new URL(page.url()).pathname === '/auth/login', `signed out, /console/ led to ${page.url()}`);
		await signIn(invitee, changedPassword);
		log('RESULT changed_signed_in=1');
	});
}

async function main() {
	fs.rmSync(outDir, { recursive: true, force: true });
	fs.mkdirSync(outDir, { recursive: true });
	log(`email.spec: ${origin} (via ${gwHost}), mail at ${mailpit}; screenshots in ${outDir}`);
	const { chromium } = await import('playwright-core');
	const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'queengate-chromium-'));
	const args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
		'--disable-background-networking', '--disable-component-update', '--disable-sync'];
	if (consoleURL.hostname !== gwHost) args.push(`--host-resolver-rules=MAP ${consoleURL.hostname} ${gwHost}`);
	const context = await chromium.launchPersistentContext(profile, {
		executablePath: chromiumPath, headless: true, args, viewport: { width: 1280, height: 860 }, timeout: 60_000,
	});
	const problems = [];
	try {
		page = context.pages()[0] || await context.newPage();
		page.setDefaultTimeout(15_000);
		page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
		page.on('console', (msg) => {
			if (msg.type() === 'error' && /Content Security Policy|Refused to/i.test(msg.text())) problems.push(`console: ${msg.text()}`);
		});
		page.on('request', (req) => {
			const u = new URL(req.url());
			if (!['data:', 'blob:'].includes(u.protocol) && u.origin !== origin) problems.push(`request to another origin: ${req.url()}`);
		});
		await run();
		check(problems.length === 0, `the page misbehaved:\n  ${problems.join('\n  ')}`);
	} finally {
		await context.close().catch(() => {});
		fs.rmSync(profile, { recursive: true, force: true });
	}
}

try {
	await main();
	log(`PASS email.spec in ${Date.now() - started} ms`);
} catch (err) {
	if (!(err instanceof StepFailure)) log(`FAIL [${currentStep}] ${err && err.stack ? err.stack : err}`);
	process.exitCode = 1;
}
