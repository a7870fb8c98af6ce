-- 004_lifecycle: daily usage, session revocation, cluster roles, the outbox,
-- one-call onboarding and the usage roll-up.

-- Daily roll-up of usage_minutes; day is the UTC calendar day. Kept forever.
CREATE TABLE IF NOT EXISTS queen_proxy.usage_days (
    cluster_id uuid   REFERENCES queen_proxy.clusters (id) ON DELETE CASCADE,
    day        date,
    op_class   text   CHECK (op_class IN ('push', 'delivery', 'txn', 'configure', 'read')),
    msgs       bigint NOT NULL DEFAULT 0 CHECK (msgs >= 0),
    reqs       bigint NOT NULL DEFAULT 0 CHECK (reqs >= 0),
    bytes_in   bigint NOT NULL DEFAULT 0 CHECK (bytes_in >= 0),
    bytes_out  bigint NOT NULL DEFAULT 0 CHECK (bytes_out >= 0),
    PRIMARY KEY (cluster_id, day, op_class)
);
CREATE INDEX IF NOT EXISTS idx_usage_days_day ON queen_proxy.usage_days (day);

-- Puts a JWT id on the deny-list until the token's own expiry. Logging out
-- twice is fine. The audit row has no cluster: the deny-list has its own
-- cache, so nothing is notified.
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
END;
$$;

-- Forgets deny-list entries whose tokens have expired anyway. No audit.
CREATE OR REPLACE FUNCTION queen_proxy.sweep_revoked_tokens()
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer;
BEGIN
    DELETE FROM queen_proxy.revoked_tokens WHERE expires_at <= now();
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

