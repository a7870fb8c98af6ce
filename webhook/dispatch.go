package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/harden"
)

// Defaults of Config.
const (
	DefaultPoll           = time.Second
	DefaultTimeout        = 15 * time.Second
	DefaultRetryBase      = 5 * time.Second
	DefaultRetryMax       = time.Hour
	DefaultDisableAfter   = 24 * time.Hour
	DefaultWorkers        = 4
	DefaultExpiringWithin = 7 * 24 * time.Hour
	// expiringEvery is how often a gateway looks for keys to announce as
	// expiring.
	expiringEvery = time.Minute
	// errorWaitMax bounds the wait of a worker after failed rounds.
	errorWaitMax = 30 * time.Second
	// KeepDelivered is how long delivered events and their attempts are
	// kept for "webhook attempts" and inspection.
	KeepDelivered = 30 * 24 * time.Hour
	// maxErrorText bounds the error recorded with an attempt.
	maxErrorText = 500
	// maxAnswerRead bounds how much of a receiver's answer is read (to
	// reuse the connection) before it is closed.
	maxAnswerRead = 64 << 10
)

// Config configures a Dispatcher. Zero values take the defaults above.
type Config struct {
	Pool *pgxpool.Pool
	// Gateway names this gateway in the attempts it records.
	Gateway string
	// Poll is how often an idle dispatcher looks for due deliveries.
	Poll time.Duration
	// Timeout bounds one attempt, from dialling to the end of the answer's
	// head.
	Timeout time.Duration
	// RetryBase is the wait after the first failed attempt of a delivery;
	// each further failure doubles it, up to RetryMax.
	RetryBase time.Duration
	RetryMax  time.Duration
	// DisableAfter is how long an endpoint may fail without a success
	// before it is disabled (webhook_endpoint_disabled).
	DisableAfter time.Duration
	// Workers is how many endpoints this gateway delivers to at once.
	Workers int
	// ExpiringWithin is how long before its expiry a key is announced
	// (api_key_expiring).
	ExpiringWithin time.Duration
	// AllowLoopback lets endpoints on loopback addresses be called (tests,
	// a receiver on the gateway's own host).
	AllowLoopback bool
	// UserAgent is sent with every delivery.
	UserAgent string
	Log       *zap.Logger
}

// Dispatcher delivers the pending deliveries of every active endpoint.
type Dispatcher struct {
	cfg    Config
	client *http.Client
	log    *zap.Logger
}

// New returns a Dispatcher; Run starts it.
func New(cfg Config) *Dispatcher {
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = DefaultRetryBase
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = DefaultRetryMax
	}
	if cfg.RetryMax < cfg.RetryBase {
		cfg.RetryMax = cfg.RetryBase
	}
	if cfg.DisableAfter <= 0 {
		cfg.DisableAfter = DefaultDisableAfter
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.ExpiringWithin <= 0 {
		cfg.ExpiringWithin = DefaultExpiringWithin
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "queengate-webhooks"
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Dispatcher{cfg: cfg, client: harden.NewOutboundClient(cfg.Timeout, cfg.AllowLoopback), log: log}
}

// Backoff is the wait after a delivery's attempts-th failed attempt.
func (d *Dispatcher) Backoff(attempts int) time.Duration {
	w := d.cfg.RetryBase
	for i := 1; i < attempts && w < d.cfg.RetryMax; i++ {
		w *= 2
	}
	return min(w, d.cfg.RetryMax)
}

// Run delivers until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) {
	// Idle workers share one tick per Poll: a gateway with nothing to
	// deliver asks the database once per Poll, not once per worker. A
	// worker that found work goes on without waiting.
	tick := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(d.cfg.Poll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			select {
			case <-ctx.Done():
				return
			case tick <- struct{}{}:
			}
		}
	})
	for range d.cfg.Workers {
		wg.Go(func() { d.work(ctx, tick) })
	}
	wg.Go(func() { d.housekeeping(ctx) })
	wg.Wait()
}

