package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/internal/testidp"
	"github.com/queengate/queengate/tenancy"
)

// The browser test's prerequisites, and the commands that install them
// (scripts/test, README's test command, runs both when they are missing).
const (
	chromiumInstall   = "apt-get install -y chromium"
	playwrightInstall = "npm ci --prefix e2e/browser"
)

// browserPrerequisites returns node, the Chromium executable and the
// folder of console.spec.mjs, or fails the test (never skips) naming the
// command that installs what is missing.
func browserPrerequisites(t *testing.T) (node, chromium, dir string) {
	t.Helper()
	dir, err := filepath.Abs("browser")
	if err != nil {
		t.Fatal(err)
	}
	chromium = os.Getenv("QG_CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("the browser test needs Debian's headless Chromium at %s: install it with `%s` (as root), or run the tests with scripts/test, which does", chromium, chromiumInstall)
	}
	node, err = exec.LookPath("node")
	if err != nil {
		t.Fatalf("the browser test needs Node.js (`node` on PATH) to run e2e/browser/console.spec.mjs: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		t.Fatalf("the browser test needs playwright-core in e2e/browser/node_modules: run `%s` in the repository root, or run the tests with scripts/test, which does", playwrightInstall)
	}
	return node, chromium, dir
}

// runBrowserSpec runs one script of e2e/browser in Node with the given
// QG_* environment, fails the test with its output when it fails, and
// returns the "RESULT name=value" lines it printed.
func runBrowserSpec(t *testing.T, script string, env ...string) map[string]string {
	t.Helper()
	node, chromium, dir := browserPrerequisites(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = dir
	screenshots := filepath.Join(dir, "test-output", strings.TrimSuffix(script, ".spec.mjs"))
	cmd.Env = append(append(os.Environ(), "QG_CHROMIUM="+chromium, "NO_COLOR=1", "QG_OUTPUT_DIR="+screenshots), env...)
	// On a time-out, let Playwright close its browser before Node goes.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	started := time.Now()
	output, err := cmd.CombinedOutput()
	took := time.Since(started).Round(time.Millisecond)
	if err != nil {
		t.Fatalf("%s failed after %v (%v); its output:\n%s\nscreenshots: %s", script, took, err, output, screenshots)
	}
	t.Logf("%s passed in %v; screenshots: %s\n%s", script, took, screenshots, output)
	results := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(output))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
			if k, v, ok := strings.Cut(rest, "="); ok {
				results[k] = v
			}
		}
	}
	return results
}

