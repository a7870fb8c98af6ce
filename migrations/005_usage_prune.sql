-- 005_usage_prune: bounded retention of usage_minutes.

-- Deletes minute rows older than (UTC today - p_keep_days) but only where the
-- matching usage_days row (cluster, UTC day, op class) exists, so a day that
-- was never rolled up is never lost. Returns the number of rows deleted.
CREATE OR REPLACE FUNCTION queen_proxy.prune_usage_minutes(p_keep_days integer DEFAULT 90)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_cutoff timestamptz;
    v_count  integer;
BEGIN
    IF p_keep_days IS NULL OR p_keep_days < 1 THEN
        RAISE EXCEPTION 'prune_usage_minutes: keep_days must be at least 1 (got %)', coalesce(p_keep_days::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    v_cutoff := ((now() AT TIME ZONE 'UTC')::date - p_keep_days)::timestamp AT TIME ZONE 'UTC';

    DELETE FROM queen_proxy.usage_minutes m
     WHERE m.minute < v_cutoff
       AND EXISTS (SELECT 1 FROM queen_proxy.usage_days d
                    WHERE d.cluster_id = m.cluster_id
                      AND d.day = (m.minute AT TIME ZONE 'UTC')::date
                      AND d.op_class = m.op_class);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;
