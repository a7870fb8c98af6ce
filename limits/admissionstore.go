package limits

import (
	"context"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/uuidtext"
)

// PgAdmissionStore keeps the admission registry in queen_proxy.queues. It
// implements AdmissionStore and QueueSweeper.
type PgAdmissionStore struct{ Pool *pgxpool.Pool }

var (
	_ AdmissionStore = (*PgAdmissionStore)(nil)
	_ QueueSweeper   = (*PgAdmissionStore)(nil)
)

// LoadQueues returns a cluster's live queues. A cluster id that is not a
// UUID has none.
func (s *PgAdmissionStore) LoadQueues(ctx context.Context, clusterID string) ([]QueueRow, error) {
	if !uuidtext.Valid(clusterID) {
		return nil, nil
	}
	rows, err := s.Pool.Query(ctx,
		`SELECT name, partitions_count FROM queen_proxy.queues
		  WHERE cluster_id = $1 AND deleted_at IS NULL`, clusterID)
	if err != nil {
		return nil, fmt.Errorf("load queue registry: %w", err)
	}
	defer rows.Close()
	var out []QueueRow
	for rows.Next() {
		var r QueueRow
		var n int32
		if err := rows.Scan(&r.Name, &n); err != nil {
			return nil, fmt.Errorf("load queue registry: %w", err)
		}
		r.ClusterID, r.Partitions = clusterID, int(n)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load queue registry: %w", err)
	}
	return out, nil
}

// persistQueuesSQL upserts every row in one statement. Rows of clusters that
// no longer exist are dropped by the join (instead of failing the whole
// statement on the foreign key); an existing live row keeps the higher
// count. Rows are written in key order: two gateways persisting the same
// queues in different orders would otherwise each lock a row the other
// waits for, and one of them fails on a deadlock.
const persistQueuesSQL = `
INSERT INTO queen_proxy.queues (cluster_id, name, partitions_count)
SELECT u.cluster_id, u.name, u.partitions_count
  FROM unnest($1::uuid[], $2::text[], $3::integer[]) AS u (cluster_id, name, partitions_count)
  JOIN queen_proxy.clusters c ON c.id = u.cluster_id
 ORDER BY u.cluster_id, u.name
ON CONFLICT (cluster_id, name) WHERE deleted_at IS NULL
DO UPDATE SET partitions_count = GREATEST(queen_proxy.queues.partitions_count, EXCLUDED.partitions_count)`

// PersistQueues writes rows in one statement. Rows the table cannot hold are
// skipped; each (cluster, name) must appear once.
func (s *PgAdmissionStore) PersistQueues(ctx context.Context, rows []QueueRow) error {
	ids := make([]string, 0, len(rows))
	names := make([]string, 0, len(rows))
	counts := make([]int32, 0, len(rows))
	for _, r := range rows {
		if !persistable(r.ClusterID, r.Name) {
			continue
		}
		ids = append(ids, r.ClusterID)
		names = append(names, r.Name)
		counts = append(counts, int32(min(max(r.Partitions, 0), math.MaxInt32)))
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := s.Pool.Exec(ctx, persistQueuesSQL, ids, names, counts); err != nil {
		return fmt.Errorf("persist queue registry (%d rows): %w", len(ids), err)
	}
	return nil
}

// SweepQueues marks deleted the live rows of a cluster whose queue is not in
// live.
func (s *PgAdmissionStore) SweepQueues(ctx context.Context, clusterID string, live []string) error {
	if !uuidtext.Valid(clusterID) {
		return nil
	}
	keep := make([]string, 0, len(live))
	for _, n := range live {
		if persistable(clusterID, n) {
			keep = append(keep, n)
		}
	}
	if _, err := s.Pool.Exec(ctx,
		`UPDATE queen_proxy.queues SET deleted_at = now()
		  WHERE cluster_id = $1 AND deleted_at IS NULL AND NOT (name = ANY($2::text[]))`,
		clusterID, keep); err != nil {
		return fmt.Errorf("sweep queue registry: %w", err)
	}
	return nil
}
