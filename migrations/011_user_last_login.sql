-- 011_user_last_login: when a user last signed in interactively.

ALTER TABLE queen_proxy.users ADD COLUMN IF NOT EXISTS last_login_at timestamptz;

-- Stamps a successful sign-in and audits it (actor user). No cluster, so
-- nothing is notified. Returns the stamp.
CREATE OR REPLACE FUNCTION queen_proxy.record_user_login(p_user uuid)
RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant uuid;
    v_at     timestamptz;
BEGIN
    UPDATE queen_proxy.users SET last_login_at = now() WHERE id = p_user
    RETURNING tenant_id, last_login_at INTO v_tenant, v_at;
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'record_user_login: unknown user %', p_user USING ERRCODE = 'P0002';
    END IF;

    PERFORM queen_proxy.record_operation(v_tenant, NULL, 'user', p_user, 'login', p_user::text, '{}'::jsonb);
    RETURN v_at;
END;
$$;
