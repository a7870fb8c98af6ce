package caddymodule

import (
	"context"
	"net"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/queengate/queengate/internal/harden"
)

// DefaultPreauthConns is how many connections that have not authenticated
// one client address may hold open to a server hosting a queen_gateway.
const DefaultPreauthConns = 256

// preauthCounters holds the counter of each http server that hosts a
// queen_gateway, so that its connections are counted once however many
// gateways it hosts; a server's entry goes with its gateways' Cleanup.
var preauthCounters sync.Map // *caddyhttp.Server -> *harden.PreauthConns

type preauthConnKey struct{}

// countPreauthConns makes the server being provisioned count, per client
// address, its connections on which nothing has authenticated yet, and
// close the oldest of them past perAddress as new ones are accepted. It returns the server
// (nil outside one).
func countPreauthConns(ctx caddy.Context, perAddress int) *caddyhttp.Server {
	srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil {
		return nil
	}
	counter := harden.NewPreauthConns(perAddress)
	if _, loaded := preauthCounters.LoadOrStore(srv, counter); loaded {
		return srv
	}
	srv.RegisterConnContext(func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, preauthConnKey{}, counter.Admit(c))
	})
	return srv
}

// preauthConn is the counted connection a request came on (nil when it is
// not counted), whose Authenticated the pipeline calls once a request on
// it authenticated.
func preauthConn(ctx context.Context) *harden.PreauthConn {
	pc, _ := ctx.Value(preauthConnKey{}).(*harden.PreauthConn)
	return pc
}

// Cleanup forgets the server's counter; the server goes with this
// configuration.
func (g *Gateway) Cleanup() error {
	if g.server != nil {
		preauthCounters.Delete(g.server)
	}
	return nil
}

var _ caddy.CleanerUpper = (*Gateway)(nil)
