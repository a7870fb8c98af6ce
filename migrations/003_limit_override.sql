-- 003_limit_override: per-cluster limit deltas over the plan.
--
-- The overrides object replaces the previous one as a whole; NULL or {}
-- clears every override. Key names and values are not validated here (the
-- gateway validates them): a key mapped to JSON null means unlimited, a
-- number replaces the plan value, anything else falls back to the plan.

CREATE OR REPLACE FUNCTION queen_proxy.set_limit_override(p_cluster_id uuid, p_overrides jsonb)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_overrides jsonb := coalesce(p_overrides, '{}'::jsonb);
    v_tenant    uuid;
BEGIN
    IF jsonb_typeof(v_overrides) <> 'object' THEN
        RAISE EXCEPTION 'set_limit_override: overrides must be a JSON object (got %)', jsonb_typeof(v_overrides)
            USING ERRCODE = '22023';
    END IF;
    UPDATE queen_proxy.clusters SET limit_overrides = v_overrides WHERE id = p_cluster_id
    RETURNING tenant_id INTO v_tenant;
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'set_limit_override: unknown cluster %', p_cluster_id USING ERRCODE = 'P0002';
    END IF;

    PERFORM queen_proxy.record_operation(v_tenant, p_cluster_id, 'control_plane', NULL, 'limit_override_set',
        p_cluster_id::text, v_overrides);
END;
$$;
