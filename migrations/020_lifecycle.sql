-- 020_lifecycle: the lifecycle steps that had no SQL function of their own:
-- deleting one cluster, and setting a user's password. Both follow 002's
-- discipline (validate, write, audit once, tell the gateways) so the CLI,
-- the console and plain SQL change the same rows the same way.
--
-- SQLSTATEs as in 002: 22023 invalid argument, P0002 unknown row, 55000 an
-- object in the wrong state.

-- Deletes one cluster and everything it owns in the control plane (its
-- roles, API keys, queue registry, usage), like delete_tenant does for a
-- whole tenant, in the same three steps:
--   1. set_cluster_status(cluster, 'deleting')  -- stops its traffic at once;
--   2. purge its data on its cell's broker
--      (queen.delete_tenant_data_v1(broker_tenant_uuid), repeated until done);
--   3. delete_cluster(cluster).
-- It refuses a cluster that is not 'deleting' unless p_force. Live keys are
-- revoked first (so a key cached by a gateway that misses the notification
-- still finds no row once it looks again), a cluster_deleted event stays in
-- the outbox (the audit row outlives the cluster, with cluster_id NULL) and
-- every gateway drops the cluster. The keeper guard of 016 applies to the
-- DELETE: a keeper of a cell not known to scope leaves only released. An
-- unknown cluster is not an error.
CREATE OR REPLACE FUNCTION queen_proxy.delete_cluster(p_cluster_id uuid, p_force boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_forced  boolean := coalesce(p_force, false);
    v_slug    text;
    v_status  text;
    v_tenant  uuid;
    v_cell    uuid;
    v_broker  uuid;
    v_counts  jsonb;
    v_revoked integer;
BEGIN
    SELECT slug, status, tenant_id, cell_id, broker_tenant_uuid
      INTO v_slug, v_status, v_tenant, v_cell, v_broker
      FROM queen_proxy.clusters WHERE id = p_cluster_id FOR UPDATE;
    IF v_slug IS NULL THEN
        RETURN jsonb_build_object('deleted', false, 'existed', false, 'cluster_id', p_cluster_id);
    END IF;
    IF v_status <> 'deleting' AND NOT v_forced THEN
        RAISE EXCEPTION 'delete_cluster: cluster % is %, not deleting; first run set_cluster_status(%, ''deleting'') to stop its traffic, then purge it on its cell (queen.delete_tenant_data_v1(''%'')), then call delete_cluster again (or pass p_force => true)',
            v_slug, v_status, p_cluster_id, v_broker USING ERRCODE = '55000';
    END IF;

    v_counts := jsonb_build_object(
        'cluster_roles', (SELECT count(*) FROM queen_proxy.cluster_roles WHERE cluster_id = p_cluster_id),
        'queues', (SELECT count(*) FROM queen_proxy.queues WHERE cluster_id = p_cluster_id),
        'api_keys', (SELECT count(*) FROM queen_proxy.api_keys WHERE cluster_id = p_cluster_id));
    UPDATE queen_proxy.api_keys SET revoked_at = now() WHERE cluster_id = p_cluster_id AND revoked_at IS NULL;
    GET DIAGNOSTICS v_revoked = ROW_COUNT;
    v_counts := v_counts || jsonb_build_object('api_keys_revoked', v_revoked);

    PERFORM queen_proxy.emit_outbox('cluster_deleted', jsonb_build_object(
        'cluster_id', p_cluster_id, 'cluster_slug', v_slug, 'tenant_id', v_tenant, 'cell_id', v_cell,
        'broker_tenant_uuid', v_broker, 'status_was', v_status, 'forced', v_forced, 'counts', v_counts, 'at', now()));

    DELETE FROM queen_proxy.clusters WHERE id = p_cluster_id;

    -- The cluster is gone, so the audit row names it in target and meta
    -- only; the notification is sent by hand for the same reason.
    PERFORM queen_proxy.record_operation(v_tenant, NULL, 'control_plane', NULL, 'cluster_deleted', p_cluster_id::text,
        jsonb_build_object('slug', v_slug, 'cell_id', v_cell, 'broker_tenant_uuid', v_broker,
                           'status_was', v_status, 'forced', v_forced, 'counts', v_counts));
    PERFORM pg_notify('queen_proxy_inval', p_cluster_id::text);

    RETURN jsonb_build_object(
        'deleted', true, 'existed', true, 'cluster_id', p_cluster_id, 'cluster_slug', v_slug,
        'tenant_id', v_tenant, 'cell_id', v_cell, 'broker_tenant_uuid', v_broker,
        'status_was', v_status, 'forced', v_forced, 'counts', v_counts);
END;
$$;

-- When a user's sessions were ended: a session token issued before it is
-- refused by every gateway (NULL: never). A new password sets it.
ALTER TABLE queen_proxy.users ADD COLUMN IF NOT EXISTS sessions_ended_at timestamptz;

-- Sets (or, with NULL, removes) a local user's password. It takes a hash,
-- never a password: bcrypt ($2a$, $2b$, $2y$) or argon2id, the formats the
-- gateway verifies, so the plaintext never reaches the database or its logs.
-- It ends the user's sessions (sessions_ended_at), as a reset must: one who
-- knew the old password is signed out; the nil-uuid notification makes every
-- gateway drop its cached answers at once. Audited as user_password_set
-- (with whether it was cleared, never the hash).
CREATE OR REPLACE FUNCTION queen_proxy.set_user_password(p_user uuid, p_password_hash text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant uuid;
BEGIN
    IF p_password_hash IS NOT NULL
       AND p_password_hash !~ '^\$2[aby]\$[0-9]{2}\$[./A-Za-z0-9]{53}$'
       AND p_password_hash !~ '^\$argon2id\$v=19\$m=[0-9]+,t=[0-9]+,p=[0-9]+\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]+$' THEN
        RAISE EXCEPTION 'set_user_password: the hash is neither bcrypt nor argon2id' USING ERRCODE = '22023';
    END IF;
    UPDATE queen_proxy.users SET password_hash = p_password_hash, sessions_ended_at = clock_timestamp()
     WHERE id = p_user RETURNING tenant_id INTO v_tenant;
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'set_user_password: unknown user %', p_user USING ERRCODE = 'P0002';
    END IF;
    PERFORM queen_proxy.record_operation(v_tenant, NULL, 'control_plane', p_user, 'user_password_set', p_user::text,
        jsonb_build_object('cleared', p_password_hash IS NULL, 'sessions_ended', true));
    PERFORM pg_notify('queen_proxy_inval', '00000000-0000-0000-0000-000000000000');
END;
$$;
