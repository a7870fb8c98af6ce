// Command caddy is Caddy with its standard modules and queengate (its
// modules and the `caddy queen` commands, registered by the module root's
// package, exactly as xcaddy's generated main imports it), so that
// `go build ./cmd/caddy` gives the same binary xcaddy would.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/queengate/queengate"
)

func main() { caddycmd.Main() }
