package tenancy

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/wire"
)

func TestProbeTenantScoping(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	b := fakebroker.New(fakebroker.Options{RequireTenant: true})
	url, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cell := ProbeCell{ID: "c", Slug: "c", BaseURL: url}
	probe := func(want TenantScoping) {
		t.Helper()
		b.ResetRequests()
		got, err := ProbeTenantScoping(context.Background(), nil, cell, "")
		if err != nil || got != want {
			t.Fatalf("verdict %q (%v), want %q", got, err, want)
		}
		reqs := b.Requests()
		// An unscoped answer needs no second read as the writer.
		wantRequests := probeRequests
		if want == ScopingUnscoped {
			wantRequests--
		}
		if len(reqs) != wantRequests {
			t.Fatalf("probe sent %d requests, want %d", len(reqs), wantRequests)
		}
		// What the probe configured is gone again, for every tenant, and
		// it never wrote a message.
		tenants := map[string]bool{}
		for _, r := range reqs {
			tenants[r.Tenant()] = true
			if strings.Contains(r.Path, "/push") {
				t.Fatalf("probe pushed: %s", r.Path)
			}
		}
		if len(tenants) != 2 {
			t.Fatalf("probe used tenants %v, want two", tenants)
		}
		for tenant := range tenants {
			if n := len(b.QueueNames(tenant)); n != 0 {
				t.Fatalf("tenant %s still has %d queues after the probe", tenant, n)
			}
		}
		if n := len(b.QueueNames(fakebroker.DefaultTenant)); n != 0 {
			t.Fatalf("shared namespace holds %d queues after the probe", n)
		}
	}
	probe(ScopingScoped)
	b.SetIgnoreTenant(true)
	probe(ScopingUnscoped)
	b.SetIgnoreTenant(false)
	probe(ScopingScoped)
}

// A broker that follows the Rust brokers' tenancy contract answers the
// reader's look at the probe queue with HTTP 404 {"error":"Queue not
// found"}; that is "absent", so the probe decides scoped, and the same
// broker without tenancy (the 0.15.1 answers) is still unscoped.
func TestProbeDecidesOnTheRustTenancyContract(t *testing.T) {
	b := fakebroker.New(fakebroker.Options{Tenancy: fakebroker.TenancyRust})
	url, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cell := ProbeCell{ID: "c", Slug: "c", BaseURL: url}
	got, err := ProbeTenantScoping(context.Background(), nil, cell, "")
	if err != nil || got != ScopingScoped {
		t.Fatalf("verdict %q (%v), want scoped", got, err)
	}
	sawNotFound := false
	for _, r := range b.Requests() {
		if r.Landed == fakebroker.DefaultTenant {
			t.Fatalf("a probe request landed in the default tenant: %s %s", r.Method, r.Path)
		}
		sawNotFound = sawNotFound || r.Method == "GET"
	}
	if !sawNotFound {
		t.Fatal("the probe never read the queue")
	}
	b.SetIgnoreTenant(true)
	got, err = ProbeTenantScoping(context.Background(), nil, cell, "")
	if err != nil || got != ScopingUnscoped {
		t.Fatalf("without tenancy: verdict %q (%v), want unscoped", got, err)
	}
}

