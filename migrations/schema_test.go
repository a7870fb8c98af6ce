package migrations

import (
	"sort"
	"strings"
	"testing"
)

// schemaContract is the queen_proxy column contract: table, column, type,
// nullability (NN = NOT NULL) and default ("-" for none).
const schemaContract = `
tenants id uuid NN public.gen_random_uuid()
tenants slug text NN -
tenants name text NN -
tenants status text NN 'active'::text
tenants created_at timestamptz NN now()
tenants is_platform boolean NN false
machine_tokens id uuid NN public.gen_random_uuid()
machine_tokens name text NN -
machine_tokens token_hash text NN -
machine_tokens previous_hash text NULL -
machine_tokens previous_expires_at timestamptz NULL -
machine_tokens scopes text[] NN -
machine_tokens rate_per_second integer NN 10
machine_tokens burst integer NN 50
machine_tokens created_at timestamptz NN now()
machine_tokens last_used_at timestamptz NULL -
machine_tokens expires_at timestamptz NULL -
machine_tokens revoked_at timestamptz NULL -
provision_replays idempotency_key text NN -
provision_replays token_id uuid NN -
provision_replays request_hash text NN -
provision_replays status integer NN -
provision_replays body text NN -
provision_replays created_at timestamptz NN now()
users id uuid NN public.gen_random_uuid()
users tenant_id uuid NN -
users email text NN -
users password_hash text NULL -
users created_at timestamptz NN now()
users is_operator boolean NN false
users name text NULL -
users last_login_at timestamptz NULL -
users sessions_ended_at timestamptz NULL -
users created_from text NN 'control_plane'::text
users created_by uuid NULL -
users email_verified_at timestamptz NULL -
identities id uuid NN public.gen_random_uuid()
identities user_id uuid NN -
identities provider text NN -
identities provider_id text NN -
identities email text NN -
identities verified boolean NN false
identities created_at timestamptz NULL now()
plans id uuid NN public.gen_random_uuid()
plans code text NN -
plans cell_class text NN -
plans max_req_per_sec integer NULL -
plans req_burst integer NULL -
plans max_msgs_per_sec integer NULL -
plans msgs_burst integer NULL -
plans max_queues integer NULL -
plans max_partitions_per_queue integer NULL -
plans max_parked_pops integer NULL -
plans max_payload_bytes integer NULL -
plans max_batch_items integer NULL -
plans max_retained_bytes bigint NULL -
plans max_retention_seconds integer NULL -
plans monthly_msgs_quota bigint NULL -
plans features jsonb NN '{"kv": true, "timers": true, "ephemeral": true}'::jsonb
plans created_at timestamptz NULL now()
cells id uuid NN public.gen_random_uuid()
cells slug text NN -
cells region text NN -
cells base_url text NN -
cells class text NN -
cells capacity_slots integer NN 0
cells used_slots integer NN 0
cells broker_version text NULL -
cells status text NN 'active'::text
cells cell_secret text NULL -
cells created_at timestamptz NULL now()
cells tenant_scoping text NN 'unknown'::text
cells tenant_scoping_checked_at timestamptz NULL -
cells tenant_scoping_detail text NULL -
cells tenancy_stated text NN 'probe'::text
cells keeper_residue jsonb NULL -
cells grants text NN 'verify'::text
cells storage_reporting text NN 'unknown'::text
clusters id uuid NN public.gen_random_uuid()
clusters tenant_id uuid NN -
clusters cell_id uuid NN -
clusters plan_id uuid NN -
clusters slug text NN -
clusters broker_tenant_uuid uuid NN public.gen_random_uuid()
clusters status text NN 'active'::text
clusters limit_overrides jsonb NN '{}'::jsonb
clusters created_at timestamptz NULL now()
clusters placed_at timestamptz NN now()
cluster_roles user_id uuid NN -
cluster_roles cluster_id uuid NN -
cluster_roles role text NN -
cluster_roles created_at timestamptz NULL now()
api_keys id uuid NN public.gen_random_uuid()
api_keys cluster_id uuid NN -
api_keys name text NN -
api_keys key_hash text NN -
api_keys scopes text[] NN '{}'::text[]
api_keys created_by uuid NULL -
api_keys created_at timestamptz NULL now()
api_keys last_used_at timestamptz NULL -
api_keys revoked_at timestamptz NULL -
api_keys expires_at timestamptz NULL -
meter_batches batch_id text NN -
meter_batches row_count integer NN 0
meter_batches applied_at timestamptz NN now()
gateway_leases group_name text NN -
gateway_leases holder text NN -
gateway_leases epoch bigint NN 1
gateway_leases acquired_at timestamptz NN now()
gateway_leases renewed_at timestamptz NN now()
gateway_leases expires_at timestamptz NN -
gateway_leases holder_peer_url text NN ''::text
gateway_group_cells cell_slug text NN -
gateway_group_cells group_name text NN -
gateway_group_cells claimed_by text NN ''::text
gateway_group_cells claimed_at timestamptz NN now()
gateway_group_cells stated_at timestamptz NN now()
gateway_instances id uuid NN -
gateway_instances name text NN -
gateway_instances started_at timestamptz NN now()
gateway_instances heartbeat_at timestamptz NN now()
cluster_drains cluster_id uuid NN -
cluster_drains cell_id uuid NN -
cluster_drains drain_id uuid NN -
cluster_drains reason text NN -
cluster_drains started_at timestamptz NN now()
cluster_drain_acks drain_id uuid NN -
cluster_drain_acks gateway_id uuid NN -
cluster_drain_acks acked_at timestamptz NN now()
quota_announcements cluster_id uuid NN -
quota_announcements month text NN -
quota_announcements kind text NN -
quota_announcements announced_at timestamptz NN now()
queues id uuid NN public.gen_random_uuid()
queues cluster_id uuid NN -
queues name text NN -
queues partitions_count integer NN 0
queues created_at timestamptz NULL now()
queues deleted_at timestamptz NULL -
usage_minutes cluster_id uuid NN -
usage_minutes minute timestamptz NN -
usage_minutes op_class text NN -
usage_minutes msgs bigint NN 0
usage_minutes reqs bigint NN 0
usage_minutes bytes_in bigint NN 0
usage_minutes bytes_out bigint NN 0
usage_minutes unanswered_msgs bigint NN 0
usage_days cluster_id uuid NN -
usage_days day date NN -
usage_days op_class text NN -
usage_days msgs bigint NN 0
usage_days reqs bigint NN 0
usage_days bytes_in bigint NN 0
usage_days bytes_out bigint NN 0
usage_days unanswered_msgs bigint NN 0
usage_rollup_pending day date NN -
usage_rollup_state singleton boolean NN true
usage_rollup_state rolled_through date NULL -
usage_rollup_state rolled_at timestamptz NULL -
usage_rollup_state pruned_before date NULL -
request_minutes cluster_id uuid NN -
request_minutes minute timestamptz NN -
request_minutes key_id text NN ''::text
request_minutes outcome text NN -
request_minutes reqs bigint NN 0
operations id uuid NN public.gen_random_uuid()
operations tenant_id uuid NN -
operations cluster_id uuid NULL -
operations actor text NN -
operations actor_id uuid NULL -
operations action text NN -
operations target text NULL -
operations meta jsonb NN '{}'::jsonb
operations at timestamptz NN now()
revoked_tokens jti text NN -
revoked_tokens expires_at timestamptz NN -
outbox id uuid NN public.gen_random_uuid()
outbox kind text NN -
outbox payload jsonb NN -
outbox created_at timestamptz NULL now()
outbox consumed_at timestamptz NULL -
email_tokens id uuid NN public.gen_random_uuid()
email_tokens purpose text NN -
email_tokens token_hash bytea NN -
email_tokens email text NN -
email_tokens user_id uuid NULL -
email_tokens tenant_id uuid NULL -
email_tokens cluster_id uuid NULL -
email_tokens role text NULL -
email_tokens created_by uuid NULL -
email_tokens created_at timestamptz NN clock_timestamp()
email_tokens expires_at timestamptz NN -
email_tokens used_at timestamptz NULL -
email_tokens revoked_at timestamptz NULL -
webhook_endpoints id uuid NN public.gen_random_uuid()
webhook_endpoints name text NN -
webhook_endpoints url text NN -
webhook_endpoints events text[] NN '{}'::text[]
webhook_endpoints secret text NN -
webhook_endpoints previous_secret text NULL -
webhook_endpoints previous_until timestamptz NULL -
webhook_endpoints status text NN 'active'::text
webhook_endpoints disabled_reason text NULL -
webhook_endpoints failing_since timestamptz NULL -
webhook_endpoints created_at timestamptz NN now()
webhook_endpoints updated_at timestamptz NN now()
webhook_deliveries seq bigint NN nextval('queen_proxy.webhook_deliveries_seq_seq'::regclass)
webhook_deliveries endpoint_id uuid NN -
webhook_deliveries event_id uuid NN -
webhook_deliveries created_at timestamptz NN now()
webhook_deliveries attempts integer NN 0
webhook_deliveries next_attempt_at timestamptz NN now()
webhook_deliveries delivered_at timestamptz NULL -
webhook_deliveries replay boolean NN false
webhook_attempts id bigint NN nextval('queen_proxy.webhook_attempts_id_seq'::regclass)
webhook_attempts delivery_seq bigint NN -
webhook_attempts endpoint_id uuid NN -
webhook_attempts at timestamptz NN now()
webhook_attempts gateway text NN -
webhook_attempts status integer NULL -
webhook_attempts latency_ms integer NN -
webhook_attempts error text NULL -
key_expiry_notices key_id uuid NN -
key_expiry_notices expires_at timestamptz NN -
quota_clearances cluster_id uuid NN -
quota_clearances month text NN -
quota_clearances cleared_at timestamptz NN now()
usage_export_sinks sink text NN -
usage_export_sinks start_at timestamptz NN -
usage_export_ledger sink text NN -
usage_export_ledger cluster_id uuid NN -
usage_export_ledger minute timestamptz NN -
usage_export_ledger op_class text NN -
usage_export_ledger msgs bigint NN -
usage_export_ledger reqs bigint NN -
usage_export_ledger bytes_in bigint NN -
usage_export_ledger bytes_out bigint NN -
usage_export_ledger unanswered_msgs bigint NN -
usage_export_events seq bigint NN nextval('queen_proxy.usage_export_events_seq_seq'::regclass)
usage_export_events sink text NN -
usage_export_events id text NN -
usage_export_events cluster_id uuid NN -
usage_export_events cluster_slug text NN -
usage_export_events tenant_id uuid NN -
usage_export_events tenant_slug text NN -
usage_export_events period_start timestamptz NN -
usage_export_events period_end timestamptz NN -
usage_export_events op_class text NN -
usage_export_events msgs bigint NN -
usage_export_events reqs bigint NN -
usage_export_events bytes_in bigint NN -
usage_export_events bytes_out bigint NN -
usage_export_events unanswered_msgs bigint NN -
usage_export_events created_at timestamptz NN now()
usage_export_events sent_at timestamptz NULL -
schema_migrations name text NN -
schema_migrations applied_at timestamptz NN now()
`

