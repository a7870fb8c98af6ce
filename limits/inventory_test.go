package limits

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/wire"
)

const (
	tenantOne = "aaaaaaaa-0000-4000-8000-000000000001"
	tenantTwo = "aaaaaaaa-0000-4000-8000-000000000002"
	cellToken = "cell-secret"
)

// startBroker starts a fake broker that requires the tenant header and the
// cell token.
func startBroker(t *testing.T, opts fakebroker.Options) string {
	t.Helper()
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	// Token stands for a proxy in front of the cell that checks its static secret: no Queen broker checks one.
	opts.RequireTenant, opts.Token = true, cellToken
	b := fakebroker.New(opts)
	url, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return url
}

// brokerPush pushes body for tenant and returns what ParsePush made of it.
func brokerPush(t *testing.T, url, tenant, body string) ProduceBatch {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/api/v1/push", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-queen-tenant", tenant)
	req.Header.Set("Authorization", "Bearer "+cellToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Contains(answer, []byte(`"queued"`)) {
		t.Fatalf("push: %d %s", resp.StatusCode, answer)
	}
	b, err := ParsePush([]byte(body))
	if err != nil {
		t.Fatalf("ParsePush refused a body the broker took: %v", err)
	}
	return b
}

func queueCounts(inv Inventory) map[string]int {
	out := map[string]int{}
	for _, q := range inv.Queues {
		out[q.Name] = q.Partitions
	}
	return out
}

func TestReadInventoryFakeBroker(t *testing.T) {
	url := startBroker(t, fakebroker.Options{})
	ctx := context.Background()
	one := ClusterRef{ID: "c1", BrokerTenant: tenantOne, CellURL: url + "/", Authorization: "Bearer " + cellToken}
	two := ClusterRef{ID: "c2", BrokerTenant: tenantTwo, CellURL: url, Authorization: "Bearer " + cellToken}

	// Before any push: an empty listing, which proves nothing about the
	// broker's byte counts.
	inv, err := ReadInventory(ctx, nil, one)
	if err != nil || len(inv.Queues) != 0 || inv.Supported || inv.RetainedBytes != 0 {
		t.Fatalf("empty: %+v %v", inv, err)
	}

	b1 := brokerPush(t, url, tenantOne, `{"items":[{"queue":"orders","partition":"p1","payload":{"id":1,"sku":"A-1"}},{"queue":"orders","partition":"p2","payload":"hello"},{"queue":"audit","payload":[1,2,3]}]}`)
	b2 := brokerPush(t, url, tenantTwo, `{"items":[{"queue":"orders","payload":{"other":"tenant"}}]}`)

	inv, err = ReadInventory(ctx, &http.Client{Timeout: 5 * time.Second}, one)
	if err != nil {
		t.Fatal(err)
	}
	if got := queueCounts(inv); len(got) != 2 || got["orders"] != 2 || got["audit"] != 1 {
		t.Fatalf("tenant one queues %v", got)
	}
	for _, q := range inv.Queues {
		if q.ClusterID != "c1" {
			t.Fatalf("row cluster %q", q.ClusterID)
		}
	}
	// The broker keeps compact payload text, which is what these bodies
	// send: its figure equals the in-flight estimate of the same pushes.
	if !inv.Supported || inv.RetainedBytes != b1.PayloadBytes {
		t.Fatalf("tenant one: supported=%v bytes=%d, want %d", inv.Supported, inv.RetainedBytes, b1.PayloadBytes)
	}
	inv, err = ReadInventory(ctx, nil, two)
	if err != nil || !inv.Supported || inv.RetainedBytes != b2.PayloadBytes || len(inv.Queues) != 1 {
		t.Fatalf("tenant two: %+v %v", inv, err)
	}

	// Wrong credentials: an error, so nothing is changed.
	bad := one
	bad.Authorization = "Bearer wrong"
	if _, err := ReadInventory(ctx, nil, bad); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("bad token: %v", err)
	}
	noTenant := one
	noTenant.BrokerTenant = ""
	if _, err := ReadInventory(ctx, nil, noTenant); err == nil {
		t.Fatal("missing tenant header accepted")
	}
}

func TestReadInventoryKVAndTimerBytes(t *testing.T) {
	b := fakebroker.New(fakebroker.Options{ReportKVTimerBytes: true})
	url, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.SetKVTimerBytes(tenantOne, 1000, 24)
	ref := ClusterRef{ID: "c1", BrokerTenant: tenantOne, CellURL: url}
	inv, err := ReadInventory(context.Background(), nil, ref)
	// No queues, but kvBytes/timerBytes say the broker counts bytes.
	if err != nil || !inv.Supported || inv.RetainedBytes != 1024 || len(inv.Queues) != 0 {
		t.Fatalf("%+v %v", inv, err)
	}
}

// brokerFixtures is the recorded traffic of the public Queen 0.15.1 broker
// (testdata/broker/README.md).
const brokerFixtures = "../testdata/broker"

