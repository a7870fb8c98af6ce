package tenancy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/uuidtext"
)

// InvalidationChannel is the PostgreSQL channel the control-plane SQL
// functions notify, with a cluster id as the payload, whenever something a
// gateway caches about that cluster changes.
const InvalidationChannel = "queen_proxy_inval"

// NilUUID as an invalidation payload means "not one cluster": a session was
// revoked, a user's sessions were ended or an operator bit changed, and
// what is cached about users (revocations, operator bits) must be dropped.
const NilUUID = "00000000-0000-0000-0000-000000000000"

// InvalidationListener holds one dedicated database connection (not from a
// pool, and not through a transaction pooler) listening on
// InvalidationChannel, and reconnects with backoff when it drops.
type InvalidationListener struct {
	// ConnString is the database to listen on.
	ConnString string
	// OnCluster is called with the id of every cluster that changed.
	OnCluster func(clusterID string)
	// OnConnected is called after every successful LISTEN. Notifications
	// sent while no listener was connected are lost, so this is where
	// everything cached must be dropped.
	OnConnected func()
	// OnSessionRevoked is called for the nil-uuid payload (a user's
	// standing changed: see NilUUID); may be nil.
	OnSessionRevoked func()
	Log              *zap.Logger

	readyOnce sync.Once
	ready     chan struct{}
	connected atomic.Bool
}

const (
	minListenBackoff = time.Second
	maxListenBackoff = 30 * time.Second
	// A session that lasted this long was healthy: the next reconnect starts
	// again from the shortest backoff.
	healthyListenSession = 10 * time.Second
)

// Ready is closed once the first LISTEN has succeeded.
func (l *InvalidationListener) Ready() <-chan struct{} {
	l.readyOnce.Do(func() { l.ready = make(chan struct{}) })
	return l.ready
}

// Connected reports whether the listener currently holds a live LISTEN.
func (l *InvalidationListener) Connected() bool { return l.connected.Load() }

// Run listens until ctx is done.
func (l *InvalidationListener) Run(ctx context.Context) {
	l.Ready()
	log := l.Log
	if log == nil {
		log = zap.NewNop()
	}
	backoff := minListenBackoff
	for ctx.Err() == nil {
		started := time.Now()
		err := l.listenOnce(ctx)
		l.connected.Store(false)
		if ctx.Err() != nil {
			return
		}
		if time.Since(started) >= healthyListenSession {
			backoff = minListenBackoff
		}
		log.Warn("cache invalidation listener disconnected; cached clusters expire by TTL until it reconnects",
			zap.Error(err), zap.Duration("retry_in", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxListenBackoff)
	}
}

func (l *InvalidationListener) listenOnce(ctx context.Context) error {
	cfg, err := pgx.ParseConfig(l.ConnString)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	cfg.RuntimeParams["application_name"] = "queengate-listen"
	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(connectCtx, cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+InvalidationChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	l.connected.Store(true)
	if l.OnConnected != nil {
		l.OnConnected()
	}
	select {
	case <-l.ready:
	default:
		close(l.ready)
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("wait for notification: %w", err)
		}
		l.dispatch(n.Payload)
	}
}

func (l *InvalidationListener) dispatch(payload string) {
	id := strings.ToLower(strings.TrimSpace(payload))
	switch {
	case id == NilUUID:
		if l.OnSessionRevoked != nil {
			l.OnSessionRevoked()
		}
	case uuidtext.ValidLower(id):
		if l.OnCluster != nil {
			l.OnCluster(id)
		}
	default:
		if l.Log != nil {
			l.Log.Warn("ignoring malformed cache invalidation payload", zap.String("payload", payload))
		}
	}
}
