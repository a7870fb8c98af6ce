-- 007_tenant_delete: hard deletion of a tenant and everything it owns.
--
-- A wipe takes three steps, in this order:
--   1. set_tenant_status(tenant, 'deleting')  -- stops all traffic at once;
--   2. purge each cluster's data on its cell's broker
--      (queen.delete_tenant_data_v1(broker_tenant_uuid), repeated until done);
--   3. delete_tenant(tenant).
-- delete_tenant refuses a tenant that is not 'deleting' unless p_force. It
-- revokes live keys, records a tenant_deleted outbox event (the only trace
-- left: the tenant's audit rows go with it), redacts admin_email from the
-- tenant's earlier outbox events, deletes the tenant (cascading to users,
-- identities, clusters, roles, keys, queues and usage) and invalidates every
-- deleted cluster. An unknown tenant is not an error. The JWT deny-list and
-- the cells are left alone.

CREATE OR REPLACE FUNCTION queen_proxy.delete_tenant(p_tenant_id uuid, p_force boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_forced      boolean := coalesce(p_force, false);
    v_slug        text;
    v_status      text;
    v_cluster_ids uuid[];
    v_clusters    jsonb;
    v_counts      jsonb;
    v_revoked     integer;
    v_operations  integer;
    v_redacted    integer;
    v_cluster     uuid;
BEGIN
    SELECT slug, status INTO v_slug, v_status FROM queen_proxy.tenants WHERE id = p_tenant_id FOR UPDATE;
    IF v_slug IS NULL THEN
        RETURN jsonb_build_object('deleted', false, 'existed', false, 'tenant_id', p_tenant_id);
    END IF;
    IF v_status <> 'deleting' AND NOT v_forced THEN
        RAISE EXCEPTION 'delete_tenant: tenant % is %, not deleting; first run set_tenant_status(%, ''deleting'') to stop traffic, then purge every cluster on its cell (queen.delete_tenant_data_v1(broker_tenant_uuid)), then call delete_tenant again (or pass p_force => true)',
            v_slug, v_status, p_tenant_id USING ERRCODE = '55000';
    END IF;

    SELECT coalesce(array_agg(id ORDER BY slug), '{}'::uuid[]),
           coalesce(jsonb_agg(jsonb_build_object('cluster_id', id, 'slug', slug, 'cell_id', cell_id,
                                                 'broker_tenant_uuid', broker_tenant_uuid) ORDER BY slug),
                    '[]'::jsonb)
      INTO v_cluster_ids, v_clusters
      FROM queen_proxy.clusters WHERE tenant_id = p_tenant_id;

    v_counts := jsonb_build_object(
        'clusters', cardinality(v_cluster_ids),
        'users', (SELECT count(*) FROM queen_proxy.users WHERE tenant_id = p_tenant_id),
        'cluster_roles', (SELECT count(*) FROM queen_proxy.cluster_roles r
                           WHERE r.cluster_id = ANY (v_cluster_ids)
                              OR r.user_id IN (SELECT id FROM queen_proxy.users WHERE tenant_id = p_tenant_id)),
        'queues', (SELECT count(*) FROM queen_proxy.queues WHERE cluster_id = ANY (v_cluster_ids)),
        'api_keys', (SELECT count(*) FROM queen_proxy.api_keys WHERE cluster_id = ANY (v_cluster_ids)));

    UPDATE queen_proxy.api_keys SET revoked_at = now()
     WHERE cluster_id = ANY (v_cluster_ids) AND revoked_at IS NULL;
    GET DIAGNOSTICS v_revoked = ROW_COUNT;
    v_counts := v_counts || jsonb_build_object('api_keys_revoked', v_revoked);

    PERFORM queen_proxy.emit_outbox('tenant_deleted', jsonb_build_object(
        'tenant_id', p_tenant_id, 'tenant_slug', v_slug, 'status_was', v_status, 'forced', v_forced,
        'clusters', v_clusters, 'counts', v_counts, 'at', now()));

    UPDATE queen_proxy.outbox
       SET payload = payload - 'admin_email'
     WHERE jsonb_exists(payload, 'admin_email')
       AND (payload ->> 'tenant_id' = p_tenant_id::text
            OR payload ->> 'cluster_id' IN (SELECT unnest(v_cluster_ids)::text));
    GET DIAGNOSTICS v_redacted = ROW_COUNT;

    DELETE FROM queen_proxy.operations WHERE tenant_id = p_tenant_id;
    GET DIAGNOSTICS v_operations = ROW_COUNT;

    DELETE FROM queen_proxy.tenants WHERE id = p_tenant_id;

    FOREACH v_cluster IN ARRAY v_cluster_ids LOOP
        PERFORM pg_notify('queen_proxy_inval', v_cluster::text);
    END LOOP;

    RETURN jsonb_build_object(
        'deleted', true, 'existed', true, 'tenant_id', p_tenant_id, 'tenant_slug', v_slug,
        'status_was', v_status, 'forced', v_forced, 'clusters', v_clusters,
        'counts', v_counts || jsonb_build_object('operations', v_operations, 'outbox_redacted', v_redacted));
END;
$$;
