package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/tenancy"
)

// TestRequestCountsPerKeyAndOutcome: the gateway writes to request_minutes
// exactly what its clients got, per cluster, key and outcome: served
// requests and 429s of a throttled key, 403s of a key without the scope,
// a cell's broken answer as 5xx, and an unknown key's 401 under no key;
// a request for no cluster is counted nowhere.
func TestRequestCountsPerKeyAndOutcome(t *testing.T) {
	// RequireTenant is a tripwire: no real broker refuses a request without x-queen-tenant; here a lost header fails loudly.
	broker := startBroker(t, fakebroker.Options{Name: "rc-cell", RequireTenant: true})
	db := pgtest.NewDatabase(t)
	cp := newControlPlane(t, db)
	cell := cp.cell("rc-cell", broker.URL(), "")
	tn := cp.tenant("rc")
	narrow := cp.cluster(tn, "rc-narrow", cell)
	calm := cp.cluster(tn, "rc-calm", cell)
	cp.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_req_per_sec": 1, "req_burst": 3}')`, narrow.id)
	narrowKeyID, narrowKey := cp.key(narrow.id)
	calmKeyID, calmKey := cp.key(calm.id)
	const readPlain = "qk_test_request-counts-read-only-key"
	readID := cp.scalar(`SELECT queen_proxy.issue_api_key($1::uuid, 'read', $2, ARRAY['read'])::text`,
		calm.id, tenancy.HashAPIKey(readPlain))

	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, db, "", ""))
	c := client(port)
	url := func(slug, path string) string {
		return fmt.Sprintf("http://%s.eu1.example.test:%d%s", slug, port, path)
	}

	seen := map[string]int{} // cluster/key/outcome -> requests
	count := func(cluster, key string, status int) {
		outcome := "ok"
		switch {
		case status == 403:
			outcome = "403"
		case status == 429:
			outcome = "429"
		case status >= 500:
			outcome = "5xx"
		case status >= 400:
			outcome = "4xx"
		}
		seen[cluster+"/"+key+"/"+outcome]++
	}
	for range 8 {
		r := do(t, c, "GET", url(narrow.slug, "/api/v1/resources/queues"), narrowKey, "")
		if r.status != 200 && r.status != 429 {
			t.Fatalf("throttled key: %d %s", r.status, r.body)
		}
		count(narrow.id, narrowKeyID, r.status)
	}
	if seen[narrow.id+"/"+narrowKeyID+"/429"] == 0 {
		t.Fatalf("the throttled key was never refused: %v", seen)
	}
	// A produce-less key's push: 403, counted against that key.
	for range 2 {
		r := do(t, c, "POST", url(calm.slug, "/api/v1/push"), readPlain, `{"items":[{"queue":"q","payload":{}}]}`)
		if r.status != 403 {
			t.Fatalf("push with a read-only key: %d %s", r.status, r.body)
		}
		count(calm.id, readID, r.status)
	}
	// The cell breaks its answer: the client gets 502, counted as 5xx.
	broker.SetAnswerFault(fakebroker.AnswerFault{Path: "/api/v1/resources/queues", Reset: true})
	r := do(t, c, "GET", url(calm.slug, "/api/v1/resources/queues"), calmKey, "")
	broker.SetAnswerFault(fakebroker.AnswerFault{})
	if r.status != 502 {
		t.Fatalf("a broken answer reached the client as %d %s", r.status, r.body)
	}
	count(calm.id, calmKeyID, r.status)
	if r := do(t, c, "GET", url(calm.slug, "/api/v1/resources/queues"), calmKey, ""); r.status != 200 {
		t.Fatalf("after the fault: %d %s", r.status, r.body)
	} else {
		count(calm.id, calmKeyID, r.status)
	}
	// An unknown key: 401, under no key. No cluster at all: not counted.
	if r := do(t, c, "GET", url(calm.slug, "/api/v1/resources/queues"), "qk_test_unknown", ""); r.status != 401 {
		t.Fatalf("unknown key: %d %s", r.status, r.body)
	} else {
		count(calm.id, "", r.status)
	}
	if r := do(t, c, "GET", url("rc-nothing", "/api/v1/resources/queues"), calmKey, ""); r.status != 421 {
		t.Fatalf("no cluster: %d %s", r.status, r.body)
	}

	deadline := time.Now().Add(20 * time.Second)
	for {
		stored := map[string]int{}
		rows, err := cp.pool.Query(t.Context(), `SELECT cluster_id::text, key_id, outcome, sum(reqs)::int FROM queen_proxy.request_minutes
			GROUP BY 1, 2, 3`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var cl, key, outcome string
			var n int
			if err := rows.Scan(&cl, &key, &outcome, &n); err != nil {
				t.Fatal(err)
			}
			stored[cl+"/"+key+"/"+outcome] = n
		}
		rows.Close()
		if fmt.Sprint(stored) == fmt.Sprint(seen) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("request_minutes holds\n  %v\nthe clients got\n  %v", stored, seen)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
