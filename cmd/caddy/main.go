// Command caddy is Caddy with its standard modules and the queengate modules,
// so that `go build ./cmd/caddy` gives the same binary xcaddy would.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/queengate/queengate/caddymodule"
	_ "github.com/queengate/queengate/queencli"
)

func main() { caddycmd.Main() }
