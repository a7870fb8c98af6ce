package caddymodule

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/harden"
	"github.com/queengate/queengate/usageexport"
)

// UsageExportConfig pushes usage to a billing receiver as CloudEvents
// (docs/usage-export.md). Nil: no export.
type UsageExportConfig struct {
	// URL receives the batches; required.
	URL string `json:"url,omitempty"`
	// Headers are sent with every request; placeholders are expanded
	// ({env.OPENMETER_TOKEN}).
	Headers map[string]string `json:"headers,omitempty"`
	// Interval is how often closed periods are exported. Default 1m.
	Interval caddy.Duration `json:"interval,omitempty"`
	// Granularity is minute (default) or hour.
	Granularity string `json:"granularity,omitempty"`
	// Settle is how long after its end a period is exported. Default 30s.
	Settle caddy.Duration `json:"settle,omitempty"`
	// Lookback is how far back late usage is looked for. Default 48h.
	Lookback caddy.Duration `json:"lookback,omitempty"`
	// Batch is the most events per request. Default 500.
	Batch int `json:"batch,omitempty"`
	// Sink names the receiver's cursor in the database. Default "default".
	Sink string `json:"sink,omitempty"`
	// Source is the events' CloudEvents source. Default "queengate".
	Source string `json:"source,omitempty"`
	// Subject is tenant_id (default), tenant_slug, cluster_id or
	// cluster_slug.
	Subject string `json:"subject,omitempty"`
	// Timeout bounds one request. Default 15s.
	Timeout       caddy.Duration `json:"timeout,omitempty"`
	AllowLoopback bool           `json:"allow_loopback,omitempty"`
}

func (u *UsageExportConfig) unmarshal(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch opt := d.Val(); opt {
		case "url":
			err = parseString(d, &u.URL)
		case "header":
			var name, value string
			if !d.AllArgs(&name, &value) {
				return d.ArgErr()
			}
			if u.Headers == nil {
				u.Headers = map[string]string{}
			}
			u.Headers[name] = value
		case "interval":
			err = parseDuration(d, &u.Interval)
		case "granularity":
			err = parseString(d, &u.Granularity)
		case "settle":
			err = parseDuration(d, &u.Settle)
		case "lookback":
			err = parseDuration(d, &u.Lookback)
		case "batch":
			err = parseCount(d, &u.Batch)
		case "sink":
			err = parseString(d, &u.Sink)
		case "source":
			err = parseString(d, &u.Source)
		case "subject":
			err = parseString(d, &u.Subject)
		case "timeout":
			err = parseDuration(d, &u.Timeout)
		case "allow_loopback":
			if d.NextArg() {
				return d.ArgErr()
			}
			u.AllowLoopback = true
		default:
			return d.Errf("queen: usage_export: unknown option %q", opt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// usageExportSettings is the export's part of backendSettings, with its
// placeholders expanded.
type usageExportSettings struct {
	on            bool
	url           string
	headers       string // name=value lines, sorted: part of the backend's key
	interval      time.Duration
	granularity   string
	settle        time.Duration
	lookback      time.Duration
	batch         int
	sink          string
	source        string
	subject       string
	timeout       time.Duration
	allowLoopback bool
}

// settings checks the configuration and expands its placeholders.
func (u *UsageExportConfig) settings() (usageExportSettings, error) {
	if u == nil {
		return usageExportSettings{}, nil
	}
	repl := caddy.NewReplacer()
	s := usageExportSettings{on: true, url: repl.ReplaceAll(u.URL, ""), interval: time.Duration(u.Interval),
		granularity: u.Granularity, settle: time.Duration(u.Settle), lookback: time.Duration(u.Lookback), batch: u.Batch,
		sink: u.Sink, source: u.Source, subject: u.Subject, timeout: time.Duration(u.Timeout), allowLoopback: u.AllowLoopback}
	if err := harden.CheckOutboundURL(s.url); err != nil {
		return s, fmt.Errorf("usage_export: %w", err)
	}
	if s.granularity != "" && s.granularity != "minute" && s.granularity != "hour" {
		return s, fmt.Errorf("usage_export: granularity must be minute or hour, got %q", s.granularity)
	}
	if s.subject != "" && !slices.Contains(usageexport.Subjects, s.subject) {
		return s, fmt.Errorf("usage_export: subject must be one of %s, got %q", strings.Join(usageexport.Subjects, ", "), s.subject)
	}
	var lines []string
	for k, v := range u.Headers {
		lines = append(lines, k+"="+repl.ReplaceAll(v, ""))
	}
	sort.Strings(lines)
	s.headers = strings.Join(lines, "\n")
	return s, nil
}

func (s usageExportSettings) headerMap() map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(s.headers, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			out[k] = v
		}
	}
	return out
}

// startUsageExport runs the exporter on a pool of its own (two
// connections: a request to a slow receiver holds one).
func (b *backend) startUsageExport(runCtx context.Context, workers *sync.WaitGroup, databaseURL string,
	s usageExportSettings, log *zap.Logger) error {
	if !s.on {
		return nil
	}
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("parse database_url: %w", err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["application_name"] = "queengate-usage-export"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return fmt.Errorf("create usage export database pool: %w", err)
	}
	b.exportPool = pool
	e := usageexport.New(usageexport.Config{Pool: pool, Sink: s.sink, URL: s.url, Headers: s.headerMap(),
		Interval: s.interval, Granularity: s.granularity, Settle: s.settle, Lookback: s.lookback, Batch: s.batch,
		Source: s.source, Subject: s.subject, Timeout: s.timeout, AllowLoopback: s.allowLoopback, Log: log.Named("usage_export")})
	workers.Go(func() { e.Run(runCtx) })
	return nil
}

func (b *backend) closeExportPool() {
	if b.exportPool != nil {
		b.exportPool.Close()
	}
}