func TestSchemaColumns(t *testing.T) {
	pool := db(t)
	rows, err := pool.Query(ctxT(t), `
		SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
		       CASE WHEN a.attnotnull THEN 'NN' ELSE 'NULL' END,
		       coalesce(pg_get_expr(d.adbin, d.adrelid), '-')
		  FROM pg_attribute a
		  JOIN pg_class c ON c.oid = a.attrelid AND c.relkind IN ('r', 'p') AND NOT c.relispartition
		  JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'queen_proxy'
		  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		 WHERE a.attnum > 0 AND NOT a.attisdropped`)
	if err != nil {
		t.Fatal(err)
	}
	short := strings.NewReplacer("timestamp with time zone", "timestamptz")
	got := map[string]bool{}
	for rows.Next() {
		var table, col, typ, null, def string
		if err := rows.Scan(&table, &col, &typ, &null, &def); err != nil {
			t.Fatal(err)
		}
		got[strings.Join([]string{table, col, short.Replace(typ), null, def}, " ")] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(schemaContract), "\n") {
		want[line] = true
	}
	diff(t, "column", got, want)
}

// diff reports entries missing from got and unexpected entries in got.
func diff(t *testing.T, what string, got, want map[string]bool) {
	t.Helper()
	var missing, extra []string
	for w := range want {
		if !got[w] {
			missing = append(missing, w)
		}
	}
	for g := range got {
		if !want[g] {
			extra = append(extra, g)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	for _, m := range missing {
		t.Errorf("missing %s: %s", what, m)
	}
	for _, e := range extra {
		t.Errorf("unexpected %s: %s", what, e)
	}
}

func TestSchemaForeignKeys(t *testing.T) {
	pool := db(t)
	// table.column -> referenced table and ON DELETE action
	// (a = no action, r = restrict, c = cascade, n = set null).
	want := map[string]bool{
		"users.tenant_id tenants c":                          true,
		"identities.user_id users c":                         true,
		"clusters.tenant_id tenants c":                       true,
		"clusters.cell_id cells r":                           true,
		"clusters.plan_id plans r":                           true,
		"cluster_roles.user_id users c":                      true,
		"cluster_roles.cluster_id clusters c":                true,
		"api_keys.cluster_id clusters c":                     true,
		"quota_announcements.cluster_id clusters c":          true,
		"api_keys.created_by users n":                        true,
		"users.created_by users n":                           true,
		"queues.cluster_id clusters c":                       true,
		"usage_minutes.cluster_id clusters c":                true,
		"usage_days.cluster_id clusters c":                   true,
		"request_minutes.cluster_id clusters c":              true,
		"operations.tenant_id tenants a":                     true,
		"operations.cluster_id clusters n":                   true,
		"cluster_drains.cluster_id clusters c":               true,
		"cluster_drain_acks.drain_id cluster_drains c":       true,
		"cluster_drain_acks.gateway_id gateway_instances c":  true,
		"email_tokens.user_id users c":                       true,
		"email_tokens.tenant_id tenants c":                   true,
		"email_tokens.cluster_id clusters c":                 true,
		"email_tokens.created_by users n":                    true,
		"provision_replays.token_id machine_tokens c":        true,
		"webhook_deliveries.endpoint_id webhook_endpoints c": true,
		"webhook_deliveries.event_id outbox c":               true,
		"webhook_attempts.delivery_seq webhook_deliveries c": true,
		"webhook_attempts.endpoint_id webhook_endpoints c":   true,
		"key_expiry_notices.key_id api_keys c":               true,
		"quota_clearances.cluster_id clusters c":             true,
		"usage_export_ledger.sink usage_export_sinks c":      true,
		"usage_export_events.sink usage_export_sinks c":      true,
	}
	rows, err := pool.Query(ctxT(t), `
		SELECT src.relname || '.' || a.attname || ' ' || dst.relname || ' ' || con.confdeltype::text
		  FROM pg_constraint con
		  JOIN pg_class src ON src.oid = con.conrelid
		  JOIN pg_class dst ON dst.oid = con.confrelid
		  JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = con.conkey[1]
		 WHERE con.contype = 'f' AND con.connamespace = 'queen_proxy'::regnamespace
		   AND con.conparentid = 0 AND NOT src.relispartition`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got[s] = true
	}
	diff(t, "foreign key", got, want)
}

func TestSchemaIndexes(t *testing.T) {
	pool := db(t)
	for _, idx := range []struct{ name, contains string }{
		{"idx_users_tenant", "(tenant_id)"},
		{"idx_users_operator", "(email) WHERE is_operator"},
		{"idx_users_console_never_signed_in", "(created_at) WHERE ((created_from = 'console'::text) AND (last_login_at IS NULL))"},
		{"idx_identities_user", "(user_id)"},
		{"idx_clusters_tenant", "(tenant_id)"},
		{"idx_clusters_cell", "(cell_id)"},
		{"idx_cluster_roles_cluster", "(cluster_id)"},
		{"idx_api_keys_cluster", "(cluster_id)"},
		{"uq_queues_cluster_name_live", "UNIQUE INDEX uq_queues_cluster_name_live ON queen_proxy.queues USING btree (cluster_id, name) WHERE (deleted_at IS NULL)"},
		{"idx_usage_minutes_minute", "(minute)"},
		{"idx_usage_days_day", "(day)"},
		{"idx_request_minutes_minute", "(minute)"},
		{"idx_usage_minutes_cluster_minute", "(cluster_id, minute) INCLUDE (op_class, msgs, reqs, bytes_in, bytes_out)"},
		{"idx_request_minutes_cluster_minute", "(cluster_id, minute) INCLUDE (key_id, outcome, reqs)"},
		{"idx_operations_tenant_at", "(tenant_id, at DESC)"},
		{"idx_operations_cluster_at", "(cluster_id, at DESC) WHERE (cluster_id IS NOT NULL)"},
		{"idx_revoked_tokens_expires_at", "(expires_at)"},
		{"idx_outbox_pending", "(created_at) WHERE (consumed_at IS NULL)"},
		{"idx_gateway_group_cells_group", "(group_name)"},
	} {
		var def string
		err := pool.QueryRow(ctxT(t), "SELECT indexdef FROM pg_indexes WHERE schemaname = 'queen_proxy' AND indexname = $1", idx.name).Scan(&def)
		if err != nil {
			t.Errorf("index %s: %v", idx.name, err)
			continue
		}
		if !strings.Contains(def, idx.contains) {
			t.Errorf("index %s = %q, want it to contain %q", idx.name, def, idx.contains)
		}
	}
	// An index made on a partitioned parent is made on each partition,
	// including days made after the migration; a partition without it would
	// send one cluster's reads back to the fleet's minutes.
	if _, err := pool.Exec(ctxT(t), "SELECT queen_proxy.usage_partitions_ensure(current_date + 40, current_date + 41)"); err != nil {
		t.Fatalf("usage_partitions_ensure: %v", err)
	}
	for table, idx := range map[string]string{"usage_minutes": "idx_usage_minutes_cluster_minute", "request_minutes": "idx_request_minutes_cluster_minute"} {
		parts := scalar[int](t, pool, `SELECT count(*) FROM queen_proxy.usage_partitions($1)`, table)
		indexed := scalar[int](t, pool, `SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass('queen_proxy.' || $1)`, idx)
		if parts < 2 || indexed != parts {
			t.Errorf("%s: %d of %d partitions have %s", table, indexed, parts, idx)
		}
	}
	// Unique constraints.
	for _, u := range []string{"tenants (slug)", "users (email)", "identities (provider, provider_id)", "plans (code)",
		"cells (slug)", "clusters (slug)", "api_keys (key_hash)"} {
		table, cols, _ := strings.Cut(u, " ")
		n := scalar[int](t, pool, `SELECT count(*) FROM pg_indexes WHERE schemaname = 'queen_proxy' AND tablename = $1
			AND indexdef LIKE 'CREATE UNIQUE INDEX % USING btree ' || $2`, table, cols)
		if n != 1 {
			t.Errorf("no unique index on %s", u)
		}
	}
	// Primary keys.
	for table, cols := range map[string]string{
		"cluster_roles": "(user_id, cluster_id)", "usage_minutes": "(cluster_id, minute, op_class)",
		"usage_days": "(cluster_id, day, op_class)", "revoked_tokens": "(jti)", "schema_migrations": "(name)",
		"request_minutes": "(cluster_id, minute, key_id, outcome)", "gateway_group_cells": "(cell_slug)", "usage_rollup_pending": "(day)", "usage_rollup_state": "(singleton)",
	} {
		def := scalar[string](t, pool, `SELECT pg_get_constraintdef(oid) FROM pg_constraint
			WHERE contype = 'p' AND conrelid = ('queen_proxy.' || $1)::regclass`, table)
		if def != "PRIMARY KEY "+cols {
			t.Errorf("%s primary key = %q, want %s", table, def, cols)
		}
	}
}

func TestSchemaChecks(t *testing.T) {
	pool := db(t)
	tenant, _ := newTenant(t, pool)
	cell := newCell(t, pool)
	cluster := newCluster(t, pool, tenant, cell)
	for _, c := range []struct{ name, sql string }{
		{"tenant slug not a DNS label", "INSERT INTO queen_proxy.tenants (slug, name) VALUES ('-bad', 'x')"},
		{"tenant slug upper case", "INSERT INTO queen_proxy.tenants (slug, name) VALUES ('Bad', 'x')"},
		{"tenant slug too long", "INSERT INTO queen_proxy.tenants (slug, name) VALUES (repeat('a', 64), 'x')"},
		{"tenant name blank", "INSERT INTO queen_proxy.tenants (slug, name) VALUES ('blank-name', '  ')"},
		{"tenant status", "INSERT INTO queen_proxy.tenants (slug, name, status) VALUES ('st', 'x', 'gone')"},
		{"identity provider", "INSERT INTO queen_proxy.identities (user_id, provider, provider_id, email) SELECT id, 'gitlab', '1', email FROM queen_proxy.users LIMIT 1"},
		{"plan code", "INSERT INTO queen_proxy.plans (code, cell_class) VALUES ('9x', 'shared')"},
		{"plan cell class", "INSERT INTO queen_proxy.plans (code, cell_class) VALUES ('px', 'huge')"},
		{"plan limit zero", "INSERT INTO queen_proxy.plans (code, cell_class, max_queues) VALUES ('pz', 'shared', 0)"},
		{"plan retained bytes negative", "INSERT INTO queen_proxy.plans (code, cell_class, max_retained_bytes) VALUES ('pn', 'shared', -1)"},
		{"cell blank region", "INSERT INTO queen_proxy.cells (slug, region, base_url, class) VALUES ('cx', ' ', 'http://x', 'shared')"},
		{"cell class", "INSERT INTO queen_proxy.cells (slug, region, base_url, class) VALUES ('cy', 'r', 'http://x', 'big')"},
		// used_slots is the trigger's (019): a written value is replaced, so the CHECK is seen on capacity_slots.
		{"cell negative slots", "INSERT INTO queen_proxy.cells (slug, region, base_url, class, capacity_slots) VALUES ('cz', 'r', 'http://x', 'shared', -1)"},
		{"cell status", "INSERT INTO queen_proxy.cells (slug, region, base_url, class, status) VALUES ('cw', 'r', 'http://x', 'shared', 'up')"},
		{"cluster status", "UPDATE queen_proxy.clusters SET status = 'grace' WHERE id = '" + cluster + "'"},
		{"cluster slug", "UPDATE queen_proxy.clusters SET slug = 'a_b' WHERE id = '" + cluster + "'"},
		{"role", "INSERT INTO queen_proxy.cluster_roles (user_id, cluster_id, role) SELECT id, '" + cluster + "', 'owner' FROM queen_proxy.users LIMIT 1"},
		{"key hash upper case", "INSERT INTO queen_proxy.api_keys (cluster_id, name, key_hash) VALUES ('" + cluster + "', 'k', repeat('A', 64))"},
		{"key hash short", "INSERT INTO queen_proxy.api_keys (cluster_id, name, key_hash) VALUES ('" + cluster + "', 'k', repeat('a', 63))"},
		{"key scope", "INSERT INTO queen_proxy.api_keys (cluster_id, name, key_hash, scopes) VALUES ('" + cluster + "', 'k', repeat('a', 64), '{write}')"},
		{"queue partitions negative", "INSERT INTO queen_proxy.queues (cluster_id, name, partitions_count) VALUES ('" + cluster + "', 'q', -1)"},
		{"usage op class", "INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class) VALUES ('" + cluster + "', now(), 'pop')"},
		{"usage negative msgs", "INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs) VALUES ('" + cluster + "', now(), 'push', -1)"},
		{"usage_days negative bytes", "INSERT INTO queen_proxy.usage_days (cluster_id, day, op_class, bytes_out) VALUES ('" + cluster + "', current_date, 'push', -1)"},
		{"request outcome", "INSERT INTO queen_proxy.request_minutes (cluster_id, minute, outcome) VALUES ('" + cluster + "', date_trunc('minute', now()), '401')"},
		{"request minute not whole", "INSERT INTO queen_proxy.request_minutes (cluster_id, minute, outcome) VALUES ('" + cluster + "', date_trunc('minute', now()) + interval '1 second', 'ok')"},
		{"request negative reqs", "INSERT INTO queen_proxy.request_minutes (cluster_id, minute, outcome, reqs) VALUES ('" + cluster + "', date_trunc('minute', now()), 'ok', -1)"},
		{"operation actor", "INSERT INTO queen_proxy.operations (tenant_id, actor, action) VALUES ('" + tenant + "', 'robot', 'x')"},
		{"operation blank action", "INSERT INTO queen_proxy.operations (tenant_id, actor, action) VALUES ('" + tenant + "', 'system', '')"},
		{"outbox blank kind", "INSERT INTO queen_proxy.outbox (kind, payload) VALUES (' ', '{}')"},
		{"user name blank", "UPDATE queen_proxy.users SET name = ' ' WHERE tenant_id = '" + tenant + "'"},
		{"user name too long", "UPDATE queen_proxy.users SET name = repeat('n', 161) WHERE tenant_id = '" + tenant + "'"},
		{"user origin", "UPDATE queen_proxy.users SET created_from = 'invited' WHERE tenant_id = '" + tenant + "'"},
		{"email link purpose", "INSERT INTO queen_proxy.email_tokens (purpose, token_hash, email, user_id, expires_at) SELECT 'login', sha256('x'), email, id, now() FROM queen_proxy.users WHERE tenant_id = '" + tenant + "' LIMIT 1"},
		{"email link hash length", "INSERT INTO queen_proxy.email_tokens (purpose, token_hash, email, user_id, expires_at) SELECT 'password_reset', '\\x00', email, id, now() FROM queen_proxy.users WHERE tenant_id = '" + tenant + "' LIMIT 1"},
		{"email invitation without cluster", "INSERT INTO queen_proxy.email_tokens (purpose, token_hash, email, tenant_id, role, expires_at) VALUES ('invitation', sha256('y'), 'x@example.com', '" + tenant + "', 'viewer', now())"},
		{"email reset without user", "INSERT INTO queen_proxy.email_tokens (purpose, token_hash, email, expires_at) VALUES ('password_reset', sha256('z'), 'x@example.com', now())"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _ = newUser(t, pool, tenant)
			wantPgErr(t, callErr(t, pool, c.sql), "23514")
		})
	}
	// A soft-deleted queue frees its name.
	exec(t, pool, "INSERT INTO queen_proxy.queues (cluster_id, name) VALUES ($1, 'q1')", cluster)
	wantPgErr(t, callErr(t, pool, "INSERT INTO queen_proxy.queues (cluster_id, name) VALUES ($1, 'q1')", cluster), "23505")
	exec(t, pool, "UPDATE queen_proxy.queues SET deleted_at = now() WHERE cluster_id = $1 AND name = 'q1'", cluster)
	exec(t, pool, "INSERT INTO queen_proxy.queues (cluster_id, name) VALUES ($1, 'q1')", cluster)
	// A 160-character name is fine.
	exec(t, pool, "UPDATE queen_proxy.users SET name = repeat('n', 160) WHERE tenant_id = $1", tenant)
}

func TestPgcryptoInPublic(t *testing.T) {
	pool := db(t)
	if s := scalar[string](t, pool, "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pgcrypto'"); s != "public" {
		t.Fatalf("pgcrypto is in schema %q, want public", s)
	}
}
