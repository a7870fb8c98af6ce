package fakebroker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/uuidtext"
)

// This file replays the recorded broker traffic in testdata/broker
// against a fresh fake broker and checks every answer against the recording:
// the status code, the content type, and the shape of the body (the same
// JSON type at the top level, the same object keys at every depth, arrays
// compared through their first elements), plus the literal values that
// carry meaning: per-item statuses, success flags, error strings, which
// partition and which messages a pop delivered.
//
// Identifiers differ between the recording and the fake, so the replay keeps
// a map from recorded ids to the fake's: whenever a recorded response holds
// a UUID where the fake's response holds another, the pair is remembered and
// later requests (paths, query values, bodies) are rewritten with it.
//
// Concurrency is rebuilt from started_at_ms and elapsed_ms: an exchange that
// was still running when the next one started (a long-poll pop woken by a
// later push) is sent in the background, the next exchange waits until the
// fake reports the pop parked, and the pop's answer is checked when the
// recording says it ended. Idle time between exchanges is reproduced (capped
// at a second), so retry delays behave as they did when recorded.

// relaxedExchanges are checked less strictly than the rest: their status
// code and content type are still compared, the body only as described.
var relaxedExchanges = map[string]string{
	// The fixture keeps only the first 4 KiB of this 1 MiB pop answer, so the
	// body cannot be compared: it must parse, be a successful pop of one
	// message and have (within 1%) the recorded size.
	"C55": "truncated",
	// Prometheus text, truncated in the fixture, describing the real
	// process (CPU, memory, thread pools): the body must start with "# HELP".
	"C176": "prometheus",
	// PostgreSQL internals (cache hit ratios, dead tuples, table sizes) that
	// the fake does not have: only the top-level keys are compared.
	"C130": "toplevel",
}

// exchange is one line of a fixture file.
type exchange struct {
	file                  string
	Seq                   int               `json:"seq"`
	Name                  string            `json:"name"`
	Method                string            `json:"method"`
	Path                  string            `json:"path"`
	Query                 map[string]string `json:"query"`
	RequestHeaders        map[string]string `json:"request_headers"`
	RequestBody           json.RawMessage   `json:"request_body"`
	RequestBodyTruncated  bool              `json:"request_body_truncated"`
	RequestBodyBytes      int               `json:"request_body_bytes"`
	Status                *int              `json:"status"`
	ResponseHeaders       map[string]string `json:"response_headers"`
	ResponseBody          json.RawMessage   `json:"response_body"`
	ResponseBodyTruncated bool              `json:"response_body_truncated"`
	ResponseBodyBytes     int               `json:"response_body_bytes"`
	ElapsedMS             float64           `json:"elapsed_ms"`
	StartedAtMS           float64           `json:"started_at_ms"`
}

func (ex *exchange) label() string { return fmt.Sprintf("%s%d", ex.file, ex.Seq) }

func (ex *exchange) describe() string {
	if ex.Name != "" {
		return fmt.Sprintf("%s (%s)", ex.label(), ex.Name)
	}
	return fmt.Sprintf("%s (%s %s)", ex.label(), ex.Method, ex.Path)
}

func (ex *exchange) endMS() float64 { return ex.StartedAtMS + ex.ElapsedMS }

// brokerFixtures is the recorded traffic of the public Queen 0.15.1 broker
// (testdata/broker/README.md at the repository root).
const brokerFixtures = "../../testdata/broker"

func loadExchanges(t *testing.T, path, file string) []exchange {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("broker fixture %s is missing or unreadable: %v", path, err)
	}
	defer f.Close()
	var out []exchange
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var ex exchange
		if err := json.Unmarshal(line, &ex); err != nil {
			t.Fatalf("%s: bad line: %v", path, err)
		}
		ex.file = file
		out = append(out, ex)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no exchanges", path)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

