-- 013_meter: queengate's additions for usage metering and the monthly quota
-- chain. The gateway writes usage in batches that carry a unique id, and
-- records the id in the same statement as the rows, so a batch that is
-- written twice (a lost commit acknowledgement, a spool file replayed again
-- after a crash) is added once. The monthly quota counts billable pushes only
-- (not deliveries), and each warning or block is announced once per cluster
-- and month however many gateways evaluate it.

-- Usage batches already added to usage_minutes. Pruned by
-- prune_meter_batches; a batch older than the horizon is no longer
-- recognised, so keep the horizon longer than any spool can lie unreplayed.
CREATE TABLE IF NOT EXISTS queen_proxy.meter_batches (
    batch_id   text        PRIMARY KEY CHECK (btrim(batch_id) <> ''),
    row_count  integer     NOT NULL DEFAULT 0 CHECK (row_count >= 0),
    applied_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_meter_batches_applied_at ON queen_proxy.meter_batches (applied_at);

-- Deletes batch ids recorded more than p_keep_days ago. Returns the number of
-- ids deleted.
CREATE OR REPLACE FUNCTION queen_proxy.prune_meter_batches(p_keep_days integer DEFAULT 90)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_count integer;
BEGIN
    IF p_keep_days IS NULL OR p_keep_days < 1 THEN
        RAISE EXCEPTION 'prune_meter_batches: keep_days must be at least 1 (got %)', coalesce(p_keep_days::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    DELETE FROM queen_proxy.meter_batches WHERE applied_at < now() - make_interval(days => p_keep_days);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

-- Billable messages of a cluster in the UTC calendar month containing
-- p_month: the push and txn op classes only (stored pushes, committed
-- transactional pushes, stream sink items, stored DLQ replays), never
-- deliveries. Per UTC day the larger of the rolled-up and the live minute
-- total, summed, exactly like cluster_month_msgs. Unknown cluster: 0.
CREATE OR REPLACE FUNCTION queen_proxy.cluster_month_billable_msgs(p_cluster uuid, p_month date)
RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_first date;
    v_next  date;
    v_total bigint;
BEGIN
    IF p_month IS NULL THEN
        RAISE EXCEPTION 'cluster_month_billable_msgs: month is required' USING ERRCODE = '22023';
    END IF;
    v_first := date_trunc('month', p_month)::date;
    v_next  := (v_first + interval '1 month')::date;

    SELECT coalesce(sum(greatest(coalesce(d.msgs, 0), coalesce(m.msgs, 0))), 0)::bigint INTO v_total
      FROM (SELECT day, sum(msgs) AS msgs
              FROM queen_proxy.usage_days
             WHERE cluster_id = p_cluster AND day >= v_first AND day < v_next
               AND op_class IN ('push', 'txn')
             GROUP BY day) d
      FULL JOIN
           (SELECT (minute AT TIME ZONE 'UTC')::date AS day, sum(msgs) AS msgs
              FROM queen_proxy.usage_minutes
             WHERE cluster_id = p_cluster
               AND minute >= (v_first::timestamp AT TIME ZONE 'UTC')
               AND minute <  (v_next::timestamp AT TIME ZONE 'UTC')
               AND op_class IN ('push', 'txn')
             GROUP BY 1) m
        ON m.day = d.day;
    RETURN v_total;
END;
$$;

-- One row per monthly-quota announcement made: the key that keeps a warning
-- or block event to one per cluster and month across restarts and gateways.
CREATE TABLE IF NOT EXISTS queen_proxy.quota_announcements (
    cluster_id   uuid        NOT NULL REFERENCES queen_proxy.clusters (id) ON DELETE CASCADE,
    month        text        NOT NULL CHECK (month ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
    kind         text        NOT NULL
                             CHECK (kind IN ('cluster_monthly_quota_warning', 'cluster_monthly_quota_blocked')),
    announced_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster_id, month, kind)
);

-- Announces that a cluster reached a monthly-quota level (kind
-- cluster_monthly_quota_warning or cluster_monthly_quota_blocked) in month
-- (YYYY-MM, UTC): an outbox event with payload {cluster_id, cluster_slug,
-- tenant_id, month, msgs, quota, percent} and an audit row, at most once per
-- cluster, month and kind. An event that an earlier gateway (queen_proxy
-- included) already put in the outbox counts as made. Returns true when this
-- call announced, false when it had been announced before.
CREATE OR REPLACE FUNCTION queen_proxy.announce_monthly_quota(
    p_cluster_id uuid,
    p_kind       text,
    p_month      text,
    p_msgs       bigint,
    p_quota      bigint
) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant  uuid;
    v_slug    text;
    v_percent numeric;
BEGIN
    IF p_kind IS NULL OR p_kind NOT IN ('cluster_monthly_quota_warning', 'cluster_monthly_quota_blocked') THEN
        RAISE EXCEPTION 'announce_monthly_quota: kind must be cluster_monthly_quota_warning or cluster_monthly_quota_blocked (got %)',
            coalesce(p_kind, 'NULL') USING ERRCODE = '22023';
    END IF;
    IF p_month IS NULL OR p_month !~ '^[0-9]{4}-(0[1-9]|1[0-2])$' THEN
        RAISE EXCEPTION 'announce_monthly_quota: month must be YYYY-MM (got %)', coalesce(p_month, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF p_msgs IS NULL OR p_msgs < 0 OR p_quota IS NULL OR p_quota < 0 THEN
        RAISE EXCEPTION 'announce_monthly_quota: msgs and quota must be non-negative (got %, %)',
            coalesce(p_msgs::text, 'NULL'), coalesce(p_quota::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    SELECT tenant_id, slug INTO v_tenant, v_slug FROM queen_proxy.clusters WHERE id = p_cluster_id;
    IF v_tenant IS NULL THEN
        RAISE EXCEPTION 'announce_monthly_quota: unknown cluster %', coalesce(p_cluster_id::text, 'NULL')
            USING ERRCODE = 'P0002';
    END IF;

    INSERT INTO queen_proxy.quota_announcements (cluster_id, month, kind)
    VALUES (p_cluster_id, p_month, p_kind)
    ON CONFLICT (cluster_id, month, kind) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM queen_proxy.outbox
                WHERE kind = p_kind
                  AND payload ->> 'cluster_id' = p_cluster_id::text
                  AND payload ->> 'month' = p_month) THEN
        RETURN false;
    END IF;

    v_percent := CASE WHEN p_quota = 0 THEN 100 ELSE floor(p_msgs::numeric * 100 / p_quota) END;
    PERFORM queen_proxy.emit_outbox(p_kind, jsonb_build_object(
        'cluster_id', p_cluster_id, 'cluster_slug', v_slug, 'tenant_id', v_tenant,
        'month', p_month, 'msgs', p_msgs, 'quota', p_quota, 'percent', v_percent));
    PERFORM queen_proxy.record_operation(v_tenant, p_cluster_id, 'system', NULL,
        CASE p_kind WHEN 'cluster_monthly_quota_warning' THEN 'monthly_quota_warning'
                    ELSE 'monthly_quota_blocked' END,
        p_month, jsonb_build_object('msgs', p_msgs, 'quota', p_quota, 'percent', v_percent));
    RETURN true;
END;
$$;
