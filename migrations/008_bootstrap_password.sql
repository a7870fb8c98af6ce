-- 008_bootstrap_password: the final bootstrap_tenant, which can also set the
-- admin's password (bcrypt, cost 10, through pgcrypto) and reports whether
-- the admin can log in at all.

-- The first form (004) had no password argument; with both present a call
-- with seven arguments would be ambiguous.
DROP FUNCTION IF EXISTS queen_proxy.bootstrap_tenant(text, text, text, text, uuid, text, text);

-- Idempotent on the slugs and the e-mail: a re-run re-asserts the admin role
-- and returns api_key NULL unless no live key of that name exists. The
-- plaintext key is returned exactly once; only its sha256 hex is stored.
CREATE OR REPLACE FUNCTION queen_proxy.bootstrap_tenant(
    p_tenant_slug  text,
    p_tenant_name  text,
    p_cluster_slug text,
    p_plan_code    text,
    p_cell         uuid,
    p_admin_email  text,
    p_password     text DEFAULT NULL,
    p_key_name     text DEFAULT 'default'
) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant_slug    text := lower(btrim(p_tenant_slug));
    v_cluster_slug   text := lower(btrim(p_cluster_slug));
    v_email          text := lower(btrim(p_admin_email));
    v_key_name       text := btrim(p_key_name);
    v_tenant_id      uuid;
    v_new_tenant     boolean := false;
    v_cluster_id     uuid;
    v_cluster_tenant uuid;
    v_user_id        uuid;
    v_user_tenant    uuid;
    v_hash           text;
    v_can_login      boolean;
    v_key            text;
BEGIN
    IF v_tenant_slug IS NULL OR v_tenant_slug = '' THEN
        RAISE EXCEPTION 'bootstrap_tenant: tenant slug is required' USING ERRCODE = '22023';
    END IF;
    IF v_cluster_slug IS NULL OR v_cluster_slug = '' THEN
        RAISE EXCEPTION 'bootstrap_tenant: cluster slug is required' USING ERRCODE = '22023';
    END IF;
    IF v_email IS NULL OR strpos(v_email, '@') = 0 THEN
        RAISE EXCEPTION 'bootstrap_tenant: admin email must contain @' USING ERRCODE = '22023';
    END IF;
    IF p_cell IS NULL THEN
        RAISE EXCEPTION 'bootstrap_tenant: cell is required' USING ERRCODE = '22023';
    END IF;
    IF v_key_name IS NULL OR v_key_name = '' THEN
        RAISE EXCEPTION 'bootstrap_tenant: key name is required' USING ERRCODE = '22023';
    END IF;

    -- 1. the tenant
    SELECT id INTO v_tenant_id FROM queen_proxy.tenants WHERE slug = v_tenant_slug;
    IF v_tenant_id IS NULL THEN
        v_tenant_id := queen_proxy.create_tenant(v_tenant_slug,
            coalesce(nullif(btrim(p_tenant_name), ''), v_tenant_slug));
        v_new_tenant := true;
    END IF;

    -- 2. the cluster (slugs are global)
    SELECT id, tenant_id INTO v_cluster_id, v_cluster_tenant FROM queen_proxy.clusters WHERE slug = v_cluster_slug;
    IF v_cluster_id IS NULL THEN
        v_cluster_id := queen_proxy.create_cluster(v_tenant_id, v_cluster_slug, p_plan_code, p_cell);
    ELSIF v_cluster_tenant <> v_tenant_id THEN
        RAISE EXCEPTION 'bootstrap_tenant: cluster slug % belongs to another tenant', v_cluster_slug
            USING ERRCODE = '23505';
    END IF;

    -- 3. the admin user (e-mails are global)
    SELECT id, tenant_id INTO v_user_id, v_user_tenant FROM queen_proxy.users WHERE email = v_email;
    IF v_user_id IS NULL THEN
        IF p_password IS NOT NULL THEN
            v_hash := public.crypt(p_password, public.gen_salt('bf', 10));
        END IF;
        v_user_id := queen_proxy.create_user(v_tenant_id, v_email, v_hash, 'local');
    ELSIF v_user_tenant <> v_tenant_id THEN
        RAISE EXCEPTION 'bootstrap_tenant: user % belongs to another tenant', v_email USING ERRCODE = '23505';
    END IF;

    -- 4. the admin role, re-asserted on every run
    PERFORM queen_proxy.grant_cluster_role(v_cluster_id, v_email, 'admin');

    -- 5. can the admin log in?
    v_can_login := EXISTS (SELECT 1 FROM queen_proxy.users WHERE id = v_user_id AND password_hash IS NOT NULL)
                OR EXISTS (SELECT 1 FROM queen_proxy.identities WHERE user_id = v_user_id);
    IF NOT v_can_login THEN
        RAISE WARNING 'bootstrap_tenant: admin % has no password and no linked identity, so cannot log in yet', v_email
            USING HINT = 'pass p_password, or sign in once through an OAuth provider with that e-mail';
    END IF;

    -- 6. the API key, unless a live one with this name exists
    IF NOT EXISTS (SELECT 1 FROM queen_proxy.api_keys
                    WHERE cluster_id = v_cluster_id AND name = v_key_name AND revoked_at IS NULL) THEN
        v_key := 'qk_live_' || translate(encode(public.gen_random_bytes(32), 'base64'), E'+/=\n', '-_');
        PERFORM queen_proxy.issue_api_key(v_cluster_id, v_key_name,
            encode(public.digest(v_key, 'sha256'), 'hex'),
            ARRAY['produce', 'consume', 'admin', 'read']::text[]);
    END IF;

    -- 7. audit, and announce a new tenant
    PERFORM queen_proxy.record_operation(v_tenant_id, v_cluster_id, 'control_plane', NULL, 'tenant_bootstrapped',
        v_tenant_id::text, jsonb_build_object(
            'tenant_slug', v_tenant_slug, 'cluster_slug', v_cluster_slug, 'plan_code', p_plan_code,
            'admin_email', v_email, 'key_issued', v_key IS NOT NULL,
            'password_set', p_password IS NOT NULL, 'can_login', v_can_login));
    IF v_new_tenant THEN
        PERFORM queen_proxy.emit_outbox('tenant_bootstrapped', jsonb_build_object(
            'tenant_id', v_tenant_id, 'tenant_slug', v_tenant_slug, 'cluster_id', v_cluster_id,
            'cluster_slug', v_cluster_slug, 'plan_code', p_plan_code, 'admin_email', v_email));
    END IF;

    -- 8. the plaintext key, this one time only
    RETURN jsonb_build_object('tenant_id', v_tenant_id, 'cluster_id', v_cluster_id, 'user_id', v_user_id,
        'api_key', v_key, 'password_set', p_password IS NOT NULL, 'can_login', v_can_login);
END;
$$;
