package caddymodule

import "net/http"

// webSurface is the gateway's own web surface, answered before the data
// plane: identity (/auth/*), the console API (/api/console/*), the
// operator API (/api/operator/*), the console app (/console) and the JWKS
// of the session signer. Requests it owns never reach a cell.
type webSurface interface {
	// Owns reports whether the surface answers this path.
	Owns(path string) bool
	http.Handler
}

// buildSurface returns the web surface for this handler, or nil when the
// gateway serves the data plane only.
func (g *Gateway) buildSurface() (webSurface, error) { return nil, nil }
