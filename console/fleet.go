package console

import (
	"context"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/queengate/queengate/meter"
	"github.com/queengate/queengate/tenancy"
)

// fleetCaller is the gate of the fleet routes: the operator API on, and a
// live operator's session, on any host; no acting cluster is needed, since
// the fleet is every cell. Everyone else, signed in or not, sees the route
// as absent, like the rest of the operator API.
func (s *Surface) fleetCaller(w http.ResponseWriter, r *http.Request) (tenancy.SessionClaims, bool) {
	if !s.o.OperatorAPI || !s.o.OperatorEnabled || s.o.Sessions == nil {
		writeError(w, errOperatorBlocked)
		return tenancy.SessionClaims{}, false
	}
	if len(r.Header.Values("Authorization")) > 1 {
		writeError(w, errOperatorBlocked)
		return tenancy.SessionClaims{}, false
	}
	cred, err := tenancy.ExtractCredential(r.Header, s.o.Cookies, s.o.IsHTTPS(r))
	if err != nil || cred.Kind != tenancy.CredentialSession {
		writeError(w, errOperatorBlocked)
		return tenancy.SessionClaims{}, false
	}
	claims, e := s.verifySession(r.Context(), cred.Value)
	if e != nil || !s.o.Identities.IsOperator(r.Context(), claims.UserID) {
		writeError(w, errOperatorBlocked)
		return tenancy.SessionClaims{}, false
	}
	return claims, true
}

type leaseJSON struct {
	Group      string `json:"group"`
	Holder     string `json:"holder"`
	Serving    bool   `json:"serving"`
	Epoch      int64  `json:"epoch"`
	PeerURL    string `json:"peer_url"`
	AcquiredAt string `json:"acquired_at"`
	RenewedAt  string `json:"renewed_at"`
	ExpiresAt  string `json:"expires_at"`
	// Cells are the cells recorded as fronted by the group
	// (gateway_group_cells).
	Cells []string `json:"cells"`
}

type cellTenancyJSON struct {
	Stated       string  `json:"stated"`
	Probed       string  `json:"probed"`
	CheckedAt    *string `json:"checked_at"`
	Detail       string  `json:"detail"`
	KeeperOnly   bool    `json:"keeper_only"`
	Contradicted bool    `json:"contradicted"`
	Keeper       *string `json:"keeper_cluster"`
}

type cellJSON struct {
	ID            string          `json:"id"`
	Slug          string          `json:"slug"`
	Region        string          `json:"region"`
	URL           string          `json:"url"`
	Class         string          `json:"class"`
	Status        string          `json:"status"`
	CapacitySlots int             `json:"capacity_slots"`
	UsedSlots     int             `json:"used_slots"`
	Clusters      int             `json:"clusters"`
	Tenancy       cellTenancyJSON `json:"tenancy"`
	// GatewayGroup is the group recorded as fronting the cell, with the
	// member that recorded it and when a member last stated it; nil when
	// no gateway configured with the cell has started.
	GatewayGroup *cellGroupJSON `json:"gateway_group"`
	// Gateway is that group's lease, when it is a leader group.
	Gateway *leaseJSON `json:"gateway"`
}

type cellGroupJSON struct {
	Group     string `json:"group"`
	ClaimedBy string `json:"claimed_by"`
	ClaimedAt string `json:"claimed_at"`
	StatedAt  string `json:"stated_at"`
}