func TestFixtureReplay(t *testing.T) {
	dir := brokerFixtures
	// The SDK session was recorded first, then the catalogue, against the
	// same broker process; replay them the same way.
	files := [][]exchange{
		loadExchanges(t, filepath.Join(dir, "sdk-js-session.jsonl"), "S"),
		loadExchanges(t, filepath.Join(dir, "curl-catalogue.jsonl"), "C"),
	}
	order := newRecordedOrder()
	b := New(Options{Name: "fixture-replay", PartitionOrder: order.less})
	srv := httptest.NewServer(b)
	defer srv.Close()
	defer b.Close()

	sum := &replaySummary{}
	start := time.Now()
	for _, exs := range files {
		r := &replayer{t: t, base: srv.URL, b: b, order: order, ids: map[string]string{}, sum: sum}
		r.run(exs)
	}
	t.Logf("fixture replay: checked %d exchanges (%d strictly, %d shape-relaxed: %s) in %v",
		sum.checked, sum.checked-sum.relaxed, sum.relaxed, strings.Join(sum.relaxedIDs, ", "),
		time.Since(start).Round(time.Millisecond))
	if sum.checked != len(files[0])+len(files[1]) {
		t.Errorf("checked %d exchanges, want %d", sum.checked, len(files[0])+len(files[1]))
	}
}

type replaySummary struct {
	checked, relaxed int
	relaxedIDs       []string
}

// recordedOrder orders a queue's partitions by their recorded ids, which is
// how the recorded broker chose among candidate partitions; it is the fake's
// Options.PartitionOrder during the replay.
type recordedOrder struct {
	mu  sync.Mutex
	ids map[[2]string]string // (queue, partition) -> recorded partition id
}

func newRecordedOrder() *recordedOrder {
	return &recordedOrder{ids: map[[2]string]string{}}
}

func (o *recordedOrder) set(queue, partition, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.ids[[2]string{queue, partition}]; !ok {
		o.ids[[2]string{queue, partition}] = id
	}
}

func (o *recordedOrder) less(queue, a, b string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	ia, okA := o.ids[[2]string{queue, a}]
	ib, okB := o.ids[[2]string{queue, b}]
	switch {
	case okA && okB:
		return ia < ib
	case okA != okB:
		return okA
	default:
		return a < b
	}
}

// learn records the partition ids a recorded exchange reveals.
func (o *recordedOrder) learn(ex *exchange, req, resp any) {
	switch ex.Path {
	case "/api/v1/configure":
		if m, ok := resp.(map[string]any); ok {
			q, _ := m["queue"].(string)
			if id, ok := m["partitionId"].(string); ok && q != "" {
				o.set(q, "Default", id)
			}
		}
	case "/api/v1/push":
		rm, _ := req.(map[string]any)
		items, _ := rm["items"].([]any)
		results, _ := resp.([]any)
		o.learnPush(items, results, "partition_id")
	case "/api/v1/transaction":
		rm, _ := req.(map[string]any)
		ops, _ := rm["operations"].([]any)
		var items []any
		for _, op := range ops {
			if om, ok := op.(map[string]any); ok && om["type"] == "push" {
				its, _ := om["items"].([]any)
				items = append(items, its...)
			}
		}
		var pushes []any
		if m, ok := resp.(map[string]any); ok {
			rs, _ := m["results"].([]any)
			for _, r := range rs {
				if rm, ok := r.(map[string]any); ok && rm["type"] == "push" {
					pushes = append(pushes, r)
				}
			}
		}
		o.learnPush(items, pushes, "partitionId")
	}
}

func (o *recordedOrder) learnPush(items, results []any, idKey string) {
	for i := 0; i < len(items) && i < len(results); i++ {
		item, _ := items[i].(map[string]any)
		res, _ := results[i].(map[string]any)
		q, _ := item["queue"].(string)
		p, ok := item["partition"].(string)
		if !ok {
			p = "Default"
		}
		if id, ok := res[idKey].(string); ok && q != "" {
			o.set(q, p, id)
		}
	}
}

