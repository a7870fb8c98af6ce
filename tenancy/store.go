package tenancy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/uuidtext"
	"github.com/queengate/queengate/limits"
)

// ErrNotFound is returned when the database answered and holds no such row.
// It is the only lookup error that may fail a request closed at once; any
// other error means the database did not answer.
var ErrNotFound = errors.New("not found")

// Store reads clusters and API keys from the queen_proxy control-plane
// database.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a Store that queries through pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// clusterColumns is the one projection every cluster lookup shares, so a
// cluster read by slug, by id or through a key decodes the same way.
const clusterColumns = `
	c.id::text, c.tenant_id::text, c.slug, c.broker_tenant_uuid::text,
	t.status, c.status, p.code,
	ce.id::text, ce.slug, ce.base_url, coalesce(ce.cell_secret, ''), ce.tenancy_stated,
	coalesce(gc.group_name, ''),
	p.max_req_per_sec, p.req_burst, p.max_msgs_per_sec, p.msgs_burst,
	p.max_queues, p.max_partitions_per_queue, p.max_parked_pops,
	p.max_payload_bytes, p.max_batch_items, p.max_retained_bytes,
	p.max_retention_seconds, p.features::text, c.limit_overrides::text,
	EXISTS (SELECT 1 FROM queen_proxy.cluster_drains d WHERE d.cluster_id = c.id AND d.cell_id = c.cell_id)`

const clusterJoins = `
	FROM queen_proxy.clusters c
	JOIN queen_proxy.tenants t ON t.id = c.tenant_id
	JOIN queen_proxy.cells ce ON ce.id = c.cell_id
	LEFT JOIN queen_proxy.gateway_group_cells gc ON gc.cell_slug = ce.slug
	JOIN queen_proxy.plans p ON p.id = c.plan_id`

// ClusterBySlug reads the cluster whose hostname label is slug.
func (s *Store) ClusterBySlug(ctx context.Context, slug string) (*Cluster, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+clusterColumns+clusterJoins+` WHERE c.slug = $1`, slug)
	c, err := scanCluster(row, nil)
	if err != nil {
		return nil, fmt.Errorf("cluster by slug %q: %w", slug, err)
	}
	return c, nil
}

// ClusterByID reads the cluster with the given id (lowercase uuid text).
func (s *Store) ClusterByID(ctx context.Context, id string) (*Cluster, error) {
	if !uuidtext.ValidLower(id) {
		return nil, fmt.Errorf("cluster by id %q: %w", id, ErrNotFound)
	}
	row := s.pool.QueryRow(ctx, `SELECT `+clusterColumns+clusterJoins+` WHERE c.id = $1::uuid`, id)
	c, err := scanCluster(row, nil)
	if err != nil {
		return nil, fmt.Errorf("cluster by id %q: %w", id, err)
	}
	return c, nil
}

// APIKeyByHash reads the live API key whose SHA-256 hex is hash, with its
// cluster. A revoked or expired key is not found.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (*APIKey, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+clusterColumns+`, ak.id::text, ak.scopes, ak.expires_at`+clusterJoins+`
	JOIN queen_proxy.api_keys ak ON ak.cluster_id = c.id
	WHERE ak.key_hash = $1 AND ak.revoked_at IS NULL
	  AND (ak.expires_at IS NULL OR ak.expires_at > now())`, hash)
	var key APIKey
	var scopes []string
	var expires *time.Time
	c, err := scanCluster(row, []any{&key.ID, &scopes, &expires})
	if err != nil {
		return nil, fmt.Errorf("api key lookup: %w", err)
	}
	key.Scopes = ParseScopes(scopes)
	if expires != nil {
		key.ExpiresAt = *expires
	}
	key.Cluster = c
	return &key, nil
}

func scanCluster(row pgx.Row, extra []any) (*Cluster, error) {
	var (
		c                             Cluster
		tenantStatus, clusterStatus   string
		features, overrides           string
		reqRate, reqBurst             *int64
		msgRate, msgBurst             *int64
		queues, partitions, parked    *int64
		payload, batch, retained, ret *int64
	)
	dest := []any{
		&c.ID, &c.TenantID, &c.Slug, &c.BrokerTenant,
		&tenantStatus, &clusterStatus, &c.PlanCode,
		&c.CellID, &c.CellSlug, &c.CellURL, &c.CellSecret, &c.CellTenancy,
		&c.CellGroup,
		&reqRate, &reqBurst, &msgRate, &msgBurst,
		&queues, &partitions, &parked,
		&payload, &batch, &retained,
		&ret, &features, &overrides,
		&c.Draining,
	}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	c.Status = MergeStatus(tenantStatus, clusterStatus)
	c.Features = ParseFeatures([]byte(features))
	plan := limits.Effective{
		MaxReqPerSec: capOf(reqRate), ReqBurst: capOf(reqBurst),
		MaxMsgsPerSec: capOf(msgRate), MsgsBurst: capOf(msgBurst),
		MaxQueues: capOf(queues), MaxPartitionsPerQueue: capOf(partitions),
		MaxParkedPops: capOf(parked), MaxPayloadBytes: capOf(payload),
		MaxBatchItems: capOf(batch), MaxRetainedBytes: capOf(retained),
		MaxRetentionSeconds: capOf(ret),
	}
	c.Limits = limits.ApplyOverrides(plan, []byte(overrides))
	return &c, nil
}

func capOf(v *int64) limits.Cap {
	if v == nil {
		return limits.Unlimited
	}
	return limits.Cap(*v)
}

// ClustersOnCells reads every cluster on the given cells (ids), for the
// background work that goes over a cell's clusters.
func (s *Store) ClustersOnCells(ctx context.Context, cellIDs []string) ([]*Cluster, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+clusterColumns+clusterJoins+` WHERE c.cell_id::text = ANY($1)`, cellIDs)
	if err != nil {
		return nil, fmt.Errorf("clusters on cells: %w", err)
	}
	defer rows.Close()
	var out []*Cluster
	for rows.Next() {
		c, err := scanCluster(rows, nil)
		if err != nil {
			return nil, fmt.Errorf("clusters on cells: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clusters on cells: %w", err)
	}
	return out, nil
}
