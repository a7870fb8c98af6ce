package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/internal/cellclient"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/meter"
)

// capJSON is a limit as JSON: a number, or null for unlimited.
func capJSON(c limits.Cap) *int64 {
	if c.IsUnlimited() {
		return nil
	}
	v := int64(c)
	return &v
}

func limitsJSON(l limits.Effective) map[string]*int64 {
	return map[string]*int64{
		"max_req_per_sec": capJSON(l.MaxReqPerSec), "req_burst": capJSON(l.ReqBurst),
		"max_msgs_per_sec": capJSON(l.MaxMsgsPerSec), "msgs_burst": capJSON(l.MsgsBurst),
		"max_queues": capJSON(l.MaxQueues), "max_partitions_per_queue": capJSON(l.MaxPartitionsPerQueue),
		"max_parked_pops": capJSON(l.MaxParkedPops), "max_payload_bytes": capJSON(l.MaxPayloadBytes),
		"max_batch_items": capJSON(l.MaxBatchItems), "max_retained_bytes": capJSON(l.MaxRetainedBytes),
		"max_retention_seconds": capJSON(l.MaxRetentionSeconds),
	}
}

type storageJSON struct {
	MaxRetainedBytes *int64 `json:"max_retained_bytes"`
	RetainedBytes    *int64 `json:"retained_bytes"`
	Measured         bool   `json:"measured"`
	OverQuota        bool   `json:"over_quota"`
	// QuotaActive is whether max_retained_bytes is enforced: false while
	// the broker reports no retained bytes, null before a listing settled
	// it.
	QuotaActive *bool `json:"quota_active"`
}

func (s *Surface) storageOf(c *caller) storageJSON {
	out := storageJSON{MaxRetainedBytes: capJSON(c.cluster.Limits.MaxRetainedBytes)}
	if s.o.State == nil {
		return out
	}
	st := s.o.State.Storage(c.cluster.ID)
	if st.Known {
		active := st.Reported
		out.QuotaActive = &active
	}
	if st.Known && st.Reported {
		v := st.Measured
		out.RetainedBytes, out.Measured = &v, true
	}
	out.OverQuota = st.Blocked
	return out
}

// overview is the cluster's plan, limits, month-to-date usage and state.
func (s *Surface) overview(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	now := s.o.Now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	var (
		tenantSlug string
		planQuota  *int64
		override   []byte
		msgs       int64
	)
	err := s.o.Pool.QueryRow(ctx, `SELECT t.slug, p.monthly_msgs_quota, c.limit_overrides -> 'monthly_msgs_quota',
			queen_proxy.cluster_month_billable_msgs(c.id, $2::date)
		FROM queen_proxy.clusters c
		JOIN queen_proxy.tenants t ON t.id = c.tenant_id
		JOIN queen_proxy.plans p ON p.id = c.plan_id
		WHERE c.id = $1::uuid`, c.cluster.ID, month).Scan(&tenantSlug, &planQuota, &override, &msgs)
	if errors.Is(err, pgx.ErrNoRows) {
		writeError(w, errClusterUnknown)
		return
	}
	if err != nil {
		s.o.Log.Warn("overview query failed", zap.Error(err))
		writeError(w, errDatabase)
		return
	}
	var pushBlock *string
	var gateway map[string]string
	if s.o.State != nil {
		// Which machine serves the cell is the operator's business; a
		// customer sees no internal gateway names.
		if c.operator {
			name, group, role := s.o.State.ServingGateway()
			gateway = map[string]string{"name": name, "group": group, "role": role}
		}
		if b := s.o.State.PushBlock(c.cluster); b != "" {
			pushBlock = &b
		}
		// What the meter holds but has not written yet counts too.
		for _, u := range s.o.State.Unflushed(c.cluster.ID) {
			if u.Op.Billable() && !u.Minute.Before(month) {
				msgs += u.Msgs
			}
		}
	}
	f := c.cluster.Features
	writeJSON(w, http.StatusOK, map[string]any{
		"cluster_id":  c.cluster.ID,
		"slug":        c.cluster.Slug,
		"tenant_slug": tenantSlug,
		"status":      c.cluster.Status.String(),
		"role":        c.role.String(),
		"operator":    c.operator,
		"plan": map[string]any{
			"code": c.cluster.PlanCode, "monthly_msgs_quota": monthlyQuota(planQuota, override),
		},
		// billable_msgs is what is billed under its one name; msgs is the
		// same number under the name the API has always had.
		"usage":      map[string]any{"month": month.Format("2006-01"), "billable_msgs": msgs, "msgs": msgs},
		"push_block": pushBlock,
		"gateway":    gateway,
		"storage":    s.storageOf(c),
		"limits":     limitsJSON(c.cluster.Limits),
		"features": map[string]bool{
			"streams": f.Streams, "traces": f.Traces, "kv": f.KV, "timers": f.Timers, "ephemeral": f.Ephemeral,
		},
	})
}

