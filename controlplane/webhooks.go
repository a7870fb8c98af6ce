package controlplane

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queengate/queengate/tenancy"
	"github.com/queengate/queengate/webhook"
)

// WebhookEndpoint is one row of queen_proxy.webhook_endpoints (never its
// secrets) with its delivery state.
type WebhookEndpoint struct {
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	URL    string   `json:"url"`
	Events []string `json:"events"` // empty: every kind
	// Status is active or disabled.
	Status         string     `json:"status"`
	DisabledReason *string    `json:"disabled_reason"`
	FailingSince   *time.Time `json:"failing_since"`
	// PreviousSecretUntil is when the secret before the last rotation
	// stops signing; nil when only one secret signs.
	PreviousSecretUntil *time.Time `json:"previous_secret_until"`
	Pending             int64      `json:"pending"`
	Delivered           int64      `json:"delivered"`
	CreatedAt           time.Time  `json:"created_at"`
}

// WebhookSecret is an endpoint with its current secret, which the add and
// rotate-secret commands print.
type WebhookSecret struct {
	WebhookEndpoint
	Secret string `json:"secret"`
}

// NewWebhook is what AddWebhook needs.
type NewWebhook struct {
	Name   string
	URL    string
	Events []string // empty: every kind
}

const webhookSelect = `SELECT e.id::text, e.name, e.url, e.events, e.status, e.disabled_reason, e.failing_since,
	CASE WHEN e.previous_secret IS NOT NULL AND e.previous_until > now() THEN e.previous_until END,
	(SELECT count(*) FROM queen_proxy.webhook_deliveries d WHERE d.endpoint_id = e.id AND d.delivered_at IS NULL),
	(SELECT count(*) FROM queen_proxy.webhook_deliveries d WHERE d.endpoint_id = e.id AND d.delivered_at IS NOT NULL),
	e.created_at
	FROM queen_proxy.webhook_endpoints e`

func scanWebhook(row pgx.Row) (WebhookEndpoint, error) {
	var w WebhookEndpoint
	err := row.Scan(&w.ID, &w.Name, &w.URL, &w.Events, &w.Status, &w.DisabledReason, &w.FailingSince,
		&w.PreviousSecretUntil, &w.Pending, &w.Delivered, &w.CreatedAt)
	w.Events = nonNil(w.Events)
	return w, err
}

// CheckWebhookName checks an endpoint name (a slug) and answers it
// normalized.
func CheckWebhookName(raw string) (string, error) {
	s := normalize(raw)
	if s == "" {
		return "", errorf(Invalid, "webhook endpoint name is required")
	}
	if !tenancy.ValidSlug(s) {
		return "", errorf(Invalid, "invalid webhook endpoint name %q: use 1 to 63 characters from a-z, 0-9 and inner hyphens", raw)
	}
	return s, nil
}

