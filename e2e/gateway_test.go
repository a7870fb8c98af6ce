package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// TestGatewayRoutesClustersToTheirCells is the backbone's end-to-end
// contract: two fake brokers as two cells, three clusters (two sharing a
// cell, one on a dedicated cell with a cell secret), through a real Caddy
// loaded from a Caddyfile.
func TestGatewayRoutesClustersToTheirCells(t *testing.T) {
	const cellSecret = "cell-b-secret"
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	shared := startBroker(t, fakebroker.Options{Name: "cell-a", RequireTenant: true})
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	// Token stands for a proxy in front of the cell that checks its static secret: no Queen broker checks one.
	dedicated := startBroker(t, fakebroker.Options{Name: "cell-b", RequireTenant: true, Token: cellSecret})

	cp := newControlPlane(t, pgtest.URL(t))
	cellA := cp.cell("cell-a", shared.URL(), "")
	cellB := cp.cell("cell-b", dedicated.URL(), cellSecret)
	acmeTenant := cp.tenant("acme")
	globexTenant := cp.tenant("globex")
	acmeProd := cp.cluster(acmeTenant, "acme-prod", cellA)
	acmeStage := cp.cluster(acmeTenant, "acme-stage", cellA)
	globex := cp.cluster(globexTenant, "globex", cellB)
	_, prodKey := cp.key(acmeProd.id)
	stageKeyID, stageKey := cp.key(acmeStage.id)
	_, globexKey := cp.key(globex.id)

	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), "", ""))
	c := client(port)
	url := func(slug, path string) string {
		return fmt.Sprintf("http://%s.eu1.example.test:%d%s", slug, port, path)
	}
	push := func(slug, key, queue, payload string) response {
		return do(t, c, "POST", url(slug, "/api/v1/push"), key,
			fmt.Sprintf(`{"items":[{"queue":%q,"payload":{"v":%q}}]}`, queue, payload))
	}

	t.Run("each cluster reaches its own cell with its own tenant", func(t *testing.T) {
		for _, tc := range []struct {
			cl     cluster
			key    string
			cell   *fakebroker.Broker
			other  *fakebroker.Broker
			secret string
		}{
			{acmeProd, prodKey, shared, dedicated, ""},
			{acmeStage, stageKey, shared, dedicated, ""},
			{globex, globexKey, dedicated, shared, "Bearer " + cellSecret},
		} {
			shared.ResetRequests()
			dedicated.ResetRequests()
			r := push(tc.cl.slug, tc.key, "orders", tc.cl.slug)
			if r.status != http.StatusOK || !strings.Contains(string(r.body), `"status":"queued"`) {
				t.Fatalf("%s: push status %d body %s", tc.cl.slug, r.status, r.body)
			}
			if r.header.Get("X-Queen-Request-Id") == "" {
				t.Errorf("%s: relayed response has no x-queen-request-id", tc.cl.slug)
			}
			seen := forwarded(tc.cell)
			if len(seen) != 1 || len(forwarded(tc.other)) != 0 {
				t.Fatalf("%s: own cell saw %d requests, other cell %d; want 1 and 0", tc.cl.slug, len(seen), len(forwarded(tc.other)))
			}
			h := seen[0].Header
			if got := h.Values("X-Queen-Tenant"); len(got) != 1 || got[0] != tc.cl.brokerTenant {
				t.Errorf("%s: x-queen-tenant %v, want [%s]", tc.cl.slug, got, tc.cl.brokerTenant)
			}
			if got := h.Get("Authorization"); got != tc.secret {
				t.Errorf("%s: upstream Authorization %q, want %q (never the client's key)", tc.cl.slug, got, tc.secret)
			}
			if h.Get("X-Queen-Request-Id") != r.header.Get("X-Queen-Request-Id") {
				t.Errorf("%s: upstream request id %q, response %q", tc.cl.slug, h.Get("X-Queen-Request-Id"), r.header.Get("X-Queen-Request-Id"))
			}
		}
	})

	t.Run("a client-sent x-queen-tenant is replaced", func(t *testing.T) {
		shared.ResetRequests()
		req, _ := http.NewRequest("GET", url("acme-prod", "/api/v1/resources/queues"), nil)
		req.Header.Set("Authorization", "Bearer "+prodKey)
		req.Header.Set("X-Queen-Tenant", acmeStage.brokerTenant)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		seen := forwarded(shared)
		if resp.StatusCode != 200 || len(seen) != 1 {
			t.Fatalf("status %d, %d upstream requests", resp.StatusCode, len(seen))
		}
		if got := seen[0].Header.Values("X-Queen-Tenant"); len(got) != 1 || got[0] != acmeProd.brokerTenant {
			t.Fatalf("x-queen-tenant %v, want [%s]", got, acmeProd.brokerTenant)
		}
	})

	t.Run("the same queue on two clusters of one cell stays separate", func(t *testing.T) {
		if r := push("acme-prod", prodKey, "shared-name", "for-prod"); r.status != 200 {
			t.Fatalf("push: %d %s", r.status, r.body)
		}
		r := do(t, c, "GET", url("acme-stage", "/api/v1/pop/queue/shared-name?batch=10"), stageKey, "")
		if r.status != 200 || strings.Contains(string(r.body), "for-prod") {
			t.Fatalf("acme-stage popped acme-prod's message: %d %s", r.status, r.body)
		}
		r = do(t, c, "GET", url("acme-prod", "/api/v1/pop/queue/shared-name?batch=10"), prodKey, "")
		if r.status != 200 || !strings.Contains(string(r.body), "for-prod") {
			t.Fatalf("acme-prod could not pop its own message: %d %s", r.status, r.body)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		assertRefusal(t, push("nosuch", prodKey, "q", "x"), 421, "cluster_unknown")
		r := do(t, c, "GET", fmt.Sprintf("http://acme-prod.other.example:%d/health", port), prodKey, "")
		if r.status == 200 {
			t.Fatalf("a host outside the base domain must not reach a cell: %d %s", r.status, r.body)
		}
		assertRefusal(t, push("acme-prod", "", "q", "x"), 401, "unauthorized")
		assertRefusal(t, push("acme-prod", "qk_live_nosuchkey", "q", "x"), 401, "unauthorized")
		assertRefusal(t, push("acme-prod", "not-a-key", "q", "x"), 401, "unauthorized")
		assertRefusal(t, push("acme-prod", globexKey, "q", "x"), 403, "forbidden")
	})

	t.Run("suspension is seen within 1s and lifted within 1s", func(t *testing.T) {
		cp.exec(`SELECT queen_proxy.set_cluster_status($1::uuid, 'suspended')`, acmeStage.id)
		took := eventually(t, time.Second, func() error {
			if r := push("acme-stage", stageKey, "q", "x"); r.status != 403 {
				return fmt.Errorf("status %d", r.status)
			}
			return nil
		})
		t.Logf("suspension seen after %v", took)
		assertRefusal(t, push("acme-stage", stageKey, "q", "x"), 403, "cluster_suspended")
		if r := push("acme-prod", prodKey, "q", "x"); r.status != 200 {
			t.Fatalf("the other cluster of the cell must keep serving: %d", r.status)
		}

		cp.exec(`SELECT queen_proxy.set_cluster_status($1::uuid, 'active')`, acmeStage.id)
		took = eventually(t, time.Second, func() error {
			if r := push("acme-stage", stageKey, "q", "x"); r.status != 200 {
				return fmt.Errorf("status %d", r.status)
			}
			return nil
		})
		t.Logf("reactivation seen after %v", took)
	})

	t.Run("a suspended tenant suspends its clusters", func(t *testing.T) {
		cp.exec(`SELECT queen_proxy.set_tenant_status($1::uuid, 'suspended')`, globexTenant)
		eventually(t, time.Second, func() error {
			if r := push("globex", globexKey, "q", "x"); r.status != 403 {
				return fmt.Errorf("status %d", r.status)
			}
			return nil
		})
		cp.exec(`SELECT queen_proxy.set_tenant_status($1::uuid, 'grace')`, globexTenant)
		eventually(t, time.Second, func() error {
			// grace blocks pushes only (a later pipeline step); the cluster is served
			if r := do(t, c, "GET", url("globex", "/api/v1/resources/queues"), globexKey, ""); r.status != 200 {
				return fmt.Errorf("status %d", r.status)
			}
			return nil
		})
	})

	t.Run("a revoked key is refused within 1s", func(t *testing.T) {
		if r := push("acme-stage", stageKey, "q", "x"); r.status != 200 {
			t.Fatalf("before revocation: %d %s", r.status, r.body)
		}
		cp.exec(`SELECT queen_proxy.revoke_api_key($1::uuid)`, stageKeyID)
		took := eventually(t, time.Second, func() error {
			if r := push("acme-stage", stageKey, "q", "x"); r.status != 401 {
				return fmt.Errorf("status %d", r.status)
			}
			return nil
		})
		t.Logf("revocation seen after %v", took)
		assertRefusal(t, push("acme-stage", stageKey, "q", "x"), 401, "unauthorized")
	})
}

