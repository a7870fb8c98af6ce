package console

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/migrations"
	"github.com/queengate/queengate/tenancy"
)

// newFirstDayEnv is a surface on a database of its own, migrated and
// nothing else: the platform tenant, no cell, no cluster (a fleet's first
// day). The package database always holds other tests' clusters, which a
// live operator would see.
func newFirstDayEnv(t *testing.T, configure ...func(*Options)) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatalf("migrations: %v", err)
	}
	e := &env{t: t, pool: pool}
	if e.keys, err = tenancy.NewSessionKeys(tenancy.SessionKeysConfig{HS256Secret: []byte(hsSecret)}); err != nil {
		t.Fatal(err)
	}
	store := tenancy.NewStore(pool)
	e.ids = tenancy.NewIdentityCache(store, tenancy.IdentityCacheConfig{}, nil)
	e.cache = tenancy.NewClusterCache(store, tenancy.CacheConfig{}, nil)
	e.opts = Options{
		Pool: pool, Sessions: e.keys, Identities: e.ids,
		Clusters: testClusters{cache: e.cache, shared: map[string]bool{"ops.example.test": true}},
		State:    testState{live: &e.live}, StateKey: []byte("kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"),
		OnClusterChanged: func(id string) { e.cache.InvalidateCluster(id) },
		Now:              e.now,
		OperatorEnabled:  true, OperatorAPI: true,
	}
	for _, f := range configure {
		f(&e.opts)
	}
	if e.s, err = New(e.opts); err != nil {
		t.Fatal(err)
	}
	return e
}

// firstOperator creates an operator as `caddy queen user create <email>
// --operator` does: in the platform tenant, with the operator bit.
func (e *env) firstOperator(email string) string {
	e.t.Helper()
	u, err := controlplane.CreateUser(e.ctx(), e.pool, controlplane.NewUser{Email: email, Operator: true})
	if err != nil {
		e.t.Fatal(err)
	}
	return u.ID
}

// An operator of a fleet with no cluster yet is told by /auth/me that the
// fleet answers it and that it has no cluster: the app opens on the fleet
// alone, since the console's cluster routes have nothing to act on.
func TestMeOfAnOperatorWithoutClusters(t *testing.T) {
	e := newFirstDayEnv(t)
	const host = "ops.example.test"
	opID := e.firstOperator("first-op@platform.test")
	cookie := e.token(opID)
	me := e.do(req{method: http.MethodGet, host: host, path: "/auth/me", cookie: cookie}).want(http.StatusOK, "").json()
	if me["operator_live"] != true || me["fleet_view"] != true || me["is_operator"] != true {
		t.Fatalf("/auth/me of a live operator: %v", me)
	}
	if me["tenant_slug"] != controlplane.PlatformTenant || me["acting_cluster"] != nil {
		t.Fatalf("the operator's home and acting cluster: tenant %v, acting %v", me["tenant_slug"], me["acting_cluster"])
	}
	if cl, ok := me["clusters"].([]any); !ok || len(cl) != 0 {
		t.Fatalf("clusters of an operator of an empty fleet: %#v, want []", me["clusters"])
	}
	// What the app reads in fleet-only mode answers; the cluster overview
	// it no longer calls has no cluster to show.
	for _, p := range []string{"/api/operator/cells", "/api/operator/tenants", "/api/operator/plans"} {
		e.do(req{method: http.MethodGet, host: host, path: p, cookie: cookie}).want(http.StatusOK, "")
	}
	tenants := e.do(req{method: http.MethodGet, host: host, path: "/api/operator/tenants", cookie: cookie}).json()["tenants"].([]any)
	if len(tenants) != 1 || tenants[0].(map[string]any)["slug"] != "platform" || tenants[0].(map[string]any)["is_platform"] != true {
		t.Fatalf("tenants of a new fleet: %v, want the platform tenant alone, marked", tenants)
	}
	e.do(req{method: http.MethodGet, host: host, path: "/api/console/overview", cookie: cookie}).want(http.StatusForbidden, "forbidden")

	// The same operator without the operator API: live, but no fleet.
	off := newFirstDayEnv(t, func(o *Options) { o.OperatorAPI = false })
	offID := off.firstOperator("op-no-api@platform.test")
	me = off.do(req{method: http.MethodGet, host: host, path: "/auth/me", cookie: off.token(offID)}).want(http.StatusOK, "").json()
	if me["operator_live"] != true || me["fleet_view"] != false {
		t.Fatalf("/auth/me without the operator API: operator_live %v fleet_view %v", me["operator_live"], me["fleet_view"])
	}
	// A user who is no operator never has the fleet view.
	tenant := e.scalar(`SELECT queen_proxy.create_tenant('acme', 'Acme')::text`)
	userID, _ := e.user(tenant, "")
	me = e.do(req{method: http.MethodGet, host: host, path: "/auth/me", cookie: e.token(userID)}).want(http.StatusOK, "").json()
	if me["operator_live"] != false || me["fleet_view"] != false {
		t.Fatalf("/auth/me of a customer's user: operator_live %v fleet_view %v", me["operator_live"], me["fleet_view"])
	}
}
