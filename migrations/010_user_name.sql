-- 010_user_name: an optional display name on users.

ALTER TABLE queen_proxy.users ADD COLUMN IF NOT EXISTS name text
    CONSTRAINT users_name_valid CHECK (name IS NULL OR (btrim(name) <> '' AND char_length(name) <= 160));

-- Sets a user's display name (trimmed, 1 to 160 characters). No cluster, so
-- nothing is notified.
CREATE OR REPLACE FUNCTION queen_proxy.set_user_name(p_user uuid, p_name text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_name   text := btrim(p_name);
    v_tenant uuid;
    v_old    text;
BEGIN
    IF v_name IS NULL OR char_length(v_name) < 1 OR char_length(v_name) > 160 THEN
        RAISE EXCEPTION 'set_user_name: name must be 1 to 160 characters after trimming' USING ERRCODE = '22023';
    END IF;
    SELECT tenant_id, name INTO v_tenant, v_old FROM queen_proxy.users WHERE id = p_user FOR UPDATE;
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'set_user_name: unknown user %', p_user USING ERRCODE = 'P0002';
    END IF;

    UPDATE queen_proxy.users SET name = v_name WHERE id = p_user;

    PERFORM queen_proxy.record_operation(v_tenant, NULL, 'control_plane', p_user, 'user_name_changed',
        p_user::text, jsonb_build_object('old_name', v_old, 'name', v_name));
END;
$$;
