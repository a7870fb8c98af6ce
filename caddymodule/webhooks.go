package caddymodule

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/buildversion"
	"github.com/queengate/queengate/webhook"
)

// WebhooksConfig tunes the delivery of webhooks (docs/webhooks.md). Every
// gateway with a database delivers unless Off; endpoints are managed with
// `caddy queen webhook`.
type WebhooksConfig struct {
	// Off stops this gateway from delivering (others still do).
	Off bool `json:"off,omitempty"`
	// Workers is how many endpoints this gateway delivers to at once, each
	// on a connection of the webhooks' own pool. Default 4.
	Workers int `json:"workers,omitempty"`
	// Timeout bounds one attempt. Default 15s.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// RetryBase is the wait after a delivery's first failed attempt,
	// doubled after each further failure up to RetryMax. Defaults 5s, 1h.
	RetryBase caddy.Duration `json:"retry_base,omitempty"`
	RetryMax  caddy.Duration `json:"retry_max,omitempty"`
	// DisableAfter is how long an endpoint fails without a success before
	// it is disabled. Default 24h.
	DisableAfter caddy.Duration `json:"disable_after,omitempty"`
	// PollInterval is how often an idle gateway looks for due deliveries.
	// Default 1s.
	PollInterval caddy.Duration `json:"poll_interval,omitempty"`
	// KeyExpiryNotice is how long before its expiry an API key is announced
	// (api_key_expiring). Default 168h (7 days).
	KeyExpiryNotice caddy.Duration `json:"key_expiry_notice,omitempty"`
	// AllowLoopback lets endpoints on loopback addresses be called; off,
	// they are refused at connection time (see harden.OutboundAllowed).
	AllowLoopback bool `json:"allow_loopback,omitempty"`
}

func (w *WebhooksConfig) unmarshal(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		var err error
		switch opt := d.Val(); opt {
		case "off":
			if d.NextArg() {
				return d.ArgErr()
			}
			w.Off = true
		case "allow_loopback":
			if d.NextArg() {
				return d.ArgErr()
			}
			w.AllowLoopback = true
		case "workers":
			err = parseCount(d, &w.Workers)
		case "timeout":
			err = parseDuration(d, &w.Timeout)
		case "retry_base":
			err = parseDuration(d, &w.RetryBase)
		case "retry_max":
			err = parseDuration(d, &w.RetryMax)
		case "disable_after":
			err = parseDuration(d, &w.DisableAfter)
		case "poll_interval":
			err = parseDuration(d, &w.PollInterval)
		case "key_expiry_notice":
			err = parseDuration(d, &w.KeyExpiryNotice)
		default:
			return d.Errf("queen: webhooks: unknown option %q", opt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// webhookSettings is the part of backendSettings the dispatcher takes.
type webhookSettings struct {
	off           bool
	workers       int
	timeout       time.Duration
	retryBase     time.Duration
	retryMax      time.Duration
	disableAfter  time.Duration
	poll          time.Duration
	expiryNotice  time.Duration
	allowLoopback bool
}

func (w *WebhooksConfig) settings() webhookSettings {
	if w == nil {
		return webhookSettings{}
	}
	return webhookSettings{off: w.Off, workers: w.Workers, timeout: time.Duration(w.Timeout),
		retryBase: time.Duration(w.RetryBase), retryMax: time.Duration(w.RetryMax),
		disableAfter: time.Duration(w.DisableAfter), poll: time.Duration(w.PollInterval),
		expiryNotice: time.Duration(w.KeyExpiryNotice), allowLoopback: w.AllowLoopback}
}

// startWebhooks runs the dispatcher on a pool of its own: an attempt holds
// its connection (and the endpoint's lock) while the receiver answers, and
// a slow receiver must not take the connections the data plane looks keys
// up with.
func (b *backend) startWebhooks(runCtx context.Context, workers *sync.WaitGroup, databaseURL, gateway string,
	s webhookSettings, log *zap.Logger) error {
	if s.off {
		return nil
	}
	n := s.workers
	if n <= 0 {
		n = webhook.DefaultWorkers
	}
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("parse database_url: %w", err)
	}
	cfg.MaxConns = int32(n) + 1
	cfg.ConnConfig.RuntimeParams["application_name"] = "queengate-webhooks"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return fmt.Errorf("create webhook database pool: %w", err)
	}
	b.webhookPool = pool
	d := webhook.New(webhook.Config{Pool: pool, Gateway: gateway, Poll: s.poll, Timeout: s.timeout,
		RetryBase: s.retryBase, RetryMax: s.retryMax, DisableAfter: s.disableAfter, Workers: n,
		ExpiringWithin: s.expiryNotice, AllowLoopback: s.allowLoopback,
		UserAgent: "queengate-webhooks/" + buildversion.Read().Version, Log: log.Named("webhooks")})
	workers.Go(func() { d.Run(runCtx) })
	return nil
}

func (b *backend) closeWebhookPool() {
	if b.webhookPool != nil {
		b.webhookPool.Close()
	}
}
