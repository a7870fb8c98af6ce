-- 034_oidc_providers: sign-in through any OpenID Connect provider.
--
-- A provider configured in the Caddyfile under the name <name> links its
-- users' identities as provider 'oidc:<name>' (the subject is unique only
-- within one issuer, so each configured provider keeps its own namespace).
-- The name is the Caddyfile's rule: lower-case letters, digits and inner
-- hyphens, at most 32 characters. queen_proxy.identity_provider_valid is
-- that rule, and the one place the identities constraint and create_user
-- read it.

CREATE OR REPLACE FUNCTION queen_proxy.identity_provider_valid(p_provider text)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_provider IS NOT NULL
       AND (p_provider IN ('local', 'google', 'github')
            OR p_provider ~ '^oidc:[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$');
$$;

ALTER TABLE queen_proxy.identities DROP CONSTRAINT IF EXISTS identities_provider_check;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conname = 'identities_provider_valid'
                      AND conrelid = 'queen_proxy.identities'::regclass) THEN
        ALTER TABLE queen_proxy.identities ADD CONSTRAINT identities_provider_valid
            CHECK (queen_proxy.identity_provider_valid(provider));
    END IF;
END;
$$;

-- create_user as before, with the provider read by the shared rule.
CREATE OR REPLACE FUNCTION queen_proxy.create_user(
    p_tenant_id     uuid,
    p_email         text,
    p_password_hash text,
    p_provider      text
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_email text := lower(btrim(p_email));
    v_id    uuid;
BEGIN
    IF v_email IS NULL OR strpos(v_email, '@') = 0 THEN
        RAISE EXCEPTION 'create_user: email must contain @' USING ERRCODE = '22023';
    END IF;
    IF NOT queen_proxy.identity_provider_valid(p_provider) THEN
        RAISE EXCEPTION 'create_user: provider must be local, google, github or oidc:<name> (got %)',
            coalesce(p_provider, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM queen_proxy.tenants WHERE id = p_tenant_id) THEN
        RAISE EXCEPTION 'create_user: unknown tenant %', p_tenant_id USING ERRCODE = 'P0002';
    END IF;

    INSERT INTO queen_proxy.users (tenant_id, email, password_hash)
    VALUES (p_tenant_id, v_email, p_password_hash)
    RETURNING id INTO v_id;

    PERFORM queen_proxy.record_operation(p_tenant_id, NULL, 'control_plane', v_id, 'user_created', v_id::text,
        jsonb_build_object('email', v_email, 'provider', p_provider));
    RETURN v_id;
END;
$$;
