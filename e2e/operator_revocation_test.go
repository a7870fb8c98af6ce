package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
)

// mintRecord is one key-mint request an operator's session sent, and its
// answer.
type mintRecord struct {
	sent   time.Time
	status int
	keyID  string
}

// TestOperatorRevocationReachesTheOtherGateway runs two gateways on one
// control plane: an operator signs in on the first, acts on two other
// tenants' clusters through the second (suspend and resume one, mint
// admin keys on the other, both through the fleet API and as acting admin
// in the console), and while a loop keeps minting through the second,
// `caddy queen user operator off` withdraws the bit on the first's
// machine. Every act sent through the second gateway after the command
// returned is refused, the first within a second (printed), and no key
// exists but those whose mint was answered 201 to a request sent before
// the command returned.
func TestOperatorRevocationReachesTheOtherGateway(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "op-cell", RequireTenant: true})
	dbURL := pgtest.URL(t)
	cp := newControlPlane(t, dbURL)
	cellA := cp.cell("op-cell-a", broker.URL(), "")
	cellB := cp.cell("op-cell-b", broker.URL(), "")
	opTenant := cp.tenant("op-home")
	victim := cp.cluster(cp.tenant("op-second"), "op-second-prod", cellA)
	third := cp.cluster(cp.tenant("op-third"), "op-third-prod", cellB)
	const opEmail, opPassword = "ops@op-home.test", "operator horse battery staple"
	opID := cp.scalar(`SELECT queen_proxy.create_user($1::uuid, $2, public.crypt($3, public.gen_salt('bf', 10)), 'local')::text`,
		opTenant, opEmail, opPassword)
	cp.exec(`SELECT queen_proxy.set_operator($1, true)`, opEmail)

	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	app := func(spool string) string {
		return fmt.Sprintf(`meter_flush_interval 1s
		spool_dir %s
		operator_enabled
		session {
			hs256_secret %s
		}
		identity {
			operator_api
		}`, spool, hex.EncodeToString(secret))
	}
	// The first gateway, in this process; the second, the real binary.
	portA := freePort(t)
	startGateway(t, gatewayCaddyfile(portA, dbURL, app(t.TempDir()), ""))
	portB := freePort(t)
	homeB := t.TempDir()
	cfgB := filepath.Join(homeB, "Caddyfile")
	if err := os.WriteFile(cfgB, []byte(gatewayCaddyfile(portB, dbURL, app(filepath.Join(homeB, "spool")), "")), 0o600); err != nil {
		t.Fatal(err)
	}
	startGatewayProcess(t, caddyBinary(t), cfgB, homeB)

	noRedirect := func(port int) *http.Client {
		c := client(port)
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		return c
	}
	onA := consoleClient{t: t, c: noRedirect(portA), origin: fmt.Sprintf("http://%s.eu1.example.test:%d", victim.slug, portA)}
	onB := consoleClient{t: t, c: noRedirect(portB), origin: fmt.Sprintf("http://%s.eu1.example.test:%d", victim.slug, portB)}
	thirdOnB := consoleClient{t: t, c: noRedirect(portB), origin: fmt.Sprintf("http://%s.eu1.example.test:%d", third.slug, portB)}
	eventually(t, 60*time.Second, func() error {
		resp, err := onB.c.Get(onB.origin + "/auth/me")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	session := onA.login(opEmail, opPassword)

	// Before: the operator's acts through the second gateway work (and
	// its cache now holds the operator bit).
	fleetNamed := func(path, name string) response {
		return onB.do("POST", "/api/operator/clusters/"+path, session, "application/json", `{"name":"`+name+`","scopes":["admin"]}`)
	}
	fleet := func(path string) response { return fleetNamed(path, "loop-fleet") }
	if r := fleet(victim.slug + "/suspend"); r.status != 200 {
		t.Fatalf("suspend through the second gateway: %d %s", r.status, r.body)
	}
	if r := fleet(victim.slug + "/resume"); r.status != 200 {
		t.Fatalf("resume through the second gateway: %d %s", r.status, r.body)
	}
	if r := fleetNamed(third.slug+"/keys", "first-fleet"); r.status != 201 {
		t.Fatalf("fleet key on the third tenant's cluster: %d %s", r.status, r.body)
	}
	if r := thirdOnB.do("POST", "/api/console/keys", session, "application/json", `{"name":"first-console","scopes":["admin"]}`); r.status != 201 {
		t.Fatalf("console key on the third tenant's cluster, as operator: %d %s", r.status, r.body)
	}

	// A loop mints keys through the second gateway, through both routes,
	// as fast as it is answered, across the withdrawal.
	var mu sync.Mutex
	var mints []mintRecord
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				rec := mintRecord{sent: time.Now()}
				var r response
				if w == 0 {
					r = fleet(third.slug + "/keys")
				} else {
					r = thirdOnB.do("POST", "/api/console/keys", session, "application/json", `{"name":"loop-console","scopes":["admin"]}`)
				}
				rec.status = r.status
				if r.status == 201 {
					rec.keyID, _ = r.json(t)["id"].(string)
				}
				mu.Lock()
				mints = append(mints, rec)
				mu.Unlock()
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	cli := queenCLI{bin: caddyBinary(t), home: t.TempDir(), url: dbURL}
	if out := cli.ok(t, "user", "operator", "off", opEmail); out != fmt.Sprintf("%q is not an operator\n", opEmail) {
		t.Fatalf("user operator off: %q", out)
	}
	revoked := time.Now()

	// The second gateway refuses the fleet acts: suspend, resume, keys.
	var refusedAfter time.Duration
	for {
		r := fleet(victim.slug + "/suspend")
		if r.status == http.StatusNotFound {
			assertRefusal(t, r, http.StatusNotFound, "route_blocked")
			refusedAfter = time.Since(revoked)
			break
		}
		if r.status != 200 {
			t.Fatalf("suspend after the withdrawal: %d %s", r.status, r.body)
		}
		if time.Since(revoked) > time.Second {
			t.Fatalf("the second gateway still served the operator's suspend %v after `user operator off` returned", time.Since(revoked))
		}
		fleet(victim.slug + "/resume")
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("the second gateway refused the withdrawn operator's act %v after `caddy queen user operator off` returned on the first's machine",
		refusedAfter.Round(100*time.Microsecond))

	for _, path := range []string{victim.slug + "/resume", third.slug + "/keys"} {
		assertRefusal(t, fleet(path), http.StatusNotFound, "route_blocked")
	}
	assertRefusal(t, thirdOnB.do("POST", "/api/console/keys", session, "application/json", `{"name":"late","scopes":["admin"]}`),
		http.StatusForbidden, "forbidden")
	// The first gateway, too.
	assertRefusal(t, onA.do("POST", "/api/operator/clusters/"+third.slug+"/keys", session, "application/json", `{"name":"late","scopes":["admin"]}`),
		http.StatusNotFound, "route_blocked")

	// Nothing minted after the withdrawal exists: every key on the third
	// tenant's cluster is one whose mint was answered 201, and every mint
	// sent after the command returned was refused.
	answered := map[string]bool{}
	before, after := 0, 0
	for _, m := range mints {
		if m.sent.After(revoked) {
			after++
			if m.status == 201 {
				t.Fatalf("a mint sent %v after the withdrawal was answered 201 (key %s)", m.sent.Sub(revoked), m.keyID)
			}
			continue
		}
		if m.status == 201 {
			before++
			answered[m.keyID] = true
		}
	}
	t.Logf("the mint loop got %d keys for mints sent before the withdrawal and %d refusals after it", before, after)
	if before == 0 || after == 0 {
		t.Fatalf("the loop minted %d keys before the withdrawal and sent %d mints after it; want both above 0", before, after)
	}
	rows, err := cp.pool.Query(t.Context(), `SELECT id::text, name FROM queen_proxy.api_keys WHERE cluster_id = $1::uuid`, third.id)
	if err != nil {
		t.Fatal(err)
	}
	stored, first := 0, 0
	for rows.Next() {
		var id, name string
		if err := rows.Scan(&id, &name); err != nil {
			t.Fatal(err)
		}
		stored++
		switch {
		case name == "first-fleet" || name == "first-console":
			first++
		case !answered[id]:
			t.Fatalf("key %s (%s) exists without a 201 to a mint sent before the withdrawal", id, name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if first != 2 || stored != before+2 {
		t.Fatalf("%d keys on the third tenant's cluster (%d minted first), want the %d the loop was given plus the 2 minted first",
			stored, first, before)
	}
	// Each key has its audit row by the operator, and nothing else does.
	if got := cp.scalar(`SELECT count(*)::text FROM queen_proxy.operations
		WHERE actor = 'user' AND actor_id = $1::uuid AND cluster_id = $2::uuid
		  AND action IN ('operator_api_key_issued', 'console_api_key_issued')`, opID, third.id); got != fmt.Sprint(stored) {
		t.Fatalf("%s audit rows of the operator's keys, want %d", got, stored)
	}
}
