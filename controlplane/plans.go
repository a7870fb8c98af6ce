package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// LimitNames are the plan's limit columns, in catalogue order. They are
// also the keys a cluster's limit_overrides may hold.
var LimitNames = []string{
	"max_req_per_sec", "req_burst", "max_msgs_per_sec", "msgs_burst",
	"max_queues", "max_partitions_per_queue", "max_parked_pops",
	"max_payload_bytes", "max_batch_items", "max_retained_bytes", "max_retention_seconds",
	"monthly_msgs_quota",
}

// FeatureNames are the feature flags the gateway knows.
var FeatureNames = []string{"streams", "traces", "kv", "timers", "ephemeral"}

func isLimitName(name string) bool {
	for _, n := range LimitNames {
		if n == name {
			return true
		}
	}
	return false
}

// Plan is one row of queen_proxy.plans. A nil limit is unlimited (NULL).
type Plan struct {
	Code      string            `json:"code"`
	CellClass string            `json:"cell_class"`
	Limits    map[string]*int64 `json:"limits"`
	Features  json.RawMessage   `json:"features"`
	Clusters  int               `json:"clusters"`
	CreatedAt time.Time         `json:"created_at"`
	// StorageQuota is whether max_retained_bytes is enforced on the
	// active cells of the plan's class: "active" (their brokers report
	// retained bytes), "inactive" (none of those known does), "partial"
	// (some do) or "unknown" (no listing has settled it yet).
	StorageQuota string `json:"storage_quota"`
}

// Limit returns a plan limit, nil when unlimited.
func (p Plan) Limit(name string) *int64 { return p.Limits[name] }

var planSelect = `SELECT p.code, p.cell_class, ` + strings.Join(prefixed("p.", LimitNames), ", ") + `,
	p.features::text, (SELECT count(*) FROM queen_proxy.clusters c WHERE c.plan_id = p.id)::int,
	coalesce(p.created_at, now()),
	(SELECT CASE
		WHEN bool_and(ce.storage_reporting = 'reported') THEN 'active'
		WHEN bool_and(ce.storage_reporting = 'not_reported') THEN 'inactive'
		WHEN bool_or(ce.storage_reporting = 'reported') THEN 'partial'
		END
	   FROM queen_proxy.cells ce
	  WHERE ce.class = p.cell_class AND ce.status = 'active' AND ce.storage_reporting <> 'unknown')
	FROM queen_proxy.plans p`

func prefixed(prefix string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = prefix + n
	}
	return out
}

func scanPlan(row pgx.Row) (Plan, error) {
	p := Plan{Limits: map[string]*int64{}}
	values := make([]*int64, len(LimitNames))
	dest := []any{&p.Code, &p.CellClass}
	for i := range values {
		dest = append(dest, &values[i])
	}
	var features string
	var storage *string
	dest = append(dest, &features, &p.Clusters, &p.CreatedAt, &storage)
	if err := row.Scan(dest...); err != nil {
		return Plan{}, err
	}
	p.StorageQuota = "unknown"
	if storage != nil {
		p.StorageQuota = *storage
	}
	for i, n := range LimitNames {
		p.Limits[n] = values[i]
	}
	p.Features = json.RawMessage(features)
	return p, nil
}

func getPlan(ctx context.Context, db DB, code string) (Plan, error) {
	p, err := scanPlan(db.QueryRow(ctx, planSelect+` WHERE p.code = $1`, code))
	if errors.Is(err, pgx.ErrNoRows) {
		return Plan{}, errorf(NotFound, "unknown plan %q", code)
	}
	if err != nil {
		return Plan{}, dbError("read plan", err)
	}
	return p, nil
}

// ListPlans returns the plan catalogue, ordered by code.
func ListPlans(ctx context.Context, db DB) ([]Plan, error) {
	rows, err := db.Query(ctx, planSelect+` ORDER BY p.code`)
	if err != nil {
		return nil, dbError("list plans", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Plan, error) { return scanPlan(r) })
	if err != nil {
		return nil, dbError("list plans", err)
	}
	return nonNil(out), nil
}

// PlanChange creates or changes a plan. Only what is set changes.
type PlanChange struct {
	Code      string
	CellClass string // required for a new plan
	// Limits maps a limit name to its new value; a nil value makes the
	// limit unlimited.
	Limits map[string]*int64
	// Features maps a feature flag to on or off.
	Features map[string]bool
}

