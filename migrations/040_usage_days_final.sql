-- 040_usage_days_final: which days of usage_days are final, so that readers
-- of a long period read those days' rolled-up rows instead of every minute,
-- and the prune drops a final day without reading it.
--
-- Until now a reader took, per day, the larger of the day's usage_days row
-- and the sum of its minutes, because a day row could be missing or behind
-- its minutes; so a month (or the console's 400 days) of a tenant read every
-- minute row of the period. A day is final once its row is known to hold
-- every minute written to it, and a minute written to it later makes it
-- pending again (037's trigger). What makes a day final:
--
--   * usage_rollup_state.rolled_through, the last day a roll-up covered (its
--     "yesterday"). A write the trigger lets pass is one made while its day
--     was today or yesterday, so it began before the day after next.
--   * Every roll-up re-reads the days from the day before the previous
--     run's rolled_through up to its own (the yesterday and day before of
--     037 when it runs daily, and every day of a gap after the pump was
--     down). So a day D is re-read by every run until the first one that
--     covers D + 2 or later, which runs on D + 3 or later: more than a day
--     after any write to D that the trigger let pass began.
--   * Hence: D is final when D <= rolled_through - 2 and D is not pending.
--
-- Readers ask usage_minute_ranges(from, to) which stretches of minutes they
-- must read: the days cut by a bound and the days not final. Everything
-- else comes from usage_days. The day row is at least its minutes' sum once
-- final (minutes are only ever pruned), so the readers' "larger of the two"
-- still holds where both are read.

-- One row: the last day the roll-up covered (NULL before the first run of
-- this version, when no day is final), and the first day whose minutes the
-- prune has not wholly removed: a minute row of an earlier day was written
-- after its day was rolled up and pruned, so the roll-up adds it to the
-- day's row instead of taking the day's minutes for the whole day.
CREATE TABLE IF NOT EXISTS queen_proxy.usage_rollup_state (
    singleton      boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    rolled_through date,
    rolled_at      timestamptz,
    pruned_before  date
);

-- On the first creation, every day before yesterday that has minutes is
-- marked pending, so that the first roll-up of this version brings each up
-- to date (writing only what differs) before any is read as final: days
-- rolled up under 037, whose runs did not catch up after a gap, are not
-- trusted on its word.
DO $$
DECLARE
    v_today date := (now() AT TIME ZONE 'UTC')::date;
    v_day   date;
BEGIN
    IF EXISTS (SELECT 1 FROM queen_proxy.usage_rollup_state) THEN
        RETURN;
    END IF;
    INSERT INTO queen_proxy.usage_rollup_state (singleton) VALUES (true);
    SELECT (min(minute) AT TIME ZONE 'UTC')::date INTO v_day FROM queen_proxy.usage_minutes;
    WHILE v_day IS NOT NULL AND v_day < v_today - 1 LOOP
        INSERT INTO queen_proxy.usage_rollup_pending (day) VALUES (v_day) ON CONFLICT (day) DO NOTHING;
        SELECT (min(minute) AT TIME ZONE 'UTC')::date INTO v_day
          FROM queen_proxy.usage_minutes
         WHERE minute >= ((v_day + 1)::timestamp AT TIME ZONE 'UTC')
           AND minute < ((v_today - 1)::timestamp AT TIME ZONE 'UTC');
    END LOOP;
END;
$$;

-- Whether usage_days holds the whole of p_day for every cluster and op
-- class (the rule above). The one definition: the readers' ranges and the
-- prune both ask it.
CREATE OR REPLACE FUNCTION queen_proxy.usage_day_final(p_day date)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce(p_day <= (SELECT rolled_through - 2 FROM queen_proxy.usage_rollup_state), false)
       AND NOT EXISTS (SELECT 1 FROM queen_proxy.usage_rollup_pending WHERE day = p_day)
$$;

-- The stretches of [p_from, p_to) a reader must read from usage_minutes:
-- one row per UTC day that the period cuts (a bound inside it) or that is
-- not final, with the part of that day inside the period. An empty period
-- has none. PL/pgSQL on purpose: a SQL function would be inlined into the
-- reader, and the planner, no longer seeing a few rows, then scanned the
-- cluster's every partition once and filtered; as a function with ROWS 4
-- it is a handful of ranges, each an index range scan of one partition.
CREATE OR REPLACE FUNCTION queen_proxy.usage_minute_ranges(p_from timestamptz, p_to timestamptz)
RETURNS TABLE (day date, from_at timestamptz, to_at timestamptz)
LANGUAGE plpgsql STABLE ROWS 4 AS $$
BEGIN
    IF NOT p_from < p_to THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT g.day,
           greatest(p_from, g.day::timestamp AT TIME ZONE 'UTC'),
           least(p_to, (g.day + 1)::timestamp AT TIME ZONE 'UTC')
      FROM (SELECT (p_from AT TIME ZONE 'UTC')::date + i AS day
              FROM generate_series(0, ((p_to - interval '1 microsecond') AT TIME ZONE 'UTC')::date
                                      - (p_from AT TIME ZONE 'UTC')::date) AS i) g
     WHERE p_from > (g.day::timestamp AT TIME ZONE 'UTC')
        OR p_to < ((g.day + 1)::timestamp AT TIME ZONE 'UTC')
        OR NOT queen_proxy.usage_day_final(g.day);
END;
$$;

-- The roll-up of 037, same name, arguments, result and day rows; it now
-- also re-reads every day since the previous run's rolled_through (a gap
-- when the pump was down) and records its own. Runs are serialized on the
-- state row, so two gateways' runs cannot interleave their state.
CREATE OR REPLACE FUNCTION queen_proxy.rollup_usage_days(p_through date DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_yesterday date := (now() AT TIME ZONE 'UTC')::date - 1;
    v_through   date := least(coalesce(p_through, v_yesterday), v_yesterday);
    v_previous  date;
    v_from      date;
    v_pruned    date;
    v_taken     date[];
    v_day       date;
    v_rows      integer := 0;
    v_n         integer;
BEGIN
    SELECT rolled_through, pruned_before INTO v_previous, v_pruned FROM queen_proxy.usage_rollup_state FOR UPDATE;

    WITH taken AS (
        DELETE FROM queen_proxy.usage_rollup_pending WHERE day <= v_through RETURNING day
    )
    SELECT coalesce(array_agg(day), '{}') INTO v_taken FROM taken;

    v_from := least(coalesce(v_previous, v_through), v_through) - 1;
    FOR v_day IN SELECT DISTINCT d
                   FROM unnest(v_taken || ARRAY(SELECT v_from + i FROM generate_series(0, v_through - v_from) AS i)) AS d
                  WHERE d <= v_through ORDER BY d LOOP
        IF v_day < v_pruned THEN
            -- Rows written after the day was pruned: added to the day's
            -- row and taken out, so that a later run cannot add them again.
            WITH late AS (
                DELETE FROM queen_proxy.usage_minutes m
                 WHERE m.minute >= (v_day::timestamp AT TIME ZONE 'UTC')
                   AND m.minute < ((v_day + 1)::timestamp AT TIME ZONE 'UTC')
                RETURNING m.cluster_id, m.op_class, m.msgs, m.reqs, m.bytes_in, m.bytes_out, m.unanswered_msgs
            )
            INSERT INTO queen_proxy.usage_days AS u
                   (cluster_id, day, op_class, msgs, reqs, bytes_in, bytes_out, unanswered_msgs)
            SELECT cluster_id, v_day, op_class,
                   sum(msgs), sum(reqs), sum(bytes_in), sum(bytes_out), sum(unanswered_msgs)
              FROM late
             GROUP BY cluster_id, op_class
            ON CONFLICT (cluster_id, day, op_class) DO UPDATE
               SET msgs = u.msgs + EXCLUDED.msgs, reqs = u.reqs + EXCLUDED.reqs,
                   bytes_in = u.bytes_in + EXCLUDED.bytes_in, bytes_out = u.bytes_out + EXCLUDED.bytes_out,
                   unanswered_msgs = u.unanswered_msgs + EXCLUDED.unanswered_msgs;
            GET DIAGNOSTICS v_n = ROW_COUNT;
            v_rows := v_rows + v_n;
            CONTINUE;
        END IF;
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

    UPDATE queen_proxy.usage_rollup_state
       SET rolled_through = greatest(coalesce(rolled_through, v_through), v_through), rolled_at = now();
    RETURN v_rows;
END;
$$;

-- The prune of 036, same contract (p_keep_days at least 1; returns the
-- rows removed), removing only final days, so that nothing it removes is
-- missing from usage_days. A partition wholly older than the retention is
-- locked first (so no write to it is still open) and, if every day in it
-- is final, dropped: the cost is a count of its rows, not a check of each
-- against usage_days. A day not final yet (written late, or not rolled up
-- since) is left for a run after the next roll-up. From the DEFAULT
-- partition and one that straddles the retention, the rows of final days
-- older than the retention are deleted. At the end it records the first
-- day that still has minutes before the retention (pruned_before), which
-- only moves forward.
CREATE OR REPLACE FUNCTION queen_proxy.prune_usage_minutes(p_keep_days integer DEFAULT 90)
RETURNS integer
LANGUAGE plpgsql
SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET lock_timeout = '5s' AS $$
DECLARE
    v_cutoff timestamptz;
    v_final  timestamptz; -- every day before it is at least two days before the last roll-up's
    v_upto   timestamptz;
    v_count  integer := 0;
    v_rows   integer;
    v_left   date;
    r        record;
BEGIN
    IF p_keep_days IS NULL OR p_keep_days < 1 THEN
        RAISE EXCEPTION 'prune_usage_minutes: keep_days must be at least 1 (got %)', coalesce(p_keep_days::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    v_cutoff := ((now() AT TIME ZONE 'UTC')::date - p_keep_days)::timestamp AT TIME ZONE 'UTC';
    PERFORM pg_advisory_xact_lock(hashtext('queen_proxy.usage_partitions'), 0);
    SELECT (rolled_through - 1)::timestamp AT TIME ZONE 'UTC' INTO v_final FROM queen_proxy.usage_rollup_state;
    IF v_final IS NULL THEN
        RETURN 0; -- no day is final before the first roll-up
    END IF;
    v_upto := least(v_cutoff, v_final);
    FOR r IN SELECT * FROM queen_proxy.usage_partitions('usage_minutes') WHERE from_at < v_upto ORDER BY from_at, partition_name LOOP
        IF NOT r.is_default AND r.to_at <= v_upto THEN
            BEGIN
                EXECUTE format('LOCK TABLE queen_proxy.%I IN ACCESS EXCLUSIVE MODE', r.partition_name);
                IF NOT EXISTS (SELECT 1 FROM queen_proxy.usage_rollup_pending p
                                WHERE (p.day::timestamp AT TIME ZONE 'UTC') >= r.from_at
                                  AND (p.day::timestamp AT TIME ZONE 'UTC') < r.to_at) THEN
                    EXECUTE format('SELECT count(*)::integer FROM queen_proxy.%I', r.partition_name) INTO v_rows;
                    EXECUTE format('DROP TABLE queen_proxy.%I', r.partition_name);
                    v_count := v_count + v_rows;
                    CONTINUE;
                END IF;
            EXCEPTION WHEN lock_not_available THEN
                RAISE NOTICE 'prune_usage_minutes: % is busy; dropped at a later run', r.partition_name;
                CONTINUE;
            END;
        END IF;
        EXECUTE format('DELETE FROM queen_proxy.%I m
                         WHERE m.minute < $1
                           AND NOT EXISTS (SELECT 1 FROM queen_proxy.usage_rollup_pending p
                                            WHERE p.day = (m.minute AT TIME ZONE ''UTC'')::date)', r.partition_name)
            USING v_upto;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        v_count := v_count + v_rows;
    END LOOP;

    SELECT (min(minute) AT TIME ZONE 'UTC')::date INTO v_left FROM queen_proxy.usage_minutes WHERE minute < v_cutoff;
    UPDATE queen_proxy.usage_rollup_state
       SET pruned_before = greatest(pruned_before, coalesce(v_left, (v_cutoff AT TIME ZONE 'UTC')::date));
    RETURN v_count;
END;
$$;

-- The monthly total of 013, same contract, reading the month's final days
-- from usage_days and only the other days' minutes: the hourly quota pass
-- asks it for every cluster.
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
           (SELECT r.day, sum(u.msgs) AS msgs
              FROM queen_proxy.usage_minute_ranges(v_first::timestamp AT TIME ZONE 'UTC',
                                                   v_next::timestamp AT TIME ZONE 'UTC') r
              JOIN queen_proxy.usage_minutes u
                ON u.cluster_id = p_cluster AND u.minute >= r.from_at AND u.minute < r.to_at
             WHERE u.op_class IN ('push', 'txn')
             GROUP BY r.day) m
        ON m.day = d.day;
    RETURN v_total;
END;
$$;