func (d *Dispatcher) work(ctx context.Context, tick <-chan struct{}) {
	failures := 0
	for {
		did, err := d.DeliverOne(ctx)
		if err == nil {
			failures = 0
			if did {
				continue
			}
		} else if ctx.Err() == nil {
			// A database that does not answer is logged once per wait,
			// and the waits grow: not a line per worker and poll.
			failures++
			wait := min(d.cfg.Poll<<min(failures, 10), errorWaitMax)
			d.log.Warn("webhook delivery round failed; trying again", zap.Duration("in", wait), zap.Error(err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}

// housekeeping announces expiring keys and prunes deliveries delivered
// more than KeepDelivered ago (their attempts with them), every minute on
// every gateway: both are safe to run at once from several.
func (d *Dispatcher) housekeeping(ctx context.Context) {
	t := time.NewTicker(expiringEvery)
	defer t.Stop()
	for {
		var n int
		err := d.cfg.Pool.QueryRow(ctx, `SELECT queen_proxy.announce_expiring_keys(make_interval(secs => $1))`,
			d.cfg.ExpiringWithin.Seconds()).Scan(&n)
		if err != nil && ctx.Err() == nil {
			d.log.Warn("announcing expiring API keys failed; trying again", zap.Error(err))
		} else if n > 0 {
			d.log.Info("announced expiring API keys", zap.Int("keys", n))
		}
		if _, err := d.cfg.Pool.Exec(ctx, `DELETE FROM queen_proxy.webhook_deliveries
			WHERE delivered_at < now() - make_interval(secs => $1)`, KeepDelivered.Seconds()); err != nil && ctx.Err() == nil {
			d.log.Warn("pruning delivered webhook events failed; trying again", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// dueEndpoints lists active endpoints whose next delivery is due, in a
// random order so that the workers of all gateways spread over them.
const dueEndpoints = `
SELECT e.id::text FROM queen_proxy.webhook_endpoints e
 WHERE e.status = 'active'
   AND (SELECT d.next_attempt_at FROM queen_proxy.webhook_deliveries d
         WHERE d.endpoint_id = e.id AND d.delivered_at IS NULL ORDER BY d.seq LIMIT 1) <= now()
 ORDER BY random() LIMIT 32`

// lockEndpoint takes the endpoint for this transaction if no other
// transaction (of any gateway) has it.
const lockEndpoint = `SELECT pg_try_advisory_xact_lock(hashtext('queen_proxy.webhook_endpoint'), hashtext($1))`

const headDelivery = `
SELECT d.seq, d.attempts, d.next_attempt_at <= now(), o.id::text, o.kind, o.payload, coalesce(o.created_at, d.created_at),
       e.name, e.url, e.secret, CASE WHEN e.previous_until > now() THEN e.previous_secret END,
       e.status, e.failing_since, now() - coalesce(e.failing_since, now())
  FROM queen_proxy.webhook_endpoints e
  JOIN queen_proxy.webhook_deliveries d ON d.endpoint_id = e.id AND d.delivered_at IS NULL
  JOIN queen_proxy.outbox o ON o.id = d.event_id
 WHERE e.id = $1::uuid
 ORDER BY d.seq LIMIT 1`

type delivery struct {
	seq          int64
	attempts     int
	due          bool
	eventID      string
	kind         string
	payload      []byte
	at           time.Time
	endpoint     string
	url          string
	secret       string
	previous     *string
	status       string
	failingSince *time.Time
	failingFor   time.Duration
}

// Message is the JSON body of a delivery, the Standard Webhooks payload
// structure.
type Message struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// DeliverOne makes at most one attempt, at the head delivery of an endpoint
// no other gateway is delivering to, and reports whether it made one.
func (d *Dispatcher) DeliverOne(ctx context.Context) (bool, error) {
	rows, err := d.cfg.Pool.Query(ctx, dueEndpoints)
	if err != nil {
		return false, fmt.Errorf("webhook: list due endpoints: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, fmt.Errorf("webhook: list due endpoints: %w", err)
	}
	for _, id := range ids {
		did, err := d.attemptEndpoint(ctx, id)
		if did || err != nil {
			return did, err
		}
	}
	return false, nil
}

func (d *Dispatcher) attemptEndpoint(ctx context.Context, id string) (bool, error) {
	tx, err := d.cfg.Pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("webhook: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a committed transaction makes this a no-op
	var locked bool
	if err := tx.QueryRow(ctx, lockEndpoint, id).Scan(&locked); err != nil {
		return false, fmt.Errorf("webhook: lock endpoint: %w", err)
	}
	if !locked {
		return false, nil
	}
	var v delivery
	err = tx.QueryRow(ctx, headDelivery, id).Scan(&v.seq, &v.attempts, &v.due, &v.eventID, &v.kind, &v.payload, &v.at,
		&v.endpoint, &v.url, &v.secret, &v.previous, &v.status, &v.failingSince, &v.failingFor)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("webhook: read head delivery: %w", err)
	}
	if !v.due || v.status != "active" {
		return false, nil
	}

	status, latency, sendErr := d.send(ctx, v)
	if ctx.Err() != nil {
		// Stopping: the attempt's outcome is unknown; the rollback leaves
		// the delivery pending, to be sent again with the same id.
		return false, ctx.Err()
	}
	var errText *string
	if sendErr != nil {
		s := sendErr.Error()
		if len(s) > maxErrorText {
			s = s[:maxErrorText]
		}
		errText = &s
	}
	var statusCol *int
	if status != 0 {
		statusCol = &status
	}
	if _, err := tx.Exec(ctx, `INSERT INTO queen_proxy.webhook_attempts (delivery_seq, endpoint_id, gateway, status, latency_ms, error)
		VALUES ($1, $2::uuid, $3, $4, $5, $6)`, v.seq, id, d.cfg.Gateway, statusCol, latency.Milliseconds(), errText); err != nil {
		return false, fmt.Errorf("webhook: record attempt: %w", err)
	}
	ok := sendErr == nil
	if ok {
		if _, err := tx.Exec(ctx, `UPDATE queen_proxy.webhook_deliveries SET attempts = attempts + 1, delivered_at = now() WHERE seq = $1`, v.seq); err != nil {
			return false, fmt.Errorf("webhook: mark delivered: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE queen_proxy.webhook_endpoints SET failing_since = NULL WHERE id = $1::uuid AND failing_since IS NOT NULL`, id); err != nil {
			return false, fmt.Errorf("webhook: mark endpoint healthy: %w", err)
		}
	} else {
		wait := d.Backoff(v.attempts + 1)
		if _, err := tx.Exec(ctx, `UPDATE queen_proxy.webhook_deliveries SET attempts = attempts + 1,
			next_attempt_at = now() + make_interval(secs => $2) WHERE seq = $1`, v.seq, wait.Seconds()); err != nil {
			return false, fmt.Errorf("webhook: schedule retry: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE queen_proxy.webhook_endpoints SET failing_since = coalesce(failing_since, now()) WHERE id = $1::uuid`, id); err != nil {
			return false, fmt.Errorf("webhook: mark endpoint failing: %w", err)
		}
		if v.failingSince != nil && v.failingFor >= d.cfg.DisableAfter {
			reason := fmt.Sprintf("every attempt failed for %s (last: %s)", v.failingFor.Round(time.Second), *errText)
			if _, err := tx.Exec(ctx, `SELECT queen_proxy.disable_webhook_endpoint($1::uuid, $2)`, id, reason); err != nil {
				return false, fmt.Errorf("webhook: disable endpoint: %w", err)
			}
			d.log.Error("webhook endpoint disabled after failing too long; re-enable it with caddy queen webhook update --enable",
				zap.String("endpoint", v.endpoint), zap.Duration("failing_for", v.failingFor), zap.Error(sendErr))
		} else {
			d.log.Info("webhook attempt failed; retrying later", zap.String("endpoint", v.endpoint),
				zap.String("event", v.eventID), zap.Int("attempts", v.attempts+1), zap.Duration("retry_in", wait), zap.Error(sendErr))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("webhook: commit attempt: %w", err)
	}
	return true, nil
}

// send makes one HTTP attempt. A 2xx answer is success; anything else,
// including a redirect, is a failure with the status recorded.
func (d *Dispatcher) send(ctx context.Context, v delivery) (status int, latency time.Duration, err error) {
	body, err := json.Marshal(Message{Type: v.kind, Timestamp: v.at.UTC(), Data: json.RawMessage(v.payload)})
	if err != nil {
		return 0, 0, fmt.Errorf("encode message: %w", err)
	}
	var keys [][]byte
	for _, s := range []*string{&v.secret, v.previous} {
		if s == nil {
			continue
		}
		k, err := ParseSecret(*s)
		if err != nil {
			return 0, 0, err
		}
		keys = append(keys, k)
	}
	now := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", d.cfg.UserAgent)
	req.Header.Set("webhook-id", v.eventID)
	req.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	req.Header.Set("webhook-signature", Signature(keys, v.eventID, now, body))
	resp, err := d.client.Do(req)
	latency = time.Since(now)
	if err != nil {
		return 0, latency, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerRead))
	resp.Body.Close()
	latency = time.Since(now)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := fmt.Sprintf("receiver answered %d", resp.StatusCode)
		if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
			msg += " (a redirect, which is not followed)"
		}
		return resp.StatusCode, latency, errors.New(strings.TrimSpace(msg))
	}
	return resp.StatusCode, latency, nil
}