// A 404 that is not the broker's "Queue not found" (a route the broker
// does not have, an HTML page, a 404 naming the queue) decides nothing.
func TestProbeOtherNotFoundsDecideNothing(t *testing.T) {
	for name, answer := range map[string]string{
		"html page":    "<html>File Not Found</html>",
		"other error":  `{"error":"not found","code":"no_such_route"}`,
		"names queue":  `{"error":"Queue not found","name":"%s"}`,
		"empty object": `{}`,
	} {
		t.Run(name, func(t *testing.T) {
			var queue, writer string
			var configured map[string]any
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodPost:
					var in struct{ Queue, Namespace, Task string }
					_ = json.NewDecoder(r.Body).Decode(&in)
					queue, writer = in.Queue, r.Header.Get("x-queen-tenant")
					configured = map[string]any{"configured": true, "queue": in.Queue,
						"queueId": "qid", "namespace": in.Namespace, "task": in.Task}
					_ = json.NewEncoder(w).Encode(configured)
				case r.Method == http.MethodDelete:
					_, _ = w.Write([]byte(`{"deleted":true}`))
				case r.Header.Get("x-queen-tenant") == writer:
					// The writer sees the very queue it configured.
					_ = json.NewEncoder(w).Encode(map[string]any{"id": "qid", "name": queue,
						"namespace": configured["namespace"], "task": configured["task"]})
				default:
					w.WriteHeader(http.StatusNotFound)
					_, _ = w.Write([]byte(strings.ReplaceAll(answer, "%s", queue)))
				}
			}))
			defer srv.Close()
			got, err := ProbeTenantScoping(context.Background(), nil, ProbeCell{BaseURL: srv.URL}, "")
			if got != ScopingUnknown || err == nil {
				t.Fatalf("verdict %q (%v), want unknown with an error", got, err)
			}
		})
	}
}

func TestProbeUndecided(t *testing.T) {
	var deletes atomic.Int32
	for name, handler := range map[string]http.HandlerFunc{
		"configure answers an error body": func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodDelete {
				deletes.Add(1)
			}
			_, _ = w.Write([]byte(`{"error":"[json.exception.type_error.306] cannot use value() with null"}`))
		},
		"the writer cannot see its queue": func(w http.ResponseWriter, r *http.Request) {
			switch r.Method {
			case http.MethodPost:
				_, _ = w.Write([]byte(`{"configured":true}`))
			case http.MethodDelete:
				deletes.Add(1)
				_, _ = w.Write([]byte(`{"deleted":true}`))
			default:
				_, _ = w.Write([]byte(`{"error":"Queue not found"}`))
			}
		},
		"a 500": func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodDelete {
				deletes.Add(1)
			}
			w.WriteHeader(http.StatusInternalServerError)
		},
	} {
		t.Run(name, func(t *testing.T) {
			deletes.Store(0)
			srv := httptest.NewServer(handler)
			defer srv.Close()
			got, err := ProbeTenantScoping(context.Background(), nil, ProbeCell{BaseURL: srv.URL}, "")
			if got != ScopingUnknown || err == nil {
				t.Fatalf("verdict %q, error %v; want unknown with an error", got, err)
			}
			if deletes.Load() != 1 {
				t.Fatalf("probe tried to remove its queue %d times, want 1", deletes.Load())
			}
		})
	}
	got, err := ProbeTenantScoping(context.Background(), nil, ProbeCell{BaseURL: "http://127.0.0.1:1"}, "")
	if got != ScopingUnknown || err == nil {
		t.Fatalf("unreachable cell: %q %v", got, err)
	}
}

// raceBroker is a fake broker behind a tenant that strikes at the probe's
// queue between two of its reads: after the probe's after-th read of its
// queue has been answered, strike runs against the broker as another
// tenant, knowing what a shared namespace's listing shows (the queue's
// name, namespace and task).
type raceBroker struct {
	b      *fakebroker.Broker
	after  int
	strike func(rb *raceBroker, name, namespace, task string)
	reads  atomic.Int32
}

func (rb *raceBroker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rb.b.ServeHTTP(w, r)
	if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/api/v1/resources/queues/"+ProbeQueuePrefix) {
		return
	}
	if int(rb.reads.Add(1)) != rb.after {
		return
	}
	name := strings.TrimPrefix(r.URL.Path, "/api/v1/resources/queues/")
	var listed struct {
		Queues []struct{ Name, Namespace, Task string } `json:"queues"`
	}
	rb.as(http.MethodGet, "/api/v1/resources/queues", "", &listed)
	var ns, task string
	for _, q := range listed.Queues {
		if q.Name == name {
			ns, task = q.Namespace, q.Task
		}
	}
	rb.strike(rb, name, ns, task)
}

