-- 037_usage_rollup_incremental: the hourly roll-up of usage_minutes into
-- usage_days reads only the days that can have changed, instead of every
-- minute row older than today (90 days of a fleet's minutes, every hour, on
-- every gateway), and writes only the day rows whose values changed.
--
-- Which days can have changed:
--   * yesterday and the day before, always: a gateway writes yesterday's
--     last minutes just after midnight, and a spool replays a little late;
--   * any older day that received a write since it was last rolled up: a
--     row-level trigger on usage_minutes records such a day in
--     usage_rollup_pending. Its WHEN clause lets it fire only for rows of
--     the day before yesterday and older, so the flushes of today's and
--     yesterday's minutes (nearly every write) queue nothing. The day before
--     yesterday is in both sets on purpose: a write to it that the trigger
--     let pass (made while it was still yesterday) is still rolled up by
--     every run of the whole following day, so no write falls between.
--
-- The trigger is made on the partitioned table, so PostgreSQL clones it to
-- every partition, those made later by usage_partitions_ensure and the
-- DEFAULT partition included, and a row written straight into a partition
-- fires it too. It covers INSERT and UPDATE (a writer's ON CONFLICT DO
-- UPDATE fires the UPDATE trigger). DELETE is left out: rows are deleted
-- only by the prune (rows already rolled up, which usage_days keeps on
-- purpose), by a cluster's deletion (whose usage_days rows go with it), and
-- by usage_partitions_ensure's move of rows out of the DEFAULT partition
-- (re-inserted into the new day at once); the full re-aggregation of 017
-- never reflected a delete in usage_days either.

CREATE TABLE IF NOT EXISTS queen_proxy.usage_rollup_pending (
    day date PRIMARY KEY
);

-- Records the day of a late minute row. A writer whose day is already
-- pending takes a KEY SHARE lock on that row rather than doing nothing: the
-- roll-up deletes the pending days it takes and only then reads their
-- minutes, so without the lock a roll-up could delete the row and read the
-- day before this writer commits, and the write would be left out with
-- nothing pending to bring it back. With the lock the roll-up's delete waits
-- for the writer's commit and its read then sees the row. A row this writer
-- inserts itself is invisible to a roll-up until the commit, so it stays
-- pending for the next run.
CREATE OR REPLACE FUNCTION queen_proxy.usage_rollup_mark_late()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_day date := (NEW.minute AT TIME ZONE 'UTC')::date;
BEGIN
    LOOP
        PERFORM 1 FROM queen_proxy.usage_rollup_pending WHERE day = v_day FOR KEY SHARE;
        EXIT WHEN FOUND;
        INSERT INTO queen_proxy.usage_rollup_pending (day) VALUES (v_day) ON CONFLICT (day) DO NOTHING;
        EXIT WHEN FOUND;
        -- Someone else inserted it meanwhile: lock theirs.
    END LOOP;
    RETURN NULL;
END;
$$;

-- The roll-up of 017, same name, arguments and result: the usage_days rows
-- of the UTC days through p_through (default and at most yesterday), now
-- only for the days that can have changed (above), each day read by its own
-- range of minutes so that only its partition is scanned. A day row is
-- written only when a value differs, and the result is the number of
-- usage_days rows inserted or changed (0 when nothing changed). The pending
-- days it takes are deleted first and their minutes read after, in the same
-- transaction: a failed roll-up leaves them pending, and a write that comes
-- after the delete marks its day pending again. Pending days after
-- p_through stay pending.
CREATE OR REPLACE FUNCTION queen_proxy.rollup_usage_days(p_through date DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_yesterday date := (now() AT TIME ZONE 'UTC')::date - 1;
    v_through   date := least(coalesce(p_through, v_yesterday), v_yesterday);
    v_taken     date[];
    v_day       date;
    v_rows      integer := 0;
    v_n         integer;
BEGIN
    WITH taken AS (
        DELETE FROM queen_proxy.usage_rollup_pending WHERE day <= v_through RETURNING day
    )
    SELECT coalesce(array_agg(day), '{}') INTO v_taken FROM taken;

    FOR v_day IN SELECT DISTINCT d FROM unnest(v_taken || ARRAY[v_yesterday, v_yesterday - 1]) AS d
                  WHERE d <= v_through ORDER BY d LOOP
        INSERT INTO queen_proxy.usage_days AS u
               (cluster_id, day, op_class, msgs, reqs, bytes_in, bytes_out, unanswered_msgs)
        SELECT m.cluster_id, v_day, m.op_class,
               sum(m.msgs), sum(m.reqs), sum(m.bytes_in), sum(m.bytes_out), sum(m.unanswered_msgs)
          FROM queen_proxy.usage_minutes m
         WHERE m.minute >= (v_day::timestamp AT TIME ZONE 'UTC')
           AND m.minute < ((v_day + 1)::timestamp AT TIME ZONE 'UTC')
         GROUP BY m.cluster_id, m.op_class
        ON CONFLICT (cluster_id, day, op_class) DO UPDATE
           SET msgs = EXCLUDED.msgs, reqs = EXCLUDED.reqs,
               bytes_in = EXCLUDED.bytes_in, bytes_out = EXCLUDED.bytes_out,
               unanswered_msgs = EXCLUDED.unanswered_msgs
         WHERE (u.msgs, u.reqs, u.bytes_in, u.bytes_out, u.unanswered_msgs)
               IS DISTINCT FROM
               (EXCLUDED.msgs, EXCLUDED.reqs, EXCLUDED.bytes_in, EXCLUDED.bytes_out, EXCLUDED.unanswered_msgs);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_rows := v_rows + v_n;
    END LOOP;
    RETURN v_rows;
END;
$$;

-- The trigger, and on its first creation every day usage_minutes holds
-- before today marked pending once, so that the first roll-up after the
-- upgrade brings every day up to date (writing only what differs) and none
-- written before the trigger existed is missed. The days are found by
-- probing the minute index a day at a time, not by reading every row.
DO $$
DECLARE
    v_today date := (now() AT TIME ZONE 'UTC')::date;
    v_first date;
    v_last  date;
    v_day   date;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_trigger
                WHERE tgname = 'usage_minutes_rollup_late'
                  AND tgrelid = 'queen_proxy.usage_minutes'::regclass) THEN
        RETURN;
    END IF;
    CREATE TRIGGER usage_minutes_rollup_late
        AFTER INSERT OR UPDATE ON queen_proxy.usage_minutes
        FOR EACH ROW
        WHEN (NEW.minute < ((((now() AT TIME ZONE 'UTC')::date) - 1)::timestamp AT TIME ZONE 'UTC'))
        EXECUTE FUNCTION queen_proxy.usage_rollup_mark_late();

    SELECT (min(minute) AT TIME ZONE 'UTC')::date, (max(minute) AT TIME ZONE 'UTC')::date
      INTO v_first, v_last FROM queen_proxy.usage_minutes;
    v_day := v_first;
    WHILE v_day IS NOT NULL AND v_day <= least(v_last, v_today - 1) LOOP
        SELECT (min(minute) AT TIME ZONE 'UTC')::date INTO v_day
          FROM queen_proxy.usage_minutes
         WHERE minute >= (v_day::timestamp AT TIME ZONE 'UTC')
           AND minute < (v_today::timestamp AT TIME ZONE 'UTC');
        EXIT WHEN v_day IS NULL;
        INSERT INTO queen_proxy.usage_rollup_pending (day) VALUES (v_day) ON CONFLICT (day) DO NOTHING;
        v_day := v_day + 1;
    END LOOP;
END;
$$;
