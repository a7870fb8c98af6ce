package migrations

import (
	"encoding/json"
	"testing"
)

func TestDefaultPlans(t *testing.T) {
	pool := db(t)
	const kib, mib, gib, day = 1024, 1024 * 1024, 1024 * 1024 * 1024, 86400
	base := map[string]bool{"kv": true, "timers": true, "ephemeral": true}
	full := map[string]bool{"kv": true, "timers": true, "ephemeral": true, "streams": true, "traces": true}
	type plan struct {
		class                                  string
		req, reqBurst, msgs, msgsBurst, queues int64
		partitions, parked, payload, batch     int64
		retained, retention                    int64
		features                               map[string]bool
	}
	want := map[string]plan{
		"free":        {"shared", 5, 25, 20, 100, 20, 8, 50, 256 * kib, 1000, 1 * gib, 7 * day, base},
		"dev":         {"shared", 10, 50, 40, 200, 50, 16, 150, 512 * kib, 2000, 3 * gib, 14 * day, base},
		"pro":         {"shared", 50, 200, 200, 800, 200, 32, 1000, 1 * mib, 5000, 20 * gib, 30 * day, full},
		"dedicated-s": {"dedicated", 200, 800, 600, 2000, 1000, 64, 5000, 4 * mib, 10000, 200 * gib, 90 * day, full},
	}
	for code, w := range want {
		var g plan
		var quota *int64
		var features []byte
		err := pool.QueryRow(ctxT(t), `SELECT cell_class, max_req_per_sec, req_burst, max_msgs_per_sec, msgs_burst,
			max_queues, max_partitions_per_queue, max_parked_pops, max_payload_bytes, max_batch_items,
			max_retained_bytes, max_retention_seconds, monthly_msgs_quota, features
			FROM queen_proxy.plans WHERE code = $1`, code).Scan(&g.class, &g.req, &g.reqBurst, &g.msgs, &g.msgsBurst,
			&g.queues, &g.partitions, &g.parked, &g.payload, &g.batch, &g.retained, &g.retention, &quota, &features)
		if err != nil {
			t.Errorf("plan %s: %v", code, err)
			continue
		}
		if err := json.Unmarshal(features, &g.features); err != nil {
			t.Fatalf("plan %s features %s: %v", code, features, err)
		}
		if quota != nil {
			t.Errorf("plan %s monthly_msgs_quota = %d, want NULL", code, *quota)
		}
		gf, wf := g.features, w.features
		g.features, w.features = nil, nil
		if g.class != w.class || g.req != w.req || g.reqBurst != w.reqBurst || g.msgs != w.msgs || g.msgsBurst != w.msgsBurst ||
			g.queues != w.queues || g.partitions != w.partitions || g.parked != w.parked || g.payload != w.payload ||
			g.batch != w.batch || g.retained != w.retained || g.retention != w.retention {
			t.Errorf("plan %s = %+v, want %+v", code, g, w)
		}
		if len(gf) != len(wf) {
			t.Errorf("plan %s features = %v, want %v", code, gf, wf)
		}
		for k, v := range wf {
			if gf[k] != v {
				t.Errorf("plan %s features = %v, want %v", code, gf, wf)
			}
		}
	}
	if n := scalar[int](t, pool, "SELECT count(*) FROM queen_proxy.plans WHERE code IN ('free', 'dev', 'pro', 'dedicated-s')"); n != 4 {
		t.Fatalf("%d default plans", n)
	}
	// A plan added later gets kv, timers and ephemeral by default.
	f := scalar[string](t, pool, `INSERT INTO queen_proxy.plans (code, cell_class) VALUES ($1, 'shared') RETURNING features::text`, "custom-"+randHex(3))
	if f != `{"kv": true, "timers": true, "ephemeral": true}` {
		t.Fatalf("default features = %s", f)
	}
}