// as sends one request to the broker as the attacking tenant.
func (rb *raceBroker) as(method, path, body string, out any) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set(fakebroker.TenantHeader, "6d1b1c7e-0000-4000-8000-00000000a77c")
	rec := httptest.NewRecorder()
	rb.b.ServeHTTP(rec, req)
	if out != nil {
		_ = json.Unmarshal(rec.Body.Bytes(), out)
	}
}

func deleteQueue(rb *raceBroker, name, _, _ string) {
	rb.as(http.MethodDelete, "/api/v1/resources/queues/"+name, "", nil)
}

func recreateQueue(rb *raceBroker, name, ns, task string) {
	deleteQueue(rb, name, ns, task)
	body, _ := json.Marshal(map[string]any{"queue": name, "namespace": ns, "task": task, "options": map[string]any{"leaseTime": 30}})
	rb.as(http.MethodPost, "/api/v1/configure", string(body), nil)
}

// TestProbeCannotBeFooledByADeletion is the attack on the probe itself: a tenant sharing the unscoped namespace deletes (or deletes and
// recreates) the probe queue at the worst moments. The probe never says
// scoped on the unscoped broker; on a scoping broker the same tenant
// cannot reach the probe's queue, and the probe still says scoped.
func TestProbeCannotBeFooledByADeletion(t *testing.T) {
	for _, tc := range []struct {
		name     string
		after    int // 1: after the writer's first read; 2: after the reader's read
		strike   func(rb *raceBroker, name, ns, task string)
		unscoped TenantScoping // the verdict allowed on the unscoped broker
	}{
		{"delete before the reader reads", 1, deleteQueue, ScopingUnknown},
		{"delete and recreate before the reader reads", 1, recreateQueue, ScopingUnscoped},
		{"delete after the reader read", 2, deleteQueue, ScopingUnscoped},
		{"delete and recreate after the reader read", 2, recreateQueue, ScopingUnscoped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, ignore := range []bool{true, false} {
				rb := &raceBroker{b: fakebroker.New(fakebroker.Options{IgnoreTenant: ignore}), after: tc.after, strike: tc.strike}
				srv := httptest.NewServer(rb)
				got, err := ProbeTenantScoping(context.Background(), nil, ProbeCell{BaseURL: srv.URL}, "")
				srv.Close()
				want := tc.unscoped
				if !ignore {
					want = ScopingScoped
				}
				if got != want {
					t.Fatalf("ignore tenant %v: verdict %q (%v), want %q", ignore, got, err, want)
				}
				if got == ScopingUnknown && (err == nil || !strings.Contains(err.Error(), "changed between")) {
					t.Fatalf("undecided probe says %v", err)
				}
				if rb.reads.Load() < int32(tc.after) {
					t.Fatalf("the strike never ran (%d reads)", rb.reads.Load())
				}
			}
		})
	}
}