// replayer replays one fixture file.
type replayer struct {
	t     *testing.T
	base  string
	b     *Broker
	order *recordedOrder
	ids   map[string]string // recorded id -> fake's id
	sum   *replaySummary
}

type result struct {
	status  int
	header  http.Header
	body    []byte
	err     error
	elapsed time.Duration
}

type inflight struct {
	ex   *exchange
	done chan result
}

func (r *replayer) run(exs []exchange) {
	var pending []*inflight
	lastEnd := exs[0].StartedAtMS
	settle := func(before float64, all bool) {
		kept := pending[:0]
		for _, f := range pending {
			if all || f.ex.endMS() <= before {
				r.check(f.ex, <-f.done)
				lastEnd = max(lastEnd, f.ex.endMS())
				continue
			}
			kept = append(kept, f)
		}
		pending = kept
	}
	for i := range exs {
		ex := &exs[i]
		settle(ex.StartedAtMS, false)
		if len(pending) == 0 {
			if gap := ex.StartedAtMS - lastEnd; gap > 0 {
				time.Sleep(min(time.Duration(gap*float64(time.Millisecond)), time.Second))
			}
		} else {
			r.waitParked(len(pending))
		}
		if i+1 < len(exs) && exs[i+1].StartedAtMS < ex.endMS() {
			f := &inflight{ex: ex, done: make(chan result, 1)}
			req := r.request(ex)
			go func() { f.done <- r.do(ex, req) }()
			pending = append(pending, f)
			continue
		}
		r.check(ex, r.do(ex, r.request(ex)))
		lastEnd = max(lastEnd, ex.endMS())
	}
	settle(0, true)
}

// waitParked waits until n pops are parked, so that the request that is
// meant to wake them really does.
func (r *replayer) waitParked(n int) {
	deadline := time.Now().Add(3 * time.Second)
	for r.b.Parked() < n {
		if time.Now().After(deadline) {
			r.t.Errorf("a background exchange never parked (Parked()=%d, want %d)", r.b.Parked(), n)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mapID translates a recorded id into the fake's.
func (r *replayer) mapID(s string) string {
	if v, ok := r.ids[s]; ok {
		return v
	}
	return s
}

// mapValue rewrites the recorded ids inside a decoded JSON value.
func (r *replayer) mapValue(v any) any {
	switch x := v.(type) {
	case string:
		return r.mapID(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.mapValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = r.mapValue(e)
		}
		return out
	}
	return v
}

func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after JSON value")
	}
	return v, nil
}

// requestBody rebuilds the bytes the client sent.
func (r *replayer) requestBody(ex *exchange) []byte {
	raw := bytes.TrimSpace(ex.RequestBody)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '"' {
		// Not JSON when recorded: the raw text (invalid-JSON cases), or the
		// first 4 KiB of a body too large to keep.
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			r.t.Fatalf("%s: bad request_body: %v", ex.describe(), err)
		}
		if ex.RequestBodyTruncated {
			return r.rebuildTruncated(ex, s)
		}
		return []byte(s)
	}
	v, err := decodeJSON(raw)
	if err != nil {
		r.t.Fatalf("%s: bad request_body: %v", ex.describe(), err)
	}
	return encodeJSON(r.mapValue(v))
}

// rebuildTruncated rebuilds a large push body the fixture kept only the
// start of (C33: one item whose payload is {"blob":"xxx..."}): the repeated
// character is extended to the recorded size and the item closed with the
// transaction id the recorded answer reports.
func (r *replayer) rebuildTruncated(ex *exchange, prefix string) []byte {
	fill := prefix[len(prefix)-1]
	head := strings.TrimRight(prefix, string(fill))
	tail := `"}}]}`
	if resp, err := decodeJSON(ex.ResponseBody); err == nil {
		if items, ok := resp.([]any); ok && len(items) == 1 {
			if m, ok := items[0].(map[string]any); ok {
				if tx, ok := m["transaction_id"].(string); ok {
					tail = `"},"transactionId":` + string(encodeJSON(tx)) + `}]}`
				}
			}
		}
	}
	n := ex.RequestBodyBytes - len(head) - len(tail)
	if n < 0 {
		r.t.Fatalf("%s: cannot rebuild the truncated request body", ex.describe())
	}
	body := []byte(head + strings.Repeat(string(fill), n) + tail)
	if !json.Valid(body) || len(body) != ex.RequestBodyBytes {
		r.t.Fatalf("%s: rebuilt request body is not valid JSON of %d bytes", ex.describe(), ex.RequestBodyBytes)
	}
	return body
}

