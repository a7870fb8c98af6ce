// Package usageexport pushes the usage the gateways book in
// queen_proxy.usage_minutes to a billing system as CloudEvents, in the
// structured batch format (application/cloudevents-batch+json) that
// OpenMeter ingests. What to send is decided in the database
// (usage_export_generate: events with ids derived from their content,
// stored before they are sent), so a retry after a refused, lost or
// interrupted request sends the same events with the same ids, and the
// receiver's deduplication by id makes it count each once. One gateway
// exports at a time: each step runs under a transaction-scoped advisory
// lock on the sink, let go the moment a killed gateway's connection
// closes.
//
// It does not import Caddy.
package usageexport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/harden"
	"github.com/queengate/queengate/meter"
)

// Defaults of Config.
const (
	DefaultSink        = "default"
	DefaultInterval    = time.Minute
	DefaultGranularity = "minute"
	DefaultSettle      = 30 * time.Second
	DefaultLookback    = 48 * time.Hour
	DefaultBatch       = 500
	DefaultSource      = "queengate"
	DefaultSubject     = "tenant_id"
	DefaultTimeout     = 15 * time.Second
	// EventType is every event's CloudEvents type.
	EventType = "queengate.usage"
	// ContentType is the structured batch mode of the CloudEvents HTTP
	// binding.
	ContentType = "application/cloudevents-batch+json"
)

// Subjects are the values Config.Subject may take: which of the event's
// data is its CloudEvents subject (the customer, for OpenMeter).
var Subjects = []string{"tenant_id", "tenant_slug", "cluster_id", "cluster_slug"}

// Config configures an Exporter. Zero values take the defaults.
type Config struct {
	Pool *pgxpool.Pool
	// Sink names the receiver's cursor in the database; two exports to
	// different receivers need different sinks.
	Sink string
	// URL receives the batches (POST).
	URL string
	// Headers are sent with every request (an Authorization header).
	Headers map[string]string
	// Interval is how often closed periods are exported.
	Interval time.Duration
	// Granularity is "minute" or "hour": the period one event covers.
	Granularity string
	// Settle is how long after a period ends it is exported (the meters of
	// every gateway write a closed minute within their flush interval).
	// Usage booked later still goes, as another event for the difference.
	Settle time.Duration
	// Lookback is how far back usage that grows late is looked for.
	Lookback time.Duration
	// Batch is the most events one request carries.
	Batch int
	// Source is the events' CloudEvents source.
	Source string
	// Subject is one of Subjects.
	Subject string
	// Timeout bounds one request.
	Timeout       time.Duration
	AllowLoopback bool
	Log           *zap.Logger
}

// Exporter exports usage; Run starts it.
type Exporter struct {
	cfg    Config
	client *http.Client
	log    *zap.Logger
}