// monthlyQuota applies the override rule to the monthly quota: absent, the
// plan's; JSON null, unlimited; a number, that number; anything else, the
// plan's.
func monthlyQuota(plan *int64, override []byte) *int64 {
	if override == nil {
		return plan
	}
	if string(override) == "null" {
		return nil
	}
	var n json.Number
	if json.Unmarshal(override, &n) == nil {
		if v, err := n.Int64(); err == nil && v >= 0 {
			return &v
		}
	}
	return plan
}

type usageRow struct {
	Minute   string `json:"minute,omitempty"`
	Day      string `json:"day,omitempty"`
	Op       string `json:"op"`
	Reqs     int64  `json:"reqs"`
	Msgs     int64  `json:"msgs"`
	BytesIn  int64  `json:"bytes_in"`
	BytesOut int64  `json:"bytes_out"`
	// Live is set when the row includes usage the meter has not written
	// yet (the open minute).
	Live bool `json:"live,omitempty"`
}

func (u *usageRow) add(l meter.Unflushed) {
	u.Reqs += l.Reqs
	u.Msgs += l.Msgs
	u.BytesIn += l.BytesIn
	u.BytesOut += l.BytesOut
	u.Live = true
}

// mergeLive adds the meter's unwritten usage to the rows read from the
// tables: into the minute (within [from, to)) and day (from fromDay) of
// each, making rows where the tables have none.
func mergeLive(minutes, daily []usageRow, live []meter.Unflushed, from, to, fromDay time.Time) ([]usageRow, []usageRow) {
	if len(live) == 0 {
		return minutes, daily
	}
	index := func(rows []usageRow, key func(usageRow) string) map[string]int {
		m := make(map[string]int, len(rows))
		for i, r := range rows {
			m[key(r)] = i
		}
		return m
	}
	byMinute := index(minutes, func(r usageRow) string { return r.Minute + "/" + r.Op })
	byDay := index(daily, func(r usageRow) string { return r.Day + "/" + r.Op })
	for _, l := range live {
		op := string(l.Op)
		if !l.Minute.Before(from) && l.Minute.Before(to) {
			k := l.Minute.Format(time.RFC3339) + "/" + op
			i, ok := byMinute[k]
			if !ok {
				minutes = append(minutes, usageRow{Minute: l.Minute.Format(time.RFC3339), Op: op})
				i = len(minutes) - 1
				byMinute[k] = i
			}
			minutes[i].add(l)
		}
		if !l.Minute.Before(fromDay) {
			day := l.Minute.Format(time.DateOnly)
			k := day + "/" + op
			i, ok := byDay[k]
			if !ok {
				daily = append(daily, usageRow{Day: day, Op: op})
				i = len(daily) - 1
				byDay[k] = i
			}
			daily[i].add(l)
		}
	}
	sortRows := func(rows []usageRow, key func(usageRow) string) {
		slices.SortFunc(rows, func(a, b usageRow) int {
			if c := strings.Compare(key(a), key(b)); c != 0 {
				return c
			}
			return strings.Compare(a.Op, b.Op)
		})
	}
	sortRows(minutes, func(r usageRow) string { return r.Minute })
	sortRows(daily, func(r usageRow) string { return r.Day })
	return minutes, daily
}

// opClasses are the meter's operation classes, in the order documented.
var opClasses = []string{"push", "delivery", "txn", "configure", "read"}

