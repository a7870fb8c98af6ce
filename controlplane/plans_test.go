package controlplane

import (
	"testing"
)

func TestListPlans(t *testing.T) {
	pool, _ := fresh(t)
	ps := must[[]Plan](t)(ListPlans(ctxT(t), pool))
	if len(ps) != 4 || ps[0].Code != "dedicated-s" || ps[1].Code != "dev" || ps[2].Code != "free" || ps[3].Code != "pro" {
		t.Fatalf("plans %+v", ps)
	}
	free := ps[2]
	if free.CellClass != "shared" || !sameLimit(free.Limit("max_req_per_sec"), ptr(5)) ||
		!sameLimit(free.Limit("max_retained_bytes"), ptr(1073741824)) || free.Limit("monthly_msgs_quota") != nil ||
		len(free.Limits) != len(LimitNames) {
		t.Fatalf("free %+v", free)
	}
	if got := FeaturesOn(ps[3].Features); got != "ephemeral,kv,streams,timers,traces" {
		t.Fatalf("pro features %q", got)
	}
}

func TestSetPlan(t *testing.T) {
	pool, url := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool) // on pro
	l := listen(t, url)

	p, created, err := SetPlan(ctx, pool, PlanChange{Code: "pro",
		Limits:   map[string]*int64{"max_queues": ptr(300), "req_burst": nil},
		Features: map[string]bool{"traces": false}})
	if err != nil || created {
		t.Fatalf("SetPlan pro: created %v, %v", created, err)
	}
	if !sameLimit(p.Limit("max_queues"), ptr(300)) || p.Limit("req_burst") != nil || !sameLimit(p.Limit("max_req_per_sec"), ptr(50)) ||
		FeaturesOn(p.Features) != "ephemeral,kv,streams,timers" || p.Clusters != 1 {
		t.Fatalf("pro now %+v (%s)", p, p.Features)
	}
	if got := l.next(); got != w.cluster.ID {
		t.Fatalf("changing the plan announced %q, want its cluster", got)
	}
	lim := must[Limits](t)(ClusterLimits(ctx, pool, "acme-prod"))
	for _, x := range lim.Limits {
		if x.Name == "max_queues" && !sameLimit(x.Effective, ptr(300)) {
			t.Fatalf("effective max_queues %v", show(x.Effective))
		}
	}

	_, _, err = SetPlan(ctx, pool, PlanChange{Code: "gold", Limits: map[string]*int64{"max_queues": ptr(5)}})
	wantErr(t, err, Invalid, `plan "gold" does not exist; a new plan needs a cell class (shared or dedicated)`)
	gold, created, err := SetPlan(ctx, pool, PlanChange{Code: "gold", CellClass: "dedicated",
		Limits: map[string]*int64{"max_queues": ptr(5000)}, Features: map[string]bool{"streams": true}})
	if err != nil || !created {
		t.Fatalf("SetPlan gold: created %v, %v", created, err)
	}
	if gold.CellClass != "dedicated" || !sameLimit(gold.Limit("max_queues"), ptr(5000)) || gold.Limit("max_req_per_sec") != nil ||
		FeaturesOn(gold.Features) != "ephemeral,kv,streams,timers" {
		t.Fatalf("gold %+v (%s)", gold, gold.Features)
	}

	_, _, err = SetPlan(ctx, pool, PlanChange{Code: "Gold!"})
	wantErr(t, err, Invalid, `invalid plan code "Gold!": start with a-z, then a-z, 0-9 and hyphens`)
	_, _, err = SetPlan(ctx, pool, PlanChange{Code: "pro", CellClass: "huge"})
	wantErr(t, err, Invalid, `invalid plan cell class "huge": use shared or dedicated`)
	_, _, err = SetPlan(ctx, pool, PlanChange{Code: "pro", Limits: map[string]*int64{"max_topics": ptr(1)}})
	wantErr(t, err, Invalid, `unknown limit "max_topics" (known: max_req_per_sec, req_burst, max_msgs_per_sec, msgs_burst, max_queues, max_partitions_per_queue, max_parked_pops, max_payload_bytes, max_batch_items, max_retained_bytes, max_retention_seconds, monthly_msgs_quota)`)
	_, _, err = SetPlan(ctx, pool, PlanChange{Code: "pro", Limits: map[string]*int64{"max_queues": ptr(0)}})
	wantErr(t, err, Invalid, "invalid max_queues 0: use a whole number above 0 or unlimited")
	_, _, err = SetPlan(ctx, pool, PlanChange{Code: "pro", Features: map[string]bool{"teleport": true}})
	wantErr(t, err, Invalid, `unknown feature "teleport" (known: streams, traces, kv, timers, ephemeral)`)
}

func TestParseLimitAndFeature(t *testing.T) {
	if v, err := ParseLimit("max_queues", " 42 "); err != nil || !sameLimit(v, ptr(42)) {
		t.Fatalf("42: %v, %v", show(v), err)
	}
	for _, s := range []string{"unlimited", "None", "null"} {
		if v, err := ParseLimit("max_queues", s); err != nil || v != nil {
			t.Fatalf("%s: %v, %v", s, show(v), err)
		}
	}
	for _, s := range []string{"0", "-3", "1.5", "lots", ""} {
		_, err := ParseLimit("max_queues", s)
		wantErr(t, err, Invalid, `invalid max_queues "`+s+`": use a whole number above 0 or "unlimited"`)
	}
	for in, want := range map[string]bool{"streams=on": true, "Traces=OFF": false, "kv=true": true, "timers=0": false} {
		name, on, err := ParseFeature(in)
		if err != nil || on != want || name == "" {
			t.Fatalf("ParseFeature(%q) = %q %v %v", in, name, on, err)
		}
	}
	for _, in := range []string{"streams", "=on", "streams=maybe"} {
		_, _, err := ParseFeature(in)
		wantErr(t, err, Invalid, `invalid feature "`+in+`": use name=on or name=off`)
	}
}