// TestBrowserConsole is the console's acceptance test in a real browser.
// Go starts a real gateway (Caddy, PostgreSQL, a fake broker) with
// sessions and the identity surface, provisions a cluster and an admin
// with a password, pushes pushedMsgs messages, and runs
// e2e/browser/console.spec.mjs in Node, which drives headless Chromium:
// sign in, see the pushes in the usage chart, create a key, push with it,
// revoke it and see the next push refused with 401 within a second, log
// out, and see the old cookie refused; see a read-only key's refused
// pushes (403) counted against it in the requests view, and the operator
// routes refused to the admin, who is no operator. Then a live operator
// signs in: the fleet view shows the cell and the cluster, and the
// operator suspends the cluster (a push is refused), resumes it, moves it
// to plan dev and issues a key that pushes. Last, the admin signs in again
// through an OpenID provider running in the test (the sign-in page's
// button, the provider's pages, the callback), which links the provider's
// identity to the account. Data goes to Node in QG_*
// environment variables and comes back in "RESULT name=value" lines,
// which the test checks against the database and the broker.
func TestBrowserConsole(t *testing.T) {
	browserPrerequisites(t) // before the setup, so a machine without a browser fails fast

	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "browser-cell", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("browser-cell", broker.URL(), "")
	tenant := cp.tenant("browser")
	cl := cp.cluster(tenant, "browser-acme", cell)
	_, key := cp.key(cl.id)
	const email, password = "ada@browser.test", "correct horse battery staple"
	cp.exec(`SELECT queen_proxy.create_user($1::uuid, $2, public.crypt($3, public.gen_salt('bf', 10)), 'local')`,
		tenant, email, password)
	cp.exec(`SELECT queen_proxy.grant_cluster_role($1::uuid, $2, 'admin')`, cl.id, email)
	// A user of the tenant with no role yet, whom the admin adds.
	const member = "grace@browser.test"
	cp.exec(`SELECT queen_proxy.create_user($1::uuid, $2, NULL, 'local')`, tenant, member)
	// A live operator of a tenant of its own, with no role on any cluster:
	// the fleet view and its actions are the operator bit's alone.
	const opEmail, opPassword = "ops@browser.test", "operator horse battery staple"
	opTenant := cp.tenant("browser-ops")
	opID := cp.scalar(`SELECT queen_proxy.create_user($1::uuid, $2, public.crypt($3, public.gen_salt('bf', 10)), 'local')::text`,
		opTenant, opEmail, opPassword)
	cp.exec(`SELECT queen_proxy.set_operator($1, true)`, opEmail)
	cp.exec(`UPDATE queen_proxy.cells SET capacity_slots = 10 WHERE id = $1::uuid`, cell)
	// A read-only key: its pushes are refused (403), which the requests
	// view must show against it.
	readRaw := make([]byte, 24)
	_, _ = rand.Read(readRaw)
	readKey := "qk_test_" + hex.EncodeToString(readRaw)
	readKeyID := cp.scalar(`SELECT queen_proxy.issue_api_key($1::uuid, 'read-only', $2, ARRAY['read'])::text`,
		cl.id, tenancy.HashAPIKey(readKey))

	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	port := freePort(t)
	// An OpenID provider whose login step signs the admin in: the script
	// signs in through it last, by the sign-in page's button.
	idp := testidp.New(t)
	idp.Next(testidp.User{Subject: "ada-at-corp", Email: email, Verified: true})
	origin := fmt.Sprintf("http://%s.eu1.example.test:%d", cl.slug, port)
	idp.AllowRedirect(origin + "/auth/oidc/corp/callback")
	const oidcLabel = "Corp SSO"
	app := fmt.Sprintf(`meter_flush_interval 1s
		spool_dir %s
		operator_enabled
		session {
			hs256_secret %s
		}
		identity {
			operator_api
			oidc corp {
				label %q
				issuer %s
				client_id %s
				client_secret %s
				allowed_domains browser.test
				require_verified_email
			}
		}`, t.TempDir(), hex.EncodeToString(secret), oidcLabel, idp.URL, testidp.ClientID, testidp.ClientSecret)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), app, ""))

	// The pushes the console's usage chart must show: three requests,
	// every item stored (billed as push).
	c := client(port)
	pushedMsgs := 0
	for i, n := range []int{3, 5, 9} {
		items := make([]string, n)
		for j := range items {
			items[j] = fmt.Sprintf(`{"queue":"orders","payload":{"batch":%d,"item":%d}}`, i, j)
		}
		r := do(t, c, "POST", origin+"/api/v1/push", key, `{"items":[`+strings.Join(items, ",")+`]}`)
		if got := acceptedItems(r); got != int64(n) {
			t.Fatalf("push %d: %d of %d items stored: %d %s", i, got, n, r.status, r.body)
		}
		pushedMsgs += n
	}
	const forbiddenPushes = 2
	for i := 0; i < forbiddenPushes; i++ {
		if r := do(t, c, "POST", origin+"/api/v1/push", readKey, `{"items":[{"queue":"orders","payload":{}}]}`); r.status != 403 {
			t.Fatalf("push with a read-only key: %d %s, want 403", r.status, r.body)
		}
	}
	cellUsed := cp.scalar(`SELECT used_slots::text FROM queen_proxy.cells WHERE id = $1::uuid`, cell)

	results := runBrowserSpec(t, "console.spec.mjs",
		"QG_CONSOLE_URL="+origin,
		fmt.Sprintf("QG_GATEWAY_ADDR=127.0.0.1:%d", port),
		"QG_EMAIL="+email,
		"QG_PASSWORD="+password,
		"QG_PUSHED="+strconv.Itoa(pushedMsgs),
		"QG_PUSHED_QUEUE=orders",
		"QG_QUEUE=browser-e2e",
		"QG_OPERATOR_EMAIL="+opEmail,
		"QG_OPERATOR_PASSWORD="+opPassword,
		"QG_CLUSTER_KEY="+key,
		"QG_MEMBER="+member,
		"QG_READ_KEY_ID="+readKeyID,
		"QG_FORBIDDEN="+strconv.Itoa(forbiddenPushes),
		"QG_CELL=browser-cell",
		"QG_CELL_USED="+cellUsed,
		"QG_CELL_CAPACITY=10",
		"QG_OIDC_ISSUER="+idp.URL,
		"QG_OIDC_LABEL="+oidcLabel,
	)
	for _, k := range []string{"key_id", "pushed_with_key", "refused_after_ms", "accepted_after_revoke", "old_cookie_status",
		"requests_forbidden", "fleet_key_id", "suspended_push_status", "oidc_user_id"} {
		if results[k] == "" {
			t.Fatalf("console.spec.mjs printed no RESULT %s", k)
		}
	}

	// The key the browser created belongs to this cluster, is revoked, and
	// both console writes are in the audit log.
	keyID := results["key_id"]
	if got := cp.scalar(`SELECT cluster_id::text || ' ' || name || ' ' || array_to_string(scopes, ',') || ' ' || (revoked_at IS NOT NULL)::text
		FROM queen_proxy.api_keys WHERE id = $1::uuid`, keyID); got != cl.id+" browser-e2e produce true" {
		t.Fatalf("api_keys row of the console's key: %q", got)
	}
	if got := cp.scalar(`SELECT string_agg(action, ',' ORDER BY action) FROM queen_proxy.operations
		WHERE actor = 'user' AND target = $1 AND action LIKE 'console_%'`, keyID); got != "console_api_key_issued,console_api_key_revoked" {
		t.Fatalf("audit rows of the console's key by the user: %q", got)
	}

	// The provider's sign-in was the admin's, and linked the provider's
	// identity to the account (audited).
	adaID := cp.scalar(`SELECT id::text FROM queen_proxy.users WHERE email = $1`, email)
	if results["oidc_user_id"] != adaID {
		t.Fatalf("signed in through the provider as %q, want the admin %s", results["oidc_user_id"], adaID)
	}
	if got := cp.scalar(`SELECT count(*)::text FROM queen_proxy.identities WHERE provider = 'oidc:corp' AND provider_id = 'ada-at-corp'
		AND user_id = $1::uuid`, adaID); got != "1" {
		t.Fatalf("identities rows linking the provider's ada-at-corp to the admin: %s", got)
	}
	if got := cp.scalar(`SELECT count(*)::text FROM queen_proxy.operations WHERE action = 'identity_linked' AND actor_id = $1::uuid
		AND meta->>'provider' = 'oidc:corp'`, adaID); got != "1" {
		t.Fatalf("identity_linked audit rows for the provider: %s", got)
	}

	// The operator's actions, each through its SQL function and audited
	// with the operator's id; the cluster back to active, on plan dev.
	if got := cp.scalar(`SELECT string_agg(action, ',' ORDER BY action) FROM queen_proxy.operations
		WHERE actor = 'user' AND actor_id = $1::uuid AND cluster_id = $2::uuid`, opID, cl.id); got != "operator_api_key_issued,operator_cluster_resumed,operator_cluster_suspended,operator_plan_changed" {
		t.Fatalf("audit rows of the operator's actions: %q", got)
	}
	if got := cp.scalar(`SELECT c.status || ' ' || p.code FROM queen_proxy.clusters c JOIN queen_proxy.plans p ON p.id = c.plan_id
		WHERE c.id = $1::uuid`, cl.id); got != "active dev" {
		t.Fatalf("cluster after the operator's actions: %q, want active dev", got)
	}
	if got := cp.scalar(`SELECT cluster_id::text FROM queen_proxy.api_keys WHERE id = $1::uuid AND revoked_at IS NULL`, results["fleet_key_id"]); got != cl.id {
		t.Fatalf("the operator's key belongs to cluster %q, want %q", got, cl.id)
	}
	if results["requests_forbidden"] != strconv.Itoa(forbiddenPushes) || results["suspended_push_status"] != "403" {
		t.Fatalf("the requests view showed %s refusals of the read-only key (want %d); a push to the suspended cluster got %s",
			results["requests_forbidden"], forbiddenPushes, results["suspended_push_status"])
	}
	// The gateway writes the per-key counts it showed live.
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := cp.scalar(`SELECT coalesce(sum(reqs), 0)::text FROM queen_proxy.request_minutes
			WHERE cluster_id = $1::uuid AND key_id = $2 AND outcome = '403'`, cl.id, readKeyID)
		if got == strconv.Itoa(forbiddenPushes) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("request_minutes holds %s refusals of the read-only key, want %d", got, forbiddenPushes)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// What reached the cell with that key: the push the script made
	// before the revocation and any accepted in the instant after it,
	// in this cluster's namespace.
	wantForwarded := 1
	if n, err := strconv.Atoi(results["accepted_after_revoke"]); err == nil {
		wantForwarded += n
	}
	forwardedPushes := 0
	for _, r := range forwarded(broker) {
		if r.Path == "/api/v1/push" && bytes.Contains(r.Body, []byte(`"browser-e2e"`)) {
			if tn := r.Header.Get("X-Queen-Tenant"); tn != cl.brokerTenant {
				t.Fatalf("push with the console's key reached the cell as tenant %q, want %q", tn, cl.brokerTenant)
			}
			forwardedPushes++
		}
	}
	if forwardedPushes != wantForwarded {
		t.Fatalf("%d pushes with the console's key reached the cell, want %d", forwardedPushes, wantForwarded)
	}
}
