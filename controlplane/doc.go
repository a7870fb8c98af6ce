// Package controlplane is what the `caddy queen …` operator commands do:
// plain functions that provision and inspect cells, tenants, clusters, plans,
// API keys, users and usage through the queen_proxy control-plane SQL
// functions, and the formatters that print their results as aligned tables,
// CSV or JSON. It does not import Caddy.
//
// Every function takes a context, a DB (a pgx pool, connection or
// transaction) and typed arguments, and returns a typed result or an *Error
// whose Kind says how the command failed: bad input, something unknown,
// a name already taken, a grant across tenants, an object in the wrong
// state, or a database that could not be reached. Objects are named the way
// operators name them: tenants, clusters and cells by slug (or id), plans by
// code, users by e-mail, API keys by id.
//
// Mutations go through the SQL functions of the migrations package, which
// audit them and tell every gateway to drop what it cached. The few
// operations the schema has no function for (cells, plans, moving a cluster)
// are plain statements that send the same invalidation themselves.
package controlplane
