//go:build realbroker

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/internal/realbroker"
	"github.com/queengate/queengate/provision"
)

// pageStep is one code block of docs/automating.md, in the page's order:
// a Caddyfile, a console of `caddy queen` commands, a request with the
// answer the page shows, or a JSON delivery the page says arrives.
type pageStep struct {
	line    int
	section string
	kind    string // caddyfile, console, http, json
	text    string

	// http: the request and its answer.
	method, path string
	header       []string
	body         string
	status       int
	answer       string
}

// readAutomatingPage reads the fenced blocks of docs/automating.md; an
// http request block is followed by its answer block.
func readAutomatingPage(t *testing.T) []pageStep {
	t.Helper()
	f, err := os.Open("../docs/automating.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type block struct {
		line          int
		section, lang string
		lines         []string
	}
	var blocks []block
	var cur *block
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		case cur == nil && strings.HasPrefix(line, "```") && len(line) > 3:
			cur = &block{line: n, section: section, lang: strings.TrimPrefix(line, "```")}
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		}
	}
	var steps []pageStep
	for i := 0; i < len(blocks); i++ {
		b := blocks[i]
		st := pageStep{line: b.line, section: b.section, kind: b.lang, text: strings.Join(b.lines, "\n")}
		switch b.lang {
		case "caddyfile", "console", "json":
		case "http":
			method, path, ok := strings.Cut(b.lines[0], " ")
			if !ok || strings.HasPrefix(method, "HTTP/") {
				t.Fatalf("automating.md:%d: an answer without its request", b.line)
			}
			st.method, st.path = method, path
			j := 1
			for ; j < len(b.lines) && b.lines[j] != ""; j++ {
				name, value, _ := strings.Cut(b.lines[j], ": ")
				st.header = append(st.header, name, value)
			}
			st.body = strings.TrimSpace(strings.Join(b.lines[min(j, len(b.lines)):], "\n"))
			if i+1 >= len(blocks) || blocks[i+1].lang != "http" || !strings.HasPrefix(blocks[i+1].lines[0], "HTTP/1.1 ") {
				t.Fatalf("automating.md:%d: a request without its answer", b.line)
			}
			i++
			ans := blocks[i].lines
			if st.status, err = strconv.Atoi(strings.Fields(ans[0])[1]); err != nil {
				t.Fatalf("automating.md:%d: %v", blocks[i].line, err)
			}
			st.answer = strings.TrimSpace(strings.Join(ans[1:], "\n"))
		default:
			t.Fatalf("automating.md:%d: a %q block the test does not follow", b.line, b.lang)
		}
		steps = append(steps, st)
	}
	return steps
}

// hostingReceiver is the hosting business's side: the alerting hook
// (webhooks) and the billing system (usage CloudEvents, deduplicated by
// id as OpenMeter does).
type hostingReceiver struct {
	mu       sync.Mutex
	hooks    []webhookDelivery
	usage    map[string]map[string]any // id -> event
	repeats  int
	received int
}

type webhookDelivery struct {
	header http.Header
	body   []byte
	at     time.Time
}

func (h *hostingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch r.URL.Path {
	case "/queen":
		h.hooks = append(h.hooks, webhookDelivery{header: r.Header.Clone(), body: body, at: time.Now()})
		w.WriteHeader(http.StatusNoContent)
	case "/api/v1/events":
		var events []map[string]any
		if r.Header.Get("Content-Type") != "application/cloudevents-batch+json" || json.Unmarshal(body, &events) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, e := range events {
			id, _ := e["id"].(string)
			if _, seen := h.usage[id]; seen {
				h.repeats++
				continue
			}
			h.usage[id] = e
		}
		h.received++
		w.WriteHeader(http.StatusAccepted)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// usageSums sums the CloudEvents of a cluster per op class.
func (h *hostingReceiver) usageSums(clusterID string) map[string][2]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][2]int64{}
	for _, e := range h.usage {
		d, _ := e["data"].(map[string]any)
		if d["cluster_id"] != clusterID {
			continue
		}
		op, _ := d["op_class"].(string)
		reqs, _ := d["reqs"].(float64)
		msgs, _ := d["msgs"].(float64)
		s := out[op]
		out[op] = [2]int64{s[0] + int64(reqs), s[1] + int64(msgs)}
	}
	return out
}

