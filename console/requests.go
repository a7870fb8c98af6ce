package console

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queengate/queengate/internal/uuidtext"
	"github.com/queengate/queengate/meter"
)

type requestMinuteJSON struct {
	Minute  string `json:"minute"`
	Outcome string `json:"outcome"`
	Reqs    int64  `json:"reqs"`
	Live    bool   `json:"live,omitempty"`
}

type requestKeyJSON struct {
	KeyID      *string          `json:"key_id"`
	Name       *string          `json:"name"`
	Revoked    bool             `json:"revoked"`
	LastUsedAt *string          `json:"last_used_at"`
	Reqs       map[string]int64 `json:"reqs"`
	Total      int64            `json:"total"`
}

func outcomeCounts() map[string]int64 {
	m := make(map[string]int64, len(meter.Outcomes))
	for _, o := range meter.Outcomes {
		m[string(o)] = 0
	}
	return m
}

func outcomeNames() []string {
	out := make([]string, len(meter.Outcomes))
	for i, o := range meter.Outcomes {
		out[i] = string(o)
	}
	return out
}

// requests is the cluster's requests per minute by outcome (refusals next
// to what was served), and per API key over the same window.
func (s *Surface) requests(w http.ResponseWriter, r *http.Request, c *caller) {
	hours := clampQuery(r, "hours", 24, 1, 168)
	keyFilter, filtered := r.URL.Query().Get("key"), r.URL.Query().Has("key")
	if filtered && keyFilter != "" && !uuidtext.ValidLower(strings.ToLower(keyFilter)) {
		writeError(w, invalid("key must be an api key id, or empty for requests made without a key"))
		return
	}
	keyFilter = strings.ToLower(keyFilter)
	now := s.o.Now().UTC()
	to := now.Truncate(time.Minute).Add(time.Minute)
	from := to.Add(-time.Duration(hours) * time.Hour)
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()

	type row struct {
		minute  time.Time
		key     string
		outcome string
		reqs    int64
		live    bool
	}
	rows, err := s.o.Pool.Query(ctx, `SELECT minute, key_id, outcome, reqs FROM queen_proxy.request_minutes
		WHERE cluster_id = $1::uuid AND minute >= $2 AND minute < $3`, c.cluster.ID, from, to)
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	counted, err := pgx.CollectRows(rows, func(rw pgx.CollectableRow) (row, error) {
		var x row
		return x, rw.Scan(&x.minute, &x.key, &x.outcome, &x.reqs)
	})
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	if st, ok := s.o.State.(RequestState); ok {
		for _, u := range st.UnflushedRequests(c.cluster.ID) {
			if !u.Minute.Before(from) && u.Minute.Before(to) {
				counted = append(counted, row{minute: u.Minute, key: u.KeyID, outcome: string(u.Outcome), reqs: u.Reqs, live: true})
			}
		}
	}

	keys, err := s.clusterKeys(ctx, c.cluster.ID)
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	byKey := map[string]*requestKeyJSON{}
	for i := range keys {
		byKey[*keys[i].KeyID] = &keys[i]
	}
	var sessions *requestKeyJSON
	totals := outcomeCounts()
	type minuteKey struct{ minute, outcome string }
	perMinute := map[minuteKey]*requestMinuteJSON{}
	for _, x := range counted {
		k := byKey[x.key]
		if k == nil {
			// Requests without a key (sessions, refusals before a key was
			// known), and keys no longer listed, are one row.
			if sessions == nil {
				sessions = &requestKeyJSON{Reqs: outcomeCounts()}
			}
			k = sessions
		}
		k.Reqs[x.outcome] += x.reqs
		k.Total += x.reqs
		totals[x.outcome] += x.reqs
		if filtered && x.key != keyFilter {
			continue
		}
		mk := minuteKey{x.minute.UTC().Format(time.RFC3339), x.outcome}
		m := perMinute[mk]
		if m == nil {
			m = &requestMinuteJSON{Minute: mk.minute, Outcome: x.outcome}
			perMinute[mk] = m
		}
		m.Reqs += x.reqs
		m.Live = m.Live || x.live
	}
	minutes := make([]requestMinuteJSON, 0, len(perMinute))
	for _, m := range perMinute {
		minutes = append(minutes, *m)
	}
	order := map[string]int{}
	for i, o := range meter.Outcomes {
		order[string(o)] = i
	}
	slices.SortFunc(minutes, func(a, b requestMinuteJSON) int {
		if c := strings.Compare(a.Minute, b.Minute); c != 0 {
			return c
		}
		return order[a.Outcome] - order[b.Outcome]
	})
	if sessions != nil {
		keys = append(keys, *sessions)
	}
	var key any
	if filtered {
		key = keyFilter
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"hours": hours, "from": from.Format(time.RFC3339), "to": to.Format(time.RFC3339),
		"outcomes": outcomeNames(), "key": key, "minutes": minutes, "keys": keys, "totals": totals,
	})
}

// clusterKeys lists the cluster's keys (revoked ones included), oldest
// first, each with zero counts.
func (s *Surface) clusterKeys(ctx context.Context, clusterID string) ([]requestKeyJSON, error) {
	rows, err := s.o.Pool.Query(ctx, `SELECT id::text, name, revoked_at IS NOT NULL, last_used_at
		FROM queen_proxy.api_keys WHERE cluster_id = $1::uuid ORDER BY created_at, id`, clusterID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (requestKeyJSON, error) {
		var id, name string
		var used *time.Time
		k := requestKeyJSON{Reqs: outcomeCounts()}
		err := row.Scan(&id, &name, &k.Revoked, &used)
		k.KeyID, k.Name, k.LastUsedAt = &id, &name, timeJSON(used)
		return k, err
	})
}
