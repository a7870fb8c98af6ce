-- 032_webhooks: signed webhooks for every event the control plane records.
--
-- An endpoint is an operator-configured URL with an event filter (empty:
-- every kind) and a whsec_ secret; during a rotation the previous secret
-- stays valid until previous_until, and deliveries are signed with both.
--
-- Every outbox row fans out, in the transaction that wrote it, into one
-- delivery per endpoint whose filter takes its kind (disabled endpoints
-- included: re-enabling one resumes where it stopped, nothing is lost).
-- The fan-out takes a transaction advisory lock first, so delivery seq
-- numbers follow commit order: a gateway that delivers an endpoint's
-- lowest undelivered seq never sees a lower one appear later, which is
-- what makes per-endpoint order hold. Events are rare (lifecycle changes,
-- quota levels), so serialising their commits costs nothing measurable.
--
-- Kinds the outbox did not have are added here with triggers and
-- functions: api_key_issued, api_key_revoked, api_key_expiring,
-- cluster_status_changed, tenant_status_changed, cell_tenancy_contradicted,
-- cluster_monthly_quota_cleared and webhook_endpoint_disabled.

CREATE TABLE IF NOT EXISTS queen_proxy.webhook_endpoints (
    id              uuid        PRIMARY KEY DEFAULT public.gen_random_uuid(),
    name            text        NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    url             text        NOT NULL CHECK (url ~ '^https?://[^\s]+$'),
    events          text[]      NOT NULL DEFAULT '{}'::text[],
    secret          text        NOT NULL CHECK (secret ~ '^whsec_[A-Za-z0-9+/]+={0,2}$'),
    previous_secret text        CHECK (previous_secret ~ '^whsec_[A-Za-z0-9+/]+={0,2}$'),
    previous_until  timestamptz,
    status          text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
    disabled_reason text,
    failing_since   timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS queen_proxy.webhook_deliveries (
    seq             bigserial   PRIMARY KEY,
    endpoint_id     uuid        NOT NULL REFERENCES queen_proxy.webhook_endpoints (id) ON DELETE CASCADE,
    event_id        uuid        NOT NULL REFERENCES queen_proxy.outbox (id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    replay          boolean     NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS idx_webhook_deliveries_pending
    ON queen_proxy.webhook_deliveries (endpoint_id, seq) WHERE delivered_at IS NULL;
CREATE INDEX IF NOT EXISTS idx_webhook_deliveries_event ON queen_proxy.webhook_deliveries (event_id);

-- Every attempt, whatever its outcome: status is NULL when no HTTP answer
-- came (error says why).
CREATE TABLE IF NOT EXISTS queen_proxy.webhook_attempts (
    id           bigserial   PRIMARY KEY,
    delivery_seq bigint      NOT NULL REFERENCES queen_proxy.webhook_deliveries (seq) ON DELETE CASCADE,
    endpoint_id  uuid        NOT NULL REFERENCES queen_proxy.webhook_endpoints (id) ON DELETE CASCADE,
    at           timestamptz NOT NULL DEFAULT now(),
    gateway      text        NOT NULL,
    status       integer,
    latency_ms   integer     NOT NULL CHECK (latency_ms >= 0),
    error        text
);
CREATE INDEX IF NOT EXISTS idx_webhook_attempts_endpoint_at ON queen_proxy.webhook_attempts (endpoint_id, at DESC);

-- Fans an outbox row out into deliveries (see the header). An endpoint is
-- not sent the event of its own disabling.
CREATE OR REPLACE FUNCTION queen_proxy.webhook_fan_out()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM queen_proxy.webhook_endpoints) THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('queen_proxy.webhook_order'));
    INSERT INTO queen_proxy.webhook_deliveries (endpoint_id, event_id)
    SELECT e.id, NEW.id
      FROM queen_proxy.webhook_endpoints e
     WHERE (cardinality(e.events) = 0 OR NEW.kind = ANY (e.events))
       AND NOT (NEW.kind = 'webhook_endpoint_disabled' AND NEW.payload ->> 'endpoint_id' = e.id::text)
     ORDER BY e.id;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS outbox_webhook_fan_out ON queen_proxy.outbox;
CREATE TRIGGER outbox_webhook_fan_out
    AFTER INSERT ON queen_proxy.outbox
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.webhook_fan_out();

-- api_key_issued and api_key_revoked, whatever path issues or revokes (the
-- CLI, the console, the provisioning API, plain SQL).
CREATE OR REPLACE FUNCTION queen_proxy.webhook_key_events()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_kind text;
    v_slug text;
    v_tenant uuid;
BEGIN
    IF TG_OP = 'INSERT' THEN
        v_kind := 'api_key_issued';
    ELSIF OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL THEN
        v_kind := 'api_key_revoked';
    ELSE
        RETURN NULL;
    END IF;
    SELECT slug, tenant_id INTO v_slug, v_tenant FROM queen_proxy.clusters WHERE id = NEW.cluster_id;
    PERFORM queen_proxy.emit_outbox(v_kind, jsonb_build_object(
        'key_id', NEW.id, 'key_name', NEW.name, 'scopes', to_jsonb(NEW.scopes),
        'cluster_id', NEW.cluster_id, 'cluster_slug', v_slug, 'tenant_id', v_tenant,
        'expires_at', NEW.expires_at, 'revoked_at', NEW.revoked_at));
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS api_keys_webhook_events ON queen_proxy.api_keys;
CREATE TRIGGER api_keys_webhook_events
    AFTER INSERT OR UPDATE OF revoked_at ON queen_proxy.api_keys
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.webhook_key_events();

-- cluster_status_changed and tenant_status_changed.
CREATE OR REPLACE FUNCTION queen_proxy.webhook_status_events()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status IS NOT DISTINCT FROM NEW.status THEN
        RETURN NULL;
    END IF;
    IF TG_TABLE_NAME = 'clusters' THEN
        PERFORM queen_proxy.emit_outbox('cluster_status_changed', jsonb_build_object(
            'cluster_id', NEW.id, 'cluster_slug', NEW.slug, 'tenant_id', NEW.tenant_id,
            'from', OLD.status, 'to', NEW.status));
    ELSE
        PERFORM queen_proxy.emit_outbox('tenant_status_changed', jsonb_build_object(
            'tenant_id', NEW.id, 'tenant_slug', NEW.slug, 'from', OLD.status, 'to', NEW.status));
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS clusters_webhook_status ON queen_proxy.clusters;
CREATE TRIGGER clusters_webhook_status
    AFTER UPDATE OF status ON queen_proxy.clusters
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.webhook_status_events();
DROP TRIGGER IF EXISTS tenants_webhook_status ON queen_proxy.tenants;
CREATE TRIGGER tenants_webhook_status
    AFTER UPDATE OF status ON queen_proxy.tenants
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.webhook_status_events();

-- cell_tenancy_contradicted: the operator stated the broker keeps tenants
-- apart and the probe found it does not, the state in which the cell
-- serves its keeper only (tenancy_keeper_only).
CREATE OR REPLACE FUNCTION queen_proxy.webhook_cell_events()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.tenancy_stated = 'scoped' AND NEW.tenant_scoping = 'unscoped'
       AND NOT (OLD.tenancy_stated = 'scoped' AND OLD.tenant_scoping = 'unscoped') THEN
        PERFORM queen_proxy.emit_outbox('cell_tenancy_contradicted', jsonb_build_object(
            'cell_id', NEW.id, 'cell_slug', NEW.slug, 'tenancy_stated', NEW.tenancy_stated,
            'tenant_scoping', NEW.tenant_scoping, 'detail', NEW.tenant_scoping_detail));
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS cells_webhook_events ON queen_proxy.cells;
CREATE TRIGGER cells_webhook_events
    AFTER UPDATE OF tenant_scoping, tenancy_stated ON queen_proxy.cells
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.webhook_cell_events();

-- api_key_expiring: announced once per key and expiry time (a key whose
-- expiry moves is announced again for the new one).
CREATE TABLE IF NOT EXISTS queen_proxy.key_expiry_notices (
    key_id     uuid        PRIMARY KEY REFERENCES queen_proxy.api_keys (id) ON DELETE CASCADE,
    expires_at timestamptz NOT NULL
);

-- Announces every live key that expires within p_within and was not
-- announced for that expiry; returns how many it announced. Safe to call
-- from every gateway at once: the notice row decides who announces.
CREATE OR REPLACE FUNCTION queen_proxy.announce_expiring_keys(p_within interval)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_key   record;
    v_count integer := 0;
BEGIN
    IF p_within IS NULL OR p_within <= interval '0' THEN
        RAISE EXCEPTION 'announce_expiring_keys: the window must be positive (got %)', coalesce(p_within::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    FOR v_key IN
        SELECT k.id, k.name, k.cluster_id, k.expires_at, c.slug, c.tenant_id
          FROM queen_proxy.api_keys k JOIN queen_proxy.clusters c ON c.id = k.cluster_id
         WHERE k.revoked_at IS NULL AND k.expires_at > now() AND k.expires_at <= now() + p_within
           AND NOT EXISTS (SELECT 1 FROM queen_proxy.key_expiry_notices n
                            WHERE n.key_id = k.id AND n.expires_at = k.expires_at)
         ORDER BY k.expires_at, k.id
    LOOP
        INSERT INTO queen_proxy.key_expiry_notices (key_id, expires_at) VALUES (v_key.id, v_key.expires_at)
        ON CONFLICT (key_id) DO UPDATE SET expires_at = EXCLUDED.expires_at
         WHERE queen_proxy.key_expiry_notices.expires_at IS DISTINCT FROM EXCLUDED.expires_at;
        IF FOUND THEN
            PERFORM queen_proxy.emit_outbox('api_key_expiring', jsonb_build_object(
                'key_id', v_key.id, 'key_name', v_key.name, 'cluster_id', v_key.cluster_id,
                'cluster_slug', v_key.slug, 'tenant_id', v_key.tenant_id, 'expires_at', v_key.expires_at));
            v_count := v_count + 1;
        END IF;
    END LOOP;
    RETURN v_count;
END;
$$;

-- cluster_monthly_quota_cleared: a block announced for a month ends when
-- the cluster is no longer over its quota in that month (a raised quota, a
-- new plan) or the month is over. Once per block announcement.
CREATE TABLE IF NOT EXISTS queen_proxy.quota_clearances (
    cluster_id uuid        NOT NULL REFERENCES queen_proxy.clusters (id) ON DELETE CASCADE,
    month      text        NOT NULL CHECK (month ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
    cleared_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster_id, month)
);

-- Announces the end of every announced block that is not in p_blocked
-- (the clusters over their quota in p_month, as a complete evaluation
-- found them) or belongs to an earlier month; returns how many.
CREATE OR REPLACE FUNCTION queen_proxy.clear_monthly_quota_blocks(p_month text, p_blocked uuid[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_row   record;
    v_count integer := 0;
BEGIN
    IF p_month IS NULL OR p_month !~ '^[0-9]{4}-(0[1-9]|1[0-2])$' THEN
        RAISE EXCEPTION 'clear_monthly_quota_blocks: month must be YYYY-MM (got %)', coalesce(p_month, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    FOR v_row IN
        SELECT a.cluster_id, a.month, c.slug, c.tenant_id
          FROM queen_proxy.quota_announcements a JOIN queen_proxy.clusters c ON c.id = a.cluster_id
         WHERE a.kind = 'cluster_monthly_quota_blocked'
           AND a.month <= p_month
           AND (a.month < p_month OR NOT (a.cluster_id = ANY (coalesce(p_blocked, '{}'::uuid[]))))
           AND NOT EXISTS (SELECT 1 FROM queen_proxy.quota_clearances q
                            WHERE q.cluster_id = a.cluster_id AND q.month = a.month)
         ORDER BY a.month, a.cluster_id
    LOOP
        INSERT INTO queen_proxy.quota_clearances (cluster_id, month) VALUES (v_row.cluster_id, v_row.month)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            PERFORM queen_proxy.emit_outbox('cluster_monthly_quota_cleared', jsonb_build_object(
                'cluster_id', v_row.cluster_id, 'cluster_slug', v_row.slug, 'tenant_id', v_row.tenant_id,
                'month', v_row.month, 'reason', CASE WHEN v_row.month < p_month THEN 'month_over' ELSE 'under_quota' END));
            v_count := v_count + 1;
        END IF;
    END LOOP;
    RETURN v_count;
END;
$$;

-- Disables an endpoint that has failed for too long (or on an operator's
-- word) and records webhook_endpoint_disabled for the other endpoints.
-- Returns false when it was disabled already.
CREATE OR REPLACE FUNCTION queen_proxy.disable_webhook_endpoint(p_id uuid, p_reason text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_name  text;
    v_since timestamptz;
BEGIN
    UPDATE queen_proxy.webhook_endpoints
       SET status = 'disabled', disabled_reason = p_reason, updated_at = now()
     WHERE id = p_id AND status = 'active'
    RETURNING name, failing_since INTO v_name, v_since;
    IF NOT FOUND THEN
        IF NOT EXISTS (SELECT 1 FROM queen_proxy.webhook_endpoints WHERE id = p_id) THEN
            RAISE EXCEPTION 'disable_webhook_endpoint: unknown endpoint %', coalesce(p_id::text, 'NULL') USING ERRCODE = 'P0002';
        END IF;
        RETURN false;
    END IF;
    PERFORM queen_proxy.emit_outbox('webhook_endpoint_disabled', jsonb_build_object(
        'endpoint_id', p_id, 'endpoint_name', v_name, 'reason', p_reason, 'failing_since', v_since));
    RETURN true;
END;
$$;
