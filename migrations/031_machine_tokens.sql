-- 031_machine_tokens: the provisioning API's callers and its replay store.
--
-- A machine token is the credential of a system (a signup service, a
-- billing job) calling the gateway's provisioning API. Only its SHA-256 is
-- stored. It has scopes (provision: change things; usage: read usage and
-- activity; read: read everything else), a rate limit, an optional expiry,
-- and across a rotation a previous hash that stays valid until
-- previous_expires_at. Its name is unique among the tokens not revoked, so
-- operators name tokens as they name everything else.
--
-- Every change of a token is audited through record_operation in the
-- platform tenant (actor control_plane, the token's id as the target), and
-- a revocation or rotation sends the nil-uuid invalidation that every
-- gateway already listens for (what is cached about callers' standing is
-- dropped), so it takes effect everywhere at COMMIT.
--
-- provision_replays holds the answers to requests that carried an
-- Idempotency-Key: a retry with the same key and the same request gets the
-- stored answer instead of a second effect.

CREATE TABLE IF NOT EXISTS queen_proxy.machine_tokens (
    id                  uuid        PRIMARY KEY DEFAULT public.gen_random_uuid(),
    name                text        NOT NULL CHECK (btrim(name) <> '' AND char_length(name) <= 200),
    token_hash          text        NOT NULL UNIQUE CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    previous_hash       text        CHECK (previous_hash ~ '^[0-9a-f]{64}$'),
    previous_expires_at timestamptz,
    scopes              text[]      NOT NULL CHECK (cardinality(scopes) > 0
                                        AND scopes <@ ARRAY['provision', 'usage', 'read']::text[]),
    rate_per_second     integer     NOT NULL DEFAULT 10 CHECK (rate_per_second BETWEEN 1 AND 100000),
    burst               integer     NOT NULL DEFAULT 50 CHECK (burst BETWEEN 1 AND 1000000),
    created_at          timestamptz NOT NULL DEFAULT now(),
    last_used_at        timestamptz,
    expires_at          timestamptz,
    revoked_at          timestamptz
);
CREATE UNIQUE INDEX IF NOT EXISTS machine_tokens_live_name
    ON queen_proxy.machine_tokens (name) WHERE revoked_at IS NULL;
CREATE INDEX IF NOT EXISTS machine_tokens_previous_hash
    ON queen_proxy.machine_tokens (previous_hash) WHERE previous_hash IS NOT NULL;

CREATE TABLE IF NOT EXISTS queen_proxy.provision_replays (
    idempotency_key text        PRIMARY KEY CHECK (char_length(idempotency_key) BETWEEN 1 AND 200),
    token_id        uuid        NOT NULL REFERENCES queen_proxy.machine_tokens (id) ON DELETE CASCADE,
    request_hash    text        NOT NULL,
    status          integer     NOT NULL,
    body            text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_provision_replays_created_at ON queen_proxy.provision_replays (created_at);

CREATE OR REPLACE FUNCTION queen_proxy.platform_tenant_id()
RETURNS uuid
LANGUAGE sql STABLE AS $$
    SELECT id FROM queen_proxy.tenants WHERE is_platform
$$;

CREATE OR REPLACE FUNCTION queen_proxy.create_machine_token(
    p_name text, p_hash text, p_scopes text[], p_rate integer, p_burst integer, p_expires_at timestamptz
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
BEGIN
    IF p_name IS NULL OR btrim(p_name) = '' THEN
        RAISE EXCEPTION 'create_machine_token: name is required' USING ERRCODE = '22023';
    END IF;
    IF p_expires_at IS NOT NULL AND p_expires_at <= now() THEN
        RAISE EXCEPTION 'create_machine_token: expiry must be in the future' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM queen_proxy.machine_tokens WHERE name = btrim(p_name) AND revoked_at IS NULL) THEN
        RAISE EXCEPTION 'create_machine_token: a live token is already named %', btrim(p_name) USING ERRCODE = '23505';
    END IF;
    INSERT INTO queen_proxy.machine_tokens (name, token_hash, scopes, rate_per_second, burst, expires_at)
    VALUES (btrim(p_name), p_hash, p_scopes, coalesce(p_rate, 10), coalesce(p_burst, 50), p_expires_at)
    RETURNING id INTO v_id;
    PERFORM queen_proxy.record_operation(queen_proxy.platform_tenant_id(), NULL, 'control_plane', NULL,
        'machine_token_created', v_id::text,
        jsonb_build_object('name', btrim(p_name), 'scopes', to_jsonb(p_scopes), 'rate_per_second', coalesce(p_rate, 10),
                           'burst', coalesce(p_burst, 50), 'expires_at', p_expires_at));
    RETURN v_id;
END;
$$;

CREATE OR REPLACE FUNCTION queen_proxy.revoke_machine_token(p_id uuid)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_name text;
BEGIN
    UPDATE queen_proxy.machine_tokens SET revoked_at = now()
     WHERE id = p_id AND revoked_at IS NULL
    RETURNING name INTO v_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'revoke_machine_token: unknown or already revoked token %', p_id USING ERRCODE = 'P0002';
    END IF;
    PERFORM queen_proxy.record_operation(queen_proxy.platform_tenant_id(), NULL, 'control_plane', NULL,
        'machine_token_revoked', p_id::text, jsonb_build_object('name', v_name));
    PERFORM pg_notify('queen_proxy_inval', '00000000-0000-0000-0000-000000000000');
END;
$$;

-- A rotation keeps the token's id, name and scopes: the new hash replaces
-- the current one, which stays valid for p_overlap (none: it is refused at
-- COMMIT).
CREATE OR REPLACE FUNCTION queen_proxy.rotate_machine_token(p_id uuid, p_hash text, p_overlap interval)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_name text;
BEGIN
    IF p_overlap IS NULL OR p_overlap < interval '0' THEN
        RAISE EXCEPTION 'rotate_machine_token: overlap must not be negative' USING ERRCODE = '22023';
    END IF;
    UPDATE queen_proxy.machine_tokens
       SET previous_hash = CASE WHEN p_overlap > interval '0' THEN token_hash END,
           previous_expires_at = CASE WHEN p_overlap > interval '0' THEN now() + p_overlap END,
           token_hash = p_hash
     WHERE id = p_id AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
    RETURNING name INTO v_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'rotate_machine_token: unknown, expired or revoked token %', p_id USING ERRCODE = 'P0002';
    END IF;
    PERFORM queen_proxy.record_operation(queen_proxy.platform_tenant_id(), NULL, 'control_plane', NULL,
        'machine_token_rotated', p_id::text, jsonb_build_object('name', v_name, 'overlap_seconds', extract(epoch FROM p_overlap)));
    PERFORM pg_notify('queen_proxy_inval', '00000000-0000-0000-0000-000000000000');
END;
$$;

-- One provisioning API call, audited with the calling token's id as the
-- actor: in the tenant it concerns, else the platform tenant. No cluster
-- invalidation is sent (a read changes nothing; a change is announced by
-- the function that made it). It also stamps the token's last use, at most
-- once a minute.
CREATE OR REPLACE FUNCTION queen_proxy.record_machine_call(
    p_token_id uuid, p_tenant_id uuid, p_cluster_id uuid, p_action text, p_target text, p_meta jsonb
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
BEGIN
    IF p_action IS NULL OR btrim(p_action) = '' THEN
        RAISE EXCEPTION 'record_machine_call: action is required' USING ERRCODE = '22023';
    END IF;
    INSERT INTO queen_proxy.operations (tenant_id, cluster_id, actor, actor_id, action, target, meta)
    VALUES (coalesce(p_tenant_id, queen_proxy.platform_tenant_id()), p_cluster_id, 'control_plane', p_token_id,
            p_action, p_target, coalesce(p_meta, '{}'::jsonb) || jsonb_build_object('machine_token', p_token_id))
    RETURNING id INTO v_id;
    UPDATE queen_proxy.machine_tokens SET last_used_at = now()
     WHERE id = p_token_id AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute');
    RETURN v_id;
END;
$$;
