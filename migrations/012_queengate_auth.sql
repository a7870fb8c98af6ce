-- 012_queengate_auth: queengate's additions to the reference schema for
-- credentials. An API key may carry an expiry, past which the gateway
-- refuses it exactly like a revoked one (NULL = never); and revoking a
-- session tells every gateway at once instead of within its deny-list TTL.

ALTER TABLE queen_proxy.api_keys ADD COLUMN IF NOT EXISTS expires_at timestamptz;

-- Sets or clears (NULL) a live key's expiry, audits it and tells every
-- gateway to drop the key from its cache.
CREATE OR REPLACE FUNCTION queen_proxy.set_api_key_expiry(p_key_id uuid, p_expires_at timestamptz)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_cluster uuid;
    v_tenant  uuid;
BEGIN
    SELECT k.cluster_id, c.tenant_id INTO v_cluster, v_tenant
      FROM queen_proxy.api_keys k
      JOIN queen_proxy.clusters c ON c.id = k.cluster_id
     WHERE k.id = p_key_id AND k.revoked_at IS NULL
       FOR UPDATE OF k;
    IF v_cluster IS NULL THEN
        RAISE EXCEPTION 'set_api_key_expiry: unknown or revoked key %', p_key_id USING ERRCODE = 'P0002';
    END IF;

    UPDATE queen_proxy.api_keys SET expires_at = p_expires_at WHERE id = p_key_id;

    PERFORM queen_proxy.record_operation(v_tenant, v_cluster, 'control_plane', NULL, 'api_key_expiry_set',
        p_key_id::text, jsonb_build_object('expires_at', p_expires_at));
END;
$$;

-- Same contract as 004's revoke_session, plus a nil-uuid notification: every
-- gateway drops its cached "not revoked" answers, so a logout bites at once.
CREATE OR REPLACE FUNCTION queen_proxy.revoke_session(
    p_jti        text,
    p_expires_at timestamptz,
    p_actor      text DEFAULT 'user',
    p_actor_id   uuid DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_jti    text := btrim(p_jti);
    v_tenant uuid;
BEGIN
    IF v_jti IS NULL OR v_jti = '' THEN
        RAISE EXCEPTION 'revoke_session: jti is required' USING ERRCODE = '22023';
    END IF;
    IF p_expires_at IS NULL THEN
        RAISE EXCEPTION 'revoke_session: expires_at is required' USING ERRCODE = '22023';
    END IF;
    SELECT tenant_id INTO v_tenant FROM queen_proxy.users WHERE id = p_actor_id;
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'revoke_session: actor_id must be a known user (got %)', coalesce(p_actor_id::text, 'NULL')
            USING ERRCODE = 'P0002';
    END IF;

    INSERT INTO queen_proxy.revoked_tokens (jti, expires_at) VALUES (v_jti, p_expires_at)
    ON CONFLICT (jti) DO NOTHING;

    PERFORM queen_proxy.record_operation(v_tenant, NULL, p_actor, p_actor_id, 'session_revoked', v_jti,
        jsonb_build_object('expires_at', p_expires_at));
    PERFORM pg_notify('queen_proxy_inval', '00000000-0000-0000-0000-000000000000');
END;
$$;