// fleetCells lists every cell with its use, its tenancy verdict and the
// gateway group recorded as fronting it (gateway_group_cells, written by
// the gateways themselves, so a group is shown with the cells it claimed
// whatever it is called), and every gateway group's lease.
func (s *Surface) fleetCells(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	rows, err := s.o.Pool.Query(ctx, `SELECT group_name, holder, epoch, holder_peer_url, acquired_at, renewed_at, expires_at,
			expires_at > now(),
			coalesce((SELECT array_agg(g.cell_slug ORDER BY g.cell_slug) FROM queen_proxy.gateway_group_cells g
			   WHERE g.group_name = l.group_name), '{}')
		FROM queen_proxy.gateway_leases l ORDER BY group_name`)
	if err != nil {
		s.fleetFailed(w, "gateway leases", err)
		return
	}
	leases, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (leaseJSON, error) {
		var l leaseJSON
		var acquired, renewed, expires time.Time
		err := row.Scan(&l.Group, &l.Holder, &l.Epoch, &l.PeerURL, &acquired, &renewed, &expires, &l.Serving, &l.Cells)
		l.AcquiredAt, l.RenewedAt, l.ExpiresAt = utcText(acquired), utcText(renewed), utcText(expires)
		return l, err
	})
	if err != nil {
		s.fleetFailed(w, "gateway leases", err)
		return
	}
	byGroup := map[string]*leaseJSON{}
	for i := range leases {
		byGroup[leases[i].Group] = &leases[i]
	}
	rows, err = s.o.Pool.Query(ctx, `SELECT ce.id::text, ce.slug, ce.region, ce.base_url, ce.class, ce.status,
			ce.capacity_slots, ce.used_slots,
			(SELECT count(*) FROM queen_proxy.clusters c WHERE c.cell_id = ce.id)::int,
			ce.tenancy_stated, ce.tenant_scoping, ce.tenant_scoping_checked_at, coalesce(ce.tenant_scoping_detail, ''),
			queen_proxy.tenancy_keeper_only(ce.tenancy_stated, ce.tenant_scoping),
			k.slug, gc.group_name, coalesce(gc.claimed_by, ''), gc.claimed_at, gc.stated_at
		FROM queen_proxy.cells ce
		LEFT JOIN queen_proxy.clusters k ON k.id = queen_proxy.cell_keeper_cluster(ce.id)
		LEFT JOIN queen_proxy.gateway_group_cells gc ON gc.cell_slug = ce.slug
		ORDER BY ce.slug`)
	if err != nil {
		s.fleetFailed(w, "cells", err)
		return
	}
	cells, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (cellJSON, error) {
		var c cellJSON
		var checked, claimed, stated *time.Time
		var group *string
		var claimedBy string
		t := &c.Tenancy
		err := row.Scan(&c.ID, &c.Slug, &c.Region, &c.URL, &c.Class, &c.Status, &c.CapacitySlots, &c.UsedSlots, &c.Clusters,
			&t.Stated, &t.Probed, &checked, &t.Detail, &t.KeeperOnly, &t.Keeper, &group, &claimedBy, &claimed, &stated)
		t.CheckedAt = timeJSON(checked)
		t.Contradicted = t.Stated == "scoped" && t.Probed == "unscoped"
		if group != nil && claimed != nil && stated != nil {
			c.GatewayGroup = &cellGroupJSON{Group: *group, ClaimedBy: claimedBy, ClaimedAt: utcText(*claimed), StatedAt: utcText(*stated)}
			c.Gateway = byGroup[*group]
		}
		return c, err
	})
	if err != nil {
		s.fleetFailed(w, "cells", err)
		return
	}
	var self map[string]any
	if s.o.State != nil {
		name, group, role := s.o.State.ServingGateway()
		cells := s.o.State.FrontedCells()
		if cells == nil {
			cells = []string{}
		}
		self = map[string]any{"name": name, "group": group, "role": role, "cells": cells}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"cells": nonNil(cells), "gateway_groups": nonNil(leases), "this_gateway": self,
	})
}

type fleetClusterJSON struct {
	ID            string     `json:"id"`
	Slug          string     `json:"slug"`
	Status        string     `json:"status"`
	ClusterStatus string     `json:"cluster_status"`
	Plan          string     `json:"plan"`
	CellSlug      string     `json:"cell_slug"`
	CreatedAt     string     `json:"created_at"`
	Usage         fleetUsage `json:"usage"`
	Quota         quotaJSON  `json:"quota"`
	PushBlock     *string    `json:"push_block"`
	Keys          int        `json:"active_keys"`
	tenantID      string
}

type fleetUsage struct {
	Month string `json:"month"`
	Msgs  int64  `json:"msgs"`
	Reqs  int64  `json:"reqs"`
}

type quotaJSON struct {
	MonthlyMsgsQuota *int64 `json:"monthly_msgs_quota"`
	Percent          *int64 `json:"percent"`
	State            string `json:"state"`
}

// quotaState is the monthly quota's state: unlimited, ok, warning (at the
// quota chain's warning level) or exhausted.
func quotaState(msgs int64, quota *int64) quotaJSON {
	q := quotaJSON{MonthlyMsgsQuota: quota, State: "unlimited"}
	if quota == nil || *quota <= 0 {
		return q
	}
	pct := msgs * 100 / *quota
	q.Percent = &pct
	switch {
	case msgs >= *quota:
		q.State = "exhausted"
	case pct >= 80:
		q.State = "warning"
	default:
		q.State = "ok"
	}
	return q
}