// CheckWebhookEvents checks an event filter (kinds the webhook package
// knows; empty is every kind) and answers it without blanks.
func CheckWebhookEvents(events []string) ([]string, error) {
	out := []string{}
	for _, e := range events {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	if err := webhook.CheckEvents(out); err != nil {
		return nil, errorf(Invalid, "%s", err.Error())
	}
	return out, nil
}

// CheckWebhookURL checks an endpoint URL as the dispatcher will use it.
func CheckWebhookURL(raw string) (string, error) {
	u := strings.TrimSpace(raw)
	if u == "" {
		return "", errorf(Invalid, "webhook endpoint URL is required")
	}
	if err := webhook.CheckURL(u); err != nil {
		return "", errorf(Invalid, "%s", err.Error())
	}
	return u, nil
}

// findWebhook resolves an endpoint by name or id.
func findWebhook(ctx context.Context, db DB, raw string) (ref, error) {
	return lookup(ctx, db, "webhook endpoint", raw,
		`SELECT id::text, name, status, '' FROM queen_proxy.webhook_endpoints WHERE name = $1 OR id::text = $1`)
}

// GetWebhook reads one endpoint by name or id.
func GetWebhook(ctx context.Context, db DB, raw string) (WebhookEndpoint, error) {
	r, err := findWebhook(ctx, db, raw)
	if err != nil {
		return WebhookEndpoint{}, err
	}
	return getWebhook(ctx, db, r.ID)
}

func getWebhook(ctx context.Context, db DB, id string) (WebhookEndpoint, error) {
	w, err := scanWebhook(db.QueryRow(ctx, webhookSelect+` WHERE e.id = $1::uuid`, id))
	if err != nil {
		return WebhookEndpoint{}, dbError("read webhook endpoint", err)
	}
	return w, nil
}

// AddWebhook creates an endpoint with a fresh secret. It receives the
// events recorded from now on (see ReplayWebhook for earlier ones).
func AddWebhook(ctx context.Context, db DB, n NewWebhook) (WebhookSecret, error) {
	name, err := CheckWebhookName(n.Name)
	if err != nil {
		return WebhookSecret{}, err
	}
	url, err := CheckWebhookURL(n.URL)
	if err != nil {
		return WebhookSecret{}, err
	}
	events, err := CheckWebhookEvents(n.Events)
	if err != nil {
		return WebhookSecret{}, err
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		return WebhookSecret{}, &Error{Kind: Failed, Msg: err.Error(), Err: err}
	}
	var id string
	err = db.QueryRow(ctx, `INSERT INTO queen_proxy.webhook_endpoints (name, url, events, secret)
		VALUES ($1, $2, $3, $4) RETURNING id::text`, name, url, events, secret).Scan(&id)
	if err != nil {
		return WebhookSecret{}, dbError("add webhook endpoint", err)
	}
	w, err := getWebhook(ctx, db, id)
	return WebhookSecret{WebhookEndpoint: w, Secret: secret}, err
}

// ListWebhooks lists every endpoint by name.
func ListWebhooks(ctx context.Context, db DB) ([]WebhookEndpoint, error) {
	rows, err := db.Query(ctx, webhookSelect+` ORDER BY e.name`)
	if err != nil {
		return nil, dbError("list webhook endpoints", err)
	}
	out := []WebhookEndpoint{}
	defer rows.Close()
	for rows.Next() {
		w, err := scanWebhook(rows)
		if err != nil {
			return nil, dbError("list webhook endpoints", err)
		}
		out = append(out, w)
	}
	return out, dbError("list webhook endpoints", rows.Err())
}

// WebhookUpdate changes what is set. AllEvents clears the filter.
type WebhookUpdate struct {
	URL       *string
	Events    []string
	AllEvents bool
	// Enabled makes the endpoint active again (its pending deliveries are
	// due at once and its failure clock restarts) or disables it.
	Enabled *bool
}

// UpdateWebhook changes an endpoint.
func UpdateWebhook(ctx context.Context, db DB, raw string, u WebhookUpdate) (WebhookEndpoint, error) {
	if u.AllEvents && len(u.Events) > 0 {
		return WebhookEndpoint{}, errorf(Invalid, "give the events or all events, not both")
	}
	var url *string
	if u.URL != nil {
		s, err := CheckWebhookURL(*u.URL)
		if err != nil {
			return WebhookEndpoint{}, err
		}
		url = &s
	}
	var events []string
	if len(u.Events) > 0 || u.AllEvents {
		var err error
		if events, err = CheckWebhookEvents(u.Events); err != nil {
			return WebhookEndpoint{}, err
		}
	}
	var id string
	err := inTx(ctx, db, "update webhook endpoint", func(tx pgx.Tx) error {
		r, err := findWebhook(ctx, tx, raw)
		if err != nil {
			return err
		}
		id = r.ID
		if _, err := tx.Exec(ctx, `UPDATE queen_proxy.webhook_endpoints
			SET url = coalesce($2, url), events = coalesce($3, events), updated_at = now() WHERE id = $1::uuid`,
			id, url, events); err != nil {
			return err
		}
		if u.Enabled == nil {
			return nil
		}
		if !*u.Enabled {
			_, err := tx.Exec(ctx, `SELECT queen_proxy.disable_webhook_endpoint($1::uuid, 'disabled by an operator')`, id)
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE queen_proxy.webhook_endpoints
			SET status = 'active', disabled_reason = NULL, failing_since = NULL, updated_at = now() WHERE id = $1::uuid`, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE queen_proxy.webhook_deliveries SET next_attempt_at = now()
			WHERE endpoint_id = $1::uuid AND delivered_at IS NULL AND next_attempt_at > now()`, id)
		return err
	})
	if err != nil {
		return WebhookEndpoint{}, err
	}
	return getWebhook(ctx, db, id)
}

// RemoveWebhook deletes an endpoint with its pending deliveries and its
// attempts.
func RemoveWebhook(ctx context.Context, db DB, raw string) (WebhookEndpoint, error) {
	var w WebhookEndpoint
	err := inTx(ctx, db, "remove webhook endpoint", func(tx pgx.Tx) error {
		r, err := findWebhook(ctx, tx, raw)
		if err != nil {
			return err
		}
		if w, err = getWebhook(ctx, tx, r.ID); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM queen_proxy.webhook_endpoints WHERE id = $1::uuid`, r.ID)
		return err
	})
	return w, err
}

// RotateWebhookSecret gives an endpoint a new secret. For overlap the
// previous secret signs too (every delivery carries both signatures), so
// that receivers can switch at their own pace; 0 drops it at once.
func RotateWebhookSecret(ctx context.Context, db DB, raw string, overlap time.Duration) (WebhookSecret, error) {
	if overlap < 0 {
		return WebhookSecret{}, errorf(Invalid, "overlap must not be negative (got %s)", overlap)
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		return WebhookSecret{}, &Error{Kind: Failed, Msg: err.Error(), Err: err}
	}
	var id string
	err = inTx(ctx, db, "rotate webhook secret", func(tx pgx.Tx) error {
		r, err := findWebhook(ctx, tx, raw)
		if err != nil {
			return err
		}
		id = r.ID
		_, err = tx.Exec(ctx, `UPDATE queen_proxy.webhook_endpoints
			SET previous_secret = CASE WHEN $3 > 0 THEN secret END,
			    previous_until = CASE WHEN $3 > 0 THEN now() + make_interval(secs => $3) END,
			    secret = $2, updated_at = now()
			WHERE id = $1::uuid`, id, secret, overlap.Seconds())
		return err
	})
	if err != nil {
		return WebhookSecret{}, err
	}
	w, err := getWebhook(ctx, db, id)
	return WebhookSecret{WebhookEndpoint: w, Secret: secret}, err
}

// WebhookAttempt is one recorded attempt.
type WebhookAttempt struct {
	At        time.Time `json:"at"`
	EventID   string    `json:"event_id"`
	Kind      string    `json:"kind"`
	Gateway   string    `json:"gateway"`
	Status    *int      `json:"status"`
	LatencyMS int       `json:"latency_ms"`
	Error     *string   `json:"error"`
	Delivered bool      `json:"delivered"`
}

// WebhookAttempts lists an endpoint's latest attempts, newest first.
func WebhookAttempts(ctx context.Context, db DB, raw string, limit int) ([]WebhookAttempt, error) {
	if limit <= 0 {
		return nil, errorf(Invalid, "limit must be positive (got %d)", limit)
	}
	r, err := findWebhook(ctx, db, raw)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT a.at, d.event_id::text, o.kind, a.gateway, a.status, a.latency_ms, a.error, a.error IS NULL
		FROM queen_proxy.webhook_attempts a
		JOIN queen_proxy.webhook_deliveries d ON d.seq = a.delivery_seq
		JOIN queen_proxy.outbox o ON o.id = d.event_id
		WHERE a.endpoint_id = $1::uuid ORDER BY a.at DESC, a.id DESC LIMIT $2`, r.ID, limit)
	if err != nil {
		return nil, dbError("list webhook attempts", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (WebhookAttempt, error) {
		var a WebhookAttempt
		err := row.Scan(&a.At, &a.EventID, &a.Kind, &a.Gateway, &a.Status, &a.LatencyMS, &a.Error, &a.Delivered)
		return a, err
	})
	if err != nil {
		return nil, dbError("list webhook attempts", err)
	}
	return out, nil
}

// WebhookReplay says which recorded events to send again: one event by
// id, or every event the endpoint's filter takes in [Since, Until).
type WebhookReplay struct {
	EventID string
	Since   *time.Time
	Until   *time.Time
}

// ReplayWebhook queues the chosen events for the endpoint again, after
// what it has pending, in the order they were recorded, each with its
// original webhook-id (a receiver that deduplicates by id sees them as
// the same messages). Returns how many it queued.
func ReplayWebhook(ctx context.Context, db DB, raw string, p WebhookReplay) (int64, error) {
	if (p.EventID == "") == (p.Since == nil) {
		return 0, errorf(Invalid, "give an event id or a start time, not both and not neither")
	}
	if p.EventID != "" && !uuidText.MatchString(strings.ToLower(p.EventID)) {
		return 0, errorf(Invalid, "event id %q is not a UUID", p.EventID)
	}
	if p.Since != nil && p.Until != nil && !p.Until.After(*p.Since) {
		return 0, errorf(Invalid, "the end of the range must be after its start")
	}
	var n int64
	err := inTx(ctx, db, "replay webhook events", func(tx pgx.Tx) error {
		r, err := findWebhook(ctx, tx, raw)
		if err != nil {
			return err
		}
		// The fan-out's lock: replayed deliveries take their place in
		// commit order like any other.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('queen_proxy.webhook_order'))`); err != nil {
			return err
		}
		var tag interface{ RowsAffected() int64 }
		if p.EventID != "" {
			tag, err = tx.Exec(ctx, `INSERT INTO queen_proxy.webhook_deliveries (endpoint_id, event_id, replay)
				SELECT $1::uuid, o.id, true FROM queen_proxy.outbox o WHERE o.id = $2::uuid`, r.ID, strings.ToLower(p.EventID))
			if err == nil && tag.RowsAffected() == 0 {
				return errorf(NotFound, "unknown event %q", p.EventID)
			}
		} else {
			tag, err = tx.Exec(ctx, `INSERT INTO queen_proxy.webhook_deliveries (endpoint_id, event_id, replay)
				SELECT e.id, o.id, true FROM queen_proxy.outbox o, queen_proxy.webhook_endpoints e
				 WHERE e.id = $1::uuid AND o.created_at >= $2 AND ($3::timestamptz IS NULL OR o.created_at < $3)
				   AND (cardinality(e.events) = 0 OR o.kind = ANY (e.events))
				 ORDER BY o.created_at, o.id`, r.ID, *p.Since, p.Until)
		}
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		return nil
	})
	return n, err
}

// WebhooksTable lists endpoints.
func WebhooksTable(ws []WebhookEndpoint) Table {
	t := Table{Header: []string{"NAME", "URL", "EVENTS", "STATUS", "PENDING", "DELIVERED", "FAILING SINCE", "ID"}}
	for _, w := range ws {
		events := strings.Join(w.Events, ",")
		if events == "" {
			events = "all"
		}
		status := w.Status
		if w.PreviousSecretUntil != nil {
			status += " (two secrets until " + stamp(*w.PreviousSecretUntil) + ")"
		}
		t.Rows = append(t.Rows, []string{w.Name, w.URL, events, status, num(w.Pending), num(w.Delivered),
			optStamp(w.FailingSince), w.ID})
	}
	return t
}

// WebhookAttemptsTable lists attempts.
func WebhookAttemptsTable(as []WebhookAttempt) Table {
	t := Table{Header: []string{"AT", "EVENT", "KIND", "GATEWAY", "STATUS", "LATENCY", "ERROR"}}
	for _, a := range as {
		status, errText := "-", "-"
		if a.Status != nil {
			status = num(int64(*a.Status))
		}
		if a.Error != nil {
			errText = *a.Error
		}
		t.Rows = append(t.Rows, []string{stamp(a.At), a.EventID, a.Kind, a.Gateway, status,
			num(int64(a.LatencyMS)) + "ms", errText})
	}
	return t
}

// ParseWebhookReplay reads the replay command's flags: an event id, or a
// start (and optional end) as RFC 3339 times or dates.
func ParseWebhookReplay(event, since, until string) (WebhookReplay, error) {
	p := WebhookReplay{EventID: strings.TrimSpace(event)}
	if strings.TrimSpace(since) != "" {
		t, err := parseInstant("since", since)
		if err != nil {
			return WebhookReplay{}, err
		}
		p.Since = &t
	}
	if strings.TrimSpace(until) != "" {
		if p.Since == nil {
			return WebhookReplay{}, errorf(Invalid, "--until needs --since")
		}
		t, err := parseInstant("until", until)
		if err != nil {
			return WebhookReplay{}, err
		}
		p.Until = &t
	}
	return p, nil
}