// request builds the HTTP request for ex, with recorded ids mapped.
func (r *replayer) request(ex *exchange) *http.Request {
	segs := strings.Split(ex.Path, "/")
	for i, s := range segs {
		segs[i] = r.mapID(s)
	}
	u := r.base + strings.Join(segs, "/")
	if len(ex.Query) > 0 {
		q := url.Values{}
		for k, v := range ex.Query {
			q.Set(k, r.mapID(v))
		}
		u += "?" + q.Encode()
	}
	var body io.Reader
	if data := r.requestBody(ex); data != nil {
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequest(ex.Method, u, body)
	if err != nil {
		r.t.Fatalf("%s: %v", ex.describe(), err)
	}
	for k, v := range ex.RequestHeaders {
		req.Header.Set(k, v)
	}
	return req
}

// do sends req. A request the broker never answered (status null) is given
// half a second, then abandoned as the recording client did.
func (r *replayer) do(ex *exchange, req *http.Request) result {
	timeout := 20 * time.Second
	if ex.Status == nil {
		timeout = 500 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return result{err: err, elapsed: time.Since(start)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: data, err: err, elapsed: time.Since(start)}
}

func (r *replayer) check(ex *exchange, res result) {
	t := r.t
	t.Helper()
	r.sum.checked++
	what := ex.describe()
	if ex.Status == nil {
		if res.err == nil {
			t.Errorf("%s: the broker never answered this request, the fake answered %d %s", what, res.status, res.body)
		}
		return
	}
	if res.err != nil {
		t.Errorf("%s: %v", what, res.err)
		return
	}
	if res.status != *ex.Status {
		t.Errorf("%s: status %d, recorded %d; body %s", what, res.status, *ex.Status, abbreviate(res.body))
		return
	}
	if got, want := res.header.Get("Content-Type"), ex.ResponseHeaders["content-type"]; got != want {
		t.Errorf("%s: content-type %q, recorded %q", what, got, want)
	}
	if ex.Query["wait"] == "true" && ex.ElapsedMS >= float64(mustAtoi(ex.Query["timeout"])) {
		// A long-poll that timed out when recorded must park here too.
		if floor := time.Duration(mustAtoi(ex.Query["timeout"])-50) * time.Millisecond; res.elapsed < floor {
			t.Errorf("%s: long-poll answered after %v, want at least %v", what, res.elapsed, floor)
		}
	}
	if kind, ok := relaxedExchanges[ex.label()]; ok {
		r.sum.relaxed++
		r.sum.relaxedIDs = append(r.sum.relaxedIDs, ex.label())
		r.checkRelaxed(ex, kind, res)
		return
	}
	if ex.ResponseBodyTruncated {
		t.Errorf("%s: the recorded body is truncated; list the exchange in relaxedExchanges", what)
		return
	}
	r.checkBody(ex, res)
}

func (r *replayer) checkRelaxed(ex *exchange, kind string, res result) {
	t, what := r.t, ex.describe()
	switch kind {
	case "truncated":
		v, err := decodeJSON(res.body)
		m, _ := v.(map[string]any)
		msgs, _ := m["messages"].([]any)
		if err != nil || m["success"] != true || len(msgs) != 1 {
			t.Errorf("%s: want a successful pop of one message, got %s", what, abbreviate(res.body))
		}
		if diff := len(res.body) - ex.ResponseBodyBytes; diff*100 > ex.ResponseBodyBytes || -diff*100 > ex.ResponseBodyBytes {
			t.Errorf("%s: body is %d bytes, recorded %d", what, len(res.body), ex.ResponseBodyBytes)
		}
	case "prometheus":
		if !bytes.HasPrefix(res.body, []byte("# HELP ")) {
			t.Errorf("%s: want Prometheus text, got %s", what, abbreviate(res.body))
		}
	case "toplevel":
		rec, _ := decodeJSON(ex.ResponseBody)
		got, err := decodeJSON(res.body)
		if err != nil {
			t.Errorf("%s: body is not JSON: %v", what, err)
			return
		}
		if k1, k2 := keysOf(rec), keysOf(got); k1 != k2 {
			t.Errorf("%s: top-level keys %s, recorded %s", what, k2, k1)
		}
	default:
		t.Fatalf("%s: unknown relaxed check %q", what, kind)
	}
}

func (r *replayer) checkBody(ex *exchange, res result) {
	t, what := r.t, ex.describe()
	recRaw := bytes.TrimSpace(ex.ResponseBody)
	if len(recRaw) == 0 || string(recRaw) == "null" {
		if len(res.body) != 0 {
			t.Errorf("%s: want an empty body, got %s", what, abbreviate(res.body))
		}
		return
	}
	rec, err := decodeJSON(recRaw)
	if err != nil {
		t.Fatalf("%s: bad recorded body: %v", what, err)
	}
	if s, ok := rec.(string); ok && !strings.Contains(ex.ResponseHeaders["content-type"], "json") {
		if string(res.body) != s {
			t.Errorf("%s: body %q, recorded %q", what, abbreviate(res.body), s)
		}
		return
	}
	got, err := decodeJSON(res.body)
	if err != nil {
		t.Errorf("%s: body is not JSON (%v): %s", what, err, abbreviate(res.body))
		return
	}
	var recReq any
	if raw := bytes.TrimSpace(ex.RequestBody); len(raw) > 0 && raw[0] != '"' {
		recReq, _ = decodeJSON(raw)
	}
	// Learn ids first: ids this answer introduces then compare equal, while
	// ids already known (from earlier answers) must be the ones delivered.
	r.learnIDs(rec, got)
	r.order.learn(ex, recReq, rec)

	c := &comparer{r: r, ignore: map[string]bool{}}
	if ex.Path == "/api/v1/resources/queues" {
		// retainedBytes is this fake's deliberate extension (see doc.go).
		c.ignore["retainedBytes"] = true
	}
	c.shape("$", rec, got)
	c.values(rec, got)
	for _, d := range c.diffs {
		t.Errorf("%s: %s", what, d)
	}
	if len(c.diffs) > 0 && os.Getenv("FAKEBROKER_DEBUG") != "" {
		t.Logf("%s: got %s", what, abbreviate(res.body))
	}
}

// learnIDs pairs the UUIDs of a recorded answer with the fake's.
func (r *replayer) learnIDs(rec, got any) {
	switch x := rec.(type) {
	case string:
		if g, ok := got.(string); ok && uuidtext.Valid(x) && g != x {
			if _, known := r.ids[x]; !known {
				r.ids[x] = g
			}
		}
	case []any:
		if g, ok := got.([]any); ok {
			for i := 0; i < len(x) && i < len(g); i++ {
				r.learnIDs(x[i], g[i])
			}
		}
	case map[string]any:
		if g, ok := got.(map[string]any); ok {
			for k, v := range x {
				r.learnIDs(v, g[k])
			}
		}
	}
}

func mustAtoi(s string) int {
	var n int
	_, _ = fmt.Sscanf(s, "%d", &n)
	return n
}

func abbreviate(b []byte) string {
	if len(b) > 3000 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

func abbreviateValue(v any) string {
	s := fmt.Sprintf("%q", fmt.Sprint(v))
	if v == nil {
		s = "null"
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
