-- 021_console_refusals: requests per cluster, API key, minute and outcome,
-- for the console's per-key usage and its charts of refusals.
--
-- usage_minutes counts what a cluster used (by operation class, for billing
-- and quotas); it says nothing of which key made a request, nor of the
-- requests the gateway refused before they reached the cell. This table
-- counts every request the gateway could attribute to a cluster, by the
-- outcome the client saw. It is an observation, not a bill: the gateway
-- writes it every few seconds with an additive upsert, and a crash loses at
-- most the counts of that interval. Nothing reads it for enforcement.
--
--   key_id   the API key's id, '' for human sessions and for requests
--            refused before their credential was known
--   outcome  ok (2xx, 3xx), 403, 429, 4xx (any other 4xx), 5xx
CREATE TABLE IF NOT EXISTS queen_proxy.request_minutes (
    cluster_id uuid        NOT NULL REFERENCES queen_proxy.clusters (id) ON DELETE CASCADE,
    minute     timestamptz NOT NULL CHECK (minute = date_trunc('minute', minute)),
    key_id     text        NOT NULL DEFAULT '',
    outcome    text        NOT NULL CHECK (outcome IN ('ok', '403', '429', '4xx', '5xx')),
    reqs       bigint      NOT NULL DEFAULT 0 CHECK (reqs >= 0),
    PRIMARY KEY (cluster_id, minute, key_id, outcome)
);
CREATE INDEX IF NOT EXISTS idx_request_minutes_minute ON queen_proxy.request_minutes (minute);

-- Deletes request counts older than p_keep_days. Returns the rows deleted.
CREATE OR REPLACE FUNCTION queen_proxy.prune_request_minutes(p_keep_days integer DEFAULT 35)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer;
BEGIN
    IF p_keep_days IS NULL OR p_keep_days < 1 THEN
        RAISE EXCEPTION 'prune_request_minutes: keep_days must be at least 1 (got %)', coalesce(p_keep_days::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    DELETE FROM queen_proxy.request_minutes WHERE minute < now() - make_interval(days => p_keep_days);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;
