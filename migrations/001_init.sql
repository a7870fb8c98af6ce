-- 001_init: the queen_proxy schema (tenants, users, identities, plans, cells,
-- clusters, roles, API keys, queue registry, minute usage, audit, JWT
-- deny-list, outbox). Every statement is idempotent.
--
-- Conventions: primary keys are UUIDs from public.gen_random_uuid() (pgcrypto
-- lives in schema public and is always called qualified); lifecycle columns are
-- TEXT with a CHECK list; limits are NULL (= unlimited) or > 0.

CREATE EXTENSION IF NOT EXISTS pgcrypto WITH SCHEMA public;

CREATE SCHEMA IF NOT EXISTS queen_proxy;

-- The paying organisation.
CREATE TABLE IF NOT EXISTS queen_proxy.tenants (
    id         uuid        PRIMARY KEY DEFAULT public.gen_random_uuid(),
    slug       text        NOT NULL UNIQUE
                           CHECK (slug ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    name       text        NOT NULL CHECK (btrim(name) <> ''),
    status     text        NOT NULL DEFAULT 'active'
                           CHECK (status IN ('active', 'grace', 'suspended', 'deleting')),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- A login identity; belongs to exactly one tenant; e-mail is globally unique.
CREATE TABLE IF NOT EXISTS queen_proxy.users (
    id            uuid        PRIMARY KEY DEFAULT public.gen_random_uuid(),
    tenant_id     uuid        NOT NULL REFERENCES queen_proxy.tenants (id) ON DELETE CASCADE,
    email         text        NOT NULL UNIQUE,
    password_hash text,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_users_tenant ON queen_proxy.users (tenant_id);

-- One row per identity provider linked to a user.
CREATE TABLE IF NOT EXISTS queen_proxy.identities (
    id          uuid        PRIMARY KEY DEFAULT public.gen_random_uuid(),
    user_id     uuid        NOT NULL REFERENCES queen_proxy.users (id) ON DELETE CASCADE,
    provider    text        NOT NULL CHECK (provider IN ('local', 'google', 'github')),
    provider_id text        NOT NULL,
    email       text        NOT NULL,
    verified    boolean     NOT NULL DEFAULT false,
    created_at  timestamptz DEFAULT now(),
    UNIQUE (provider, provider_id)
);
CREATE INDEX IF NOT EXISTS idx_identities_user ON queen_proxy.identities (user_id);

-- The plan catalogue: the only place raw limits live.
CREATE TABLE IF NOT EXISTS queen_proxy.plans (
    id                       uuid        PRIMARY KEY DEFAULT public.gen_random_uuid(),
    code                     text        NOT NULL UNIQUE CHECK (code ~ '^[a-z][a-z0-9-]*$'),
    cell_class               text        NOT NULL CHECK (cell_class IN ('shared', 'dedicated')),
    max_req_per_sec          integer     CHECK (max_req_per_sec > 0),
    req_burst                integer     CHECK (req_burst > 0),
    max_msgs_per_sec         integer     CHECK (max_msgs_per_sec > 0),
    msgs_burst               integer     CHECK (msgs_burst > 0),
    max_queues               integer     CHECK (max_queues > 0),
    max_partitions_per_queue integer     CHECK (max_partitions_per_queue > 0),
    max_parked_pops          integer     CHECK (max_parked_pops > 0),
    max_payload_bytes        integer     CHECK (max_payload_bytes > 0),
    max_batch_items          integer     CHECK (max_batch_items > 0),
    max_retained_bytes       bigint      CHECK (max_retained_bytes > 0),
    max_retention_seconds    integer     CHECK (max_retention_seconds > 0),
    monthly_msgs_quota       bigint      CHECK (monthly_msgs_quota > 0),
    features                 jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at               timestamptz DEFAULT now()
);

-- One physical stack (a broker and its PostgreSQL). Provisioned by operators
-- with a plain INSERT.
CREATE TABLE IF NOT EXISTS queen_proxy.cells (
    id             uuid        PRIMARY KEY DEFAULT public.gen_random_uuid(),
    slug           text        NOT NULL UNIQUE CHECK (btrim(slug) <> ''),
    region         text        NOT NULL CHECK (btrim(region) <> ''),
    base_url       text        NOT NULL CHECK (btrim(base_url) <> ''),
    class          text        NOT NULL CHECK (class IN ('shared', 'dedicated')),
    capacity_slots integer     NOT NULL DEFAULT 0 CHECK (capacity_slots >= 0),
    used_slots     integer     NOT NULL DEFAULT 0 CHECK (used_slots >= 0),
    broker_version text,
    status         text        NOT NULL DEFAULT 'active'
                               CHECK (status IN ('active', 'draining', 'dead')),
    cell_secret    text,
    created_at     timestamptz DEFAULT now()
);

-- The tenant-visible Queen: one hostname, one plan, one broker namespace.
CREATE TABLE IF NOT EXISTS queen_proxy.clusters (
    id                 uuid        PRIMARY KEY DEFAULT public.gen_random_uuid(),
    tenant_id          uuid        NOT NULL REFERENCES queen_proxy.tenants (id) ON DELETE CASCADE,
    cell_id            uuid        NOT NULL REFERENCES queen_proxy.cells (id) ON DELETE RESTRICT,
    plan_id            uuid        NOT NULL REFERENCES queen_proxy.plans (id) ON DELETE RESTRICT,
    slug               text        NOT NULL UNIQUE
                                   CHECK (slug ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    broker_tenant_uuid uuid        NOT NULL DEFAULT public.gen_random_uuid(),
    status             text        NOT NULL DEFAULT 'active'
                                   CHECK (status IN ('active', 'push_blocked', 'suspended', 'deleting')),
    limit_overrides    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at         timestamptz DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_clusters_tenant ON queen_proxy.clusters (tenant_id);
CREATE INDEX IF NOT EXISTS idx_clusters_cell ON queen_proxy.clusters (cell_id);

-- A user's role on a cluster. User and cluster must share a tenant; the
-- functions enforce it.
CREATE TABLE IF NOT EXISTS queen_proxy.cluster_roles (
    user_id    uuid        REFERENCES queen_proxy.users (id) ON DELETE CASCADE,
    cluster_id uuid        REFERENCES queen_proxy.clusters (id) ON DELETE CASCADE,
    role       text        NOT NULL CHECK (role IN ('admin', 'producer', 'consumer', 'viewer')),
    created_at timestamptz DEFAULT now(),
    PRIMARY KEY (user_id, cluster_id)
);
CREATE INDEX IF NOT EXISTS idx_cluster_roles_cluster ON queen_proxy.cluster_roles (cluster_id);

-- Cluster-scoped credentials; only the sha256 hex of a key is stored.
CREATE TABLE IF NOT EXISTS queen_proxy.api_keys (
    id           uuid        PRIMARY KEY DEFAULT public.gen_random_uuid(),
    cluster_id   uuid        NOT NULL REFERENCES queen_proxy.clusters (id) ON DELETE CASCADE,
    name         text        NOT NULL CHECK (btrim(name) <> ''),
    key_hash     text        NOT NULL UNIQUE CHECK (key_hash ~ '^[0-9a-f]{64}$'),
    scopes       text[]      NOT NULL DEFAULT '{}'::text[]
                             CHECK (scopes <@ ARRAY['produce', 'consume', 'admin', 'read']::text[]),
    created_by   uuid        REFERENCES queen_proxy.users (id) ON DELETE SET NULL,
    created_at   timestamptz DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);
CREATE INDEX IF NOT EXISTS idx_api_keys_cluster ON queen_proxy.api_keys (cluster_id);

-- Admission registry: a cache of the broker's queues per cluster.
CREATE TABLE IF NOT EXISTS queen_proxy.queues (
    id               uuid        PRIMARY KEY DEFAULT public.gen_random_uuid(),
    cluster_id       uuid        NOT NULL REFERENCES queen_proxy.clusters (id) ON DELETE CASCADE,
    name             text        NOT NULL CHECK (btrim(name) <> ''),
    partitions_count integer     NOT NULL DEFAULT 0 CHECK (partitions_count >= 0),
    created_at       timestamptz DEFAULT now(),
    deleted_at       timestamptz
);
CREATE UNIQUE INDEX IF NOT EXISTS uq_queues_cluster_name_live
    ON queen_proxy.queues (cluster_id, name) WHERE deleted_at IS NULL;

-- Per-minute metering, written by the gateway (upsert-add, closed minutes).
CREATE TABLE IF NOT EXISTS queen_proxy.usage_minutes (
    cluster_id uuid        REFERENCES queen_proxy.clusters (id) ON DELETE CASCADE,
    minute     timestamptz,
    op_class   text        CHECK (op_class IN ('push', 'delivery', 'txn', 'configure', 'read')),
    msgs       bigint      NOT NULL DEFAULT 0 CHECK (msgs >= 0),
    reqs       bigint      NOT NULL DEFAULT 0 CHECK (reqs >= 0),
    bytes_in   bigint      NOT NULL DEFAULT 0 CHECK (bytes_in >= 0),
    bytes_out  bigint      NOT NULL DEFAULT 0 CHECK (bytes_out >= 0),
    PRIMARY KEY (cluster_id, minute, op_class)
);
CREATE INDEX IF NOT EXISTS idx_usage_minutes_minute ON queen_proxy.usage_minutes (minute);

-- Append-only audit. tenant_id deliberately has no ON DELETE action.
CREATE TABLE IF NOT EXISTS queen_proxy.operations (
    id         uuid        PRIMARY KEY DEFAULT public.gen_random_uuid(),
    tenant_id  uuid        NOT NULL REFERENCES queen_proxy.tenants (id),
    cluster_id uuid        REFERENCES queen_proxy.clusters (id) ON DELETE SET NULL,
    actor      text        NOT NULL CHECK (actor IN ('user', 'api_key', 'control_plane', 'system')),
    actor_id   uuid,
    action     text        NOT NULL CHECK (btrim(action) <> ''),
    target     text,
    meta       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_operations_tenant_at
    ON queen_proxy.operations (tenant_id, at DESC);
CREATE INDEX IF NOT EXISTS idx_operations_cluster_at
    ON queen_proxy.operations (cluster_id, at DESC) WHERE cluster_id IS NOT NULL;

-- JWT deny-list; jti is TEXT so foreign, non-UUID ids fit.
CREATE TABLE IF NOT EXISTS queen_proxy.revoked_tokens (
    jti        text        PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_revoked_tokens_expires_at
    ON queen_proxy.revoked_tokens (expires_at);

-- Events bound for the control plane; NULL consumed_at = not yet drained.
CREATE TABLE IF NOT EXISTS queen_proxy.outbox (
    id          uuid        PRIMARY KEY DEFAULT public.gen_random_uuid(),
    kind        text        NOT NULL CHECK (btrim(kind) <> ''),
    payload     jsonb       NOT NULL,
    created_at  timestamptz DEFAULT now(),
    consumed_at timestamptz
);
CREATE INDEX IF NOT EXISTS idx_outbox_pending
    ON queen_proxy.outbox (created_at) WHERE consumed_at IS NULL;
