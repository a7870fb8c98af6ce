// Package migrations holds the queen_proxy schema and its control-plane SQL
// functions as embedded, numbered SQL files, and applies them.
//
// The file names (without .sql) are the names queen_proxy records in
// queen_proxy.schema_migrations, so a database migrated by queen_proxy is
// recognised as such. Every statement is idempotent, and a changed function
// is shipped as a new file that restates it, because applied files never run
// again.
//
// The SQL functions report bad calls with RAISE EXCEPTION and a
// "function_name: reason" message, and with these SQLSTATEs: 22023
// (invalid_parameter_value) for a bad or missing argument, P0002
// (no_data_found) for an unknown tenant, cluster, plan, cell, user, key or
// grant, 23505 (unique_violation) for a slug or e-mail that is taken, 42501
// (insufficient_privilege) for a grant across tenants, and 55000
// (object_not_in_prerequisite_state) for delete_tenant on a tenant that is not
// 'deleting'.
//
// Mutating functions append an audit row through record_operation and, when
// a cluster's effective state changes, send NOTIFY on InvalidationChannel with
// the cluster id as payload (delivered at COMMIT).
package migrations

// InvalidationChannel is the LISTEN/NOTIFY channel on which the SQL functions
// announce clusters whose cached state is stale. The payload is the cluster
// id as text, nothing else.
const InvalidationChannel = "queen_proxy_inval"
