package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/migrations"
	"github.com/queengate/queengate/tenancy"
)

// queenCLI runs `caddy queen …` through the real binary.
type queenCLI struct {
	bin  string
	home string
	url  string // passed with --database-url unless empty
}

type cliRun struct {
	stdout, stderr string
	code           int
}

// run executes the binary with args (after "queen"), extra environment
// variables and standard input. QUEENGATE_DATABASE_URL is never inherited.
func (q queenCLI) run(t *testing.T, env []string, stdin string, args ...string) cliRun {
	t.Helper()
	full := append([]string{"queen"}, args...)
	if q.url != "" {
		full = append(full, "--database-url", q.url)
	}
	cmd := exec.Command(q.bin, full...)
	cmd.Env = append(withoutDatabaseURL(os.Environ()),
		"HOME="+q.home, "XDG_DATA_HOME="+q.home, "XDG_CONFIG_HOME="+q.home)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("caddy %s: %v", strings.Join(full, " "), err)
	}
	return cliRun{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

func withoutDatabaseURL(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "QUEENGATE_DATABASE_URL=") {
			out = append(out, kv)
		}
	}
	return out
}

// ok runs a command that must succeed silently on stderr and returns its
// standard output.
func (q queenCLI) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := q.run(t, nil, "", args...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("caddy queen %s: exit %d\nstderr: %s\nstdout: %s", strings.Join(args, " "), r.code, r.stderr, r.stdout)
	}
	return r.stdout
}

// okJSON runs a command with --json and decodes its output into v.
func (q queenCLI) okJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := q.ok(t, append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("caddy queen %s --json: not JSON: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// fails runs a command that must fail with exactly stderr and code, and
// print nothing on standard output.
func (q queenCLI) fails(t *testing.T, code int, stderr string, args ...string) {
	t.Helper()
	r := q.run(t, nil, "", args...)
	if r.code != code || r.stderr != stderr || r.stdout != "" {
		t.Fatalf("caddy queen %s:\n exit %d, stderr %q, stdout %q\nwant exit %d, stderr %q, no stdout",
			strings.Join(args, " "), r.code, r.stderr, r.stdout, code, stderr)
	}
}

// lines returns the non-empty lines of out with their columns split on runs
// of two or more spaces (the table separator).
func lines(out string) [][]string {
	var rows [][]string
	sep := regexp.MustCompile(` {2,}`)
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			rows = append(rows, sep.Split(strings.TrimSpace(l), -1))
		}
	}
	return rows
}

// TestCLI builds the real binary once (go build ./cmd/caddy) and runs every
// `caddy queen` subcommand through it against real PostgreSQL databases.
// cliFor returns a constructor of CLI runners over the built binary.
func cliFor(t *testing.T) func(url string) queenCLI {
	bin, home := caddyBinary(t), t.TempDir()
	return func(url string) queenCLI { return queenCLI{bin: bin, home: home, url: url} }
}

