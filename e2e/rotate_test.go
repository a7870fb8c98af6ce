package e2e

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/tenancy"
)

// The tests of "Rotating credentials" in docs/operations.md: each follows
// the documented steps against a real in-process Caddy and the fake broker.

// reached reports whether the broker saw a request with this gateway
// request id.
func reached(b *fakebroker.Broker, requestID string) bool {
	for _, r := range b.Requests() {
		if r.Header.Get("X-Queen-Request-Id") == requestID {
			return true
		}
	}
	return false
}

// TestRotateAPIKey: "key rotate" (the real binary) issues the new key and
// keeps the old one for the overlap; both work during it, and after it the
// old one is refused with 401 before anything reaches the cell, while the
// new one goes on working.
func TestRotateAPIKey(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "rotate-key-cell", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("rotate-key-cell", broker.URL(), "")
	cl := cp.cluster(cp.tenant("rotk"), "rotk", cell)
	oldID, oldKey := cp.key(cl.id)
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), "", ""))
	c := client(port)
	url := fmt.Sprintf("http://rotk.eu1.example.test:%d/api/v1/resources/queues", port)
	if r := do(t, c, "GET", url, oldKey, ""); r.status != 200 {
		t.Fatalf("before the rotation: %d %s", r.status, r.body)
	}

	const overlap = 4 * time.Second
	var rot struct {
		New struct {
			ID  string `json:"id"`
			Key string `json:"key"`
		} `json:"new"`
		Old struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"old"`
		OldValidUntil time.Time `json:"old_valid_until"`
	}
	cliFor(t)(pgtest.URL(t)).okJSON(t, &rot, "key", "rotate", oldID, "--overlap", overlap.String())
	if rot.Old.ID != oldID || rot.Old.Status != "live" || rot.New.ID == oldID || !strings.HasPrefix(rot.New.Key, "qk_live_") ||
		time.Until(rot.OldValidUntil) > overlap || time.Until(rot.OldValidUntil) < overlap/2 {
		t.Fatalf("rotation %+v", rot)
	}

	// During the overlap both keys work.
	for name, key := range map[string]string{"old": oldKey, "new": rot.New.Key} {
		if r := do(t, c, "GET", url, key, ""); r.status != 200 {
			t.Fatalf("%s key during the overlap: %d %s", name, r.status, r.body)
		}
	}
	// After it the old key is refused, and the refusal reaches nothing.
	time.Sleep(time.Until(rot.OldValidUntil))
	eventually(t, 2*time.Second, func() error {
		r := do(t, c, "GET", url, oldKey, "")
		if r.status != 401 {
			return fmt.Errorf("old key after the overlap answered %d", r.status)
		}
		assertRefusal(t, r, 401, "unauthorized")
		if reached(broker, r.header.Get("X-Queen-Request-Id")) {
			t.Fatal("a request with the rotated-out key reached the cell")
		}
		return nil
	})
	if r := do(t, c, "GET", url, rot.New.Key, ""); r.status != 200 {
		t.Fatalf("new key after the overlap: %d %s", r.status, r.body)
	}
}

// TestRotateCellSecret follows the cell secret rotation: with a broker that
// accepts the old and the new token during the change, "cell update
// --secret" moves every request to the new token within a second and no
// request fails (the cell is stated scoped, so no cluster waits longer than
// the first probe of the new credential); with a broker that takes only the
// new one, the requests between the broker's change and the cell update
// fail with the broker's 401, and the update ends that at once.
func TestRotateCellSecret(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	// Token stands for a proxy in front of the cell that checks its static secret: no Queen broker checks one.
	broker := startBroker(t, fakebroker.Options{Name: "rotate-secret-cell", RequireTenant: true, Token: "secret-old"})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("rotate-secret-cell", broker.URL(), "secret-old")
	cp.exec(`SELECT queen_proxy.update_cell($1::uuid, NULL, NULL, false, 'scoped', NULL)`, cell)
	keeper := cp.cluster(cp.tenant("rots-a"), "rots-a", cell)
	other := cp.cluster(cp.tenant("rots-b"), "rots-b", cell)
	_, keeperKey := cp.key(keeper.id)
	_, otherKey := cp.key(other.id)
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), "", ""))
	c := client(port)
	urlOf := func(slug string) string {
		return fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/resources/queues", slug, port)
	}
	get := func(slug, key string) response { return do(t, c, "GET", urlOf(slug), key, "") }
	for slug, key := range map[string]string{keeper.slug: keeperKey, other.slug: otherKey} {
		if r := get(slug, key); r.status != 200 {
			t.Fatalf("%s before the rotation: %d %s", slug, r.status, r.body)
		}
	}
	// presented is the credential of the last request forwarded for a
	// client.
	presented := func() string {
		f := forwarded(broker)
		if len(f) == 0 {
			return ""
		}
		return f[len(f)-1].Header.Get("Authorization")
	}

	// Traffic of both clusters runs through the whole change, slower than
	// plan pro's request rate, so that every answer is the cell's.
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		stop     = make(chan struct{})
		done     sync.WaitGroup
	)
	for slug, key := range map[string]string{keeper.slug: keeperKey, other.slug: otherKey} {
		done.Add(1)
		go func() {
			defer done.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := get(slug, key)
				mu.Lock()
				statuses[r.status]++
				mu.Unlock()
				time.Sleep(40 * time.Millisecond) // well inside the plan's request rate
			}
		}()
	}

	// Step 1: the broker accepts both. Step 2: the cell update.
	broker.SetTokens("secret-old", "secret-new")
	cp.exec(`SELECT queen_proxy.update_cell($1::uuid, NULL, 'secret-new', false, NULL, NULL)`, cell)
	took := eventually(t, time.Second, func() error {
		if p := presented(); p != "Bearer secret-new" {
			return fmt.Errorf("the gateway presents %q", p)
		}
		return nil
	})
	t.Logf("the gateway presented the new secret %v after the update", took)
	// Step 3: the broker drops the old one.
	broker.SetTokens("secret-new")
	time.Sleep(500 * time.Millisecond)
	close(stop)
	done.Wait()
	if statuses[200] == 0 || len(statuses) != 1 {
		t.Fatalf("answers during the rotation: %v, want every request served", statuses)
	}
	since := time.Now()
	for slug, key := range map[string]string{keeper.slug: keeperKey, other.slug: otherKey} {
		if r := get(slug, key); r.status != 200 {
			t.Fatalf("%s after the rotation: %d %s", slug, r.status, r.body)
		}
	}
	for _, r := range forwarded(broker) {
		if r.Time.After(since) && r.Header.Get("Authorization") != "Bearer secret-new" {
			t.Fatalf("a request after the rotation presented %q", r.Header.Get("Authorization"))
		}
	}

	// A broker that takes one token only: between its change and the cell
	// update, requests fail with its 401; the update ends it.
	broker.SetTokens("secret-newer")
	r := get(keeper.slug, keeperKey)
	if r.status != 401 || !strings.Contains(string(r.body), "Unauthorized") {
		t.Fatalf("during the window: %d %s, want the broker's 401", r.status, r.body)
	}
	cp.exec(`SELECT queen_proxy.update_cell($1::uuid, NULL, 'secret-newer', false, NULL, NULL)`, cell)
	took = eventually(t, 5*time.Second, func() error {
		for slug, key := range map[string]string{keeper.slug: keeperKey, other.slug: otherKey} {
			if r := get(slug, key); r.status != 200 {
				return fmt.Errorf("%s answered %d %s", slug, r.status, r.body)
			}
		}
		return nil
	})
	t.Logf("traffic flowed again %v after the cell update", took)
}

// writeSessionKey writes a new Ed25519 private key and its public key as
// PEM files and returns their paths.
func writeSessionKey(t *testing.T, dir, name string) (private, public string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	private, public = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".pub")
	if err := os.WriteFile(private, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(public, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return private, public
}

// TestRotateSessionKey follows the session signing key rotation with
// configuration reloads: after the switch the new key signs and a session
// of the old key still works (no one is signed out); once the old key is
// dropped, its sessions are refused with 401 before anything reaches the
// cell, and the new key's go on working.
func TestRotateSessionKey(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "rotate-session-cell", RequireTenant: true})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("rotate-session-cell", broker.URL(), "")
	tenant := cp.tenant("rotj")
	cl := cp.cluster(tenant, "rotj", cell)
	userID := cp.scalar(`SELECT queen_proxy.create_user($1::uuid, 'viewer@rotj.test', NULL, 'local')::text`, tenant)
	cp.exec(`SELECT queen_proxy.grant_cluster_role($1::uuid, 'viewer@rotj.test', 'viewer')`, cl.id)

	dir := t.TempDir()
	oldPriv, oldPub := writeSessionKey(t, dir, "session-old")
	newPriv, newPub := writeSessionKey(t, dir, "session-new")
	port := freePort(t)
	config := func(session string) string {
		return gatewayCaddyfile(port, pgtest.URL(t), "session {\n"+session+"\n}", "")
	}
	reload := func(session string) {
		t.Helper()
		cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(config(session)), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := caddy.Load(cfg, false); err != nil {
			t.Fatalf("reload: %v", err)
		}
		waitServing(t, port)
	}
	mint := func(privPath string) string {
		t.Helper()
		pem, err := os.ReadFile(privPath)
		if err != nil {
			t.Fatal(err)
		}
		keys, err := tenancy.NewSessionKeys(tenancy.SessionKeysConfig{Ed25519PrivateKeyPEM: pem})
		if err != nil {
			t.Fatal(err)
		}
		tok, _, err := keys.Mint(userID, "", "viewer", "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	c := client(port)
	url := fmt.Sprintf("http://rotj.eu1.example.test:%d/api/v1/resources/queues", port)
	get := func(tok string) response {
		c.CloseIdleConnections() // the reload closes the old server's idle connections
		return do(t, c, "GET", url, tok, "")
	}

	startGateway(t, config("ed25519_key_file "+oldPriv))
	waitServing(t, port)
	oldSession := mint(oldPriv)
	if r := get(oldSession); r.status != 200 {
		t.Fatalf("before the rotation: %d %s", r.status, r.body)
	}

	// Stage: the new public key verifies everywhere before any gateway
	// signs with it.
	reload("ed25519_key_file " + oldPriv + "\nprevious_ed25519_public_key_file " + newPub)
	newSession := mint(newPriv)
	for name, tok := range map[string]string{"old": oldSession, "new": newSession} {
		if r := get(tok); r.status != 200 {
			t.Fatalf("staged, %s session: %d %s", name, r.status, r.body)
		}
	}
	// Switch: the new key signs, the old one still verifies.
	reload("ed25519_key_file " + newPriv + "\nprevious_ed25519_public_key_file " + oldPub)
	for name, tok := range map[string]string{"old": oldSession, "new": newSession} {
		if r := get(tok); r.status != 200 {
			t.Fatalf("switched, %s session: %d %s", name, r.status, r.body)
		}
	}
	// Drop the old key: its sessions are refused and reach nothing.
	reload("ed25519_key_file " + newPriv)
	r := get(oldSession)
	assertRefusal(t, r, 401, "unauthorized")
	if reached(broker, r.header.Get("X-Queen-Request-Id")) {
		t.Fatal("a session of the dropped key reached the cell")
	}
	if r := get(newSession); r.status != 200 {
		t.Fatalf("dropped, new session: %d %s", r.status, r.body)
	}
}

// TestRotateCellSecretOnProbedCell: on a cell left to the probe, the new
// secret resets the verdict, so until the probe has decided again the
// keeper is served and the other clusters are refused with 503
// cell_not_isolated before anything reaches the cell; with a broker that
// accepts the new secret, that is over within a couple of seconds.
func TestRotateCellSecretOnProbedCell(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	// Token stands for a proxy in front of the cell that checks its static secret: no Queen broker checks one.
	broker := startBroker(t, fakebroker.Options{Name: "rotate-probed-cell", RequireTenant: true, Token: "secret-old"})
	cp := newControlPlane(t, pgtest.URL(t))
	cell := cp.cell("rotate-probed-cell", broker.URL(), "secret-old")
	keeper := cp.cluster(cp.tenant("rotp-a"), "rotp-a", cell)
	other := cp.cluster(cp.tenant("rotp-b"), "rotp-b", cell)
	_, keeperKey := cp.key(keeper.id)
	_, otherKey := cp.key(other.id)
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, pgtest.URL(t), "", ""))
	c := client(port)
	get := func(slug, key string) response {
		return do(t, c, "GET", fmt.Sprintf("http://%s.eu1.example.test:%d/api/v1/resources/queues", slug, port), key, "")
	}
	servedAll := func() error {
		for slug, key := range map[string]string{keeper.slug: keeperKey, other.slug: otherKey} {
			if r := get(slug, key); r.status != 200 {
				return fmt.Errorf("%s answered %d %s", slug, r.status, r.body)
			}
		}
		return nil
	}
	// The first probes decide that the broker scopes.
	eventually(t, 10*time.Second, servedAll)

	broker.SetTokens("secret-old", "secret-new")
	updated := cp.scalar(`SELECT now()::text`)
	cp.exec(`SELECT queen_proxy.update_cell($1::uuid, NULL, 'secret-new', false, NULL, NULL)`, cell)
	// For a while after the change, every answer of the other cluster is
	// either served or the refusal, and the keeper is always served.
	answers := map[int]int{}
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if r := get(keeper.slug, keeperKey); r.status != 200 {
			t.Fatalf("the keeper during the re-probe: %d %s", r.status, r.body)
		}
		r := get(other.slug, otherKey)
		answers[r.status]++
		switch r.status {
		case 200:
		case 503:
			assertRefusal(t, r, 503, "cell_not_isolated")
			if reached(broker, r.header.Get("X-Queen-Request-Id")) {
				t.Fatal("a refused request reached the cell")
			}
		default:
			t.Fatalf("the other cluster during the re-probe: %d %s", r.status, r.body)
		}
	}
	t.Logf("the other cluster's answers in the 1.5 s after the cell update: %v", answers)
	// The verdict was reset and probed again with the new secret.
	took := eventually(t, 5*time.Second, func() error {
		if v := cp.scalar(`SELECT tenant_scoping || ' ' || (coalesce(tenant_scoping_checked_at, '-infinity') > $1::timestamptz)::text
			FROM queen_proxy.cells WHERE id = $2::uuid`, updated, cell); v != "scoped true" {
			return fmt.Errorf("verdict after the update: %s", v)
		}
		return servedAll()
	})
	t.Logf("re-probed and serving every cluster %v later", took)
	for _, r := range forwarded(broker) {
		if r.Header.Get("Authorization") != "Bearer secret-new" && r.Time.After(time.Now().Add(-time.Second)) {
			t.Fatalf("a request after the rotation presented %q", r.Header.Get("Authorization"))
		}
	}
}