// TestGatewayUpstreamFailures covers the answers the gateway gives when the
// cell does not: 502 when it is unreachable, 504 after the upstream
// timeout, and a long-poll pop allowed to outlast the normal timeout.
func TestGatewayUpstreamFailures(t *testing.T) {
	broker := startBroker(t, fakebroker.Options{Name: "slow-cell"})
	cp := newControlPlane(t, pgtest.URL(t))
	live := cp.cell("live-cell", broker.URL(), "")
	deadPort := freePort(t)
	dead := cp.cell("dead-cell", fmt.Sprintf("http://127.0.0.1:%d", deadPort), "")
	tn := cp.tenant("failures")
	ok := cp.cluster(tn, "fail-live", live)
	gone := cp.cluster(tn, "fail-dead", dead)
	_, okKey := cp.key(ok.id)
	_, goneKey := cp.key(gone.id)

	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), "", "upstream_timeout 700ms\n\t\tlong_poll_margin 1s"))
	c := client(port)

	r := do(t, c, "GET", fmt.Sprintf("http://fail-dead.eu1.example.test:%d/api/v1/resources/queues", port), goneKey, "")
	assertRefusal(t, r, 502, "bad_gateway")

	// An ack batch with no acknowledgments is never answered by the broker.
	start := time.Now()
	r = do(t, c, "POST", fmt.Sprintf("http://fail-live.eu1.example.test:%d/api/v1/ack/batch", port), okKey, `{"acknowledgments":[]}`)
	assertRefusal(t, r, 504, "upstream_timeout")
	if took := time.Since(start); took < 700*time.Millisecond || took > 3*time.Second {
		t.Fatalf("504 after %v, want about the 700ms upstream timeout", took)
	}

	// A long-poll pop waits longer than upstream_timeout: its own wait plus the margin.
	start = time.Now()
	r = do(t, c, "GET", fmt.Sprintf("http://fail-live.eu1.example.test:%d/api/v1/pop/queue/idle?wait=true&timeout=1200", port), okKey, "")
	if r.status != 200 || !strings.Contains(string(r.body), `"messages":[]`) {
		t.Fatalf("long poll: %d %s", r.status, r.body)
	}
	if took := time.Since(start); took < 1200*time.Millisecond {
		t.Fatalf("long poll answered after %v, before its 1200ms wait", took)
	}
}
