-- 002_functions: the audit primitive, the control-plane mutators and the
-- default plans.
--
-- Discipline of every mutator: validate its arguments (RAISE EXCEPTION with a
-- "function_name: reason" message), write its own tables, then call
-- queen_proxy.record_operation exactly once. record_operation appends the
-- audit row and, when it is given a cluster, sends
-- pg_notify('queen_proxy_inval', <cluster id>) so every gateway drops that
-- cluster from its cache (delivered at COMMIT). The functions run inside the
-- caller's transaction: a RAISE undoes everything.
--
-- SQLSTATEs: 22023 invalid argument, P0002 a referenced row does not exist,
-- 23505 a unique name is taken, 42501 a cross-tenant operation.

CREATE OR REPLACE FUNCTION queen_proxy.record_operation(
    p_tenant_id  uuid,
    p_cluster_id uuid,
    p_actor      text,
    p_actor_id   uuid,
    p_action     text,
    p_target     text,
    p_meta       jsonb
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
BEGIN
    IF p_tenant_id IS NULL THEN
        RAISE EXCEPTION 'record_operation: tenant id is required' USING ERRCODE = '22023';
    END IF;
    IF p_actor IS NULL OR p_actor NOT IN ('user', 'api_key', 'control_plane', 'system') THEN
        RAISE EXCEPTION 'record_operation: actor must be one of user, api_key, control_plane, system (got %)',
            coalesce(p_actor, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF p_action IS NULL OR btrim(p_action) = '' THEN
        RAISE EXCEPTION 'record_operation: action is required' USING ERRCODE = '22023';
    END IF;

    INSERT INTO queen_proxy.operations (tenant_id, cluster_id, actor, actor_id, action, target, meta)
    VALUES (p_tenant_id, p_cluster_id, p_actor, p_actor_id, p_action, p_target,
            coalesce(p_meta, '{}'::jsonb))
    RETURNING id INTO v_id;

    IF p_cluster_id IS NOT NULL THEN
        PERFORM pg_notify('queen_proxy_inval', p_cluster_id::text);
    END IF;
    RETURN v_id;
END;
$$;

CREATE OR REPLACE FUNCTION queen_proxy.create_tenant(p_slug text, p_name text)
RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_slug text := lower(btrim(p_slug));
    v_name text := btrim(p_name);
    v_id   uuid;
BEGIN
    IF v_slug IS NULL OR v_slug = '' THEN
        RAISE EXCEPTION 'create_tenant: slug is required' USING ERRCODE = '22023';
    END IF;
    IF v_name IS NULL OR v_name = '' THEN
        RAISE EXCEPTION 'create_tenant: name is required' USING ERRCODE = '22023';
    END IF;
    IF v_slug !~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$' THEN
        RAISE EXCEPTION 'create_tenant: slug % is not a DNS label (a-z, 0-9, inner hyphens, at most 63 characters)', v_slug
            USING ERRCODE = '22023';
    END IF;

    INSERT INTO queen_proxy.tenants (slug, name) VALUES (v_slug, v_name) RETURNING id INTO v_id;

    PERFORM queen_proxy.record_operation(v_id, NULL, 'control_plane', NULL, 'tenant_created', v_id::text,
        jsonb_build_object('slug', v_slug, 'name', v_name));
    RETURN v_id;
END;
$$;

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
    IF p_provider IS NULL OR p_provider NOT IN ('local', 'google', 'github') THEN
        RAISE EXCEPTION 'create_user: provider must be one of local, google, github (got %)',
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

CREATE OR REPLACE FUNCTION queen_proxy.create_cluster(
    p_tenant_id uuid,
    p_slug      text,
    p_plan_code text,
    p_cell_id   uuid
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_slug    text := lower(btrim(p_slug));
    v_plan_id uuid;
    v_id      uuid;
BEGIN
    IF v_slug IS NULL OR v_slug = '' THEN
        RAISE EXCEPTION 'create_cluster: slug is required' USING ERRCODE = '22023';
    END IF;
    IF v_slug !~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$' THEN
        RAISE EXCEPTION 'create_cluster: slug % is not a DNS label (a-z, 0-9, inner hyphens, at most 63 characters)', v_slug
            USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM queen_proxy.tenants WHERE id = p_tenant_id) THEN
        RAISE EXCEPTION 'create_cluster: unknown tenant %', p_tenant_id USING ERRCODE = 'P0002';
    END IF;
    SELECT id INTO v_plan_id FROM queen_proxy.plans WHERE code = p_plan_code;
    IF v_plan_id IS NULL THEN
        RAISE EXCEPTION 'create_cluster: unknown plan %', coalesce(p_plan_code, 'NULL') USING ERRCODE = 'P0002';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM queen_proxy.cells WHERE id = p_cell_id) THEN
        RAISE EXCEPTION 'create_cluster: unknown cell %', p_cell_id USING ERRCODE = 'P0002';
    END IF;

    INSERT INTO queen_proxy.clusters (tenant_id, cell_id, plan_id, slug)
    VALUES (p_tenant_id, p_cell_id, v_plan_id, v_slug)
    RETURNING id INTO v_id;

    PERFORM queen_proxy.record_operation(p_tenant_id, v_id, 'control_plane', NULL, 'cluster_created', v_id::text,
        jsonb_build_object('slug', v_slug, 'plan_code', p_plan_code, 'cell_id', p_cell_id));
    RETURN v_id;
END;
$$;

CREATE OR REPLACE FUNCTION queen_proxy.assign_plan(p_cluster_id uuid, p_plan_code text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_plan_id uuid;
    v_tenant  uuid;
BEGIN
    SELECT id INTO v_plan_id FROM queen_proxy.plans WHERE code = p_plan_code;
    IF v_plan_id IS NULL THEN
        RAISE EXCEPTION 'assign_plan: unknown plan %', coalesce(p_plan_code, 'NULL') USING ERRCODE = 'P0002';
    END IF;
    UPDATE queen_proxy.clusters SET plan_id = v_plan_id WHERE id = p_cluster_id
    RETURNING tenant_id INTO v_tenant;
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'assign_plan: unknown cluster %', p_cluster_id USING ERRCODE = 'P0002';
    END IF;

    PERFORM queen_proxy.record_operation(v_tenant, p_cluster_id, 'control_plane', NULL, 'plan_assigned',
        p_cluster_id::text, jsonb_build_object('plan_code', p_plan_code));
END;
$$;

-- A tenant's status changes the merged status of all its clusters, so every
-- one of them is invalidated explicitly (the audit row itself has no cluster).
CREATE OR REPLACE FUNCTION queen_proxy.set_tenant_status(p_tenant_id uuid, p_status text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_cluster uuid;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('active', 'grace', 'suspended', 'deleting') THEN
        RAISE EXCEPTION 'set_tenant_status: status must be one of active, grace, suspended, deleting (got %)',
            coalesce(p_status, 'NULL') USING ERRCODE = '22023';
    END IF;
    UPDATE queen_proxy.tenants SET status = p_status WHERE id = p_tenant_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'set_tenant_status: unknown tenant %', p_tenant_id USING ERRCODE = 'P0002';
    END IF;

    PERFORM queen_proxy.record_operation(p_tenant_id, NULL, 'control_plane', NULL, 'tenant_status_changed',
        p_tenant_id::text, jsonb_build_object('status', p_status));

    FOR v_cluster IN SELECT id FROM queen_proxy.clusters WHERE tenant_id = p_tenant_id ORDER BY id LOOP
        PERFORM pg_notify('queen_proxy_inval', v_cluster::text);
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION queen_proxy.set_cluster_status(p_cluster_id uuid, p_status text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant uuid;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('active', 'push_blocked', 'suspended', 'deleting') THEN
        RAISE EXCEPTION 'set_cluster_status: status must be one of active, push_blocked, suspended, deleting (got %)',
            coalesce(p_status, 'NULL') USING ERRCODE = '22023';
    END IF;
    UPDATE queen_proxy.clusters SET status = p_status WHERE id = p_cluster_id
    RETURNING tenant_id INTO v_tenant;
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'set_cluster_status: unknown cluster %', p_cluster_id USING ERRCODE = 'P0002';
    END IF;

    PERFORM queen_proxy.record_operation(v_tenant, p_cluster_id, 'control_plane', NULL, 'cluster_status_changed',
        p_cluster_id::text, jsonb_build_object('status', p_status));
END;
$$;

-- Stores a key's sha256 hex; the plaintext never reaches the database.
CREATE OR REPLACE FUNCTION queen_proxy.issue_api_key(
    p_cluster_id uuid,
    p_name       text,
    p_key_hash   text,
    p_scopes     text[]
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_name   text := btrim(p_name);
    v_tenant uuid;
    v_id     uuid;
BEGIN
    SELECT tenant_id INTO v_tenant FROM queen_proxy.clusters WHERE id = p_cluster_id;
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'issue_api_key: unknown cluster %', p_cluster_id USING ERRCODE = 'P0002';
    END IF;
    IF v_name IS NULL OR v_name = '' THEN
        RAISE EXCEPTION 'issue_api_key: name is required' USING ERRCODE = '22023';
    END IF;
    IF p_key_hash IS NULL OR p_key_hash !~ '^[0-9a-f]{64}$' THEN
        RAISE EXCEPTION 'issue_api_key: key hash must be 64 lowercase hex characters (sha256)' USING ERRCODE = '22023';
    END IF;
    IF p_scopes IS NULL OR cardinality(p_scopes) = 0 THEN
        RAISE EXCEPTION 'issue_api_key: at least one scope is required' USING ERRCODE = '22023';
    END IF;
    IF array_position(p_scopes, NULL) IS NOT NULL
       OR NOT (p_scopes <@ ARRAY['produce', 'consume', 'admin', 'read']::text[]) THEN
        RAISE EXCEPTION 'issue_api_key: scopes must be among produce, consume, admin, read (got %)', p_scopes
            USING ERRCODE = '22023';
    END IF;

    INSERT INTO queen_proxy.api_keys (cluster_id, name, key_hash, scopes)
    VALUES (p_cluster_id, v_name, p_key_hash, p_scopes)
    RETURNING id INTO v_id;

    PERFORM queen_proxy.record_operation(v_tenant, p_cluster_id, 'control_plane', NULL, 'api_key_issued',
        v_id::text, jsonb_build_object('name', v_name, 'scopes', to_jsonb(p_scopes)));
    RETURN v_id;
END;
$$;

-- Looks the key up by id alone (no cluster argument).
CREATE OR REPLACE FUNCTION queen_proxy.revoke_api_key(p_key_id uuid)
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
        RAISE EXCEPTION 'revoke_api_key: unknown or already-revoked key %', p_key_id USING ERRCODE = 'P0002';
    END IF;

    UPDATE queen_proxy.api_keys SET revoked_at = now() WHERE id = p_key_id;

    PERFORM queen_proxy.record_operation(v_tenant, v_cluster, 'control_plane', NULL, 'api_key_revoked',
        p_key_id::text, '{}'::jsonb);
END;
$$;

-- Default plans (binary units). free and dev get features later (009).
INSERT INTO queen_proxy.plans (code, cell_class,
        max_req_per_sec, req_burst, max_msgs_per_sec, msgs_burst,
        max_queues, max_partitions_per_queue, max_parked_pops,
        max_payload_bytes, max_batch_items, max_retained_bytes, max_retention_seconds,
        monthly_msgs_quota, features)
VALUES
    ('free',        'shared',      5,  25,  20,  100,   20,  8,   50,  262144,  1000,   1073741824,  604800, NULL,
        '{}'::jsonb),
    ('dev',         'shared',     10,  50,  40,  200,   50, 16,  150,  524288,  2000,   3221225472, 1209600, NULL,
        '{}'::jsonb),
    ('pro',         'shared',     50, 200, 200,  800,  200, 32, 1000, 1048576,  5000,  21474836480, 2592000, NULL,
        '{"streams": true, "traces": true}'::jsonb),
    ('dedicated-s', 'dedicated', 200, 800, 600, 2000, 1000, 64, 5000, 4194304, 10000, 214748364800, 7776000, NULL,
        '{"streams": true, "traces": true}'::jsonb)
ON CONFLICT (code) DO NOTHING;