// fleetTenants lists every tenant with its clusters: status, plan, cell,
// this month's usage and the quota's state.
func (s *Surface) fleetTenants(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	now := s.o.Now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	type tenantJSON struct {
		ID        string `json:"id"`
		Slug      string `json:"slug"`
		Name      string `json:"name"`
		Status    string `json:"status"`
		CreatedAt string `json:"created_at"`
		// IsPlatform marks the operators' own tenant, no customer's.
		IsPlatform bool               `json:"is_platform"`
		Clusters   []fleetClusterJSON `json:"clusters"`
	}
	rows, err := s.o.Pool.Query(ctx, `SELECT id::text, slug, name, status, coalesce(created_at, now()), is_platform
		FROM queen_proxy.tenants ORDER BY slug`)
	if err != nil {
		s.fleetFailed(w, "tenants", err)
		return
	}
	tenants, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (tenantJSON, error) {
		var t tenantJSON
		var created time.Time
		err := row.Scan(&t.ID, &t.Slug, &t.Name, &t.Status, &created, &t.IsPlatform)
		t.CreatedAt, t.Clusters = utcText(created), []fleetClusterJSON{}
		return t, err
	})
	if err != nil {
		s.fleetFailed(w, "tenants", err)
		return
	}
	byTenant := map[string]int{}
	for i, t := range tenants {
		byTenant[t.ID] = i
	}
	// The month's usage of every cluster at once, in a time that does not
	// grow with the day of the month: final days from usage_days (the
	// hourly roll-up's), minutes only in the spans the roll-up has not
	// closed (today, yesterday, the day before, late-written days). Per
	// day, the larger of the day's row and its minutes counts, as in
	// cluster_month_billable_msgs. Reading a month of minutes per cluster
	// instead took longer than the page's budget at 10,000 clusters.
	spans, err := meter.MinuteSpans(ctx, s.o.Pool, month, month.AddDate(0, 1, 0))
	if err != nil {
		s.fleetFailed(w, "usage", err)
		return
	}
	inSpans, args := meter.SpansCondition(spans, []any{month, month.AddDate(0, 1, 0)})
	rows, err = s.o.Pool.Query(ctx, `WITH d AS (
			SELECT cluster_id, day, sum(msgs) FILTER (WHERE op_class IN `+meter.BilledOpsSQL+`) AS msgs, sum(reqs) AS reqs
			  FROM queen_proxy.usage_days
			 WHERE day >= $1::date AND day < $2::date
			 GROUP BY 1, 2
		), m AS (
			SELECT cluster_id, (minute AT TIME ZONE 'UTC')::date AS day,
			       sum(msgs) FILTER (WHERE op_class IN `+meter.BilledOpsSQL+`) AS msgs, sum(reqs) AS reqs
			  FROM queen_proxy.usage_minutes
			 WHERE `+inSpans+`
			 GROUP BY 1, 2
		), u AS (
			SELECT coalesce(d.cluster_id, m.cluster_id) AS cluster_id,
			       sum(greatest(coalesce(d.msgs, 0), coalesce(m.msgs, 0))) AS msgs,
			       sum(greatest(coalesce(d.reqs, 0), coalesce(m.reqs, 0))) AS reqs
			  FROM d FULL JOIN m ON m.cluster_id = d.cluster_id AND m.day = d.day
			 GROUP BY 1
		), k AS (
			SELECT cluster_id, count(*) AS keys FROM queen_proxy.api_keys WHERE revoked_at IS NULL GROUP BY 1
		)
		SELECT c.id::text, c.slug, c.tenant_id::text, t.status, c.status, p.code, ce.slug,
			coalesce(c.created_at, now()), p.monthly_msgs_quota, c.limit_overrides -> 'monthly_msgs_quota',
			coalesce(u.msgs, 0)::bigint, coalesce(u.reqs, 0)::bigint, coalesce(k.keys, 0)::int
		FROM queen_proxy.clusters c
		JOIN queen_proxy.tenants t ON t.id = c.tenant_id
		JOIN queen_proxy.plans p ON p.id = c.plan_id
		JOIN queen_proxy.cells ce ON ce.id = c.cell_id
		LEFT JOIN u ON u.cluster_id = c.id
		LEFT JOIN k ON k.cluster_id = c.id
		ORDER BY c.slug`, args...)
	if err != nil {
		s.fleetFailed(w, "clusters", err)
		return
	}
	var planQuota *int64
	var override []byte
	var tenantStatus string
	var created time.Time
	var cl fleetClusterJSON
	_, err = pgx.ForEachRow(rows, []any{&cl.ID, &cl.Slug, &cl.tenantID, &tenantStatus, &cl.ClusterStatus, &cl.Plan, &cl.CellSlug,
		&created, &planQuota, &override, &cl.Usage.Msgs, &cl.Usage.Reqs, &cl.Keys}, func() error {
		item := cl
		item.CreatedAt = utcText(created)
		status := tenancy.MergeStatus(tenantStatus, cl.ClusterStatus)
		item.Status = status.String()
		item.Usage.Month = month.Format("2006-01")
		if s.o.State != nil {
			// What the meter holds but has not written counts too.
			for _, u := range s.o.State.Unflushed(cl.ID) {
				if !u.Minute.Before(month) {
					item.Usage.Reqs += u.Reqs
					if u.Op.Billable() {
						item.Usage.Msgs += u.Msgs
					}
				}
			}
		}
		item.Quota = quotaState(item.Usage.Msgs, monthlyQuota(planQuota, override))
		if s.o.State != nil {
			// The push block depends on the cluster's id and worst status,
			// both in this row: looking each cluster up again cost a query
			// per cluster, seconds at 10,000.
			if b := s.o.State.PushBlock(&tenancy.Cluster{ID: cl.ID, Status: status}); b != "" {
				item.PushBlock = &b
			}
		}
		if i, ok := byTenant[cl.tenantID]; ok {
			tenants[i].Clusters = append(tenants[i].Clusters, item)
		}
		return nil
	})
	if err != nil {
		s.fleetFailed(w, "clusters", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"month": month.Format("2006-01"), "tenants": nonNil(tenants)})
}

