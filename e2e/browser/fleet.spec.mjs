// The operators' console on the operator host, in a real browser (Debian's
// headless Chromium driven by playwright-core), on a fleet's first day: a
// fresh database with the platform tenant and one operator, no cell and no
// cluster. A plain Node script like console.spec.mjs: one line per step, a
// screenshot of each, exit 1 on the first failure.
//
// e2e/browser_test.go (TestBrowserFleetFirstDay) starts the gateway and
// runs it with:
//
//   QG_OPS_URL       the operator host's origin, e.g. http://ops.example.test:8080
//   QG_GATEWAY_ADDR  where it really listens, e.g. 127.0.0.1:8080 (no DNS)
//   QG_OPERATOR_EMAIL, QG_OPERATOR_PASSWORD  the operator `user create --operator` made
//   QG_PHASE         first-day (default: the fleet-only console of an empty
//                    fleet) or users (managing users from the fleet view)
//   QG_TENANT, QG_CLUSTER  (users) a customer's tenant and its cluster, which
//                    has an admin already
//   QG_NEW_USER, QG_NEW_OPERATOR  (users) addresses of the users to create
//   QG_INVITEE, QG_WITHDRAWN_INVITEE  (users) addresses to invite to the
//                    cluster by e-mail (the second invitation is revoked)
//   QG_OUTPUT_DIR    screenshots, in a folder per phase (default test-output/fleet
//                    beside this file)
//   QG_CHROMIUM      browser executable (default /usr/bin/chromium)

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const env = (name, fallback) => {
	const v = process.env[name];
	if (v === undefined || v === '') {
		if (fallback === undefined) throw new Error(`environment variable ${name} is required`);
		return fallback;
	}
	return v;
};

const opsURL = new URL(env('QG_OPS_URL'));
const origin = opsURL.origin;
const [gwHost] = env('QG_GATEWAY_ADDR').split(':');
const operatorEmail = env('QG_OPERATOR_EMAIL');
const operatorPassword = env('QG_OPERATOR_PASSWORD');
const chromiumPath = env('QG_CHROMIUM', '/usr/bin/chromium');
const phase = env('QG_PHASE', 'first-day');
const outDir = path.join(path.resolve(env('QG_OUTPUT_DIR', path.join(here, 'test-output', 'fleet'))), phase);

const byTestId = (id) => `[data-testid="${id}"]`;
let page = null;
let shot = 0;
let currentStep = 'setup';

class StepFailure extends Error {}

function log(line) { process.stdout.write(`${line}\n`); }

function check(cond, message) {
	if (!cond) throw new StepFailure(message);
}

async function step(name, fn) {
	currentStep = name;
	const t0 = Date.now();
	try {
		await fn();
	} catch (err) {
		log(`FAIL [${name}] ${err instanceof StepFailure ? err.message : (err && err.stack) || err}`);
		try {
			await page.screenshot({ path: path.join(outDir, `${String(++shot).padStart(2, '0')}-FAILED-${name}.png`), fullPage: true });
		} catch { /* the page may be gone */ }
		throw new StepFailure(`step ${name} failed`);
	}
	await page.screenshot({ path: path.join(outDir, `${String(++shot).padStart(2, '0')}-${name}.png`), fullPage: true });
	log(`ok   ${name} (${Date.now() - t0} ms)`);
}

// visibleTabs are the console's tabs the page shows.
function visibleTabs() {
	return page.$$eval('.tabs a', (as) => as.filter((a) => !a.hidden).map((a) => a.dataset.view));
}

// signIn signs in from the console's address and waits for the app; it
// returns the boot error's text ("" when the console opened).
async function signInAs(who, secret) {
	await page.goto(`${origin}/console/`);
	check(new URL(page.url()).pathname === '/auth/login', `without a session /console/ should lead to the sign-in page, got ${page.url()}`);
	await page.fill('form input[name="email"]', who);
	await page.fill('form input[name="password"]', secret);
	await Promise.all([
		page.waitForURL((u) => u.pathname.startsWith('/console'), { timeout: 15_000 }),
		page.click('form button[type="submit"]'),
	]);
	await page.waitForSelector(`body[data-ready="true"], ${byTestId('boot-error')}`);
	const bootError = await page.$(byTestId('boot-error'));
	return bootError ? (await bootError.textContent()).trim() : '';
}

async function signIn() {
	const bootError = await signInAs(operatorEmail, operatorPassword);
	check(!bootError, `the console did not open for the operator: ${bootError}`);
}

const userRow = (email) => `${byTestId('fleet-user-row')}[data-email="${email}"]`;

