-- 033_usage_export: usage pushed to a billing system as CloudEvents.
--
-- Exporting is two steps, so that a retry never carries a different event
-- under an old id or the same usage under a new one:
--
--   1. usage_export_generate turns what usage_minutes gained since the
--      last run into events (usage_export_events), and records in the
--      ledger (usage_export_ledger) the values it read, in one transaction.
--      A minute's row that grows later (a spool replayed after an outage)
--      yields another event for the difference only.
--   2. The gateway sends pending events in order and marks them sent.
--      Killed or refused between the two, it sends the same events, with
--      the same ids, again: the receiver deduplicates by id.
--
-- The ledger and the pending events are the cursor: nothing is skipped or
-- sent twice across restarts, leader changes and receiver outages. Each
-- sink (receiver) has its own, and starts with the minute it was first
-- exported to.

CREATE TABLE IF NOT EXISTS queen_proxy.usage_export_sinks (
    sink     text        PRIMARY KEY CHECK (sink ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    start_at timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS queen_proxy.usage_export_ledger (
    sink            text        NOT NULL REFERENCES queen_proxy.usage_export_sinks (sink) ON DELETE CASCADE,
    cluster_id      uuid        NOT NULL,
    minute          timestamptz NOT NULL,
    op_class        text        NOT NULL,
    msgs            bigint      NOT NULL,
    reqs            bigint      NOT NULL,
    bytes_in        bigint      NOT NULL,
    bytes_out       bigint      NOT NULL,
    unanswered_msgs bigint      NOT NULL,
    PRIMARY KEY (sink, cluster_id, minute, op_class)
);
CREATE INDEX IF NOT EXISTS idx_usage_export_ledger_minute ON queen_proxy.usage_export_ledger (minute);

-- Events outlive their cluster: what was used is billed even when the
-- cluster was deleted before the event was sent.
CREATE TABLE IF NOT EXISTS queen_proxy.usage_export_events (
    seq             bigserial   PRIMARY KEY,
    sink            text        NOT NULL REFERENCES queen_proxy.usage_export_sinks (sink) ON DELETE CASCADE,
    id              text        NOT NULL,
    cluster_id      uuid        NOT NULL,
    cluster_slug    text        NOT NULL,
    tenant_id       uuid        NOT NULL,
    tenant_slug     text        NOT NULL,
    period_start    timestamptz NOT NULL,
    period_end      timestamptz NOT NULL,
    op_class        text        NOT NULL,
    msgs            bigint      NOT NULL,
    reqs            bigint      NOT NULL,
    bytes_in        bigint      NOT NULL,
    bytes_out       bigint      NOT NULL,
    unanswered_msgs bigint      NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    UNIQUE (sink, id)
);
CREATE INDEX IF NOT EXISTS idx_usage_export_events_pending
    ON queen_proxy.usage_export_events (sink, seq) WHERE sent_at IS NULL;

-- Step 1 for sink: every closed period (p_granularity 'minute' or 'hour',
-- closed p_settle ago) from the sink's start and at most p_lookback back,
-- whose usage_minutes rows differ from the ledger, becomes one event per
-- cluster, period and op class carrying the difference. Returns how many
-- events it made. Callers hold the sink's lock (one exporter at a time);
-- the ledger's primary key refuses a second concurrent run anyway.
CREATE OR REPLACE FUNCTION queen_proxy.usage_export_generate(
    p_sink        text,
    p_granularity text,
    p_settle      interval,
    p_lookback    interval
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_start timestamptz;
    v_from  timestamptz;
    v_to    timestamptz;
    v_step  interval;
    v_count integer;
BEGIN
    IF p_granularity IS NULL OR p_granularity NOT IN ('minute', 'hour') THEN
        RAISE EXCEPTION 'usage_export_generate: granularity must be minute or hour (got %)', coalesce(p_granularity, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF p_settle IS NULL OR p_settle < interval '0' OR p_lookback IS NULL OR p_lookback <= interval '0' THEN
        RAISE EXCEPTION 'usage_export_generate: settle must not be negative and lookback must be positive'
            USING ERRCODE = '22023';
    END IF;
    v_step := CASE p_granularity WHEN 'minute' THEN interval '1 minute' ELSE interval '1 hour' END;
    INSERT INTO queen_proxy.usage_export_sinks (sink, start_at) VALUES (p_sink, date_trunc(p_granularity, now()))
    ON CONFLICT (sink) DO NOTHING;
    SELECT start_at INTO v_start FROM queen_proxy.usage_export_sinks WHERE sink = p_sink;
    v_from := greatest(v_start, date_trunc(p_granularity, now() - p_lookback));
    v_to := date_trunc(p_granularity, now() - p_settle);

    CREATE TEMP TABLE IF NOT EXISTS pg_temp.usage_export_changed (
        cluster_id uuid, minute timestamptz, op_class text,
        msgs bigint, reqs bigint, bytes_in bigint, bytes_out bigint, unanswered_msgs bigint,
        d_msgs bigint, d_reqs bigint, d_bytes_in bigint, d_bytes_out bigint, d_unanswered bigint, was text
    ) ON COMMIT DROP;
    DELETE FROM pg_temp.usage_export_changed;

    INSERT INTO pg_temp.usage_export_changed
    SELECT u.cluster_id, u.minute, u.op_class, u.msgs, u.reqs, u.bytes_in, u.bytes_out, u.unanswered_msgs,
           u.msgs - coalesce(l.msgs, 0), u.reqs - coalesce(l.reqs, 0), u.bytes_in - coalesce(l.bytes_in, 0),
           u.bytes_out - coalesce(l.bytes_out, 0), u.unanswered_msgs - coalesce(l.unanswered_msgs, 0),
           coalesce(l.msgs || '/' || l.reqs || '/' || l.bytes_in || '/' || l.bytes_out || '/' || l.unanswered_msgs, '-')
      FROM queen_proxy.usage_minutes u
      LEFT JOIN queen_proxy.usage_export_ledger l
        ON l.sink = p_sink AND l.cluster_id = u.cluster_id AND l.minute = u.minute AND l.op_class = u.op_class
     WHERE u.minute >= v_from AND u.minute < v_to
       AND (l.sink IS NULL
            OR (l.msgs, l.reqs, l.bytes_in, l.bytes_out, l.unanswered_msgs)
               IS DISTINCT FROM (u.msgs, u.reqs, u.bytes_in, u.bytes_out, u.unanswered_msgs));

    INSERT INTO queen_proxy.usage_export_ledger AS l
           (sink, cluster_id, minute, op_class, msgs, reqs, bytes_in, bytes_out, unanswered_msgs)
    SELECT p_sink, cluster_id, minute, op_class, msgs, reqs, bytes_in, bytes_out, unanswered_msgs
      FROM pg_temp.usage_export_changed
    ON CONFLICT (sink, cluster_id, minute, op_class) DO UPDATE
       SET msgs = EXCLUDED.msgs, reqs = EXCLUDED.reqs, bytes_in = EXCLUDED.bytes_in,
           bytes_out = EXCLUDED.bytes_out, unanswered_msgs = EXCLUDED.unanswered_msgs;

    -- The id is a digest of what the event says and of the ledger state it
    -- starts from: the same difference of the same rows is the same id.
    INSERT INTO queen_proxy.usage_export_events
           (sink, id, cluster_id, cluster_slug, tenant_id, tenant_slug, period_start, period_end, op_class,
            msgs, reqs, bytes_in, bytes_out, unanswered_msgs)
    SELECT p_sink,
           encode(sha256(convert_to(p_sink || '|' || x.cluster_id || '|' || x.period || '|' || x.op_class || '|' || x.trail, 'UTF8')), 'hex'),
           x.cluster_id, c.slug, c.tenant_id, t.slug, x.period, x.period + v_step, x.op_class,
           x.msgs, x.reqs, x.bytes_in, x.bytes_out, x.unanswered
      FROM (SELECT cluster_id, date_trunc(p_granularity, minute) AS period, op_class,
                   sum(d_msgs)::bigint AS msgs, sum(d_reqs)::bigint AS reqs, sum(d_bytes_in)::bigint AS bytes_in,
                   sum(d_bytes_out)::bigint AS bytes_out, sum(d_unanswered)::bigint AS unanswered,
                   string_agg(minute::text || ':' || was || '>' || msgs || '/' || reqs || '/' || bytes_in || '/' || bytes_out
                              || '/' || unanswered_msgs, ',' ORDER BY minute) AS trail
              FROM pg_temp.usage_export_changed
             GROUP BY cluster_id, date_trunc(p_granularity, minute), op_class) x
      JOIN queen_proxy.clusters c ON c.id = x.cluster_id
      JOIN queen_proxy.tenants t ON t.id = c.tenant_id
     ORDER BY x.period, x.cluster_id, x.op_class
    ON CONFLICT (sink, id) DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;

    -- Ledger rows older than any minute a run reads are of no more use,
    -- and sent events are kept a week for inspection.
    DELETE FROM queen_proxy.usage_export_ledger
     WHERE sink = p_sink AND minute < date_trunc(p_granularity, now() - p_lookback) - interval '1 day';
    DELETE FROM queen_proxy.usage_export_events
     WHERE sink = p_sink AND sent_at < now() - interval '7 days';
    RETURN v_count;
END;
$$;