// fleetPlans lists every plan with its limits, features and how many
// clusters use it.
func (s *Surface) fleetPlans(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	rows, err := s.o.Pool.Query(ctx, `SELECT p.code, p.cell_class, p.max_req_per_sec, p.req_burst, p.max_msgs_per_sec,
			p.msgs_burst, p.max_queues, p.max_partitions_per_queue, p.max_parked_pops, p.max_payload_bytes,
			p.max_batch_items, p.max_retained_bytes, p.max_retention_seconds, p.monthly_msgs_quota, p.features,
			(SELECT count(*) FROM queen_proxy.clusters c WHERE c.plan_id = p.id)::int
		FROM queen_proxy.plans p ORDER BY p.code`)
	if err != nil {
		s.fleetFailed(w, "plans", err)
		return
	}
	type planJSON struct {
		Code      string            `json:"code"`
		CellClass string            `json:"cell_class"`
		Limits    map[string]*int64 `json:"limits"`
		Quota     *int64            `json:"monthly_msgs_quota"`
		Features  map[string]any    `json:"features"`
		Clusters  int               `json:"clusters"`
	}
	plans, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (planJSON, error) {
		var p planJSON
		var rps, burst, mps, mburst, queues, parts, parked, payload, batch, retention *int64
		var retained *int64
		err := row.Scan(&p.Code, &p.CellClass, &rps, &burst, &mps, &mburst, &queues, &parts, &parked, &payload,
			&batch, &retained, &retention, &p.Quota, &p.Features, &p.Clusters)
		p.Limits = map[string]*int64{
			"max_req_per_sec": rps, "req_burst": burst, "max_msgs_per_sec": mps, "msgs_burst": mburst,
			"max_queues": queues, "max_partitions_per_queue": parts, "max_parked_pops": parked,
			"max_payload_bytes": payload, "max_batch_items": batch, "max_retained_bytes": retained,
			"max_retention_seconds": retention,
		}
		if p.Features == nil {
			p.Features = map[string]any{}
		}
		return p, err
	})
	if err != nil {
		s.fleetFailed(w, "plans", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"plans": nonNil(plans)})
}

func (s *Surface) fleetFailed(w http.ResponseWriter, what string, err error) {
	s.o.Log.Warn("fleet query failed", zap.String("reading", what), zap.Error(err))
	writeError(w, errDatabase)
}

func utcText(t time.Time) string { return t.UTC().Format(time.RFC3339) }
