package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/console"
	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/tenancy"
)

// TestCLILifecycle runs the lifecycle commands through the real binary
// against an in-process gateway: suspend, push-block and resume reach the
// gateway within a second; the three-step cluster delete stops the
// cluster's traffic first; set-password gives a user a password the
// console verifies; and every refusal is one line with exit code 1.
func TestCLILifecycle(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "cli-life", RequireTenant: true})
	url := pgtest.URL(t)
	cp := newControlPlane(t, url)
	q := cliFor(t)(url)
	q.ok(t, "cell", "add", "life-a", "--region", "eu1", "--url", broker.URL(), "--tenancy", "scoped")
	q.ok(t, "tenant", "create", "life")
	q.ok(t, "cluster", "create", "life-prod", "--tenant", "life", "--plan", "pro")
	q.ok(t, "cluster", "create", "life-dev", "--tenant", "life", "--plan", "pro")
	var key struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	q.okJSON(t, &key, "key", "create", "--cluster", "life-prod")

	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, url, "", ""))
	c := client(port)
	base := fmt.Sprintf("http://life-prod.eu1.example.test:%d", port)
	push := `{"items":[{"queue":"orders","payload":{"n":1}}]}`
	within := func(what string, check func() error) {
		t.Helper()
		took := eventually(t, time.Second, check)
		t.Logf("%s reached the gateway after %v", what, took)
	}
	answers := func(method, path, body string, status int) func() error {
		return func() error {
			if r := do(t, c, method, base+path, key.Key, body); r.status != status {
				return fmt.Errorf("%s %s answered %d %s, want %d", method, path, r.status, r.body, status)
			}
			return nil
		}
	}
	if err := answers("GET", "/api/v1/resources/queues", "", 200)(); err != nil {
		t.Fatal(err)
	}

	t.Run("push-block, suspend, resume", func(t *testing.T) {
		if out := q.ok(t, "cluster", "push-block", "life-prod"); out != "cluster \"life-prod\" is push-blocked: gateways refuse its pushes; consuming still works\n" {
			t.Fatalf("push-block printed %q", out)
		}
		within("push-block", func() error {
			r := do(t, c, "POST", base+"/api/v1/push", key.Key, push)
			if r.status != 403 {
				return fmt.Errorf("push answered %d", r.status)
			}
			assertRefusal(t, r, 403, "push_blocked")
			if reached(broker, r.header.Get("X-Queen-Request-Id")) {
				t.Fatal("a blocked push reached the cell")
			}
			return nil
		})
		if err := answers("GET", "/api/v1/resources/queues", "", 200)(); err != nil {
			t.Fatalf("reading while push-blocked: %v", err)
		}

		var cl struct {
			Slug, Status string
		}
		q.okJSON(t, &cl, "cluster", "suspend", "life-prod")
		if cl.Slug != "life-prod" || cl.Status != "suspended" {
			t.Fatalf("suspend --json: %+v", cl)
		}
		within("suspend", func() error {
			r := do(t, c, "GET", base+"/api/v1/resources/queues", key.Key, "")
			if r.status != 403 {
				return fmt.Errorf("read answered %d", r.status)
			}
			assertRefusal(t, r, 403, "cluster_suspended")
			return nil
		})
		if out := q.ok(t, "cluster", "resume", "life-prod"); out != "cluster \"life-prod\" is active: it serves traffic again\n" {
			t.Fatalf("resume printed %q", out)
		}
		within("resume", answers("GET", "/api/v1/resources/queues", "", 200))
		if n := cp.scalar(`SELECT count(*)::text FROM queen_proxy.operations WHERE action = 'cluster_status_changed'`); n != "3" {
			t.Fatalf("%s status changes audited, want 3", n)
		}
		q.fails(t, 1, "queen cluster suspend: unknown cluster \"nope\"\n", "cluster", "suspend", "nope")
		q.fails(t, 1, "queen cluster resume: want 1 argument (resume <cluster> [--force]), got 0 (see \"caddy queen cluster resume --help\")\n",
			"cluster", "resume")
	})

	t.Run("key rotate refusals", func(t *testing.T) {
		q.fails(t, 1, "queen key rotate: invalid overlap \"soon\": use a duration such as 30m, 24h or 7d, or 0 to revoke the old key at once\n",
			"key", "rotate", key.ID, "--overlap", "soon")
		q.fails(t, 1, "queen key rotate: invalid key id \"app\": want the id that key list shows\n", "key", "rotate", "app")
		q.fails(t, 1, "queen key rotate: unknown or revoked key \"00000000-0000-0000-0000-000000000000\"\n",
			"key", "rotate", "00000000-0000-0000-0000-000000000000")
		help := q.ok(t, "key", "rotate", "--help")
		if !strings.Contains(help, "default 24h0m0s") && !strings.Contains(help, "(default 24h") {
			t.Fatalf("key rotate --help does not state the default overlap:\n%s", help)
		}
	})

	t.Run("set-password", func(t *testing.T) {
		q.ok(t, "user", "create", "ann@life.test", "--tenant", "life")
		var u struct {
			Email       string `json:"email"`
			HasPassword bool   `json:"has_password"`
			Password    string `json:"password"`
		}
		q.okJSON(t, &u, "user", "set-password", "ann@life.test", "--generate")
		if u.Email != "ann@life.test" || !u.HasPassword || len(u.Password) != 24 {
			t.Fatalf("set-password --generate --json: %+v", u)
		}
		hash := cp.scalar(`SELECT password_hash FROM queen_proxy.users WHERE email = 'ann@life.test'`)
		if ok, err := console.VerifyPassword(hash, u.Password); !ok || err != nil {
			t.Fatal("the stored hash is not of the printed password")
		}
		r := q.run(t, nil, "correct horse battery\n", "user", "set-password", "ann@life.test", "--password-stdin")
		if r.code != 0 || r.stdout != "set a new password for \"ann@life.test\"\n" || strings.Contains(r.stdout, "correct horse") {
			t.Fatalf("set-password --password-stdin: exit %d, %q %q", r.code, r.stdout, r.stderr)
		}
		hash = cp.scalar(`SELECT password_hash FROM queen_proxy.users WHERE email = 'ann@life.test'`)
		if ok, err := console.VerifyPassword(hash, "correct horse battery"); !ok || err != nil {
			t.Fatal("the stored hash is not of the password from standard input")
		}
		q.fails(t, 1, "queen user set-password: give one of --password-stdin, --generate or --clear\n", "user", "set-password", "ann@life.test")
		q.fails(t, 1, "queen user set-password: give one of --password-stdin, --generate or --clear\n",
			"user", "set-password", "ann@life.test", "--generate", "--clear")
		q.fails(t, 1, "queen user set-password: unknown user \"bob@life.test\"\n", "user", "set-password", "bob@life.test", "--generate")
		if r := q.run(t, nil, "short\n", "user", "set-password", "ann@life.test", "--password-stdin"); r.code != 1 ||
			r.stderr != "queen user set-password: password must be 12 to 128 characters long\n" {
			t.Fatalf("short password: exit %d, %q", r.code, r.stderr)
		}
		if out := q.ok(t, "user", "set-password", "ann@life.test", "--clear"); !strings.Contains(out, "removed the password") {
			t.Fatalf("--clear printed %q", out)
		}
		if has := cp.scalar(`SELECT (password_hash IS NOT NULL)::text FROM queen_proxy.users WHERE email = 'ann@life.test'`); has != "false" {
			t.Fatal("the password is still there")
		}
	})

	t.Run("cluster delete in three steps", func(t *testing.T) {
		q.fails(t, 1, "queen cluster delete: cluster \"life-prod\" is active, not deleting: stop its traffic and purge it first; "+
			"run \"caddy queen cluster delete life-prod\" (step 1) and purge it on its cell (step 2) first\n",
			"cluster", "delete", "life-prod", "--purged")
		out := q.ok(t, "cluster", "delete", "life-prod")
		bt := cp.scalar(`SELECT broker_tenant_uuid::text FROM queen_proxy.clusters WHERE slug = 'life-prod'`)
		if !strings.HasPrefix(out, "step 1 of 3 done: cluster \"life-prod\" is now deleting") ||
			!strings.Contains(out, "SELECT queen.delete_tenant_data_v1('"+bt+"');") ||
			!strings.HasSuffix(out, "step 3 of 3: caddy queen cluster delete life-prod --purged\n") {
			t.Fatalf("step 1 printed:\n%s", out)
		}
		within("step 1", func() error {
			r := do(t, c, "GET", base+"/api/v1/resources/queues", key.Key, "")
			if r.status != 403 {
				return fmt.Errorf("read answered %d", r.status)
			}
			assertRefusal(t, r, 403, "cluster_suspended")
			return nil
		})
		q.fails(t, 1, "queen cluster resume: cluster \"life-prod\" is being deleted (status deleting); finish the deletion, "+
			"or force the change if it has not been purged yet\n", "cluster", "resume", "life-prod")
		q.fails(t, 1, "queen cluster delete: give --purged or --force, not both\n", "cluster", "delete", "life-prod", "--purged", "--force")

		var d struct {
			Deleted     bool             `json:"deleted"`
			ClusterSlug string           `json:"cluster_slug"`
			Counts      map[string]int64 `json:"counts"`
		}
		q.okJSON(t, &d, "cluster", "delete", "life-prod", "--purged")
		if !d.Deleted || d.ClusterSlug != "life-prod" || d.Counts["api_keys_revoked"] != 1 {
			t.Fatalf("step 3 --json: %+v", d)
		}
		// The host is gone: a client with the old key is refused and
		// reaches nothing.
		within("step 3", func() error {
			r := do(t, c, "GET", base+"/api/v1/resources/queues", key.Key, "")
			if r.status != 401 && r.status != 421 {
				return fmt.Errorf("read answered %d %s", r.status, r.body)
			}
			if reached(broker, r.header.Get("X-Queen-Request-Id")) {
				t.Fatal("a request for the deleted cluster reached the cell")
			}
			return nil
		})
		var left int
		if err := cp.pool.QueryRow(context.Background(), `SELECT count(*)::int FROM queen_proxy.clusters WHERE tenant_id =
			(SELECT id FROM queen_proxy.tenants WHERE slug = 'life')`).Scan(&left); err != nil || left != 1 {
			t.Fatalf("the tenant's clusters after the deletion: %d, %v", left, err)
		}
		if out := q.ok(t, "cluster", "delete", "life-dev", "--force"); !strings.Contains(out, "forced: its broker data was not purged") {
			t.Fatalf("--force printed %q", out)
		}
	})
}

