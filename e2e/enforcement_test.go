package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/tenancy"
)

// scopedKey issues an API key with the given scopes.
func (cp *controlPlane) scopedKey(clusterID string, scopes ...string) (id, plaintext string) {
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	plaintext = "qk_test_" + base64.RawURLEncoding.EncodeToString(raw)
	id = cp.scalar(`SELECT queen_proxy.issue_api_key($1::uuid, 'e2e scoped', $2, $3)::text`,
		clusterID, tenancy.HashAPIKey(plaintext), scopes)
	return id, plaintext
}

const (
	brokerJWTSecret  = "broker-jwt-secret-for-e2e-0123456789"
	sessionHS256Test = "session-secret-for-e2e-tests-0123456789"
)

// TestEnforcement is the route-classification, credential and
// authorization contract end to end: a real Caddy loaded from a Caddyfile,
// a real database, and a fake broker that checks its own JWTs, so every
// forwarded request proves the gateway minted the cell's credential.
func TestEnforcement(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "cell-jwt", RequireTenant: true, JWTSecret: []byte(brokerJWTSecret)})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("cell-jwt", broker.URL(), "")
	tenantA, tenantB := cp.tenant("enf-a"), cp.tenant("enf-b")
	a := cp.cluster(tenantA, "enf-alpha", cell)
	b := cp.cluster(tenantB, "enf-beta", cell)
	_, aKey := cp.key(a.id)
	_, bKey := cp.key(b.id)
	produceID, produceKey := cp.scopedKey(a.id, "produce")
	_, consumeKey := cp.scopedKey(a.id, "consume")
	_, readKey := cp.scopedKey(a.id, "read")

	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), fmt.Sprintf(`key_touch_interval 1s
		session {
			hs256_secret %s
		}
		cell_token cell-jwt {
			algorithm HS256
			secret %s
		}`, sessionHS256Test, brokerJWTSecret), ""))
	c := client(port)
	url := func(slug, path string) string {
		return fmt.Sprintf("http://%s.eu1.example.test:%d%s", slug, port, path)
	}
	alpha := func(path string) string { return url(a.slug, path) }
	push := `{"items":[{"queue":"orders","payload":{"n":1}}]}`

	t.Run("another cluster's key is refused", func(t *testing.T) {
		assertRefusal(t, do(t, c, "POST", alpha("/api/v1/push"), bKey, push), 403, "forbidden")
	})

	t.Run("blocked surfaces do not exist", func(t *testing.T) {
		for _, p := range []string{"/api/v1/pop", "/api/v1/status", "/api/v1/analytics/postgres-stats",
			"/metrics/prometheus", "/api/v1/analytics/system-metrics", "/internal/api/notify", "/streams/v1/unknown"} {
			assertRefusal(t, do(t, c, "GET", alpha(p), aKey, ""), 404, "route_blocked")
		}
		// Also without a credential: 404 answers before authentication.
		assertRefusal(t, do(t, c, "GET", alpha("/api/v1/migration/status"), "", ""), 404, "route_blocked")
	})

	t.Run("ambiguous paths are refused, not forwarded", func(t *testing.T) {
		broker.ResetRequests()
		for _, p := range []string{"/api/v1/pu%73h", "/api/v1/resources/queues/%2e%2e", "/api/v1//push"} {
			assertRefusal(t, do(t, c, "POST", alpha(p), aKey, push), 400, "bad_request")
		}
		if n := len(forwarded(broker)); n != 0 {
			t.Fatalf("%d ambiguous requests reached the cell", n)
		}
	})

	t.Run("key scopes", func(t *testing.T) {
		popURL := alpha("/api/v1/pop/queue/orders")
		readURL := alpha("/api/v1/resources/queues")
		adminURL := alpha("/api/v1/resources/queues/orders")
		check := func(name string, r response, want int) {
			t.Helper()
			if want == 403 {
				assertRefusal(t, r, 403, "forbidden")
				return
			}
			if r.status != want && !(want == 200 && r.status == 204) && !(want == 201 && r.status == 200) {
				t.Fatalf("%s: %d %s, want %d", name, r.status, r.body, want)
			}
		}
		check("produce key push", do(t, c, "POST", alpha("/api/v1/push"), produceKey, push), 201)
		check("produce key pop", do(t, c, "GET", popURL, produceKey, ""), 403)
		check("produce key read", do(t, c, "GET", readURL, produceKey, ""), 403)
		check("produce key admin", do(t, c, "DELETE", adminURL, produceKey, ""), 403)
		check("consume key push", do(t, c, "POST", alpha("/api/v1/push"), consumeKey, push), 403)
		check("consume key read", do(t, c, "GET", readURL, consumeKey, ""), 403)
		check("consume key admin", do(t, c, "DELETE", adminURL, consumeKey, ""), 403)
		check("consume key pop", do(t, c, "GET", popURL, consumeKey, ""), 200)
		check("read key read", do(t, c, "GET", readURL, readKey, ""), 200)
		check("read key push", do(t, c, "POST", alpha("/api/v1/push"), readKey, push), 403)
		check("read key pop", do(t, c, "GET", popURL, readKey, ""), 403)
		check("read key admin", do(t, c, "DELETE", adminURL, readKey, ""), 403)
	})

	t.Run("writes under read prefixes are refused", func(t *testing.T) {
		broker.ResetRequests()
		assertRefusal(t, do(t, c, "DELETE", alpha("/api/v1/resources/queues/orders"), readKey, ""), 403, "forbidden")
		assertRefusal(t, do(t, c, "DELETE", alpha("/api/v1/resources/tenant"), aKey, ""), 404, "route_blocked")
		assertRefusal(t, do(t, c, "POST", alpha("/api/v1/resources/quota"), aKey, "{}"), 404, "route_blocked")
		assertRefusal(t, do(t, c, "PATCH", alpha("/api/v1/status/queues"), aKey, "{}"), 404, "route_blocked")
		if n := len(forwarded(broker)); n != 0 {
			t.Fatalf("%d refused writes reached the cell", n)
		}
	})

	t.Run("the cell gets a minted JWT naming the key, never the client's key", func(t *testing.T) {
		broker.ResetRequests()
		if r := do(t, c, "POST", alpha("/api/v1/push"), produceKey, push); r.status != 200 {
			t.Fatalf("push %d %s", r.status, r.body)
		}
		reqs := forwarded(broker)
		if len(reqs) != 1 {
			t.Fatalf("cell saw %d requests", len(reqs))
		}
		got := reqs[0]
		if got.JWTSub != produceID || got.JWTRole != "read-write" {
			t.Fatalf("cell verified sub %q role %q, want %q read-write", got.JWTSub, got.JWTRole, produceID)
		}
		if strings.Contains(got.Header.Get("Authorization"), produceKey) || got.Header.Get("X-Queen-Tenant") != a.brokerTenant {
			t.Fatalf("cell headers %v", got.Header)
		}
	})

	t.Run("last_used_at is written in batches", func(t *testing.T) {
		eventually(t, 5*time.Second, func() error {
			if cp.scalar(`SELECT (last_used_at IS NOT NULL)::text FROM queen_proxy.api_keys WHERE id = $1::uuid`, produceID) != "true" {
				return errors.New("last_used_at still empty")
			}
			return nil
		})
	})

	t.Run("revoked and expired keys are refused at once", func(t *testing.T) {
		tempID, temp := cp.scopedKey(a.id, "read")
		if r := do(t, c, "GET", alpha("/api/v1/resources/queues"), temp, ""); r.status != 200 {
			t.Fatalf("fresh key: %d %s", r.status, r.body)
		}
		cp.exec(`SELECT queen_proxy.revoke_api_key($1::uuid)`, tempID)
		took := eventually(t, 2*time.Second, func() error {
			if r := do(t, c, "GET", alpha("/api/v1/resources/queues"), temp, ""); r.status != 401 {
				return fmt.Errorf("revoked key answered %d", r.status)
			}
			return nil
		})
		t.Logf("revocation took effect after %v", took)

		expID, exp := cp.scopedKey(a.id, "read")
		if r := do(t, c, "GET", alpha("/api/v1/resources/queues"), exp, ""); r.status != 200 {
			t.Fatalf("fresh key: %d", r.status)
		}
		cp.exec(`SELECT queen_proxy.set_api_key_expiry($1::uuid, now())`, expID)
		eventually(t, 2*time.Second, func() error {
			r := do(t, c, "GET", alpha("/api/v1/resources/queues"), exp, "")
			if r.status != 401 {
				return fmt.Errorf("expired key answered %d", r.status)
			}
			assertRefusal(t, r, 401, "unauthorized")
			return nil
		})
	})

	t.Run("sessions: role from cluster_roles, revocation through the deny-list", func(t *testing.T) {
		userID := cp.scalar(`SELECT queen_proxy.create_user($1::uuid, 'viewer@enf-a.test', NULL, 'local')::text`, tenantA)
		cp.exec(`SELECT queen_proxy.grant_cluster_role($1::uuid, 'viewer@enf-a.test', 'viewer')`, a.id)
		keys, err := tenancy.NewSessionKeys(tenancy.SessionKeysConfig{HS256Secret: []byte(sessionHS256Test)})
		if err != nil {
			t.Fatal(err)
		}
		tok, claims, err := keys.Mint(userID, "", "viewer", "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if r := do(t, c, "GET", alpha("/api/v1/resources/queues"), tok, ""); r.status != 200 {
			t.Fatalf("viewer read: %d %s", r.status, r.body)
		}
		assertRefusal(t, do(t, c, "POST", alpha("/api/v1/push"), tok, push), 403, "forbidden")
		r := do(t, c, "GET", url(b.slug, "/api/v1/resources/queues"), tok, "")
		assertRefusal(t, r, 403, "forbidden")

		cp.exec(`SELECT queen_proxy.revoke_session($1, $2, 'user', $3::uuid)`, claims.SessionID, claims.ExpiresAt, userID)
		eventually(t, 2*time.Second, func() error {
			if r := do(t, c, "GET", alpha("/api/v1/resources/queues"), tok, ""); r.status != 401 {
				return fmt.Errorf("revoked session answered %d", r.status)
			}
			return nil
		})
	})

	t.Run("failed authentication is rate limited per address", func(t *testing.T) {
		var last response
		for range 25 {
			last = do(t, c, "GET", alpha("/api/v1/resources/queues"), "qk_test_guessing", "")
			if last.status == http.StatusTooManyRequests {
				break
			}
		}
		assertRefusal(t, last, 429, "rate_limited")
		if last.header.Get("Retry-After") == "" {
			t.Fatal("no Retry-After")
		}
	})
}

