package caddymodule

import (
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// DefaultHeaderReadTimeout bounds how long a connection to a server that
// hosts a queen_gateway may take to send a request's head, unless the
// server sets its own (`servers { timeouts { read_header … } }`). Nothing
// is authenticated before the head is complete, so this is how long a
// connection that trickles its head holds a file descriptor without
// authenticating; Caddy's own default is a minute.
const DefaultHeaderReadTimeout = 10 * time.Second

// boundHeaderRead gives the server being provisioned DefaultHeaderReadTimeout
// when it has no read_header timeout of its own. Handlers are provisioned
// before the http app fills in its defaults, so zero here means the
// operator set none.
func boundHeaderRead(ctx caddy.Context, log *zap.Logger) {
	srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil || srv.ReadHeaderTimeout != 0 {
		return
	}
	srv.ReadHeaderTimeout = caddy.Duration(DefaultHeaderReadTimeout)
	log.Debug("request heads must arrive within the gateway's default read_header timeout",
		zap.Duration("read_header", DefaultHeaderReadTimeout))
}
