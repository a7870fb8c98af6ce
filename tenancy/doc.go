// Package tenancy knows who a request belongs to: clusters, their tenants,
// cells, plans and API keys as stored in the queen_proxy control-plane
// database, the cluster cache that keeps them close to the request path, and
// its invalidation. It does not import Caddy.
package tenancy
