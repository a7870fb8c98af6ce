package caddymodule

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/tenancy"
)

// stallingBody gives its first half, then waits for release before the
// rest: a push whose body is still arriving.
type stallingBody struct {
	first, rest []byte
	reached     chan struct{}
	release     chan struct{}
	waited      bool
}

func (b *stallingBody) Read(p []byte) (int, error) {
	if len(b.first) > 0 {
		n := copy(p, b.first)
		b.first = b.first[n:]
		return n, nil
	}
	if !b.waited {
		b.waited = true
		close(b.reached)
		<-b.release
	}
	if len(b.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.rest)
	b.rest = b.rest[n:]
	return n, nil
}

// TestForwardChecksTheClusterAgain: what changes about a cluster while a
// request's body arrives (its status, a drain off its cell, a move) is seen
// just before the request would be forwarded: it is refused, and nothing
// reaches the cell.
func TestForwardChecksTheClusterAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(c *tenancy.Cluster)
		status int
		code   apierror.Code
	}{
		{"deleting", func(c *tenancy.Cluster) { c.Status = tenancy.StatusDeleting }, http.StatusForbidden, apierror.ClusterSuspended},
		{"drained", func(c *tenancy.Cluster) { c.Draining = true }, http.StatusServiceUnavailable, apierror.ClusterDraining},
		{"moved", func(c *tenancy.Cluster) { c.CellID = "another-cell" }, http.StatusServiceUnavailable, apierror.ClusterDraining},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t)
			g := env.g
			body := `{"items":[{"queue":"orders","payload":{"n":1}}]}`
			sb := &stallingBody{first: []byte(body[:10]), rest: []byte(body[10:]), reached: make(chan struct{}), release: make(chan struct{})}
			reached, release := sb.reached, sb.release
			go func() {
				<-reached
				changed := *env.src.clusters["acme"]
				tc.change(&changed)
				env.src.clusters["acme"] = &changed
				g.app.backend.cache.InvalidateCluster(changed.ID)
				close(release)
			}()
			w, seen := g.do(t, call{method: "POST", host: "acme.eu1.example.com", target: "/api/v1/push", auth: "qk_live_acme", bodyReader: sb}, nil)
			expect(t, w, seen, tc.status, string(tc.code))
			if n := g.app.backend.drains.InFlight(idAcme); n != 0 {
				t.Fatalf("%d requests of the cluster still counted on their way", n)
			}
		})
	}
	// Unchanged, the same push goes through and is counted while it is on
	// its way.
	env := newTestEnv(t)
	w, seen := env.g.do(t, call{method: "POST", host: "acme.eu1.example.com", target: "/api/v1/push", auth: "qk_live_acme",
		body: `{"items":[{"queue":"orders","payload":{"n":1}}]}`}, nil)
	expect(t, w, seen, http.StatusOK, "")
	if n := env.g.app.backend.drains.InFlight(idAcme); n != 0 {
		t.Fatalf("%d requests still counted after the exchange ended", n)
	}
}

// TestLapsedGatewayServesNoKeeper: on a cell that does not scope, only the
// keeper is served, and only while the gateway's heartbeat is recent: the
// control plane stops waiting for a gateway it no longer hears from.
func TestLapsedGatewayServesNoKeeper(t *testing.T) {
	env := newTestEnv(t)
	iso := tenancy.NewCellIsolation(tenancy.CellIsolationConfig{
		Probe: func(context.Context, tenancy.ProbeCell) (tenancy.TenantScoping, error) {
			return tenancy.ScopingUnscoped, nil
		},
		Record: func(context.Context, tenancy.ProbeCell, tenancy.TenantScoping, string) error { return nil },
		Keeper: func(context.Context, string) (string, error) { return idAcme, nil },
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go iso.Run(ctx)
	env.g.app.backend.isolation = iso
	push := call{method: "POST", host: "acme.eu1.example.com", target: "/api/v1/push", auth: "qk_live_acme",
		body: `{"items":[{"queue":"orders","payload":{"n":1}}]}`}
	// The test backend's drains never beat: the keeper is refused.
	w, seen := env.g.do(t, push, nil)
	expect(t, w, seen, http.StatusServiceUnavailable, string(apierror.GatewayLapsed))
}