// ParseLimit reads a limit value as operators write it: a whole number
// above 0, or "unlimited" (also "none" or "null").
func ParseLimit(name, s string) (*int64, error) {
	switch normalize(s) {
	case "unlimited", "none", "null":
		return nil, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return nil, errorf(Invalid, "invalid %s %q: use a whole number above 0 or \"unlimited\"", name, s)
	}
	return &n, nil
}

var planCode = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// SetPlan creates the plan c.Code when it does not exist (it then needs a
// cell class) and otherwise changes the given columns. Plans are catalogue
// rows that no SQL function writes; every gateway caches the limits of each
// cluster on the plan, so each such cluster is announced on the invalidation
// channel. Plans belong to no tenant, so the change leaves no audit row.
// created reports whether the plan is new.
func SetPlan(ctx context.Context, db DB, c PlanChange) (plan Plan, created bool, err error) {
	code := normalize(c.Code)
	if !planCode.MatchString(code) {
		return Plan{}, false, errorf(Invalid, "invalid plan code %q: start with a-z, then a-z, 0-9 and hyphens", c.Code)
	}
	var class string
	if strings.TrimSpace(c.CellClass) != "" {
		if class, err = checkClass("plan cell class", c.CellClass); err != nil {
			return Plan{}, false, err
		}
	}
	names := make([]string, 0, len(c.Limits))
	for name, v := range c.Limits {
		if !isLimitName(name) {
			return Plan{}, false, errorf(Invalid, "unknown limit %q (known: %s)", name, strings.Join(LimitNames, ", "))
		}
		if v != nil && *v <= 0 {
			return Plan{}, false, errorf(Invalid, "invalid %s %d: use a whole number above 0 or unlimited", name, *v)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	features := map[string]bool{}
	for name, on := range c.Features {
		if !isFeature(name) {
			return Plan{}, false, errorf(Invalid, "unknown feature %q (known: %s)", name, strings.Join(FeatureNames, ", "))
		}
		features[name] = on
	}
	featureJSON, _ := json.Marshal(features)

	err = inTx(ctx, db, "set plan", func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM queen_proxy.plans WHERE code = $1)`, code).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			if class == "" {
				return errorf(Invalid, "plan %q does not exist; a new plan needs a cell class (shared or dedicated)", code)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO queen_proxy.plans (code, cell_class) VALUES ($1, $2)`, code, class); err != nil {
				return err
			}
			created = true
		}
		sets := []string{}
		args := []any{code}
		if class != "" {
			args = append(args, class)
			sets = append(sets, fmt.Sprintf("cell_class = $%d", len(args)))
		}
		for _, name := range names { // names are checked against LimitNames above
			args = append(args, c.Limits[name])
			sets = append(sets, fmt.Sprintf("%s = $%d", name, len(args)))
		}
		if len(features) > 0 {
			args = append(args, string(featureJSON))
			sets = append(sets, fmt.Sprintf("features = features || $%d::jsonb", len(args)))
		}
		if len(sets) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE queen_proxy.plans SET `+strings.Join(sets, ", ")+` WHERE code = $1`, args...); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify('queen_proxy_inval', c.id::text)
			FROM queen_proxy.clusters c JOIN queen_proxy.plans p ON p.id = c.plan_id WHERE p.code = $1`, code)
		return err
	})
	if err != nil {
		return Plan{}, false, err
	}
	plan, err = getPlan(ctx, db, code)
	return plan, created, err
}

func isFeature(name string) bool {
	for _, n := range FeatureNames {
		if n == name {
			return true
		}
	}
	return false
}

// ParseFeature reads "name=on" or "name=off" (also true/false, yes/no, 1/0).
func ParseFeature(s string) (name string, on bool, err error) {
	name, value, ok := strings.Cut(strings.TrimSpace(s), "=")
	name = normalize(name)
	if !ok || name == "" {
		return "", false, errorf(Invalid, "invalid feature %q: use name=on or name=off", s)
	}
	switch normalize(value) {
	case "on", "true", "yes", "1":
		return name, true, nil
	case "off", "false", "no", "0":
		return name, false, nil
	}
	return "", false, errorf(Invalid, "invalid feature %q: use name=on or name=off", s)
}
