package tenancy

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// seeded is one tenant with a cluster on a cell with a secret, and a key.
type seeded struct {
	pool                          *pgxpool.Pool
	tenantID, clusterID, cellID   string
	keyID, keyPlain, brokerTenant string
}

func seed(t *testing.T) seeded {
	t.Helper()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := migrations.Apply(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var s seeded
	s.pool = pool
	q := func(sql string, dest any, args ...any) {
		t.Helper()
		if err := pool.QueryRow(ctx, sql, args...).Scan(dest); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	q(`INSERT INTO queen_proxy.cells (slug, region, base_url, class, cell_secret)
		VALUES ('cell-1', 'eu1', 'http://127.0.0.1:6632', 'shared', 'topsecret') RETURNING id::text`, &s.cellID)
	q(`SELECT queen_proxy.create_tenant('acme', 'Acme')::text`, &s.tenantID)
	q(`SELECT queen_proxy.create_cluster($1::uuid, 'acme-prod', 'pro', $2::uuid)::text`, &s.clusterID, s.tenantID, s.cellID)
	q(`SELECT broker_tenant_uuid::text FROM queen_proxy.clusters WHERE id = $1::uuid`, &s.brokerTenant, s.clusterID)
	s.keyPlain = "qk_live_store_test_key"
	q(`SELECT queen_proxy.issue_api_key($1::uuid, 'k', $2, ARRAY['produce','read'])::text`, &s.keyID, s.clusterID, HashAPIKey(s.keyPlain))
	return s
}

func TestStoreReadsTheWholeCluster(t *testing.T) {
	s := seed(t)
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `SELECT queen_proxy.set_limit_override($1::uuid, '{"max_queues": 7, "req_burst": null}')`, s.clusterID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `SELECT queen_proxy.set_tenant_status($1::uuid, 'grace')`, s.tenantID); err != nil {
		t.Fatal(err)
	}
	store := NewStore(s.pool)
	c, err := store.ClusterBySlug(ctx, "acme-prod")
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != s.clusterID || c.TenantID != s.tenantID || c.Slug != "acme-prod" || c.BrokerTenant != s.brokerTenant ||
		c.CellID != s.cellID || c.CellSlug != "cell-1" || c.CellURL != "http://127.0.0.1:6632" || c.CellSecret != "topsecret" ||
		c.PlanCode != "pro" || c.Status != StatusPushBlocked {
		t.Fatalf("cluster %+v", c)
	}
	// pro: 50 req/s, burst 200 (overridden to unlimited), 200 queues (overridden to 7), 32 partitions.
	want := limits.Effective{
		MaxReqPerSec: 50, ReqBurst: limits.Unlimited, MaxMsgsPerSec: 200, MsgsBurst: 800,
		MaxQueues: 7, MaxPartitionsPerQueue: 32, MaxParkedPops: 1000, MaxPayloadBytes: 1 << 20,
		MaxBatchItems: 5000, MaxRetainedBytes: 20 << 30, MaxRetentionSeconds: 30 * 86400,
	}
	if c.Limits != want {
		t.Errorf("limits %+v\nwant   %+v", c.Limits, want)
	}
	if !c.Features.Streams || !c.Features.Traces || !c.Features.KV || !c.Features.Timers || !c.Features.Ephemeral {
		t.Errorf("features %+v", c.Features)
	}
	byID, err := store.ClusterByID(ctx, s.clusterID)
	if err != nil || byID.Slug != "acme-prod" {
		t.Fatalf("ClusterByID = %+v, %v", byID, err)
	}
	if _, err := store.ClusterBySlug(ctx, "nosuch"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown slug: %v", err)
	}
	if _, err := store.ClusterByID(ctx, "not-a-uuid"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("malformed id: %v", err)
	}
}

func TestStoreAPIKeys(t *testing.T) {
	s := seed(t)
	ctx := context.Background()
	store := NewStore(s.pool)
	k, err := store.APIKeyByHash(ctx, HashAPIKey(s.keyPlain))
	if err != nil {
		t.Fatal(err)
	}
	if k.ID != s.keyID || k.Cluster.ID != s.clusterID || !k.Has(ScopeProduce) || !k.Has(ScopeRead) || k.Has(ScopeAdmin) {
		t.Fatalf("key %+v", k)
	}
	if _, err := s.pool.Exec(ctx, `SELECT queen_proxy.revoke_api_key($1::uuid)`, s.keyID); err != nil {
		t.Fatal(err)
	}
	if _, err := store.APIKeyByHash(ctx, HashAPIKey(s.keyPlain)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoked key: %v", err)
	}
}

func TestStoreUnavailableIsNotNotFound(t *testing.T) {
	s := seed(t)
	store := NewStore(s.pool)
	s.pool.Close()
	_, err := store.ClusterBySlug(context.Background(), "acme-prod")
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("closed pool: err = %v, want an error that is not ErrNotFound", err)
	}
}

func TestInvalidationListener(t *testing.T) {
	s := seed(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan string, 16)
	revoked := make(chan struct{}, 1)
	connected := make(chan struct{}, 4)
	l := &InvalidationListener{
		ConnString:       s.pool.Config().ConnString(),
		OnCluster:        func(id string) { changed <- id },
		OnConnected:      func() { connected <- struct{}{} },
		OnSessionRevoked: func() { revoked <- struct{}{} },
	}
	go l.Run(ctx)
	select {
	case <-l.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("listener not ready within 5s")
	}
	<-connected
	if !l.Connected() {
		t.Fatal("Connected() = false after Ready")
	}

	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string) {
		t.Helper()
		select {
		case id := <-changed:
			if id != s.clusterID {
				t.Fatalf("%s: invalidated %s, want %s", what, id, s.clusterID)
			}
		case <-time.After(time.Second):
			t.Fatalf("%s: no invalidation within 1s", what)
		}
	}
	exec(`SELECT queen_proxy.set_cluster_status($1::uuid, 'suspended')`, s.clusterID)
	expect("set_cluster_status")
	exec(`SELECT queen_proxy.revoke_api_key($1::uuid)`, s.keyID)
	expect("revoke_api_key")
	exec(`SELECT queen_proxy.set_tenant_status($1::uuid, 'active')`, s.tenantID)
	expect("set_tenant_status")

	exec(`SELECT pg_notify('queen_proxy_inval', 'garbage')`)
	exec(`SELECT pg_notify('queen_proxy_inval', '00000000-0000-0000-0000-000000000000')`)
	select {
	case <-revoked:
	case <-time.After(time.Second):
		t.Fatal("nil uuid payload did not signal a session revocation")
	}
	select {
	case id := <-changed:
		t.Fatalf("unexpected invalidation %q", id)
	default:
	}

	// Kill the listener's connection: it reconnects and reports it, so the
	// cache can drop what it may have missed.
	exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'queengate-listen' AND datname = current_database()`)
	select {
	case <-connected:
	case <-time.After(5 * time.Second):
		t.Fatal("listener did not reconnect within 5s")
	}
	exec(`SELECT queen_proxy.set_cluster_status($1::uuid, 'active')`, s.clusterID)
	expect("after reconnect")
}