// TestSharedHost is limits-meter.md §7.1 item 20: one hostname for every
// cluster, the credential naming the cluster.
func TestSharedHost(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "cell-shared", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("cell-shared", broker.URL(), "")
	a := cp.cluster(cp.tenant("sh-a"), "sh-alpha", cell)
	b := cp.cluster(cp.tenant("sh-b"), "sh-beta", cell)
	_, aKey := cp.key(a.id)
	_, bKey := cp.key(b.id)
	revokedID, revoked := cp.key(a.id)
	cp.exec(`SELECT queen_proxy.revoke_api_key($1::uuid)`, revokedID)

	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), "", "shared_hosts shared.example.test"))
	c := client(port)
	shared := fmt.Sprintf("http://shared.example.test:%d", port)
	sharedDot := fmt.Sprintf("http://shared.example.test.:%d", port)

	pushOn := func(base, key, who string) response {
		return do(t, c, "POST", base+"/api/v1/push", key, fmt.Sprintf(`{"items":[{"queue":"shared-q","payload":{"who":%q}}]}`, who))
	}
	for _, base := range []string{shared, sharedDot} {
		broker.ResetRequests()
		if r := pushOn(base, aKey, "A"); r.status != 200 {
			t.Fatalf("A's push on %s: %d %s", base, r.status, r.body)
		}
		if r := pushOn(base, bKey, "B"); r.status != 200 {
			t.Fatalf("B's push on %s: %d %s", base, r.status, r.body)
		}
		reqs := forwarded(broker)
		if len(reqs) != 2 || reqs[0].Header.Get("X-Queen-Tenant") != a.brokerTenant || reqs[1].Header.Get("X-Queen-Tenant") != b.brokerTenant {
			t.Fatalf("x-queen-tenant did not follow the key: %+v", reqs)
		}
	}
	pop := do(t, c, "GET", shared+"/api/v1/pop/queue/shared-q?batch=10", bKey, "")
	if pop.status != 200 || strings.Contains(string(pop.body), `"who":"A"`) || !strings.Contains(string(pop.body), `"who":"B"`) {
		t.Fatalf("B's pop on the shared host: %d %s", pop.status, pop.body)
	}

	assertRefusal(t, do(t, c, "GET", shared+"/api/v1/resources/queues", "", ""), 401, "unauthorized")
	assertRefusal(t, do(t, c, "GET", shared+"/api/v1/resources/queues", "qk_test_unknown", ""), 401, "unauthorized")
	assertRefusal(t, do(t, c, "GET", shared+"/api/v1/resources/queues", "garbage.token.here", ""), 401, "unauthorized")
	assertRefusal(t, do(t, c, "GET", shared+"/api/v1/resources/queues", revoked, ""), 401, "unauthorized")
	req, _ := http.NewRequest("GET", shared+"/api/v1/resources/queues", nil)
	req.Header.Set("Authorization", "Bearer "+aKey)
	req.Header.Set("X-Queen-Act-Cluster", b.slug)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("key plus act-as: %d", resp.StatusCode)
	}
	// Cluster hostnames on the same listener keep the key/cluster check,
	// and unknown hosts no longer reveal themselves to anonymous callers.
	assertRefusal(t, do(t, c, "GET", fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/resources/queues", a.slug, port), bKey, ""), 403, "forbidden")
	assertRefusal(t, do(t, c, "GET", fmt.Sprintf("http://nosuch.eu1.example.test:%d/api/v1/resources/queues", port), "", ""), 401, "unauthorized")
	assertRefusal(t, do(t, c, "GET", fmt.Sprintf("http://nosuch.eu1.example.test:%d/api/v1/resources/queues", port), aKey, ""), 421, "cluster_unknown")
}