func clampQuery(r *http.Request, name string, def, lo, hi int) int {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return def
	}
	return max(lo, min(hi, n))
}

// usage is the cluster's metered usage per minute and per day.
func (s *Surface) usage(w http.ResponseWriter, r *http.Request, c *caller) {
	hours := clampQuery(r, "hours", 24, 1, 168)
	days := clampQuery(r, "days", 30, 1, 400)
	now := s.o.Now().UTC()
	to := now.Truncate(time.Minute).Add(time.Minute)
	from := to.Add(-time.Duration(hours) * time.Hour)
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	fromDay := today.AddDate(0, 0, -(days - 1))
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()

	rows, err := s.o.Pool.Query(ctx, `SELECT minute, op_class, reqs, msgs, bytes_in, bytes_out
		FROM queen_proxy.usage_minutes
		WHERE cluster_id = $1::uuid AND minute >= $2 AND minute < $3
		ORDER BY minute, op_class`, c.cluster.ID, from, to)
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	minutes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (usageRow, error) {
		var u usageRow
		var minute time.Time
		err := row.Scan(&minute, &u.Op, &u.Reqs, &u.Msgs, &u.BytesIn, &u.BytesOut)
		u.Minute = minute.UTC().Format(time.RFC3339)
		return u, err
	})
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	// Per day: the rolled-up day, or the live minutes of a day the roll-up
	// has not closed (today, late-written days), whichever is larger, as
	// the monthly totals do; final days' minutes are not read, so 400 days
	// cost their day rows.
	rows, err = s.o.Pool.Query(ctx, `WITH d AS (
			SELECT day, op_class, reqs, msgs, bytes_in, bytes_out FROM queen_proxy.usage_days
			 WHERE cluster_id = $1::uuid AND day >= $2::date),
		m AS (
			SELECT r.day, u.op_class, sum(u.reqs) AS reqs, sum(u.msgs) AS msgs,
			       sum(u.bytes_in) AS bytes_in, sum(u.bytes_out) AS bytes_out
			  FROM queen_proxy.usage_minute_ranges($2::date::timestamp AT TIME ZONE 'UTC', $3) r
			  JOIN queen_proxy.usage_minutes u
			    ON u.cluster_id = $1::uuid AND u.minute >= r.from_at AND u.minute < r.to_at
			 GROUP BY 1, 2)
		SELECT coalesce(d.day, m.day), coalesce(d.op_class, m.op_class),
		       greatest(coalesce(d.reqs, 0), coalesce(m.reqs, 0))::bigint,
		       greatest(coalesce(d.msgs, 0), coalesce(m.msgs, 0))::bigint,
		       greatest(coalesce(d.bytes_in, 0), coalesce(m.bytes_in, 0))::bigint,
		       greatest(coalesce(d.bytes_out, 0), coalesce(m.bytes_out, 0))::bigint
		  FROM d FULL JOIN m ON m.day = d.day AND m.op_class = d.op_class
		 ORDER BY 1, 2`, c.cluster.ID, fromDay, to)
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	daily, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (usageRow, error) {
		var u usageRow
		var day time.Time
		err := row.Scan(&day, &u.Op, &u.Reqs, &u.Msgs, &u.BytesIn, &u.BytesOut)
		u.Day = day.Format(time.DateOnly)
		return u, err
	})
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	if s.o.State != nil {
		minutes, daily = mergeLive(minutes, daily, s.o.State.Unflushed(c.cluster.ID), from, to, fromDay)
	}
	var totals usageRow
	var billable int64
	for _, u := range minutes {
		if meter.Op(u.Op).Billable() {
			billable += u.Msgs
		}
		totals.Reqs += u.Reqs
		totals.Msgs += u.Msgs
		totals.BytesIn += u.BytesIn
		totals.BytesOut += u.BytesOut
	}
	if minutes == nil {
		minutes = []usageRow{}
	}
	if daily == nil {
		daily = []usageRow{}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"hours": hours, "days": days,
		"from": from.Format(time.RFC3339), "to": to.Format(time.RFC3339),
		"from_day": fromDay.Format(time.DateOnly), "op_classes": opClasses,
		"minutes": minutes, "daily": daily,
		// totals.msgs is every message counted (billed or not);
		// totals.billable_msgs what is billed.
		"totals": map[string]int64{"reqs": totals.Reqs, "msgs": totals.Msgs, "billable_msgs": billable,
			"bytes_in": totals.BytesIn, "bytes_out": totals.BytesOut},
	})
}

