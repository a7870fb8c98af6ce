-- 006_operator: the operator (super-admin) bit on users.

ALTER TABLE queen_proxy.users ADD COLUMN IF NOT EXISTS is_operator boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS idx_users_operator ON queen_proxy.users (email) WHERE is_operator;

-- The only way to grant or withdraw the operator bit. Audited even when the
-- bit does not change. No cluster, so nothing is notified (the gateway caches
-- operators with a short TTL).
CREATE OR REPLACE FUNCTION queen_proxy.set_operator(p_email text, p_enabled boolean)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_email  text := lower(btrim(p_email));
    v_user   uuid;
    v_tenant uuid;
    v_was    boolean;
BEGIN
    IF p_enabled IS NULL THEN
        RAISE EXCEPTION 'set_operator: enabled is required' USING ERRCODE = '22023';
    END IF;
    IF v_email IS NULL OR v_email = '' THEN
        RAISE EXCEPTION 'set_operator: email is required' USING ERRCODE = '22023';
    END IF;
    SELECT id, tenant_id, is_operator INTO v_user, v_tenant, v_was
      FROM queen_proxy.users WHERE email = v_email
       FOR UPDATE;
    IF v_user IS NULL THEN
        RAISE EXCEPTION 'set_operator: unknown user %', v_email USING ERRCODE = 'P0002';
    END IF;

    UPDATE queen_proxy.users SET is_operator = p_enabled WHERE id = v_user;

    PERFORM queen_proxy.record_operation(v_tenant, NULL, 'control_plane', v_user,
        CASE WHEN p_enabled THEN 'operator_granted' ELSE 'operator_revoked' END,
        v_email, jsonb_build_object('is_operator', p_enabled, 'was', v_was));
END;
$$;