func TestCLI(t *testing.T) {
	newCLI := cliFor(t)

	t.Run("help lists every command", func(t *testing.T) {
		out := newCLI("").ok(t, "--help")
		for _, c := range []string{"migrate", "cell", "tenant", "cluster", "key", "user", "plan", "usage", "version", "QUEENGATE_DATABASE_URL", "Exit codes"} {
			if !strings.Contains(out, c) {
				t.Errorf("caddy queen --help does not mention %q:\n%s", c, out)
			}
		}
		// It ends with queengate's documentation, not Caddy's, and so does
		// every subcommand's help.
		for _, help := range []string{out, newCLI("").ok(t, "cluster", "create", "--help")} {
			if strings.Contains(help, "caddyserver.com/docs") ||
				!strings.HasSuffix(strings.TrimSpace(help), "https://github.com/queengate/queengate/blob/main/docs/operations.md") {
				t.Errorf("help does not end with queengate's documentation:\n%s", help)
			}
		}
		del := newCLI("").ok(t, "tenant", "delete", "--help")
		if !strings.Contains(del, "queen.delete_tenant_data_v1('<broker tenant id>')") || !strings.Contains(del, "--purged") {
			t.Errorf("tenant delete --help does not explain the broker purge:\n%s", del)
		}
	})

	t.Run("migrate", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		q := newCLI("")
		env := []string{"QUEENGATE_DATABASE_URL=" + url} // from the environment this time
		r := q.run(t, env, "", "migrate")
		names := migrations.Names()
		var want strings.Builder
		for _, n := range names {
			fmt.Fprintf(&want, "applied %s\n", n)
		}
		fmt.Fprintf(&want, "database is at %s (%d migrations, %d applied now)\n", names[len(names)-1], len(names), len(names))
		if r.code != 0 || r.stderr != "" || r.stdout != want.String() {
			t.Fatalf("first migrate: exit %d, stderr %q\n%s\nwant:\n%s", r.code, r.stderr, r.stdout, want.String())
		}
		r = q.run(t, env, "", "migrate")
		if want := fmt.Sprintf("database is up to date (%d migrations, latest %s)\n", len(names), names[len(names)-1]); r.code != 0 || r.stdout != want {
			t.Fatalf("second migrate: exit %d, stderr %q, stdout %q; want %q", r.code, r.stderr, r.stdout, want)
		}
		var m struct{ Applied, Known []string }
		newCLI(url).okJSON(t, &m, "migrate")
		if len(m.Applied) != 0 || len(m.Known) != len(names) {
			t.Fatalf("migrate --json: %+v", m)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		empty := newCLI(url)
		empty.fails(t, 1, "queen tenant list: the database lacks the queen_proxy schema this command needs "+
			"(relation \"queen_proxy.tenants\" does not exist); run `caddy queen migrate` first\n", "tenant", "list")
		q := newCLI(url)
		q.ok(t, "migrate")

		newCLI("").fails(t, 1, "queen tenant list: no database URL: pass --database-url or set QUEENGATE_DATABASE_URL\n",
			"tenant", "list")
		port := freePort(t)
		newCLI(fmt.Sprintf("postgres://queen:secret@127.0.0.1:%d/queen", port)).fails(t, 4,
			fmt.Sprintf("queen tenant list: cannot reach the database at 127.0.0.1:%d: connection refused\n", port), "tenant", "list")
		newCLI("postgres://queen:secret@127.0.0.1:99999/queen").fails(t, 1,
			"queen tenant list: invalid database URL: invalid port\n", "tenant", "list")

		q.ok(t, "tenant", "create", "acme")
		q.fails(t, 1, "queen tenant create: tenant slug \"acme\" is already taken\n", "tenant", "create", "acme")
		q.fails(t, 1, "queen tenant create: tenant slug \"acme\" is already taken\n", "tenant", "create", " ACME ")
		q.fails(t, 1, "queen tenant create: invalid tenant slug \"Acme_Corp\": use 1 to 63 characters from a-z, 0-9 and inner hyphens\n",
			"tenant", "create", "Acme_Corp")
		q.fails(t, 1, "queen cluster create: invalid cluster slug \"prod.eu\": use 1 to 63 characters from a-z, 0-9 and inner hyphens\n",
			"cluster", "create", "prod.eu", "--tenant", "acme")
		q.fails(t, 1, "queen tenant suspend: unknown tenant \"nope\"\n", "tenant", "suspend", "nope")
		q.fails(t, 1, "queen cluster create: unknown tenant \"nope\"\n", "cluster", "create", "nope-prod", "--tenant", "nope")
		q.fails(t, 1, "queen tenant delete: unknown tenant \"nope\"\n", "tenant", "delete", "nope")
		q.fails(t, 1, "queen usage: unknown tenant \"nope\"\n", "usage", "--tenant", "nope")
		q.fails(t, 1, "queen cluster create: no active shared cell has room for a cluster of plan free (shared cells: none): "+
			"add one (caddy queen cell add <slug> --region <region> --url <broker URL> --class shared --capacity N)\n",
			"cluster", "create", "acme-prod", "--tenant", "acme")
		q.fails(t, 1, "queen key revoke: invalid key id \"abc\": want the id that key list shows\n", "key", "revoke", "abc")
		q.fails(t, 1, "queen key create: invalid scope \"write\": use produce, consume, read or admin\n",
			"key", "create", "--cluster", "x", "--scopes", "read,write")
		q.fails(t, 1, "queen cluster override: invalid overrides: want a JSON object such as {\"max_queues\": 500, \"req_burst\": null}\n",
			"cluster", "override", "x", "[1]")

		// Usage errors come from the command line itself.
		q.fails(t, 1, "queen tenant create: want 1 argument (create <slug> [--name <name>]), got 0 (see \"caddy queen tenant create --help\")\n",
			"tenant", "create")
		q.fails(t, 1, "queen tenant create: unknown flag: --colour (see \"caddy queen tenant create --help\")\n",
			"tenant", "create", "x", "--colour", "red")
		q.fails(t, 1, "queen tenant: unknown command \"rename\" (see \"caddy queen tenant --help\")\n", "tenant", "rename", "x")
		q.fails(t, 1, "queen cluster create: --tenant is required\n", "cluster", "create", "x")
		q.fails(t, 1, "queen usage: invalid --format \"xml\": use table, csv or json\n", "usage", "--format", "xml")
		r := q.run(t, nil, "", "tenant")
		if r.code != 1 || !strings.HasSuffix(r.stderr, "queen tenant: missing command (see \"caddy queen tenant --help\")\n") ||
			!strings.Contains(r.stderr, "Available Commands:") {
			t.Fatalf("caddy queen tenant: exit %d, stderr %q", r.code, r.stderr)
		}
	})

	t.Run("every subcommand", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		q := newCLI(url)
		q.ok(t, "migrate")

		// cell add | list | drain
		// eu1-a is stated scoped: its keeper moves without a broker check
		// (keeper_test.go has the check; these addresses are not reachable).
		if out := q.ok(t, "cell", "add", "eu1-a", "--region", "eu1", "--url", "http://192.0.2.7:6632", "--tenancy", "scoped", "--grants", "none"); !strings.HasPrefix(out,
			`added cell "eu1-a" (shared, region eu1, broker http://192.0.2.7:6632, tenancy scoped), id `) {
			t.Fatalf("cell add: %q", out)
		}
		r := q.run(t, []string{"CELL_B_SECRET=s3cret"}, "", "cell", "add", "eu1-b", "--region", "eu1",
			"--url", "http://192.0.2.8:6632", "--class", "dedicated", "--capacity", "1", "--secret-env", "CELL_B_SECRET")
		if r.code != 0 {
			t.Fatalf("cell add --secret-env: %d %s", r.code, r.stderr)
		}
		q.fails(t, 1, "queen cell add: cell slug \"eu1-a\" is already taken\n", "cell", "add", "eu1-a", "--region", "eu1", "--url", "http://x:1")
		q.fails(t, 1, "queen cell add: invalid cell class \"big\": use shared or dedicated\n",
			"cell", "add", "eu1-c", "--region", "eu1", "--url", "http://x:1", "--class", "big")
		q.fails(t, 1, "queen cell add: invalid tenancy \"maybe\": use probe, scoped or unscoped\n",
			"cell", "add", "eu1-c", "--region", "eu1", "--url", "http://x:1", "--tenancy", "maybe")
		cells := lines(q.ok(t, "cell", "list"))
		if len(cells) != 3 || strings.Join(cells[0][:12], "|") != "SLUG|REGION|CLASS|STATUS|USED/CAPACITY|PLACEMENT|BROKER URL|SECRET|TENANCY|TENANT SCOPING|SERVES|KEEPER" ||
			strings.Join(cells[1][:12], "|") != "eu1-a|eu1|shared|active|0/no cap|open|http://192.0.2.7:6632|no|scoped|unknown|all|-" ||
			strings.Join(cells[2][:12], "|") != "eu1-b|eu1|dedicated|active|0/1|open|http://192.0.2.8:6632|yes|probe|unknown|keeper|-" {
			t.Fatalf("cell list: %q", cells)
		}

		// cell update
		cp0 := newControlPlane(t, url)
		cp0.exec(`UPDATE queen_proxy.cells SET tenant_scoping = 'scoped', tenant_scoping_checked_at = now() WHERE slug = 'eu1-b'`)
		if out := q.ok(t, "cell", "update", "eu1-b", "--tenancy", "unscoped", "--region", "eu2"); out !=
			"updated cell \"eu1-b\" (broker http://192.0.2.8:6632, tenancy unscoped, 0 of 1 slots used); gateways reload its 0 cluster(s)\n" {
			t.Fatalf("cell update --tenancy: %q", out)
		}
		if out := q.ok(t, "cell", "update", "eu1-b", "--url", "http://192.0.2.9:6632"); out !=
			"updated cell \"eu1-b\" (broker http://192.0.2.9:6632, tenancy unscoped, 0 of 1 slots used); gateways reload its 0 cluster(s)\n"+
				"note: the broker URL or secret changed: the probe's verdict (was scoped) is unknown until the gateway probes the cell again\n" {
			t.Fatalf("cell update --url: %q", out)
		}
		var updated struct {
			Region        string
			TenancyStated string `json:"tenancy_stated"`
			TenantScoping string `json:"tenant_scoping"`
			HasSecret     bool   `json:"has_secret"`
			KeeperOnly    bool   `json:"keeper_only"`
		}
		q.okJSON(t, &updated, "cell", "update", "eu1-b", "--clear-secret", "--tenancy", "probe")
		if updated.Region != "eu2" || updated.TenancyStated != "probe" || updated.TenantScoping != "unknown" || updated.HasSecret || !updated.KeeperOnly {
			t.Fatalf("cell update --json: %+v", updated)
		}
		r = q.run(t, []string{"CELL_B_SECRET=s3cret"}, "", "cell", "update", "eu1-b", "--secret-env", "CELL_B_SECRET", "--url", "http://192.0.2.8:6632", "--region", "eu1")
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("cell update --secret-env: %d %s", r.code, r.stderr)
		}
		q.fails(t, 1, "queen cell update: nothing to change: give --url, --secret, --clear-secret, --tenancy, --region, --capacity or --grants\n", "cell", "update", "eu1-b")
		q.fails(t, 1, "queen cell update: give a new secret or clear it, not both\n", "cell", "update", "eu1-b", "--secret", "x", "--clear-secret")
		q.fails(t, 1, "queen cell update: invalid tenancy \"all\": use probe, scoped or unscoped\n", "cell", "update", "eu1-b", "--tenancy", "all")
		q.fails(t, 1, "queen cell update: unknown cell \"eu9\"\n", "cell", "update", "eu9", "--tenancy", "scoped")
		if out := q.ok(t, "cell", "drain", "eu1-b"); out != "cell \"eu1-b\" is draining: it keeps serving its 0 cluster(s) and takes no new ones\n" {
			t.Fatalf("cell drain: %q", out)
		}
		var jsonCells []struct {
			Slug, Status string
			HasSecret    bool `json:"has_secret"`
		}
		q.okJSON(t, &jsonCells, "cell", "list")
		if len(jsonCells) != 2 || jsonCells[1].Status != "draining" || !jsonCells[1].HasSecret {
			t.Fatalf("cell list --json: %+v", jsonCells)
		}

		// tenant create | list
		if out := q.ok(t, "tenant", "create", "acme", "--name", "Acme Inc"); !strings.HasPrefix(out, `created tenant "acme" (Acme Inc), id `) {
			t.Fatalf("tenant create: %q", out)
		}
		var beta struct{ ID, Slug, Name, Status string }
		q.okJSON(t, &beta, "tenant", "create", "beta")
		if beta.Slug != "beta" || beta.Name != "beta" || beta.Status != "active" || beta.ID == "" {
			t.Fatalf("tenant create --json: %+v", beta)
		}

		// cluster create | list | move | set-plan | override
		q.fails(t, 1, "queen cluster create: cell \"eu1-b\" is draining and takes no new clusters\n",
			"cluster", "create", "acme-prod", "--tenant", "acme", "--cell", "eu1-b")
		if out := q.ok(t, "cluster", "create", "acme-prod", "--tenant", "acme", "--plan", "pro"); !strings.HasPrefix(out,
			`created cluster "acme-prod" for tenant "acme" on cell "eu1-a", plan pro, broker tenant `) || !strings.HasSuffix(out,
			"\nplaced on cell \"eu1-a\": the least loaded active shared cell with room; now 1 cluster(s), no cap\n") {
			t.Fatalf("cluster create: %q", out)
		}
		q.ok(t, "cluster", "create", "beta-1", "--tenant", beta.ID, "--cell", "eu1-a")
		q.fails(t, 1, "queen cluster create: cluster slug \"acme-prod\" is already taken\n", "cluster", "create", "acme-prod", "--tenant", "beta")
		q.fails(t, 1, "queen cluster create: unknown plan \"gold\"\n", "cluster", "create", "acme-x", "--tenant", "acme", "--plan", "gold")
		clusters := lines(q.ok(t, "cluster", "list", "--tenant", "acme"))
		if len(clusters) != 2 || strings.Join(clusters[1][:7], "|") != "acme-prod|acme|active|active|pro|eu1-a|-" {
			t.Fatalf("cluster list: %q", clusters)
		}
		q.fails(t, 1, "queen cluster move: cell \"eu1-b\" is draining and takes no new clusters\n", "cluster", "move", "acme-prod", "--to", "eu1-b")
		q.ok(t, "cell", "drain", "eu1-b", "--undo")
		out := q.ok(t, "cluster", "move", "acme-prod", "--to", "eu1-b")
		if !strings.HasPrefix(out, "moved cluster \"acme-prod\" from cell \"eu1-a\" to cell \"eu1-b\"\nnote: its queues and messages stay on cell \"eu1-a\"'s broker") {
			t.Fatalf("cluster move: %q", out)
		}
		if out := q.ok(t, "cluster", "set-plan", "acme-prod", "dev"); out != "cluster \"acme-prod\" is on plan dev\n" {
			t.Fatalf("cluster set-plan: %q", out)
		}
		q.fails(t, 1, "queen cluster set-plan: unknown cluster \"nope\"\n", "cluster", "set-plan", "nope", "dev")
		out = q.ok(t, "cluster", "override", "acme-prod", `{"max_queues": 500, "req_burst": null}`)
		limitRows := lines(out)
		if limitRows[0][0] != `cluster "acme-prod", plan dev, overrides {"req_burst": null, "max_queues": 500}` ||
			strings.Join(limitRows[1], "|") != "LIMIT|PLAN|OVERRIDE|EFFECTIVE" {
			t.Fatalf("cluster override: %q", out)
		}
		want := map[string]string{"max_queues": "50|500|500", "req_burst": "50|unlimited|unlimited", "max_req_per_sec": "10|-|10"}
		for _, row := range limitRows[2:] {
			if w, ok := want[row[0]]; ok && strings.Join(row[1:], "|") != w {
				t.Errorf("override row %v, want %s", row, w)
			}
		}
		var lim struct {
			Limits []struct {
				Name      string
				Effective *int64
			}
		}
		q.okJSON(t, &lim, "cluster", "override", "acme-prod")
		if len(lim.Limits) != 12 || lim.Limits[4].Name != "max_queues" || *lim.Limits[4].Effective != 500 || lim.Limits[1].Effective != nil {
			t.Fatalf("cluster override --json: %+v", lim)
		}
		q.ok(t, "cluster", "override", "acme-prod", "--clear")
		q.fails(t, 1, "queen cluster override: invalid overrides: unknown limit \"max_topics\" (known: max_req_per_sec, req_burst, max_msgs_per_sec, msgs_burst, max_queues, max_partitions_per_queue, max_parked_pops, max_payload_bytes, max_batch_items, max_retained_bytes, max_retention_seconds, monthly_msgs_quota)\n",
			"cluster", "override", "acme-prod", `{"max_topics": 1}`)

		// key create | list | revoke
		out = q.ok(t, "key", "create", "--cluster", "acme-prod", "--name", "ci", "--scopes", "produce,read", "--expires", "2099-01-01")
		m := regexp.MustCompile(`^created API key ([0-9a-f-]{36}) "ci" for cluster "acme-prod", scopes produce,read, expires 2099-01-01T00:00:00Z\n` +
			`key \(shown once, store it now\): (qk_live_[A-Za-z0-9_-]{43})\n$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("key create: %q", out)
		}
		keyID, key := m[1], m[2]
		var issued struct {
			ID, Key, Status string
			Scopes          []string
		}
		q.okJSON(t, &issued, "key", "create", "--cluster", "acme-prod", "--env", "test")
		if !strings.HasPrefix(issued.Key, "qk_test_") || len(issued.Key) != len("qk_test_")+43 || len(issued.Scopes) != 4 {
			t.Fatalf("key create --json: %+v", issued)
		}
		q.fails(t, 1, "queen key create: invalid expiry \"2001-01-01\": it is not in the future\n",
			"key", "create", "--cluster", "acme-prod", "--expires", "2001-01-01")
		q.fails(t, 1, "queen key create: unknown cluster \"nope\"\n", "key", "create", "--cluster", "nope")
		keys := lines(q.ok(t, "key", "list", "--cluster", "acme-prod"))
		if len(keys) != 3 || keys[1][0] != keyID || strings.Join(keys[1][1:5], "|") != "ci|acme-prod|produce,read|live" ||
			keys[1][7] != "2099-01-01T00:00:00Z" {
			t.Fatalf("key list: %q", keys)
		}
		cp := newControlPlane(t, url)
		if h := cp.scalar(`SELECT key_hash FROM queen_proxy.api_keys WHERE id = $1::uuid`, keyID); h != tenancy.HashAPIKey(key) {
			t.Fatalf("stored hash %s is not the gateway's hash of the printed key", h)
		}
		if out := q.ok(t, "key", "revoke", keyID); out != fmt.Sprintf("revoked API key %s \"ci\" of cluster \"acme-prod\"\n", keyID) {
			t.Fatalf("key revoke: %q", out)
		}
		q.fails(t, 1, fmt.Sprintf("queen key revoke: unknown or already revoked key %q\n", keyID), "key", "revoke", keyID)
		if keys := lines(q.ok(t, "key", "list", "--cluster", "acme-prod")); len(keys) != 2 {
			t.Fatalf("key list after revoke: %q", keys)
		}
		if keys := lines(q.ok(t, "key", "list", "--cluster", "acme-prod", "--all")); len(keys) != 3 || keys[1][4] != "revoked" {
			t.Fatalf("key list --all: %q", keys)
		}

		// user create | list | grant | revoke | operator
		r = q.run(t, nil, "a long enough password\n", "user", "create", "ops@acme.test", "--tenant", "acme", "--name", "Ops", "--password-stdin")
		if r.code != 0 || !strings.HasPrefix(r.stdout, `created user "ops@acme.test" in tenant "acme", id `) || strings.Contains(r.stdout, "note:") {
			t.Fatalf("user create: %d %q %q", r.code, r.stdout, r.stderr)
		}
		if cp.scalar(`SELECT (password_hash = public.crypt('a long enough password', password_hash))::text
			FROM queen_proxy.users WHERE email = 'ops@acme.test'`) != "true" {
			t.Fatal("user create stored no usable password")
		}
		if out := q.ok(t, "user", "create", "dev@beta.test", "--tenant", "beta"); !strings.Contains(out, "note: no password set") {
			t.Fatalf("user create without password: %q", out)
		}
		q.fails(t, 1, "queen user create: user e-mail \"ops@acme.test\" is already taken\n", "user", "create", "OPS@acme.test", "--tenant", "beta")
		q.fails(t, 1, "queen user create: unknown tenant \"nope\"\n", "user", "create", "x@y.test", "--tenant", "nope")
		if out := q.ok(t, "user", "grant", "ops@acme.test", "--cluster", "acme-prod", "--role", "viewer"); out != "\"ops@acme.test\" is viewer on cluster \"acme-prod\"\n" {
			t.Fatalf("user grant: %q", out)
		}
		if out := q.ok(t, "user", "grant", "ops@acme.test", "--cluster", "acme-prod", "--role", "admin"); out != "\"ops@acme.test\" is now admin on cluster \"acme-prod\" (was viewer)\n" {
			t.Fatalf("user grant again: %q", out)
		}
		q.fails(t, 1, "queen user grant: user \"ops@acme.test\" belongs to another tenant than cluster \"beta-1\"\n",
			"user", "grant", "ops@acme.test", "--cluster", "beta-1", "--role", "admin")
		q.fails(t, 1, "queen user grant: invalid role \"owner\": use admin, producer, consumer or viewer\n",
			"user", "grant", "ops@acme.test", "--cluster", "acme-prod", "--role", "owner")
		users := lines(q.ok(t, "user", "list", "--tenant", "acme"))
		if len(users) != 2 || strings.Join(users[1][:8], "|") != "ops@acme.test|Ops|acme|no|yes|acme-prod=admin|-|control_plane" {
			t.Fatalf("user list: %q", users)
		}
		// The accounts a cluster admin made in the console that nobody
		// signed in to, for an operator to review.
		squat := cp.scalar(`SELECT queen_proxy.create_user(id, 'ceo@elsewhere.test', NULL, 'local')::text FROM queen_proxy.tenants WHERE slug = 'acme'`)
		cp.exec(`SELECT queen_proxy.set_user_origin($1::uuid, 'console', (SELECT id FROM queen_proxy.users WHERE email = 'ops@acme.test'))`, squat)
		if users := lines(q.ok(t, "user", "list", "--created-from", "console", "--never-signed-in")); len(users) != 2 ||
			strings.Join(users[1][:8], "|") != "ceo@elsewhere.test|-|acme|no|no|-|-|console by ops@acme.test" || users[1][8] != squat {
			t.Fatalf("user list --created-from console --never-signed-in: %q", users)
		}
		q.fails(t, 1, "queen user list: invalid origin \"invite\": use control_plane, operator, console, signup\n", "user", "list", "--created-from", "invite")
		cp.exec(`DELETE FROM queen_proxy.users WHERE id = $1::uuid`, squat)
		if out := q.ok(t, "user", "operator", "on", "ops@acme.test"); out != "\"ops@acme.test\" is an operator\n" {
			t.Fatalf("user operator on: %q", out)
		}
		if out := q.ok(t, "user", "operator", "off", "ops@acme.test"); out != "\"ops@acme.test\" is not an operator\n" {
			t.Fatalf("user operator off: %q", out)
		}
		q.fails(t, 1, "queen user operator: want on or off, got \"maybe\"\n", "user", "operator", "maybe", "ops@acme.test")
		q.fails(t, 1, "queen user operator: unknown user \"who@acme.test\"\n", "user", "operator", "on", "who@acme.test")
		if out := q.ok(t, "user", "revoke", "ops@acme.test", "--cluster", "acme-prod"); out != "\"ops@acme.test\" no longer has a role on cluster \"acme-prod\" (was admin)\n" {
			t.Fatalf("user revoke: %q", out)
		}
		q.fails(t, 1, "queen user revoke: user \"ops@acme.test\" has no role on cluster \"acme-prod\"\n", "user", "revoke", "ops@acme.test", "--cluster", "acme-prod")

		// plan list | set
		plans := lines(q.ok(t, "plan", "list"))
		if len(plans) != 5 || strings.Join(plans[4][:4], "|") != "pro|shared|50|200" || plans[4][len(plans[4])-2] != "ephemeral,kv,streams,timers,traces" {
			t.Fatalf("plan list: %q", plans)
		}
		out = q.ok(t, "plan", "set", "dev", "--max-queues", "75", "--monthly-msgs-quota", "1000000", "--req-burst", "unlimited", "--feature", "streams=on")
		if !strings.HasPrefix(out, "updated plan \"dev\"; gateways reload the limits of its 1 cluster(s)\n") {
			t.Fatalf("plan set: %q", out)
		}
		var dev struct {
			Limits map[string]*int64
		}
		q.okJSON(t, &dev, "plan", "set", "dev")
		if *dev.Limits["max_queues"] != 75 || *dev.Limits["monthly_msgs_quota"] != 1000000 || dev.Limits["req_burst"] != nil {
			t.Fatalf("plan set dev --json: %+v", dev)
		}
		if out := q.ok(t, "plan", "set", "gold", "--cell-class", "dedicated", "--max-queues", "5000"); !strings.HasPrefix(out, "created plan \"gold\"\n") {
			t.Fatalf("plan set gold: %q", out)
		}
		q.fails(t, 1, "queen plan set: plan \"platinum\" does not exist; a new plan needs a cell class (shared or dedicated)\n", "plan", "set", "platinum")
		q.fails(t, 1, "queen plan set: invalid max_queues \"0\": use a whole number above 0 or \"unlimited\"\n", "plan", "set", "dev", "--max-queues", "0")

		// usage (all formats; the walk-through checks the numbers)
		if rows := lines(q.ok(t, "usage")); len(rows) != 4 || !strings.HasPrefix(rows[0][0], "usage from ") ||
			strings.Join(rows[1], "|") != "CLUSTER|TENANT|BILLABLE MSGS|DELIVERED (NOT BILLED)|REQUESTS|BYTES IN|BYTES OUT" {
			t.Fatalf("usage: %q", rows)
		}
		if out := q.ok(t, "usage", "--format", "csv", "--tenant", "beta", "--month", "2026-01"); out !=
			"cluster,tenant,requests,messages,pushed,delivered,bytes_in,bytes_out,billable_messages\nbeta-1,beta,0,0,0,0,0,0,0\n" {
			t.Fatalf("usage --format csv: %q", out)
		}

		// tenant suspend | resume | delete (three steps, and forced)
		if out := q.ok(t, "tenant", "suspend", "acme"); out != "tenant \"acme\" is suspended: gateways refuse all traffic to its 1 cluster(s)\n" {
			t.Fatalf("tenant suspend: %q", out)
		}
		if out := q.ok(t, "tenant", "suspend", "acme", "--grace"); out != "tenant \"acme\" is in grace: gateways refuse pushes to its 1 cluster(s); consuming still works\n" {
			t.Fatalf("tenant suspend --grace: %q", out)
		}
		if out := q.ok(t, "tenant", "resume", "acme"); out != "tenant \"acme\" is active: its 1 cluster(s) serve traffic again\n" {
			t.Fatalf("tenant resume: %q", out)
		}
		tenants := lines(q.ok(t, "tenant", "list"))
		if len(tenants) != 4 || strings.Join(tenants[1][:5], "|") != "acme|Acme Inc|active|1|1" || strings.Join(tenants[2][:5], "|") != "beta|beta|active|1|1" ||
			strings.Join(tenants[3][:5], "|") != "platform|Platform operators|active|0|0" {
			t.Fatalf("tenant list: %q", tenants)
		}

		q.fails(t, 1, "queen tenant delete: tenant \"acme\" is active, not deleting: stop its traffic and purge its clusters first; "+
			"run \"caddy queen tenant delete acme\" (step 1) and purge its clusters (step 2) first\n", "tenant", "delete", "acme", "--purged")
		brokerTenant := cp.scalar(`SELECT broker_tenant_uuid::text FROM queen_proxy.clusters WHERE slug = 'acme-prod'`)
		out = q.ok(t, "tenant", "delete", "acme")
		step := lines(out)
		if len(step) != 6 || step[0][0] != "step 1 of 3 done: tenant \"acme\" is now deleting; gateways refuse all of its traffic" ||
			strings.Join(step[3], "|") != "CLUSTER|CELL|BROKER|PURGE" ||
			strings.Join(step[4], "|") != "acme-prod|eu1-b|http://192.0.2.8:6632|SELECT queen.delete_tenant_data_v1('"+brokerTenant+"');" ||
			step[5][0] != "step 3 of 3: caddy queen tenant delete acme --purged" {
			t.Fatalf("tenant delete (step 1):\n%s", out)
		}
		if again := q.ok(t, "tenant", "delete", "acme"); !strings.HasPrefix(again, "step 1 of 3 was already done") {
			t.Fatalf("tenant delete (step 1 again): %q", again)
		}
		q.fails(t, 1, "queen tenant resume: tenant \"acme\" is being deleted (status deleting); finish the deletion, or force the change if no cluster has been purged yet\n",
			"tenant", "resume", "acme")
		audit := cp.scalar(`SELECT count(*)::text FROM queen_proxy.operations o JOIN queen_proxy.tenants t ON t.id = o.tenant_id
			WHERE t.slug = 'acme'`)
		if out := q.ok(t, "tenant", "delete", "acme", "--purged"); out != "deleted tenant \"acme\": 1 cluster(s), 1 user(s), 2 API key(s) (1 revoked now), "+audit+" audit row(s)\n" {
			t.Fatalf("tenant delete --purged: %q", out)
		}
		q.fails(t, 1, "queen tenant delete: unknown tenant \"acme\"\n", "tenant", "delete", "acme", "--purged")
		var forced struct {
			Deleted, Forced bool
			StatusWas       string `json:"status_was"`
		}
		q.okJSON(t, &forced, "tenant", "delete", "beta", "--force")
		if !forced.Deleted || !forced.Forced || forced.StatusWas != "active" {
			t.Fatalf("tenant delete --force: %+v", forced)
		}
		// The operators' tenant is all that is left, and stays.
		if n := cp.scalar(`SELECT string_agg(slug, ',') FROM queen_proxy.tenants`); n != "platform" {
			t.Fatalf("tenants left: %s", n)
		}
		q.fails(t, 1, "queen tenant delete: the platform tenant platform holds the operators and cannot be deleted\n", "tenant", "delete", "platform", "--force")
		// An operator needs no customer's tenant.
		q.fails(t, 1, "queen user create: --tenant is required (or --operator, for a platform operator)\n", "user", "create", "root@ops.test")
		r = q.run(t, nil, "the operator's password\n", "user", "create", "root@ops.test", "--operator", "--password-stdin")
		if r.code != 0 || !strings.HasPrefix(r.stdout, `created user "root@ops.test" in tenant "platform", id `) || !strings.Contains(r.stdout, "operator: yes") {
			t.Fatalf("user create --operator: %d %q %q", r.code, r.stdout, r.stderr)
		}
		if cp.scalar(`SELECT is_operator::text FROM queen_proxy.users WHERE email = 'root@ops.test'`) != "true" {
			t.Fatal("user create --operator did not set the operator bit")
		}
	})

	t.Run("walk-through: provision with the CLI, push through the gateway, read usage", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		q := newCLI(url)
		// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
		broker := startBroker(t, fakebroker.Options{Name: "walk-cell", RequireTenant: true})

		q.ok(t, "migrate")
		q.ok(t, "cell", "add", "walk-cell", "--region", "eu1", "--url", broker.URL())
		q.ok(t, "tenant", "create", "walk", "--name", "Walk Ltd")
		var cl struct {
			ID               string
			BrokerTenantUUID string `json:"broker_tenant_uuid"`
		}
		q.okJSON(t, &cl, "cluster", "create", "walk-prod", "--tenant", "walk", "--plan", "pro")
		out := q.ok(t, "key", "create", "--cluster", "walk-prod", "--name", "app", "--scopes", "produce,consume")
		m := regexp.MustCompile(`key \(shown once, store it now\): (qk_live_\S+)\n`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("key create printed no key:\n%s", out)
		}
		key := m[1]

		port := freePort(t)
		startGateway(t, gatewayCaddyfile(port, url, "", ""))
		c := client(port)
		push := do(t, c, "POST", fmt.Sprintf("http://walk-prod.eu1.example.test:%d/api/v1/push", port), key,
			`{"items":[{"queue":"orders","payload":{"n":1}}]}`)
		if push.status != http.StatusOK || !strings.Contains(string(push.body), `"status":"queued"`) {
			t.Fatalf("push with the CLI's key: %d %s", push.status, push.body)
		}
		seen := forwarded(broker)
		if len(seen) != 1 || seen[0].Header.Get("X-Queen-Tenant") != cl.BrokerTenantUUID {
			t.Fatalf("broker saw %d requests (x-queen-tenant %q), want 1 for %s", len(seen), seen[0].Header.Get("X-Queen-Tenant"), cl.BrokerTenantUUID)
		}

		// Known rows, so the report's arithmetic is checked exactly: one
		// closed minute plus an earlier rolled-up day (the gateway's own
		// meter writes this push only when its minute closes;
		// TestREADMEWalkThrough reads what the meter wrote).
		cp := newControlPlane(t, url)
		now := time.Now().UTC()
		minute := now.Truncate(time.Minute).Add(-time.Minute)
		cp.exec(`INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs, bytes_in, bytes_out)
			VALUES ($1::uuid, $2, 'push', 1, 1, 49, 60), ($1::uuid, $2, 'delivery', 1, 1, 0, 120)`, cl.ID, minute)
		yesterday := now.Truncate(24*time.Hour).AddDate(0, 0, -1)
		cp.exec(`INSERT INTO queen_proxy.usage_days (cluster_id, day, op_class, msgs, reqs, bytes_in, bytes_out)
			VALUES ($1::uuid, $2::date, 'push', 10, 2, 500, 100)`, cl.ID, yesterday.Format(time.DateOnly))

		from := yesterday.Format(time.DateOnly)
		to := now.Add(time.Minute).Format(time.RFC3339)
		csvOut := q.ok(t, "usage", "--from", from, "--to", to, "--format", "csv")
		if want := "cluster,tenant,requests,messages,pushed,delivered,bytes_in,bytes_out,billable_messages\nwalk-prod,walk,4,12,11,1,549,280,11\n"; csvOut != want {
			t.Fatalf("usage csv:\n%s\nwant:\n%s", csvOut, want)
		}
		var rep struct {
			From, To time.Time
			Clusters []struct {
				Cluster, Tenant            string
				Requests, Messages, Pushed int64
				Delivered                  int64
				BillableMessages           int64 `json:"billable_messages"`
				BytesIn                    int64 `json:"bytes_in"`
				BytesOut                   int64 `json:"bytes_out"`
			}
		}
		q.okJSON(t, &rep, "usage", "--from", from, "--to", to, "--cluster", "walk-prod")
		if len(rep.Clusters) != 1 || rep.Clusters[0].Pushed != 11 || rep.Clusters[0].BillableMessages != 11 || rep.Clusters[0].BytesOut != 280 ||
			rep.From.Format(time.DateOnly) != from {
			t.Fatalf("usage --json: %+v", rep)
		}
		var same bytes.Buffer
		same.WriteString(q.ok(t, "usage", "--from", from, "--to", to, "--format", "json", "--cluster", "walk-prod"))
		if !json.Valid(same.Bytes()) {
			t.Fatalf("usage --format json is not JSON: %s", same.String())
		}
		table := lines(q.ok(t, "usage", "--from", from, "--to", to))
		if len(table) != 3 || strings.Join(table[2], "|") != "walk-prod|walk|11|1|4|549|280" {
			t.Fatalf("usage table: %q", table)
		}

		// Revoking the key with the CLI locks the client out.
		var keys []struct{ ID string }
		q.okJSON(t, &keys, "key", "list", "--cluster", "walk-prod")
		q.ok(t, "key", "revoke", keys[0].ID)
		eventually(t, 5*time.Second, func() error {
			r := do(t, c, "POST", fmt.Sprintf("http://walk-prod.eu1.example.test:%d/api/v1/push", port), key,
				`{"items":[{"queue":"orders","payload":{"n":2}}]}`)
			if r.status != http.StatusUnauthorized {
				return fmt.Errorf("push with a revoked key: %d", r.status)
			}
			return nil
		})
	})
}