// TestSetPasswordEndsSessions: a new password (user set-password, the
// real binary) ends the user's sessions on the gateway within a second,
// refused before anything reaches the cell; a session signed after it is
// served.
func TestSetPasswordEndsSessions(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "reset-cell", RequireTenant: true})
	url := pgtest.URL(t)
	cp := newControlPlane(t, url)
	cell := cp.cell("reset-cell", broker.URL(), "")
	tenant := cp.tenant("reset")
	cl := cp.cluster(tenant, "reset", cell)
	userID := cp.scalar(`SELECT queen_proxy.create_user($1::uuid, 'ann@reset.test', NULL, 'local')::text`, tenant)
	cp.exec(`SELECT queen_proxy.grant_cluster_role($1::uuid, 'ann@reset.test', 'viewer')`, cl.id)
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, url, "session {\nhs256_secret "+sessionHS256Test+"\n}", ""))
	keys, err := tenancy.NewSessionKeys(tenancy.SessionKeysConfig{HS256Secret: []byte(sessionHS256Test)})
	if err != nil {
		t.Fatal(err)
	}
	mint := func() string {
		tok, _, err := keys.Mint(userID, "", "viewer", "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	c := client(port)
	queues := fmt.Sprintf("http://reset.eu1.example.test:%d/api/v1/resources/queues", port)
	before := mint()
	if r := do(t, c, "GET", queues, before, ""); r.status != 200 {
		t.Fatalf("before the reset: %d %s", r.status, r.body)
	}
	time.Sleep(time.Second) // a session of the reset's own second counts as before it

	cliFor(t)(url).ok(t, "user", "set-password", "ann@reset.test", "--generate")
	took := eventually(t, time.Second, func() error {
		r := do(t, c, "GET", queues, before, "")
		if r.status != 401 {
			return fmt.Errorf("the session from before the reset answered %d", r.status)
		}
		assertRefusal(t, r, 401, "unauthorized")
		if reached(broker, r.header.Get("X-Queen-Request-Id")) {
			t.Fatal("a request of an ended session reached the cell")
		}
		return nil
	})
	t.Logf("the session from before the reset was refused %v after it", took)
	time.Sleep(time.Second)
	if r := do(t, c, "GET", queues, mint(), ""); r.status != 200 {
		t.Fatalf("a session signed after the reset: %d %s", r.status, r.body)
	}
}
