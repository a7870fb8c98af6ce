// Package queengate makes Caddy the multi-tenant gateway for the Queen
// message broker. Importing it registers every queengate Caddy module (the
// queen app, the queen_gateway handler, the queen upstream and the queen TLS
// permission) and the `caddy queen` operator commands, which is what
// `xcaddy build --with github.com/queengate/queengate` does:
//
//	import _ "github.com/queengate/queengate"
package queengate

import (
	// The Caddy modules: app, handler, upstream, TLS permission.
	_ "github.com/queengate/queengate/caddymodule"
	// The `caddy queen` command tree.
	_ "github.com/queengate/queengate/queencli"
)
