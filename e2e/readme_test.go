package e2e

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// walkThrough returns the shell lines of the README's walk-through.
func walkThrough(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- walk-through -->\\s*```sh\\n(.*?)```\\s*<!-- /walk-through -->").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no walk-through block")
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(m[1])), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// shellWords splits a command line the way the README's lines need:
// spaces, with double or single quotes grouping.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	quote, in := byte(0), false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '"' || c == '\'':
			quote, in = c, true
		case c == ' ':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// TestREADMEWalkThrough runs the README's walk-through as written: every
// `caddy queen` line through the built binary against a fresh database,
// the curl line as the same HTTP request through a real gateway, and
// checks that the usage it prints counts the push.
func TestREADMEWalkThrough(t *testing.T) {
	url := pgtest.NewDatabase(t)
	q := cliFor(t)(url)
	broker := startBroker(t, fakebroker.Options{Name: "readme-cell", RequireTenant: true})
	port := freePort(t)
	var key, usage string
	gatewayUp := false
	for _, line := range walkThrough(t) {
		words := shellWords(line)
		switch {
		case len(words) > 2 && words[0] == "caddy" && words[1] == "queen":
			args := words[2:]
			for i, a := range args {
				if a == "http://10.0.0.7:6632" { // the README's example cell
					args[i] = broker.URL()
				}
			}
			out := q.ok(t, args...)
			if m := regexp.MustCompile(`(qk_live_[A-Za-z0-9_-]{43})`).FindStringSubmatch(out); m != nil {
				key = m[1]
			}
			if args[0] == "usage" {
				usage = out
			}
		case words[0] == "curl":
			if key == "" {
				t.Fatal("the walk-through pushes before it created a key")
			}
			if !gatewayUp {
				// Usage is flushed per closed minute; the test stops the
				// gateway after the push, which drains the open one.
				startGateway(t, gatewayCaddyfile(port, url, "meter_flush_interval 1s\n\t\tspool_dir "+t.TempDir(), ""))
				gatewayUp = true
			}
			var body, target string
			for i := 1; i < len(words); i++ {
				switch {
				case words[i] == "-d":
					i++
					body = words[i]
				case words[i] == "-H":
					i++
					if !strings.Contains(words[i], "$KEY") {
						t.Fatalf("unexpected header in the README: %s", words[i])
					}
				case strings.HasPrefix(words[i], "https://"):
					target = words[i]
				}
			}
			host := strings.TrimSuffix(strings.TrimPrefix(strings.SplitN(target, "/api/", 2)[0], "https://"), ".eu1.example.com")
			r := do(t, client(port), "POST", fmt.Sprintf("http://%s.eu1.example.test:%d/api/%s", host, port, strings.SplitN(target, "/api/", 2)[1]), key, body)
			if r.status != http.StatusOK || !strings.Contains(string(r.body), `"status":"queued"`) {
				t.Fatalf("the README's push: %d %s", r.status, r.body)
			}
			if err := caddy.Stop(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("the walk-through has a line the test cannot run: %s", line)
		}
	}
	// usage --cluster acme-prod prints a table: header, then the cluster.
	rows := lines(usage)
	if len(rows) < 3 || rows[2][0] != "acme-prod" {
		t.Fatalf("usage printed:\n%s", usage)
	}
	header := rows[1]
	for i, h := range header {
		if strings.EqualFold(h, "pushed") && rows[2][i] != "1" {
			t.Fatalf("usage shows %s pushed, want the README's one push:\n%s", rows[2][i], usage)
		}
	}
}