// runUsers manages people from the fleet view, as nothing but the console:
// create a customer's user with a role, change and remove the role, create
// an operator and withdraw the bit; the operator's own bit cannot be
// withdrawn from here.
async function runUsers() {
	const tenant = env('QG_TENANT');
	const cluster = env('QG_CLUSTER');
	const newUser = env('QG_NEW_USER');
	const newOperator = env('QG_NEW_OPERATOR');
	await step('users-open-fleet', async () => {
		await signIn();
		await page.click(byTestId('nav-fleet'));
		await page.waitForSelector(`${byTestId('fleet-users')} ${userRow(operatorEmail)}`);
		const own = `${userRow(operatorEmail)} ${byTestId('fleet-user-operator-toggle')}`;
		check(await page.isDisabled(own), 'the operator may withdraw their own bit from the console');
	});
	await step('users-create-customer', async () => {
		await page.fill(byTestId('fleet-user-email'), newUser);
		await page.fill(byTestId('fleet-user-name'), 'Ada Customer');
		await page.selectOption(byTestId('fleet-user-tenant'), tenant);
		await page.selectOption(byTestId('fleet-user-cluster'), { label: cluster });
		await page.selectOption(byTestId('fleet-user-role'), 'viewer');
		await page.fill(byTestId('fleet-user-password'), 'a customer password 1');
		await page.click(byTestId('fleet-user-create'));
		const chip = `${userRow(newUser)} ${byTestId('fleet-user-role-chip')}[data-cluster="${cluster}"][data-role="viewer"]`;
		await page.waitForSelector(chip);
		check(await page.getAttribute(userRow(newUser), 'data-created-from') === 'operator', 'the new user is not shown as created by an operator');
		check(await page.getAttribute(userRow(newUser), 'data-tenant') === tenant, `the new user is not in tenant ${tenant}`);
		log(`RESULT customer_id=${await page.getAttribute(userRow(newUser), 'data-user-id')}`);
	});
	await step('users-set-role', async () => {
		await page.selectOption(`${userRow(newUser)} ${byTestId('fleet-user-grant-cluster')}`, { label: cluster });
		await page.selectOption(`${userRow(newUser)} ${byTestId('fleet-user-grant-role')}`, 'admin');
		await page.click(`${userRow(newUser)} ${byTestId('fleet-user-grant')}`);
		await page.waitForSelector(`${userRow(newUser)} ${byTestId('fleet-user-role-chip')}[data-cluster="${cluster}"][data-role="admin"]`);
	});
	await step('users-remove-role', async () => {
		await page.click(`${userRow(newUser)} ${byTestId('fleet-user-role-revoke')}[data-cluster="${cluster}"]`);
		await page.waitForFunction((sel) => !document.querySelector(sel),
			`${userRow(newUser)} ${byTestId('fleet-user-role-chip')}`);
	});
	const invitee = env('QG_INVITEE');
	const withdrawn = env('QG_WITHDRAWN_INVITEE');
	const invitationRow = (email) => `${byTestId('fleet-invitation-row')}[data-email="${email}"]`;
	const invite = async (email, role) => {
		await page.fill(byTestId('fleet-invite-email'), email);
		await page.selectOption(byTestId('fleet-invite-cluster'), { label: `${tenant} / ${cluster}` });
		await page.selectOption(byTestId('fleet-invite-role'), role);
		await page.click(byTestId('fleet-invite-send'));
		await page.waitForSelector(`${invitationRow(email)}[data-cluster="${cluster}"][data-role="${role}"]`);
	};
	await step('users-invite', async () => {
		check(!await page.$(byTestId('fleet-invite-off')), 'the fleet says e-mail is off on a gateway that has it');
		await invite(invitee, 'producer');
		await invite(withdrawn, 'admin');
		check(!await page.$(userRow(invitee)), 'an invitation made an account before it was accepted');
	});
	await step('users-revoke-invitation', async () => {
		await page.click(`${invitationRow(withdrawn)} ${byTestId('fleet-invitation-revoke')}`);
		await page.waitForFunction((sel) => !document.querySelector(sel), invitationRow(withdrawn));
		check(await page.$(invitationRow(invitee)), 'revoking one invitation took another away');
	});
	await step('users-create-operator', async () => {
		await page.fill(byTestId('fleet-user-email'), newOperator);
		await page.selectOption(byTestId('fleet-user-tenant'), 'platform');
		await page.check(byTestId('fleet-user-operator'));
		await page.click(byTestId('fleet-user-create'));
		await page.waitForSelector(`${userRow(newOperator)}[data-operator="true"][data-tenant="platform"]`);
		log(`RESULT operator_id=${await page.getAttribute(userRow(newOperator), 'data-user-id')}`);
	});
	await step('users-withdraw-operator', async () => {
		await page.click(`${userRow(newOperator)} ${byTestId('fleet-user-operator-toggle')}`);
		await page.waitForSelector(`${userRow(newOperator)}[data-operator="false"]`);
	});
	// The customer's user, whose only role was removed, is told why the
	// console has nothing to open, not sent to a fleet it may not see.
	await step('user-without-cluster', async () => {
		await Promise.all([page.waitForURL((u) => u.pathname === '/auth/login'), page.click(byTestId('logout'))]);
		const bootError = await signInAs(newUser, 'a customer password 1');
		check(bootError !== '', 'the console opened for a user with no role on any cluster');
		check(await page.isVisible(byTestId('boot-no-cluster')), `a user without a cluster is not told why: ${bootError}`);
		check(!(await page.isVisible(`${byTestId('nav-fleet')}:not([hidden])`)), 'a customer\'s user is shown the Fleet tab');
	});
}