// TestProbeNeedsTheWriterToSeeItsOwnQueueThroughout: a broker that
// answers "not found" to the writer's second read (or shows another
// queue) decides nothing, and the writer's reads must show the id,
// namespace and task the probe configured.
func TestProbeNeedsTheWriterToSeeItsOwnQueueThroughout(t *testing.T) {
	for name, detail := range map[string]func(reads int, q string) string{
		"second writer read not found": func(reads int, q string) string {
			if reads == 1 {
				return `{"id":"id-1","name":"` + q + `","namespace":"NS","task":"TASK"}`
			}
			return `{"error":"Queue not found"}`
		},
		"another id at the second writer read": func(reads int, q string) string {
			if reads == 2 {
				return `{"error":"Queue not found"}`
			}
			id := "id-1"
			if reads == 3 {
				id = "id-2"
			}
			return `{"id":"` + id + `","name":"` + q + `","namespace":"NS","task":"TASK"}`
		},
		"namespace not the probe's": func(reads int, q string) string {
			if reads == 2 {
				return `{"error":"Queue not found"}`
			}
			return `{"id":"id-1","name":"` + q + `","namespace":"other","task":"TASK"}`
		},
	} {
		t.Run(name, func(t *testing.T) {
			var reads atomic.Int32
			var ns, task string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.Method {
				case http.MethodPost:
					var in struct{ Queue, Namespace, Task string }
					_ = json.NewDecoder(r.Body).Decode(&in)
					ns, task = in.Namespace, in.Task
					out, _ := json.Marshal(map[string]any{"configured": true, "queue": in.Queue, "queueId": "id-1", "namespace": in.Namespace, "task": in.Task})
					_, _ = w.Write(out)
				case http.MethodDelete:
					_, _ = w.Write([]byte(`{"deleted":true}`))
				default:
					q := strings.TrimPrefix(r.URL.Path, "/api/v1/resources/queues/")
					a := detail(int(reads.Add(1)), q)
					a = strings.ReplaceAll(strings.ReplaceAll(a, `"NS"`, `"`+ns+`"`), `"TASK"`, `"`+task+`"`)
					_, _ = w.Write([]byte(a))
				}
			}))
			defer srv.Close()
			got, err := ProbeTenantScoping(context.Background(), nil, ProbeCell{BaseURL: srv.URL}, "")
			if got != ScopingUnknown || err == nil {
				t.Fatalf("verdict %q (%v), want unknown", got, err)
			}
		})
	}
}

// FuzzProbeAnswer holds the probe's reading of a cell's answer to a model
// written with encoding/json over a map (names exactly, the last of a
// repeated one): on an answer the broker's grammar accepts, the same
// texts and flags, or an error where the model finds a member of another
// kind; on any other answer, an error.
func FuzzProbeAnswer(f *testing.F) {
	for _, s := range []string{
		`{"configured":true,"queue":"q","queueId":"0190","namespace":"n","task":"t"}`,
		`{"error":"Queue not found"}`, `{"name":"q","name":"r","id":null}`, `{"Name":"q"}`,
		`{"deleted":"yes"}`, `{"name":7}`, `[]`, `{"name":"\u00e9\ud83d\ude00"}`, "{\"name\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	names := []string{"configured", "deleted", "error", "id", "name", "queue", "queueId"}
	f.Fuzz(func(t *testing.T, body []byte) {
		var a probeAnswer
		err := a.read(body, names)
		if wire.Check(body) != nil {
			if err == nil {
				t.Fatalf("%q: read an answer the grammar refuses", body)
			}
			return
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(body, &top) != nil || top == nil {
			if err == nil {
				t.Fatalf("%q: read an answer that is no object", body)
			}
			return
		}
		wantErr := false
		for _, n := range names {
			raw, present := top[n]
			if !present || string(raw) == "null" {
				if a.text(n) != "" || a.flag(n) {
					t.Fatalf("%q: %s absent, read %q %v", body, n, a.text(n), a.flag(n))
				}
				continue
			}
			var b bool
			var s string
			switch {
			case json.Unmarshal(raw, &b) == nil:
				if err == nil && (a.flag(n) != b || a.text(n) != "") {
					t.Fatalf("%q: %s is %v, read %v %q", body, n, b, a.flag(n), a.text(n))
				}
			case json.Unmarshal(raw, &s) == nil:
				if err == nil && (a.text(n) != s || a.flag(n)) {
					t.Fatalf("%q: %s is %q, read %q %v", body, n, s, a.text(n), a.flag(n))
				}
			default:
				wantErr = true
			}
		}
		if (err != nil) != wantErr {
			t.Fatalf("%q: error %v, model finds a member of another kind: %v", body, err, wantErr)
		}
	})
}
