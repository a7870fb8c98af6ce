package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// TestDevCommandFromREADME runs README's first command the way a newcomer
// does (no database configured, no broker running): the launcher, which
// builds the gateway and runs it. It follows the printed
// instructions: push and pop through the gateway with the printed key, open
// the printed console URL and sign in as the printed dev admin, see the push
// in the console's usage, and run the printed `caddy queen usage` line until
// it bills the push.
func TestDevCommandFromREADME(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "queengate-dev")
	build := exec.Command("go", "build", "-o", bin, "../cmd/queengate-dev")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/queengate-dev: %v\n%s", err, out)
	}
	port := freePort(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"QUEENGATE_DATABASE_URL=",
		fmt.Sprintf("QUEENGATE_HTTP_PORT=%d", port),
		fmt.Sprintf("QUEENGATE_BROKER_URL=http://127.0.0.1:%d", freePort(t)),
	)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
	})

	printedLines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			printedLines <- sc.Text()
		}
		close(printedLines)
		exited <- cmd.Wait()
	}()
	var printed strings.Builder
	keyPattern := regexp.MustCompile(`Dev API key \(shown once\): (qk_dev_[A-Za-z0-9_-]{43})`)
	consolePattern := regexp.MustCompile(`^Console \(.*\): (http://dev\.localhost:\d+/console/)$`)
	fleetPattern := regexp.MustCompile(`^Fleet \(.*\): (http://dev\.localhost:\d+/console/fleet)$`)
	adminPattern := regexp.MustCompile(`^Dev admin: (\S+@\S+)$`)
	passwordPattern := regexp.MustCompile(`^Dev admin password \(shown once\): (\S{24})$`)
	usagePattern := regexp.MustCompile(`^  (go run \./cmd/caddy queen usage --cluster dev .*)$`)
	sdkPattern := regexp.MustCompile(`^SDK \(url and bearerToken\): (http://127\.0\.0\.1:\d+) `)
	var key, consoleURL, fleetURL, admin, password, usageCmd, sdkURL string
	// The shell lines it prints: the export, then each curl command with
	// its continuation lines.
	var shellLines []string
	continued := false
	deadline := time.After(2 * time.Minute)
	for !strings.Contains(printed.String(), "Press Ctrl-C to stop.") {
		select {
		case line, ok := <-printedLines:
			if !ok {
				t.Fatalf("queengate-dev exited early:\n%s\nstderr:\n%s", printed.String(), stderr.String())
			}
			printed.WriteString(line + "\n")
			if m := keyPattern.FindStringSubmatch(line); m != nil {
				key = m[1]
			}
			if m := consolePattern.FindStringSubmatch(line); m != nil {
				consoleURL = m[1]
			}
			if m := fleetPattern.FindStringSubmatch(line); m != nil {
				fleetURL = m[1]
			}
			if m := adminPattern.FindStringSubmatch(line); m != nil {
				admin = m[1]
			}
			if m := passwordPattern.FindStringSubmatch(line); m != nil {
				password = m[1]
			}
			if m := usagePattern.FindStringSubmatch(line); m != nil {
				usageCmd = m[1]
			}
			if m := sdkPattern.FindStringSubmatch(line); m != nil {
				sdkURL = m[1]
			}
			if cmdLine := strings.TrimPrefix(line, "  "); continued || strings.HasPrefix(cmdLine, "export QUEEN_API_KEY=") || strings.HasPrefix(cmdLine, "curl ") {
				shellLines = append(shellLines, strings.TrimSpace(cmdLine))
				continued = strings.HasSuffix(cmdLine, "\\")
			}
		case <-deadline:
			t.Fatalf("queengate-dev not ready within 2 minutes:\n%s\nstderr:\n%s", printed.String(), stderr.String())
		}
	}
	go func() {
		for range printedLines { // keep draining so the program never blocks on stdout
		}
	}()
	if key == "" || !strings.Contains(printed.String(), "IN-MEMORY FAKE BROKER") {
		t.Fatalf("output lacks the key or the fake-broker label:\n%s", printed.String())
	}
	// Before anything else it says that the first build takes minutes,
	// since go build is silent until it is done.
	if first, _, _ := strings.Cut(printed.String(), "\n"); !strings.Contains(first, "first build") || !strings.Contains(first, "minutes") {
		t.Fatalf("the first line does not say the first build takes minutes: %q", first)
	}
	// Its fake broker is in the public broker's mode, and says so.
	if !strings.Contains(printed.String(), "Mode: NO TENANCY, like the public Queen 0.15 broker") ||
		!strings.Contains(printed.String(), "QUEENGATE_DEV_TENANCY=header") {
		t.Fatalf("output does not say the fake broker has no tenancy and how to switch:\n%s", printed.String())
	}
	if consoleURL == "" || admin == "" || password == "" || usageCmd == "" {
		t.Fatalf("output lacks the console URL (%q), the dev admin (%q), its password (%q) or the usage line (%q):\n%s",
			consoleURL, admin, password, usageCmd, printed.String())
	}
	if n := strings.Count(printed.String(), password); n != 1 {
		t.Fatalf("the password is printed %d times, want once:\n%s", n, printed.String())
	}

	c := client(port)
	base := fmt.Sprintf("http://dev.localhost:%d", port)
	// The printed push and pop, run as printed: they reach the dev cluster at
	// the SDK's address, 127.0.0.1, with the key alone naming the cluster.
	if sdkURL != fmt.Sprintf("http://127.0.0.1:%d", port) || len(shellLines) != 4 {
		t.Fatalf("output lacks the SDK address (%q) or the export, push and pop lines (%q):\n%s", sdkURL, shellLines, printed.String())
	}
	sh := exec.Command("bash", "-euo", "pipefail", "-c", strings.Join(shellLines, "\n"))
	sh.Env = append(os.Environ(), "QUEEN_API_KEY=")
	out, err := sh.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"status":"queued"`) || !strings.Contains(string(out), `"msg":"hi"`) {
		t.Fatalf("the printed push and pop: %v\n%s", err, out)
	}

	// What it says is what runs: serving the dev cluster, the gateway's own
	// probe records the dev cell as unscoped, as it would in front of the
	// public broker.
	m := regexp.MustCompile(`--database-url '([^']+)'`).FindStringSubmatch(usageCmd)
	if m == nil {
		t.Fatalf("the usage line names no database: %s", usageCmd)
	}
	pool, err := pgxpool.New(context.Background(), m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pollEvery(t, 30*time.Second, 200*time.Millisecond, func() error {
		var verdict string
		if err := pool.QueryRow(context.Background(),
			`SELECT tenant_scoping FROM queen_proxy.cells WHERE slug = 'dev-local'`).Scan(&verdict); err != nil {
			return err
		}
		if verdict != "unscoped" {
			return fmt.Errorf("the dev cell's recorded verdict is %q, want unscoped (the fake broker in the public broker's mode)", verdict)
		}
		return nil
	})

	// The console, as a browser gets to it from the printed URL.
	console := strings.TrimSuffix(consoleURL, "/console/")
	if console != base {
		t.Fatalf("console URL %s is not on the dev cluster's host %s", consoleURL, base)
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	cc := consoleClient{t: t, c: c, origin: console}
	if r := cc.do("GET", "/console/", "", "", ""); r.status != http.StatusFound || !strings.HasPrefix(r.header.Get("Location"), "/auth/login?next=") {
		t.Fatalf("console without a session: %d %s", r.status, r.header.Get("Location"))
	}
	if r := cc.do("GET", "/auth/login?next=/console/", "", "", ""); r.status != 200 || !strings.Contains(string(r.body), "<form") {
		t.Fatalf("sign-in page: %d %s", r.status, r.body)
	}
	if r := cc.do("POST", "/auth/login", "", "application/x-www-form-urlencoded", "email="+url.QueryEscape(admin)+"&password=wrong-password"); r.status != http.StatusUnauthorized {
		t.Fatalf("sign-in with a wrong password: %d %s", r.status, r.body)
	}
	session := cc.login(admin, password)
	if r := cc.do("GET", "/console/", session, "", ""); r.status != 200 || !strings.Contains(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("console with a session: %d %s", r.status, r.header.Get("Content-Type"))
	}
	o := cc.do("GET", "/api/console/overview", session, "", "").json(t)
	if o["slug"] != "dev" || o["role"] != "admin" {
		t.Fatalf("console overview %v, want cluster dev with role admin", o)
	}
	// The fleet is one click away: the dev admin is an operator (the
	// console shows the Fleet tab for operator: true), and the printed
	// fleet URL serves the app, whose view reads the fleet routes.
	if o["operator"] != true {
		t.Fatalf("console overview %v: the dev admin is not an operator, so the console hides the fleet", o)
	}
	if fleetURL != consoleURL+"fleet" {
		t.Fatalf("printed fleet URL %q, want %q", fleetURL, consoleURL+"fleet")
	}
	if r := cc.do("GET", "/console/fleet", session, "", ""); r.status != 200 || !strings.Contains(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("fleet page: %d %s", r.status, r.header.Get("Content-Type"))
	}
	cells := cc.do("GET", "/api/operator/cells", session, "", "").json(t)
	if cs, _ := cells["cells"].([]any); len(cs) != 1 || cs[0].(map[string]any)["slug"] != "dev-local" {
		t.Fatalf("fleet cells %v, want the dev cell", cells)
	}
	var fleetTenants []string
	for _, tn := range cc.do("GET", "/api/operator/tenants", session, "", "").json(t)["tenants"].([]any) {
		fleetTenants = append(fleetTenants, tn.(map[string]any)["slug"].(string))
	}
	if strings.Join(fleetTenants, ",") != "dev,platform" {
		t.Fatalf("fleet tenants %v, want dev and platform", fleetTenants)
	}
	// The push is in the console's usage at once (from the meter's unwritten
	// counts), and billed in usage_minutes once its minute is flushed.
	consolePushes := func() (msgs int64, live bool) {
		r := cc.do("GET", "/api/console/usage?hours=1", session, "", "")
		if r.status != 200 {
			t.Fatalf("console usage: %d %s", r.status, r.body)
		}
		var u struct {
			Minutes []struct {
				Op   string
				Msgs int64
				Live bool
			}
		}
		if err := json.Unmarshal(r.body, &u); err != nil {
			t.Fatalf("console usage: %v: %s", err, r.body)
		}
		for _, m := range u.Minutes {
			if m.Op == "push" {
				msgs += m.Msgs
				live = live || m.Live
			}
		}
		return msgs, live
	}
	if msgs, _ := consolePushes(); msgs != 1 {
		t.Fatalf("the console's usage shows %d pushed messages, want 1", msgs)
	}

	// The printed usage line, run as printed from the repository root.
	runUsage := func() []string {
		t.Helper()
		usage := exec.Command("bash", "-c", usageCmd)
		usage.Dir = ".."
		usage.Env = append(os.Environ(), "QUEENGATE_DATABASE_URL=")
		var errOut strings.Builder
		usage.Stderr = &errOut // go run's own messages, if any
		out, err := usage.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s%s", usageCmd, err, out, errOut.String())
		}
		rows := lines(string(out))
		if len(rows) < 3 || rows[2][0] != "dev" {
			t.Fatalf("%s printed no row for the dev cluster:\n%s", usageCmd, out)
		}
		pushed := slices.IndexFunc(rows[1], func(h string) bool { return strings.EqualFold(h, "billable msgs") })
		if pushed < 0 {
			t.Fatalf("%s printed no billable messages column:\n%s", usageCmd, out)
		}
		return []string{rows[2][pushed], string(out)}
	}
	runUsage()
	pollEvery(t, 100*time.Second, 2*time.Second, func() error {
		if msgs, live := consolePushes(); msgs != 1 || live {
			return fmt.Errorf("the push's minute is not flushed yet (%d pushed, live %v)", msgs, live)
		}
		return nil
	})
	if got := runUsage(); got[0] != "1" {
		t.Fatalf("%s bills %s pushed messages, want the one push:\n%s", usageCmd, got[0], got[1])
	}

	// The Connect page, as the dev admin sees it, names the SDK's address
	// and the key, and the JavaScript SDK's requests sent to exactly that
	// (Node's fetch, the recorded requests of queen-mq 0.15.0, which the
	// registry here does not serve) all work, the consume loop's
	// per-message acknowledgements of a full batch included: the dev
	// cluster's limits leave room for them.
	conn := cc.do("GET", "/api/console/connect", session, "", "").json(t)
	if conn["url"] != sdkURL || conn["api_key_env"] != "QUEEN_API_KEY" {
		t.Fatalf("the Connect page gives %v, want the printed SDK address %s", conn, sdkURL)
	}
	snippets := map[string]string{}
	for _, s := range conn["snippets"].([]any) {
		s := s.(map[string]any)
		snippets[s["lang"].(string)] = s["code"].(string)
	}
	if js := snippets["js"]; !strings.Contains(js, "url: '"+sdkURL+"'") || !strings.Contains(js, "bearerToken: process.env.QUEEN_API_KEY") {
		t.Fatalf("the Connect page's JavaScript snippet does not pass url %s and bearerToken:\n%s", sdkURL, js)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("the SDK check needs Node.js on PATH: %v", err)
	}
	replay := exec.Command(node, filepath.Join("sdk", "session.mjs"), filepath.Join("..", "testdata", "broker", "sdk-js-session.jsonl"))
	replay.Env = append(os.Environ(), "QUEEN_URL="+conn["url"].(string), "QUEEN_API_KEY="+key)
	if out, err := replay.CombinedOutput(); err != nil {
		t.Fatalf("the SDK's requests to %s: %v\n%s", conn["url"], err, out)
	} else {
		t.Logf("SDK session through the dev gateway: %s", strings.TrimSpace(string(out)))
	}
	// The page's curl snippet, run as shown with the key in QUEEN_API_KEY.
	curlSnippet := exec.Command("bash", "-euo", "pipefail", "-c", snippets["sh"])
	curlSnippet.Env = append(os.Environ(), "QUEEN_API_KEY="+key)
	if out, err := curlSnippet.CombinedOutput(); err != nil || !strings.Contains(string(out), `"status":"queued"`) || !strings.Contains(string(out), `"orderId":1`) {
		t.Fatalf("the Connect page's curl snippet: %v\n%s", err, out)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("queengate-dev exit: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("queengate-dev did not stop within 30s of SIGINT")
	}
}