type queueJSON struct {
	Name          string          `json:"name"`
	Namespace     string          `json:"namespace"`
	Task          string          `json:"task"`
	Partitions    int64           `json:"partitions"`
	Messages      json.RawMessage `json:"messages"`
	RetainedBytes *int64          `json:"retained_bytes"`
	CreatedAt     *string         `json:"created_at"`
}

// queues lists the cluster's queues as its cell reports them.
func (s *Surface) queues(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if s.o.State != nil && !s.o.State.CellServes(ctx, c.cluster) {
		writeError(w, apiErr(http.StatusServiceUnavailable, apierror.CellNotIsolated,
			"this cluster's cell cannot keep it apart from other clusters: its broker does not scope by tenant (or is not yet verified to)"))
		return
	}
	list, err := s.cellQueues(ctx, c, w.Header().Get(headerRequestID))
	if err != nil {
		s.o.Log.Warn("queue listing failed", zap.String("cluster", c.cluster.Slug), zap.Error(err))
		writeError(w, apiErr(http.StatusBadGateway, apierror.BadGateway, "the broker did not answer the queue listing"))
		return
	}
	var total *int64
	for _, q := range list {
		if q.RetainedBytes != nil {
			if total == nil {
				total = new(int64)
			}
			*total += *q.RetainedBytes
		}
	}
	st := s.storageOf(c)
	writeJSON(w, http.StatusOK, map[string]any{
		"queues": list, "retained_bytes": total,
		"max_retained_bytes": st.MaxRetainedBytes, "over_quota": st.OverQuota,
	})
}

// cellQueues reads GET <cell>/api/v1/resources/queues in the cluster's
// broker tenant, with the gateway's own cell credential.
func (s *Surface) cellQueues(ctx context.Context, c *caller, rid string) ([]queueJSON, error) {
	cell := cellclient.Client{HTTP: s.o.CellClient, BaseURL: c.cluster.CellURL, MaxAnswer: 16 << 20}
	if s.o.State != nil {
		cell.Authorization = s.o.State.CellCredential(c.cluster)
	}
	a, err := cell.Do(ctx, cellclient.Request{Method: http.MethodGet, Path: "/api/v1/resources/queues",
		Tenant: c.cluster.BrokerTenant, RequestID: rid})
	if err != nil {
		return nil, err
	}
	if a.Status != http.StatusOK {
		return nil, fmt.Errorf("cell answered %d", a.Status)
	}
	body := a.Body
	var doc struct {
		Error  any `json:"error"`
		Queues []struct {
			Name          string          `json:"name"`
			Namespace     *string         `json:"namespace"`
			Task          *string         `json:"task"`
			Partitions    json.Number     `json:"partitions"`
			Messages      json.RawMessage `json:"messages"`
			RetainedBytes *json.Number    `json:"retainedBytes"`
			CreatedAt     *string         `json:"createdAt"`
		} `json:"queues"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("undecodable queue listing: %w", err)
	}
	if doc.Error != nil {
		return nil, fmt.Errorf("cell answered an error: %v", doc.Error)
	}
	out := make([]queueJSON, 0, len(doc.Queues))
	for _, q := range doc.Queues {
		item := queueJSON{Name: q.Name, CreatedAt: q.CreatedAt, Messages: q.Messages}
		if q.Namespace != nil {
			item.Namespace = *q.Namespace
		}
		if q.Task != nil {
			item.Task = *q.Task
		}
		item.Partitions, _ = q.Partitions.Int64()
		if q.RetainedBytes != nil {
			if v, err := q.RetainedBytes.Int64(); err == nil {
				item.RetainedBytes = &v
			}
		}
		if len(item.Messages) == 0 {
			item.Messages = json.RawMessage(`null`)
		}
		out = append(out, item)
	}
	return out, nil
}