-- Grants (or changes) a user's role on a cluster of the user's own tenant.
CREATE OR REPLACE FUNCTION queen_proxy.grant_cluster_role(p_cluster uuid, p_email text, p_role text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_email          text := lower(btrim(p_email));
    v_cluster_tenant uuid;
    v_user           uuid;
    v_user_tenant    uuid;
BEGIN
    IF p_role IS NULL OR p_role NOT IN ('admin', 'producer', 'consumer', 'viewer') THEN
        RAISE EXCEPTION 'grant_cluster_role: role must be one of admin, producer, consumer, viewer (got %)',
            coalesce(p_role, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF v_email IS NULL OR strpos(v_email, '@') = 0 THEN
        RAISE EXCEPTION 'grant_cluster_role: email must contain @' USING ERRCODE = '22023';
    END IF;
    SELECT tenant_id INTO v_cluster_tenant FROM queen_proxy.clusters WHERE id = p_cluster;
    IF v_cluster_tenant IS NULL THEN
        RAISE EXCEPTION 'grant_cluster_role: unknown cluster %', p_cluster USING ERRCODE = 'P0002';
    END IF;
    SELECT id, tenant_id INTO v_user, v_user_tenant FROM queen_proxy.users WHERE email = v_email;
    IF v_user IS NULL THEN
        RAISE EXCEPTION 'grant_cluster_role: unknown user %', v_email USING ERRCODE = 'P0002';
    END IF;
    IF v_user_tenant <> v_cluster_tenant THEN
        RAISE EXCEPTION 'grant_cluster_role: user % belongs to another tenant than cluster %', v_email, p_cluster
            USING ERRCODE = '42501';
    END IF;

    INSERT INTO queen_proxy.cluster_roles (user_id, cluster_id, role) VALUES (v_user, p_cluster, p_role)
    ON CONFLICT (user_id, cluster_id) DO UPDATE SET role = EXCLUDED.role;

    PERFORM queen_proxy.record_operation(v_cluster_tenant, p_cluster, 'control_plane', v_user, 'cluster_role_granted',
        v_user::text, jsonb_build_object('email', v_email, 'role', p_role));
END;
$$;

CREATE OR REPLACE FUNCTION queen_proxy.revoke_cluster_role(p_cluster uuid, p_email text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_email          text := lower(btrim(p_email));
    v_cluster_tenant uuid;
    v_user           uuid;
    v_role           text;
BEGIN
    IF v_email IS NULL OR strpos(v_email, '@') = 0 THEN
        RAISE EXCEPTION 'revoke_cluster_role: email must contain @' USING ERRCODE = '22023';
    END IF;
    SELECT tenant_id INTO v_cluster_tenant FROM queen_proxy.clusters WHERE id = p_cluster;
    IF v_cluster_tenant IS NULL THEN
        RAISE EXCEPTION 'revoke_cluster_role: unknown cluster %', p_cluster USING ERRCODE = 'P0002';
    END IF;
    SELECT id INTO v_user FROM queen_proxy.users WHERE email = v_email;
    IF v_user IS NULL THEN
        RAISE EXCEPTION 'revoke_cluster_role: unknown user %', v_email USING ERRCODE = 'P0002';
    END IF;

    DELETE FROM queen_proxy.cluster_roles WHERE user_id = v_user AND cluster_id = p_cluster
    RETURNING role INTO v_role;
    IF v_role IS NULL THEN
        RAISE EXCEPTION 'revoke_cluster_role: % has no role on cluster %', v_email, p_cluster USING ERRCODE = 'P0002';
    END IF;

    PERFORM queen_proxy.record_operation(v_cluster_tenant, p_cluster, 'control_plane', v_user, 'cluster_role_revoked',
        v_user::text, jsonb_build_object('email', v_email, 'role', v_role));
END;
$$;

-- Queues an event for the control plane. No audit row.
CREATE OR REPLACE FUNCTION queen_proxy.emit_outbox(p_kind text, p_payload jsonb)
RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_kind text := btrim(p_kind);
    v_id   uuid;
BEGIN
    IF v_kind IS NULL OR v_kind = '' THEN
        RAISE EXCEPTION 'emit_outbox: kind is required' USING ERRCODE = '22023';
    END IF;
    INSERT INTO queen_proxy.outbox (kind, payload) VALUES (v_kind, coalesce(p_payload, '{}'::jsonb))
    RETURNING id INTO v_id;
    RETURN v_id;
END;
$$;

-- One-call onboarding, first form (no password). 008 replaces it with the
-- form that also takes the admin's password.
CREATE OR REPLACE FUNCTION queen_proxy.bootstrap_tenant(
    p_tenant_slug  text,
    p_tenant_name  text,
    p_cluster_slug text,
    p_plan_code    text,
    p_cell         uuid,
    p_admin_email  text,
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

    SELECT id INTO v_tenant_id FROM queen_proxy.tenants WHERE slug = v_tenant_slug;
    IF v_tenant_id IS NULL THEN
        v_tenant_id := queen_proxy.create_tenant(v_tenant_slug,
            coalesce(nullif(btrim(p_tenant_name), ''), v_tenant_slug));
        v_new_tenant := true;
    END IF;

    SELECT id, tenant_id INTO v_cluster_id, v_cluster_tenant FROM queen_proxy.clusters WHERE slug = v_cluster_slug;
    IF v_cluster_id IS NULL THEN
        v_cluster_id := queen_proxy.create_cluster(v_tenant_id, v_cluster_slug, p_plan_code, p_cell);
    ELSIF v_cluster_tenant <> v_tenant_id THEN
        RAISE EXCEPTION 'bootstrap_tenant: cluster slug % belongs to another tenant', v_cluster_slug
            USING ERRCODE = '23505';
    END IF;

    SELECT id, tenant_id INTO v_user_id, v_user_tenant FROM queen_proxy.users WHERE email = v_email;
    IF v_user_id IS NULL THEN
        v_user_id := queen_proxy.create_user(v_tenant_id, v_email, NULL, 'local');
    ELSIF v_user_tenant <> v_tenant_id THEN
        RAISE EXCEPTION 'bootstrap_tenant: user % belongs to another tenant', v_email USING ERRCODE = '23505';
    END IF;

    PERFORM queen_proxy.grant_cluster_role(v_cluster_id, v_email, 'admin');

    IF NOT EXISTS (SELECT 1 FROM queen_proxy.api_keys
                    WHERE cluster_id = v_cluster_id AND name = v_key_name AND revoked_at IS NULL) THEN
        v_key := 'qk_live_' || translate(encode(public.gen_random_bytes(32), 'base64'), E'+/=\n', '-_');
        PERFORM queen_proxy.issue_api_key(v_cluster_id, v_key_name,
            encode(public.digest(v_key, 'sha256'), 'hex'),
            ARRAY['produce', 'consume', 'admin', 'read']::text[]);
    END IF;

    PERFORM queen_proxy.record_operation(v_tenant_id, v_cluster_id, 'control_plane', NULL, 'tenant_bootstrapped',
        v_tenant_id::text, jsonb_build_object(
            'tenant_slug', v_tenant_slug, 'cluster_slug', v_cluster_slug, 'plan_code', p_plan_code,
            'admin_email', v_email, 'key_issued', v_key IS NOT NULL));
    IF v_new_tenant THEN
        PERFORM queen_proxy.emit_outbox('tenant_bootstrapped', jsonb_build_object(
            'tenant_id', v_tenant_id, 'tenant_slug', v_tenant_slug, 'cluster_id', v_cluster_id,
            'cluster_slug', v_cluster_slug, 'plan_code', p_plan_code, 'admin_email', v_email));
    END IF;

    RETURN jsonb_build_object('tenant_id', v_tenant_id, 'cluster_id', v_cluster_id, 'user_id', v_user_id,
        'api_key', v_key);
END;
$$;

-- Recomputes every closed UTC day (through p_through, clamped to yesterday;
-- NULL = everything closed) still present in usage_minutes and REPLACES the
-- usage_days rows, so minutes that arrive late correct the day on the next
-- pass. Returns the number of day rows written.
CREATE OR REPLACE FUNCTION queen_proxy.rollup_usage_days(p_through date DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_yesterday date := (now() AT TIME ZONE 'UTC')::date - 1;
    v_through   date := least(coalesce(p_through, v_yesterday), v_yesterday);
    v_rows      integer;
BEGIN
    INSERT INTO queen_proxy.usage_days AS d (cluster_id, day, op_class, msgs, reqs, bytes_in, bytes_out)
    SELECT m.cluster_id, (m.minute AT TIME ZONE 'UTC')::date, m.op_class,
           sum(m.msgs), sum(m.reqs), sum(m.bytes_in), sum(m.bytes_out)
      FROM queen_proxy.usage_minutes m
     WHERE m.minute < ((v_through + 1)::timestamp AT TIME ZONE 'UTC')
     GROUP BY 1, 2, 3
    ON CONFLICT (cluster_id, day, op_class) DO UPDATE
       SET msgs = EXCLUDED.msgs, reqs = EXCLUDED.reqs,
           bytes_in = EXCLUDED.bytes_in, bytes_out = EXCLUDED.bytes_out;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END;
$$;

-- Messages of a cluster in the UTC calendar month containing p_month, all
-- op classes: for each day the larger of the rolled-up total and the live
-- minute total, summed. Unknown cluster: 0.
CREATE OR REPLACE FUNCTION queen_proxy.cluster_month_msgs(p_cluster uuid, p_month date)
RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_first date;
    v_next  date;
    v_total bigint;
BEGIN
    IF p_month IS NULL THEN
        RAISE EXCEPTION 'cluster_month_msgs: month is required' USING ERRCODE = '22023';
    END IF;
    v_first := date_trunc('month', p_month)::date;
    v_next  := (v_first + interval '1 month')::date;

    SELECT coalesce(sum(greatest(coalesce(d.msgs, 0), coalesce(m.msgs, 0))), 0)::bigint INTO v_total
      FROM (SELECT day, sum(msgs) AS msgs
              FROM queen_proxy.usage_days
             WHERE cluster_id = p_cluster AND day >= v_first AND day < v_next
             GROUP BY day) d
      FULL JOIN
           (SELECT (minute AT TIME ZONE 'UTC')::date AS day, sum(msgs) AS msgs
              FROM queen_proxy.usage_minutes
             WHERE cluster_id = p_cluster
               AND minute >= (v_first::timestamp AT TIME ZONE 'UTC')
               AND minute <  (v_next::timestamp AT TIME ZONE 'UTC')
             GROUP BY 1) m
        ON m.day = d.day;
    RETURN v_total;
END;
$$;
