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

// TestBrowserConsole is the console's acceptance test in a real browser.
// Go starts a real gateway (Caddy, PostgreSQL, a fake broker) with
// sessions and the identity surface, provisions a cluster and an admin
// with a password, pushes pushedMsgs messages, and runs
// e2e/browser/console.spec.mjs in Node, which drives headless Chromium:
// sign in, see the pushes in the usage chart, create a key, push with it,
// revoke it and see the next push refused with 401 within a second, log
// out, and see the old cookie refused. Data goes to Node in QG_*
// environment variables and comes back in "RESULT name=value" lines,
// which the test checks against the database and the broker.
func TestBrowserConsole(t *testing.T) {
	node, chromium, dir := browserPrerequisites(t)

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

	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	port := freePort(t)
	app := fmt.Sprintf(`meter_flush_interval 1s
		spool_dir %s
		session {
			hs256_secret %s
		}
		identity {
		}`, t.TempDir(), hex.EncodeToString(secret))
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), app, ""))

	// The pushes the console's usage chart must show: three requests,
	// every item stored (billed as push).
	c := client(port)
	origin := fmt.Sprintf("http://%s.eu1.example.test:%d", cl.slug, port)
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

	out := filepath.Join(dir, "test-output")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "console.spec.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"QG_CONSOLE_URL="+origin,
		fmt.Sprintf("QG_GATEWAY_ADDR=127.0.0.1:%d", port),
		"QG_EMAIL="+email,
		"QG_PASSWORD="+password,
		"QG_PUSHED="+strconv.Itoa(pushedMsgs),
		"QG_PUSHED_QUEUE=orders",
		"QG_QUEUE=browser-e2e",
		"QG_OUTPUT_DIR="+out,
		"QG_CHROMIUM="+chromium,
		"NO_COLOR=1",
	)
	// On a time-out, let Playwright close its browser before Node goes.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	started := time.Now()
	output, err := cmd.CombinedOutput()
	took := time.Since(started).Round(time.Millisecond)
	if err != nil {
		t.Fatalf("console.spec.mjs failed after %v (%v); its output:\n%s\nscreenshots: %s", took, err, output, out)
	}
	t.Logf("console.spec.mjs passed in %v; screenshots: %s\n%s", took, out, output)

	results := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(output))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
			if k, v, ok := strings.Cut(rest, "="); ok {
				results[k] = v
			}
		}
	}
	for _, k := range []string{"key_id", "pushed_with_key", "refused_after_ms", "accepted_after_revoke", "old_cookie_status"} {
		if results[k] == "" {
			t.Fatalf("console.spec.mjs printed no RESULT %s; its output:\n%s", k, output)
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
