package controlplane

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// OpClassUsage is one op class's share of a cluster's usage.
type OpClassUsage struct {
	Requests int64 `json:"requests"`
	Messages int64 `json:"messages"`
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
}

// UsageByOpClass is the usage of the named clusters (by slug) over
// [from, to), per op class, counted by the same rule as Usage: the sums of
// each cluster's op classes are that cluster's row of Usage.
func UsageByOpClass(ctx context.Context, db DB, from, to time.Time, clusters []string) (map[string]map[string]OpClassUsage, error) {
	out := map[string]map[string]OpClassUsage{}
	if len(clusters) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `WITH sel AS (SELECT id FROM queen_proxy.clusters WHERE slug = ANY($3::text[])), `+usageCTE+`
SELECT c.slug, u.op_class, sum(u.reqs)::bigint, sum(u.msgs)::bigint, sum(u.bytes_in)::bigint, sum(u.bytes_out)::bigint
  FROM u JOIN queen_proxy.clusters c ON c.id = u.cluster_id
 GROUP BY c.slug, u.op_class`, from, to, clusters)
	if err != nil {
		return nil, dbError("read usage per op class", err)
	}
	defer rows.Close()
	for rows.Next() {
		var slug, class string
		var u OpClassUsage
		if err := rows.Scan(&slug, &class, &u.Requests, &u.Messages, &u.BytesIn, &u.BytesOut); err != nil {
			return nil, dbError("read usage per op class", err)
		}
		if out[slug] == nil {
			out[slug] = map[string]OpClassUsage{}
		}
		out[slug][class] = u
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("read usage per op class", err)
	}
	return out, nil
}

// KeyActivity is when one key of a cluster was last used.
type KeyActivity struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	Status     string     `json:"status"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

// Activity is when a cluster last had traffic and its keys were last
// used. LastTrafficAt is the start of the last minute with metered usage;
// a key's use is stamped by the gateways at most once per key touch
// interval.
type Activity struct {
	Cluster       string        `json:"cluster"`
	LastTrafficAt *time.Time    `json:"last_traffic_at"`
	LastKeyUseAt  *time.Time    `json:"last_key_use_at"`
	Keys          []KeyActivity `json:"keys"`
}

// ClusterActivity reads a cluster's activity.
func ClusterActivity(ctx context.Context, db DB, cluster string) (Activity, error) {
	c, err := lookupCluster(ctx, db, cluster)
	if err != nil {
		return Activity{}, err
	}
	a := Activity{Cluster: c.Name}
	var lastDay *time.Time
	if err := db.QueryRow(ctx, `SELECT (SELECT max(minute) FROM queen_proxy.usage_minutes WHERE cluster_id = $1::uuid),
		(SELECT max(day)::timestamp AT TIME ZONE 'UTC' FROM queen_proxy.usage_days WHERE cluster_id = $1::uuid),
		(SELECT max(last_used_at) FROM queen_proxy.api_keys WHERE cluster_id = $1::uuid)`, c.ID).
		Scan(&a.LastTrafficAt, &lastDay, &a.LastKeyUseAt); err != nil {
		return Activity{}, dbError("read activity", err)
	}
	// Minutes are pruned after their roll-up; the day is then what is left.
	if a.LastTrafficAt == nil {
		a.LastTrafficAt = lastDay
	}
	rows, err := db.Query(ctx, `SELECT id::text, name,
		CASE WHEN revoked_at IS NOT NULL THEN 'revoked'
		     WHEN expires_at IS NOT NULL AND expires_at <= now() THEN 'expired' ELSE 'live' END,
		last_used_at FROM queen_proxy.api_keys WHERE cluster_id = $1::uuid ORDER BY created_at, id`, c.ID)
	if err != nil {
		return Activity{}, dbError("read activity", err)
	}
	a.Keys, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (KeyActivity, error) {
		var k KeyActivity
		err := r.Scan(&k.ID, &k.Name, &k.Status, &k.LastUsedAt)
		return k, err
	})
	if err != nil {
		return Activity{}, dbError("read activity", err)
	}
	a.Keys = nonNil(a.Keys)
	return a, nil
}