// recordedResponse returns the response body of the catalogue exchange seq.
func recordedResponse(t *testing.T, seq int) []byte {
	t.Helper()
	path := filepath.Join(brokerFixtures, "curl-catalogue.jsonl")
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("broker fixture %s: %v", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var ex struct {
			Seq  int             `json:"seq"`
			Body json.RawMessage `json:"response_body"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ex); err != nil {
			t.Fatal(err)
		}
		if ex.Seq == seq {
			return ex.Body
		}
	}
	t.Fatalf("exchange %d not in %s", seq, path)
	return nil
}

// recordedBroker serves the recorded 0.15.1 queue listing after a stats
// refresh (catalogue exchange 113): partition counts, no byte counts.
func recordedBroker(t *testing.T, seq int) (url string, hits *atomic.Int64) {
	t.Helper()
	body := recordedResponse(t, seq)
	hits = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/resources/queues" || r.Header.Get("x-queen-tenant") == "" {
			http.NotFound(w, r)
			return
		}
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, hits
}

func TestReadInventoryOldBroker(t *testing.T) {
	url, _ := recordedBroker(t, 113)
	inv, err := ReadInventory(context.Background(), nil, ClusterRef{ID: "c1", BrokerTenant: tenantOne, CellURL: url})
	if err != nil {
		t.Fatal(err)
	}
	if inv.Supported || inv.RetainedBytes != 0 {
		t.Fatalf("the recorded broker reports no bytes, got %+v", inv)
	}
	got := queueCounts(inv)
	want := map[string]int{"cat-big": 1, "cat-autocreated": 1, "cat-next": 2, "cat-capped": 1, "cat-dlq": 3, "cat-empty": 2, "cat-orders": 7}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("queues %v, want %v", got, want)
	}
}

func TestReadInventoryUnusableAnswers(t *testing.T) {
	cases := map[string]struct {
		status int
		body   string
	}{
		"broker error as 200": {200, `{"error":"Queue not found"}`},
		"no queues array":     {200, `{"namespaces":[]}`},
		"queues null":         {200, `{"queues":null}`},
		"queues object":       {200, `{"queues":{}}`},
		"not JSON":            {200, `<html>oops</html>`},
		"server error":        {500, `{"queues":[]}`},
		"not found page":      {404, `<html><body><h1>File Not Found</h1></body></html>`},
	}
	for name, c := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(c.status)
			_, _ = io.WriteString(w, c.body)
		}))
		_, err := ReadInventory(context.Background(), nil, ClusterRef{ID: "c", BrokerTenant: tenantOne, CellURL: srv.URL})
		srv.Close()
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// Unreachable cell.
	if _, err := ReadInventory(context.Background(), nil, ClusterRef{ID: "c", CellURL: "http://127.0.0.1:1"}); err == nil {
		t.Error("unreachable: no error")
	}
	// A slow cell is bounded by the context.
	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }))
	defer slow.Close()
	defer close(block)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := ReadInventory(ctx, nil, ClusterRef{ID: "c", CellURL: slow.URL}); err == nil {
		t.Error("slow: no error")
	}
}

func TestParseInventoryElements(t *testing.T) {
	inv, err := parseInventory("c", []byte(`{"queues":[
		{"name":"a","partitions":3,"retainedBytes":100},
		{"name":"b","retainedBytes":-5},
		{"name":7,"partitions":1,"retainedBytes":50},
		"junk",
		{"name":"c","partitions":"2","retainedBytes":1.5},
		{"name":"d","partitions":9223372036854775807,"retainedBytes":9223372036854775807}
	],"kvBytes":-3,"timerBytes":10}`))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range inv.Queues {
		names = append(names, fmt.Sprintf("%s:%d", q.Name, q.Partitions))
	}
	sort.Strings(names)
	if fmt.Sprint(names) != "[a:3 b:0 c:0 d:2147483647]" {
		t.Fatalf("queues %v", names)
	}
	// 100 + MaxInt64 saturates; kvBytes -3 is ignored, timerBytes adds.
	if !inv.Supported || inv.RetainedBytes != 1<<63-1 {
		t.Fatalf("bytes %d supported %v", inv.RetainedBytes, inv.Supported)
	}
}

// TestReadInventoryRustBroker: a 1.x broker reports retainedBytes from a
// slow lane (0 for a queue it has not measured yet) and omits kvBytes and
// timerBytes when it cannot read them. The listing still says the broker
// counts bytes; the storage verdict keeps the in-flight estimate on top of
// the unchanged 0, and takes the lane's figure when it comes.
func TestReadInventoryRustBroker(t *testing.T) {
	b := fakebroker.New(fakebroker.Options{Tenancy: fakebroker.TenancyRust})
	url, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	req, _ := http.NewRequest(http.MethodPost, url+"/api/v1/push", strings.NewReader(`{"items":[{"queue":"orders","payload":"0123456789"}]}`))
	req.Header.Set("x-queen-tenant", tenantOne)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("push: %d", resp.StatusCode)
	}
	ref := ClusterRef{ID: "c1", BrokerTenant: tenantOne, CellURL: url}
	inv, err := ReadInventory(context.Background(), nil, ref)
	if err != nil || !inv.Supported || inv.RetainedBytes != 0 || len(inv.Queues) != 1 {
		t.Fatalf("before the lane: %+v %v", inv, err)
	}
	s := NewStorage(nil)
	s.Observe("c1", inv, 20)
	s.AddInFlight("c1", 12)
	s.Observe("c1", inv, 20) // the same lagging 0: the estimate stays
	s.AddInFlight("c1", 12)
	if !s.InFlightBlocked("c1", 20) {
		t.Fatal("0 measured + 24 in flight does not block a cap of 20")
	}
	b.RunRetainedBytesLane()
	inv, err = ReadInventory(context.Background(), nil, ref)
	if err != nil || !inv.Supported || inv.RetainedBytes != 12 {
		t.Fatalf("after the lane: %+v %v", inv, err)
	}
	if blocked, _ := s.Observe("c1", inv, 20); blocked {
		t.Fatal("the lane's 12 bytes, under 90% of 20, did not release the block")
	}
	// A tenant with nothing stored and no kv/timer figures proves nothing.
	inv, err = ReadInventory(context.Background(), nil, ClusterRef{ID: "c2", BrokerTenant: tenantTwo, CellURL: url})
	if err != nil || inv.Supported || len(inv.Queues) != 0 {
		t.Fatalf("empty tenant: %+v %v", inv, err)
	}
}

// FuzzParseInventory holds the queue listing's reader to a model written
// with encoding/json over maps (names matched exactly, the last of a
// repeated one kept, as the broker's answers are read), on every listing
// the broker's grammar accepts; any other is an error.
func FuzzParseInventory(f *testing.F) {
	for _, s := range []string{
		`{"queues":[{"name":"a","partitions":3,"retainedBytes":100},{"name":"b"}],"kvBytes":5,"timerBytes":null}`,
		`{"queues":[{"name":"a\u00e9","name":"b","partitions":"2"},"junk",{"Name":"c"}],"Queues":[]}`,
		`{"queues":{},"error":"relation \"queen.queues\" does not exist"}`,
		`{"queues":[{"name":"d","partitions":9223372036854775807,"retainedBytes":9223372036854775807}],"kvBytes":-3}`,
		`[1]`,
		"{\"queues\":[{\"name\":\"\xff\"}]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		inv, err := parseInventory("c", body)
		if wire.Check(body) != nil {
			if err == nil {
				t.Fatalf("%q: read a listing the grammar refuses", body)
			}
			return
		}
		want, ok := modelInventory(body)
		if (err == nil) != ok {
			t.Fatalf("%q: error %v, model ok %v", body, err, ok)
		}
		if err == nil && !reflect.DeepEqual(inv, want) {
			t.Fatalf("%q: read %+v, model %+v", body, inv, want)
		}
	})
}

// modelInventory is parseInventory written with encoding/json.
func modelInventory(body []byte) (Inventory, bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil || top == nil {
		return Inventory{}, false
	}
	str := func(raw json.RawMessage) (string, bool) {
		var s string
		return s, len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil
	}
	integer := func(raw json.RawMessage) (int64, bool) {
		n, err := strconv.ParseInt(string(raw), 10, 64)
		return n, err == nil
	}
	var elems []json.RawMessage
	if json.Unmarshal(top["queues"], &elems) != nil || len(top["queues"]) == 0 || top["queues"][0] != '[' {
		return Inventory{}, false
	}
	inv := Inventory{Queues: []QueueRow{}}
	for _, raw := range elems {
		var q map[string]json.RawMessage
		if raw[0] != '{' || json.Unmarshal(raw, &q) != nil {
			continue
		}
		name, ok := str(q["name"])
		if !ok {
			continue
		}
		parts, _ := integer(q["partitions"])
		inv.Queues = append(inv.Queues, QueueRow{ClusterID: "c", Name: name, Partitions: int(min(max(parts, 0), math.MaxInt32))})
		if n, ok := integer(q["retainedBytes"]); ok && n >= 0 {
			inv.RetainedBytes = satAddModel(inv.RetainedBytes, n)
			inv.Supported = true
		}
	}
	for _, k := range []string{"kvBytes", "timerBytes"} {
		if n, ok := integer(top[k]); ok {
			inv.Supported = true
			if n > 0 {
				inv.RetainedBytes = satAddModel(inv.RetainedBytes, n)
			}
		}
	}
	return inv, true
}

// satAddModel adds non-negative b to non-negative a in big numbers,
// capped at math.MaxInt64.
func satAddModel(a, b int64) int64 {
	if s := new(big.Int).Add(big.NewInt(a), big.NewInt(b)); s.IsInt64() {
		return s.Int64()
	}
	return math.MaxInt64
}