async function run() {
	if (phase === 'users') {
		await runUsers();
		return;
	}
	await step('sign-in-on-operator-host', signIn);

	await step('fleet-only-console', async () => {
		await page.waitForSelector(`${byTestId('view-fleet')} ${byTestId('fleet-body')}[data-loaded]`);
		check(new URL(page.url()).pathname === '/console/fleet', `the fleet-only console should be at /console/fleet, is at ${page.url()}`);
		const tabs = await visibleTabs();
		check(tabs.length === 1 && tabs[0] === 'fleet', `the fleet-only console should show the Fleet tab alone, shows ${JSON.stringify(tabs)}`);
		check((await page.textContent(byTestId('user-email'))).includes(operatorEmail), 'the top bar does not name the operator');
	});

	await step('empty-states-say-what-next', async () => {
		const noCells = await page.textContent(byTestId('fleet-no-cells'));
		check(/caddy queen cell add/.test(noCells), `the empty cells table should give the command that adds a cell, says ${JSON.stringify(noCells)}`);
		const platform = `${byTestId('fleet-tenant-row')}[data-tenant="platform"]`;
		check(await page.getAttribute(platform, 'data-platform') === 'true', 'the platform tenant is not listed as the operators\' own');
		const next = await page.textContent(byTestId('fleet-next-step'));
		for (const cmd of ['caddy queen cell add', 'caddy queen tenant create', 'caddy queen cluster create', 'caddy queen user grant']) {
			check(next.includes(cmd), `the next steps of a fleet without clusters do not name ${cmd}: ${JSON.stringify(next)}`);
		}
		check((await page.$$(byTestId('fleet-cluster-row'))).length === 0, 'a fleet without clusters shows cluster rows');
	});

	await step('cluster-views-lead-to-the-fleet', async () => {
		await page.goto(`${origin}/console/overview`);
		await page.waitForSelector(`${byTestId('view-fleet')} ${byTestId('fleet-body')}[data-loaded]`);
		check(new URL(page.url()).pathname === '/console/fleet', `/console/overview of the fleet-only console should show the fleet, is at ${page.url()}`);
	});
}

async function main() {
	fs.rmSync(outDir, { recursive: true, force: true });
	fs.mkdirSync(outDir, { recursive: true });
	const { chromium } = await import('playwright-core');
	const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'queengate-chromium-'));
	const args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
		'--disable-background-networking', '--disable-component-update', '--disable-sync'];
	if (opsURL.hostname !== gwHost) args.push(`--host-resolver-rules=MAP ${opsURL.hostname} ${gwHost}`);
	const context = await chromium.launchPersistentContext(profile, {
		executablePath: chromiumPath, headless: true, args, viewport: { width: 1280, height: 860 }, timeout: 60_000,
	});
	const problems = [];
	try {
		page = context.pages()[0] || await context.newPage();
		page.setDefaultTimeout(15_000);
		page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
		page.on('request', (r) => {
			const u = new URL(r.url());
			if (!['data:', 'blob:'].includes(u.protocol) && u.origin !== origin) problems.push(`request to another origin: ${r.url()}`);
		});
		await run();
		currentStep = 'page';
		check(problems.length === 0, `the page misbehaved:\n  ${problems.join('\n  ')}`);
	} finally {
		await context.close().catch(() => {});
		fs.rmSync(profile, { recursive: true, force: true });
	}
}

try {
	await main();
	log('PASS fleet.spec');
} catch (err) {
	if (!(err instanceof StepFailure)) log(`FAIL [${currentStep}] ${(err && err.stack) || err}`);
	else if (currentStep === 'page') log(`FAIL [page] ${err.message}`);
	log(`screenshots: ${outDir}`);
	process.exitCode = 1;
}
