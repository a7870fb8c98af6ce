package caddymodule

import (
	"net/http"
	"sync"

	"github.com/queengate/queengate/internal/apierror"
)

// A produce exchange outlives its client (detach.go): a client that sends
// a push and hangs up leaves the gateway holding the push's body and an
// upstream connection until the cell answers or the upstream timeout
// passes. Without a bound, a tenant could pile these up at its request
// rate times the upstream timeout. So every produce exchange (each may
// outlive its client) holds a share of a budget while it runs, counted in
// exchanges and in the body bytes it holds, per cluster and per gateway
// process; a request that would exceed it is refused 503
// exchange_capacity before it is forwarded: nothing reaches the cell and
// nothing is billed.

// Defaults of the budget (queen block: produce_max_exchanges,
// produce_max_bytes, cluster_produce_max_exchanges,
// cluster_produce_max_bytes).
const (
	defaultProduceMaxExchanges        = 1024
	defaultProduceMaxBytes            = 256 << 20
	defaultClusterProduceMaxExchanges = 128
	defaultClusterProduceMaxBytes     = 64 << 20
)

// inflightCaps are the budget's bounds, from the configuration.
type inflightCaps struct {
	exchanges, bytes               int64
	clusterExchanges, clusterBytes int64
}

// inflightBudget counts the produce exchanges in flight in this process.
// It lives outside any configuration, so that a reload does not forget
// the exchanges the previous configuration still runs.
type inflightBudget struct {
	mu        sync.Mutex
	exchanges int64
	bytes     int64
	clusters  map[string]*inflightHeld // cluster id -> its share, while it holds one
}

type inflightHeld struct{ exchanges, bytes int64 }

var inflight = inflightBudget{clusters: map[string]*inflightHeld{}}

var (
	errGatewayExchanges = &apierror.Error{Status: http.StatusServiceUnavailable, Code: apierror.ExchangeCapacity, RetryAfter: 1,
		Message: "this gateway holds as many produce requests in flight to the cells as it allows (exchanges or body bytes); retry shortly"}
	errClusterExchanges = &apierror.Error{Status: http.StatusServiceUnavailable, Code: apierror.ExchangeCapacity, RetryAfter: 1,
		Message: "this cluster has as many produce requests in flight on this gateway as it allows (exchanges or body bytes); retry shortly"}
)

// take reserves one exchange holding n body bytes for cluster, or says
// which bound it would pass. The byte bounds apply once something is held:
// a lone exchange is never refused for its size (the size caps bound it),
// so no cap below the largest body can make a cluster unservable.
func (b *inflightBudget) take(cluster string, n int64, caps inflightCaps) *apierror.Error {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.clusters[cluster]
	var held inflightHeld
	if c != nil {
		held = *c
	}
	switch {
	case b.exchanges+1 > caps.exchanges || (b.exchanges > 0 && b.bytes+n > caps.bytes):
		return errGatewayExchanges
	case held.exchanges+1 > caps.clusterExchanges || (held.exchanges > 0 && held.bytes+n > caps.clusterBytes):
		return errClusterExchanges
	}
	if c == nil {
		c = new(inflightHeld)
		b.clusters[cluster] = c
	}
	c.exchanges++
	c.bytes += n
	b.exchanges++
	b.bytes += n
	return nil
}

// give returns what take reserved.
func (b *inflightBudget) give(cluster string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.exchanges--
	b.bytes -= n
	if c := b.clusters[cluster]; c != nil {
		c.exchanges--
		c.bytes -= n
		if c.exchanges <= 0 {
			delete(b.clusters, cluster)
		}
	}
}

// held is what the budget holds now.
func (b *inflightBudget) held() (exchanges, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.exchanges, b.bytes
}

// inflightCaps is the configured budget (the defaults where an App was
// not provisioned, as in handler tests).
func (a *App) inflightCaps() inflightCaps {
	or := func(v, def int) int64 {
		if v > 0 {
			return int64(v)
		}
		return int64(def)
	}
	return inflightCaps{exchanges: or(a.ProduceMaxExchanges, defaultProduceMaxExchanges), bytes: or(a.ProduceMaxBytes, defaultProduceMaxBytes),
		clusterExchanges: or(a.ClusterProduceMaxExchanges, defaultClusterProduceMaxExchanges),
		clusterBytes:     or(a.ClusterProduceMaxBytes, defaultClusterProduceMaxBytes)}
}

// inflightBytes is what a produce request holds while it is forwarded:
// its buffered body, else the length it announced.
func inflightBytes(r *http.Request, st *requestState) int64 {
	if st.buffered {
		return int64(len(st.body))
	}
	return max(r.ContentLength, 0)
}

// inflightHold is one request's share of the budget: taken before its
// body is read when it announced a length, and grown to what it holds
// once read (a chunked body announces none).
type inflightHold struct {
	cluster string
	bytes   int64
	taken   bool
}

// take reserves the exchange holding n bytes, or grows the reservation to
// n when it was taken for less.
func (h *inflightHold) take(cluster string, n int64, caps inflightCaps) *apierror.Error {
	if !h.taken {
		if e := inflight.take(cluster, n, caps); e != nil {
			return e
		}
		h.cluster, h.bytes, h.taken = cluster, n, true
		return nil
	}
	if n <= h.bytes {
		return nil
	}
	if e := inflight.grow(cluster, n-h.bytes, caps); e != nil {
		return e
	}
	h.bytes = n
	return nil
}

// release gives the reservation back, if one was taken.
func (h *inflightHold) release() {
	if h.taken {
		inflight.give(h.cluster, h.bytes)
		h.taken = false
	}
}

// grow adds n bytes to an exchange cluster already holds, within the
// byte bounds (which apply to it when anything else is held).
func (b *inflightBudget) grow(cluster string, n int64, caps inflightCaps) *apierror.Error {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.clusters[cluster]
	switch {
	case b.exchanges > 1 && b.bytes+n > caps.bytes:
		return errGatewayExchanges
	case c != nil && c.exchanges > 1 && c.bytes+n > caps.clusterBytes:
		return errClusterExchanges
	}
	b.bytes += n
	if c != nil {
		c.bytes += n
	}
	return nil
}