var pageCapture = regexp.MustCompile(`^\{([a-z_]+)\}$`)

// pageMatch holds got to what the page shows: every member shown (others
// are not compared), "…" for any value, "{name}" for a captured value (a
// new name is captured when capture is set).
func pageMatch(want, got any, vars map[string]string, capture bool) error {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%v is not an object", got)
		}
		for k, wv := range w {
			gv, has := g[k]
			if !has {
				return fmt.Errorf("no %q", k)
			}
			if err := pageMatch(wv, gv, vars, capture); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
		return nil
	case string:
		if w == "…" {
			return nil
		}
		if m := pageCapture.FindStringSubmatch(w); m != nil {
			v, known := vars[m[1]]
			if !known {
				if !capture {
					return fmt.Errorf("{%s} was not captured earlier", m[1])
				}
				s, isString := got.(string)
				if !isString || s == "" {
					return fmt.Errorf("{%s}: %v is not a string", m[1], got)
				}
				vars[m[1]] = s
				return nil
			}
			w = v
		}
		if got != w {
			return fmt.Errorf("%v, the page shows %q", got, w)
		}
		return nil
	}
	wj, _ := json.Marshal(want)
	gj, _ := json.Marshal(got)
	if string(wj) != string(gj) {
		return fmt.Errorf("%s, the page shows %s", gj, wj)
	}
	return nil
}

