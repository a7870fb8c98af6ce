// Package tenancy decides who a request acts for and whether that cluster
// may be served: it finds the cluster a host or credential names (clusters,
// tenants, cells, plans, API keys, users and sessions from the queen_proxy
// control-plane database, cached near the request path and invalidated
// when they change), classifies the route into the scope a key needs (a
// KV batch inside a facade's reserved key space is a consume, and whether
// a mixed batch adds data decides its push block: batch.go), refuses the
// names reserved for the isolation probe (reservedname.go), and judges the
// cluster's cell (whether its broker keeps tenants apart, which
// cluster keeps an unscoped cell, the grants a plan needs there, drains and
// which cells this gateway fronts). It also mints what the gateway presents
// to a cell in a caller's name. Limits and billing are other packages'
// decisions; it does not import Caddy.
package tenancy
