package caddymodule

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/queengate/queengate/tenancy"
)

// frontingEnv is the test gateway fronting cell-1 as group g1, with pro
// placed on cell-2, which it does not front.
func frontingEnv(t *testing.T) *testEnv {
	t.Helper()
	env := newTestEnv(t)
	pro := env.src.clusters["pro"]
	pro.CellSlug = "cell-2"
	// Limited, so that a request admitted against it would make a bucket.
	pro.Limits.MaxReqPerSec, pro.Limits.ReqBurst = 1, 1
	env.g.app.fronting = tenancy.Fronting{Group: "g1", Cells: []string{"cell-1"}}
	return env
}

// TestClusterOfAnotherCell: a cluster of a cell the gateway does not front
// is refused 421 before anything is spent, whichever way it is named; the
// clusters of its own cells are served.
func TestClusterOfAnotherCell(t *testing.T) {
	env := frontingEnv(t)
	g := env.g
	elsewhere := func(t *testing.T, c call) {
		t.Helper()
		w, seen := g.do(t, c, nil)
		expect(t, w, seen, 421, "cluster_unknown")
		if !strings.Contains(w.Body.String(), "does not front the cell of this cluster") {
			t.Fatalf("421 without its reason: %s", w.Body)
		}
	}
	// By Host: before the credential, so even none gets the 421, and a
	// blocked route too (resolution comes first).
	elsewhere(t, call{method: "POST", host: "pro.eu1.example.com", target: "/api/v1/push", auth: strongProKey, body: `{"items":[]}`})
	elsewhere(t, call{method: "POST", host: "pro.eu1.example.com", target: "/api/v1/push"})
	elsewhere(t, call{host: "pro.eu1.example.com", target: "/api/v1/system/shared-state"})
	if n := g.app.limits.buckets.Len(); n != 0 {
		t.Fatalf("%d buckets made for refused requests", n)
	}
	// By x-queen-act-cluster: after the session, before any limit.
	elsewhere(t, call{host: "acme.eu1.example.com", target: "/api/v1/resources/queues", auth: env.session(t, userAdmin, ""),
		header: map[string]string{"X-Queen-Act-Cluster": "pro"}})
	// Its own cell's clusters are served.
	w, seen := g.do(t, call{host: "acme.eu1.example.com", target: "/api/v1/resources/queues", auth: "qk_live_acme"}, nil)
	expect(t, w, seen, 200, "")

	// A shielded listener answers the 421 only after a live credential.
	g.Shield = true
	w, seen = g.do(t, call{host: "pro.eu1.example.com", target: "/api/v1/resources/queues"}, nil)
	expect(t, w, seen, 401, "unauthorized")
	w, seen = g.do(t, call{host: "pro.eu1.example.com", target: "/api/v1/resources/queues", auth: "qk_live_nope"}, nil)
	expect(t, w, seen, 401, "unauthorized")
	elsewhere(t, call{host: "pro.eu1.example.com", target: "/api/v1/resources/queues", auth: strongProKey})
	g.Shield = false

	// A cell another group is recorded as fronting is refused even when
	// the configuration names it.
	env2 := frontingEnv(t)
	env2.src.clusters["acme"].CellGroup = "g2"
	w, seen = env2.g.do(t, call{host: "acme.eu1.example.com", target: "/api/v1/resources/queues", auth: "qk_live_acme"}, nil)
	expect(t, w, seen, 421, "cluster_unknown")
}

// TestCertificateForClusterOfAnotherCell: no on-demand certificate for a
// cluster whose requests this gateway would refuse.
func TestCertificateForClusterOfAnotherCell(t *testing.T) {
	env := frontingEnv(t)
	p := &CertPermission{backend: env.g.app.backend, baseDomains: env.g.app.BaseDomains, fronting: env.g.app.fronting, logger: env.g.logger}
	if err := p.CertificateAllowed(context.Background(), "acme.eu1.example.com"); err != nil {
		t.Fatalf("own cell's cluster: %v", err)
	}
	if err := p.CertificateAllowed(context.Background(), "pro.eu1.example.com"); !errors.Is(err, tenancy.ErrClusterElsewhere) {
		t.Fatalf("another cell's cluster: %v", err)
	}
}

// TestCellsOption: the Caddyfile's cells, and a gateway of its own that
// sets them without a name to record the claim under.
func TestCellsOption(t *testing.T) {
	var a App
	d := caddyfile.NewTestDispenser(`queen {
		database_url postgres://x
		cells eu1-a eu1-b
		cells eu1-a
		gateway_name gw-1
	}`)
	if err := a.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	f := a.frontingOf()
	if f.Group != "gw-1" || strings.Join(f.Cells, ",") != "eu1-a,eu1-b" {
		t.Fatalf("fronting %+v", f)
	}
	a.LeaderGroup = "grp"
	if f := a.frontingOf(); f.Group != "grp" {
		t.Fatalf("a leader group's claim is under %q", f.Group)
	}
	noName := App{DatabaseURL: "postgres://x", PoolMaxConns: 1, Cells: []string{"eu1-a"}}
	if err := noName.Validate(); err == nil || !strings.Contains(err.Error(), "explicit gateway_name") {
		t.Fatalf("cells without leader_group or gateway_name: %v", err)
	}
	var b App
	if b.UnmarshalCaddyfile(caddyfile.NewTestDispenser("queen {\n cells\n}")) == nil {
		t.Fatal("cells without a cell accepted")
	}
}