// New returns an Exporter for cfg with its defaults filled in.
func New(cfg Config) *Exporter {
	if cfg.Sink == "" {
		cfg.Sink = DefaultSink
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Granularity == "" {
		cfg.Granularity = DefaultGranularity
	}
	if cfg.Settle < 0 {
		cfg.Settle = 0
	} else if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.Lookback <= 0 {
		cfg.Lookback = DefaultLookback
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Source == "" {
		cfg.Source = DefaultSource
	}
	if cfg.Subject == "" {
		cfg.Subject = DefaultSubject
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	log := cfg.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Exporter{cfg: cfg, client: harden.NewOutboundClient(cfg.Timeout, cfg.AllowLoopback), log: log}
}

// Run exports every Interval until ctx ends.
func (e *Exporter) Run(ctx context.Context) {
	t := time.NewTicker(e.cfg.Interval)
	defer t.Stop()
	for {
		made, sent, err := e.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			e.log.Warn("usage export failed; the same events are sent again next time", zap.String("sink", e.cfg.Sink),
				zap.Int("made", made), zap.Int("sent", sent), zap.Error(err))
		case made > 0 || sent > 0:
			e.log.Info("usage exported", zap.String("sink", e.cfg.Sink), zap.Int("made", made), zap.Int("sent", sent))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

const lockSink = `SELECT pg_try_advisory_xact_lock(hashtext('queen_proxy.usage_export'), hashtext($1))`

// RunOnce makes the events of the periods closed since the last run and
// sends every pending event, in order, in batches. It returns how many
// events it made and sent; another gateway exporting to the sink makes it
// return at once.
func (e *Exporter) RunOnce(ctx context.Context) (made, sent int, err error) {
	err = e.inLock(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT queen_proxy.usage_export_generate($1, $2, make_interval(secs => $3), make_interval(secs => $4))`,
			e.cfg.Sink, e.cfg.Granularity, e.cfg.Settle.Seconds(), e.cfg.Lookback.Seconds()).Scan(&made)
	})
	if err != nil {
		return made, 0, fmt.Errorf("usage export: make events: %w", err)
	}
	for {
		n := 0
		err := e.inLock(ctx, func(tx pgx.Tx) error {
			var err error
			n, err = e.sendBatch(ctx, tx)
			return err
		})
		sent += n
		if err != nil || n == 0 {
			return made, sent, err
		}
	}
}

var errLocked = errors.New("another gateway exports to this sink")

// inLock runs fn in a transaction holding the sink's lock, and commits.
// Another holder is not an error: it does the work.
func (e *Exporter) inLock(ctx context.Context, fn func(pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, e.cfg.Pool, func(tx pgx.Tx) error {
		var locked bool
		if err := tx.QueryRow(ctx, lockSink, e.cfg.Sink).Scan(&locked); err != nil {
			return err
		}
		if !locked {
			return errLocked
		}
		return fn(tx)
	})
	if errors.Is(err, errLocked) {
		return nil
	}
	return err
}

// Event is one CloudEvent of the batch.
type Event struct {
	SpecVersion     string `json:"specversion"`
	ID              string `json:"id"`
	Source          string `json:"source"`
	Type            string `json:"type"`
	Subject         string `json:"subject"`
	Time            string `json:"time"`
	DataContentType string `json:"datacontenttype"`
	Data            Usage  `json:"data"`
}

// Usage is an event's data: what one cluster used in one period and op
// class, beyond what earlier events of the sink carried.
type Usage struct {
	TenantID    string `json:"tenant_id"`
	TenantSlug  string `json:"tenant_slug"`
	ClusterID   string `json:"cluster_id"`
	ClusterSlug string `json:"cluster_slug"`
	OpClass     string `json:"op_class"`
	PeriodStart string `json:"period_start"`
	PeriodEnd   string `json:"period_end"`
	Msgs        int64  `json:"msgs"`
	// BillableMsgs is Msgs for the op classes that are billed (push and
	// txn) and 0 for the others: the one number a billing system should sum.
	BillableMsgs   int64 `json:"billable_msgs"`
	Reqs           int64 `json:"reqs"`
	BytesIn        int64 `json:"bytes_in"`
	BytesOut       int64 `json:"bytes_out"`
	UnansweredMsgs int64 `json:"unanswered_msgs"`
}

const pendingEvents = `
SELECT seq, id, tenant_id::text, tenant_slug, cluster_id::text, cluster_slug, op_class, period_start, period_end,
       msgs, reqs, bytes_in, bytes_out, unanswered_msgs
  FROM queen_proxy.usage_export_events
 WHERE sink = $1 AND sent_at IS NULL
 ORDER BY seq LIMIT $2`

func (e *Exporter) sendBatch(ctx context.Context, tx pgx.Tx) (int, error) {
	rows, err := tx.Query(ctx, pendingEvents, e.cfg.Sink, e.cfg.Batch)
	if err != nil {
		return 0, err
	}
	var seqs []int64
	var batch []Event
	for rows.Next() {
		var seq int64
		var id string
		var u Usage
		var start, end time.Time
		if err := rows.Scan(&seq, &id, &u.TenantID, &u.TenantSlug, &u.ClusterID, &u.ClusterSlug, &u.OpClass,
			&start, &end, &u.Msgs, &u.Reqs, &u.BytesIn, &u.BytesOut, &u.UnansweredMsgs); err != nil {
			rows.Close()
			return 0, err
		}
		if meter.Op(u.OpClass).Billed() {
			u.BillableMsgs = u.Msgs
		}
		u.PeriodStart, u.PeriodEnd = start.UTC().Format(time.RFC3339), end.UTC().Format(time.RFC3339)
		seqs = append(seqs, seq)
		batch = append(batch, Event{SpecVersion: "1.0", ID: id, Source: e.cfg.Source, Type: EventType,
			Subject: subjectOf(e.cfg.Subject, u), Time: u.PeriodStart, DataContentType: "application/json", Data: u})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(batch) == 0 {
		return 0, nil
	}
	if err := e.post(ctx, batch); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `UPDATE queen_proxy.usage_export_events SET sent_at = now() WHERE seq = ANY ($1)`, seqs); err != nil {
		return 0, err
	}
	return len(batch), nil
}

func subjectOf(field string, u Usage) string {
	switch field {
	case "tenant_slug":
		return u.TenantSlug
	case "cluster_id":
		return u.ClusterID
	case "cluster_slug":
		return u.ClusterSlug
	}
	return u.TenantID
}

func (e *Exporter) post(ctx context.Context, batch []Event) error {
	body, err := json.Marshal(batch)
	if err != nil {
		return fmt.Errorf("encode batch: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", ContentType)
	for k, v := range e.cfg.Headers {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("send %d events: %w", len(batch), err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("send %d events: receiver answered %d", len(batch), resp.StatusCode)
	}
	return nil
}