// TestAutomatingAHostingBusiness follows docs/automating.md in front of the
// real broker: a signup service provisions a tenant, a cluster (with a
// small monthly quota) and a key through the API, twice with the same
// result, after registering a webhook endpoint; the customer pushes and
// pops through the gateway; the billing system receives the usage as
// CloudEvents and the hook a signed quota warning; the service suspends
// the cluster and the next push is refused. The usage events summed equal
// usage_minutes, which equal what the broker stored.
func TestAutomatingAHostingBusiness(t *testing.T) {
	steps := readAutomatingPage(t)
	broker := realbroker.Start(t)
	brokerPool := broker.Pool(t)
	dbURL := pgtest.NewDatabase(t)
	cp := newControlPlane(t, dbURL)
	cp.cell("eu1-a", broker.URL, "")
	q := cliFor(t)(dbURL)

	recv := &hostingReceiver{usage: map[string]map[string]any{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: recv, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	// The page's receivers are the test's.
	hosts := strings.NewReplacer("https://hooks.example.com", "http://"+l.Addr().String(),
		"https://billing.example.com", "http://"+l.Addr().String())

	// The gateway runs what the page's Caddyfile says, on a test port and
	// over plain HTTP, with the periods shortened: the quota runs every
	// second rather than every five minutes.
	port := freePort(t)
	startGateway(t, fmt.Sprintf(`{
	admin off
	persist_config off
	http_port %d
	default_bind 127.0.0.1
	log {
		level ERROR
	}
	queen {
		database_url %s
		base_domain queen.example.com
		spool_dir %s
		meter_flush_interval 1s
		quota_interval 1s
		webhooks {
			poll_interval 200ms
			allow_loopback
		}
		usage_export {
			url %s/api/v1/events
			sink billing
			interval 500ms
			settle 1s
			allow_loopback
		}
	}
}
http:// {
	queen_provision
	queen_gateway
}
`, port, dbURL, t.TempDir(), hosts.Replace("https://billing.example.com")))
	c := client(port)
	api := fmt.Sprintf("http://ops.example.com:%d", port)
	router := openAPIRouter(t, api)

	vars := map[string]string{}
	expand := func(s string) string {
		for name, v := range vars {
			s = strings.ReplaceAll(s, "{"+name+"}", v)
		}
		return hosts.Replace(s)
	}
	token := ""
	run := func(st pageStep, again bool) {
		t.Helper()
		switch st.kind {
		case "caddyfile":
			if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(st.text+"\n"), map[string]any{"filename": "Caddyfile"}); err != nil {
				t.Fatalf("automating.md:%d: the Caddyfile does not adapt: %v", st.line, err)
			}
		case "console":
			out := ""
			for _, line := range strings.Split(st.text, "\n") {
				cmd, isCmd := strings.CutPrefix(line, "$ caddy queen ")
				if isCmd {
					out = q.ok(t, strings.Fields(cmd)...)
					if tok := regexp.MustCompile(`qmt_[A-Za-z0-9_-]+`).FindString(out); tok != "" {
						token = tok
					}
					continue
				}
				// An output line shown is printed, up to its first
				// elided value (without the value's shown start).
				shown, _, _ := strings.Cut(line, "…")
				if i := strings.LastIndex(shown, " "); i >= 0 && strings.Contains(line, "…") {
					shown = shown[:i]
				}
				if !strings.Contains(out, shown) {
					t.Fatalf("automating.md:%d: the command printed\n%s\nwithout %q", st.line, out, shown)
				}
			}
		case "http":
			var header []string
			var r response
			if strings.HasPrefix(st.path, provision.Prefix) {
				for i := 0; i+1 < len(st.header); i += 2 {
					if st.header[i] == "Authorization" {
						if st.header[i+1] != "Bearer $TOKEN" || token == "" {
							t.Fatalf("automating.md:%d: the API's Authorization is not the token made above", st.line)
						}
						continue
					}
					header = append(header, st.header[i], st.header[i+1])
				}
				r = provisionCall(t, c, router, st.method, api+expand(st.path), token, expand(st.body), header...)
			} else {
				r = pageDataPlane(t, c, port, st, expand)
			}
			want := st.status
			if again && st.method == http.MethodPut && want == http.StatusCreated {
				want = http.StatusOK
			}
			if r.status != want {
				t.Fatalf("automating.md:%d: %s %s answered %d %s, want %d", st.line, st.method, st.path, r.status, r.body, want)
			}
			if st.answer == "" {
				return
			}
			var shown any
			if err := json.Unmarshal([]byte(expand(st.answer)), &shown); err != nil {
				t.Fatalf("automating.md:%d: the answer shown is not JSON: %v", st.line, err)
			}
			var got any
			if err := json.Unmarshal(r.body, &got); err != nil {
				t.Fatalf("automating.md:%d: the answer %s is not JSON", st.line, r.body)
			}
			if err := pageMatch(shown, got, vars, true); err != nil {
				t.Fatalf("automating.md:%d: the answer %s: %v", st.line, r.body, err)
			}
		case "json":
			var shown map[string]any
			if err := json.Unmarshal([]byte(st.text), &shown); err != nil {
				t.Fatalf("automating.md:%d: not JSON: %v", st.line, err)
			}
			took := eventually(t, 150*time.Second, func() error {
				if _, isUsage := shown["specversion"]; isUsage {
					recv.mu.Lock()
					defer recv.mu.Unlock()
					for _, e := range recv.usage {
						if pageMatch(shown, e, vars, false) == nil {
							return nil
						}
					}
					return fmt.Errorf("no usage event as shown among %d", len(recv.usage))
				}
				return recv.verifiedDelivery(shown, vars["webhook_secret"], vars)
			})
			t.Logf("automating.md:%d arrived after %v", st.line, took.Round(time.Millisecond))
		}
	}

	signup := "3. Sign a customer up"
	var signupSteps []pageStep
	for i, st := range steps {
		run(st, false)
		if st.section == signup {
			signupSteps = append(signupSteps, st)
			if i+1 == len(steps) || steps[i+1].section != signup {
				// The service's retry of the whole signup: the same objects.
				before := fmt.Sprint(vars["tenant_id"], vars["cluster_id"], vars["key_id"], vars["key_secret"])
				for _, again := range signupSteps {
					run(again, true)
				}
				if after := fmt.Sprint(vars["tenant_id"], vars["cluster_id"], vars["key_id"], vars["key_secret"]); after != before {
					t.Fatalf("the second signup answered other objects")
				}
				if n := cp.scalar(`SELECT count(*)::text FROM queen_proxy.api_keys`); n != "1" {
					t.Fatalf("%s keys after two signups", n)
				}
			}
		}
	}
	if len(signupSteps) == 0 || vars["cluster_id"] == "" {
		t.Fatalf("the page has no section %q that provisions a cluster", signup)
	}

	// The books: the broker's, the gateway's and the billing system's.
	clusterID := vars["cluster_id"]
	stored := brokerCount(t, brokerPool, `SELECT count(*) FROM queen.messages`)
	if stored != 8 {
		t.Fatalf("the broker stored %d messages, the page pushed 8 and the refused push nothing", stored)
	}
	eventually(t, 150*time.Second, func() error {
		open := cp.scalar(`SELECT count(*)::text FROM queen_proxy.usage_minutes
			WHERE cluster_id = $1::uuid AND minute >= date_trunc('minute', now() - interval '1 second')`, clusterID)
		if open != "0" {
			return fmt.Errorf("%s rows of usage in open minutes", open)
		}
		sums := recv.usageSums(clusterID)
		for _, op := range []string{"push", "delivery", "read", "configure", "txn"} {
			reqs, msgs := cp.usageOf(clusterID, op)
			if sums[op] != [2]int64{reqs, msgs} {
				return fmt.Errorf("%s: events sum to %v, usage_minutes has %d requests and %d messages", op, sums[op], reqs, msgs)
			}
		}
		return nil
	})
	_, pushed := cp.usageOf(clusterID, "push")
	_, delivered := cp.usageOf(clusterID, "delivery")
	if pushed != stored || delivered != stored {
		t.Fatalf("usage_minutes has %d pushed and %d delivered messages; the broker stored %d", pushed, delivered, stored)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	for _, d := range recv.hooks {
		if !standardWebhookVerifies(vars["webhook_secret"], d.header, d.body) {
			t.Errorf("a delivery whose signature does not verify: %s", d.body)
		}
	}
	t.Logf("billing took %d usage events in %d requests (%d repeats dropped by id); the hook %d deliveries; broker stored %d",
		len(recv.usage), recv.received, recv.repeats, len(recv.hooks), stored)
}

// verifiedDelivery finds a webhook delivery that matches what the page
// shows and whose signature and timestamp verify.
func (h *hostingReceiver) verifiedDelivery(shown map[string]any, secret string, vars map[string]string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range h.hooks {
		var got any
		if json.Unmarshal(d.body, &got) != nil || pageMatch(shown, got, vars, false) != nil {
			continue
		}
		if !standardWebhookVerifies(secret, d.header, d.body) {
			return fmt.Errorf("the delivery %s does not verify", d.body)
		}
		ts, err := strconv.ParseInt(d.header.Get("webhook-timestamp"), 10, 64)
		if err != nil || d.at.Sub(time.Unix(ts, 0)).Abs() > 5*time.Minute {
			return fmt.Errorf("the delivery's timestamp %q is not its time", d.header.Get("webhook-timestamp"))
		}
		if d.header.Get("webhook-id") == "" {
			return fmt.Errorf("the delivery %s has no webhook-id", d.body)
		}
		return nil
	}
	return fmt.Errorf("no delivery as shown among %d", len(h.hooks))
}

// pageDataPlane sends a request of the page's customer to its cluster's
// hostname (the Host header shown), with the key it was given.
func pageDataPlane(t *testing.T, c *http.Client, port int, st pageStep, expand func(string) string) response {
	t.Helper()
	host, key := "", ""
	for i := 0; i+1 < len(st.header); i += 2 {
		switch st.header[i] {
		case "Host":
			host = st.header[i+1]
		case "Authorization":
			key = strings.TrimPrefix(expand(st.header[i+1]), "Bearer ")
		default:
			t.Fatalf("automating.md:%d: header %s the test does not send", st.line, st.header[i])
		}
	}
	if host == "" || key == "" {
		t.Fatalf("automating.md:%d: a customer's request needs its Host and its key", st.line)
	}
	return do(t, c, st.method, fmt.Sprintf("http://%s:%d%s", host, port, expand(st.path)), key, expand(st.body))
}
