package tenancy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/queengate/queengate/internal/fakebroker"
)

func TestProbeTenantScoping(t *testing.T) {
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
		if len(reqs) != probeRequests {
			t.Fatalf("probe sent %d requests, want %d", len(reqs), probeRequests)
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
