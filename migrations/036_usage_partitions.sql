-- 036_usage_partitions: usage_minutes and request_minutes become tables
-- range-partitioned by UTC day on their minute column, so that retention
-- drops a whole day's table instead of deleting a day of rows out of the
-- middle of a table the gateways write every few seconds. Names, columns,
-- primary keys, checks, foreign keys, indexes and every function that reads
-- or writes them stay as they were: a writer's upsert goes to the parent
-- table and PostgreSQL routes each row to its day (the primary keys contain
-- minute, the partition key, which an ON CONFLICT on a partitioned table
-- needs).
--
-- Partitions:
--   <table>_pYYYYMMDD       one UTC day, [00:00, 24:00) UTC
--   <table>_default         the DEFAULT partition: every row whose day has
--                           no partition of its own
--   <table>_before_YYYYMMDD the table as it was before this migration, with
--                           its rows, covering everything before that day
--
-- Why a DEFAULT partition rather than creating a missing day when a write
-- needs it: the rows are written by plain INSERT ... ON CONFLICT statements
-- from several writers (queengate's meter and request counts, queen_proxy,
-- an operator's tool, a spool replayed days late), not through one function
-- that could create the day first; and creating a partition inside a write
-- would take locks on the parent in the middle of every gateway's flush. So
-- no write ever fails or loses a row for want of a partition: it lands in
-- the DEFAULT partition. usage_partitions_ensure, which the gateways call
-- every hour for the days ahead, moves a day's rows out of the DEFAULT
-- partition into the day's new partition in the same transaction (the DEFAULT
-- partition is locked meanwhile, so nothing is written to it in between).
-- In normal operation the DEFAULT partition stays empty, which keeps cheap
-- the scan PostgreSQL makes of it whenever a partition is attached.
--
-- Why the existing table is attached rather than copied: copying 90 days of
-- rows would hold the tables locked for as long as the copy takes (every
-- gateway's flush waits) and write every row twice. Attaching keeps each
-- row where it is, so nothing can be lost or counted twice; it costs one
-- scan, under the lock, that proves the rows lie before the bound. The old
-- table then ages out: pruned row by row while it overlaps the retention,
-- and dropped whole once all of it is older (after 90 days for usage, 35
-- for requests). An empty table is dropped and replaced outright.
--
-- The conversion takes the old table's ACCESS EXCLUSIVE lock first, inside
-- this migration's transaction: a flush in progress finishes first and its
-- rows are attached with the rest; a flush that starts meanwhile waits, and
-- after the commit finds the name queen_proxy.usage_minutes on the new parent
-- and writes there. It is a no-op on a table that is already partitioned.

-- Every partition of queen_proxy.<p_table> with the instants it covers,
-- [from_at, to_at); the DEFAULT partition covers -infinity to infinity and
-- says so. The bounds are read from the catalog, in UTC, so a partition
-- made by hand is seen for what it covers whatever its name.
CREATE OR REPLACE FUNCTION queen_proxy.usage_partitions(p_table text)
RETURNS TABLE (partition_name text, from_at timestamptz, to_at timestamptz, is_default boolean)
LANGUAGE plpgsql STABLE
SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' AS $$
DECLARE
    r      record;
    v_from text;
    v_to   text;
BEGIN
    IF p_table IS NULL OR p_table NOT IN ('usage_minutes', 'request_minutes') THEN
        RAISE EXCEPTION 'usage_partitions: table must be usage_minutes or request_minutes (got %)', coalesce(p_table, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    FOR r IN SELECT c.relname::text AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
               FROM pg_inherits i
               JOIN pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = to_regclass('queen_proxy.' || p_table)
    LOOP
        partition_name := r.name;
        IF r.bound = 'DEFAULT' THEN
            from_at := '-infinity'; to_at := 'infinity'; is_default := true;
        ELSE
            v_from := substring(r.bound FROM '^FOR VALUES FROM \((.*)\) TO \(.*\)$');
            v_to   := substring(r.bound FROM '^FOR VALUES FROM \(.*\) TO \((.*)\)$');
            from_at := CASE v_from WHEN 'MINVALUE' THEN '-infinity'::timestamptz
                                   ELSE btrim(v_from, '''')::timestamptz END;
            to_at   := CASE v_to WHEN 'MAXVALUE' THEN 'infinity'::timestamptz
                                 ELSE btrim(v_to, '''')::timestamptz END;
            is_default := false;
        END IF;
        RETURN NEXT;
    END LOOP;
END;
$$;

-- Creates the missing day partitions of usage_minutes and request_minutes
-- for every UTC day from p_from to p_to (both included), moving the rows of
-- such a day out of the DEFAULT partition into it. A day already covered
-- (by its partition, the pre-partitioning table or a partition made by
-- hand) is left alone, so calling it again is a no-op. Returns how many
-- partitions it created. Several gateways call it: they take turns on a
-- transaction-scoped advisory lock. Each partition is made as a table of
-- its own and attached, which takes a lock on the parent that lets reads
-- and writes go on; lock_timeout bounds the wait for the DEFAULT
-- partition's lock, so a long reader makes the call fail (and the gateway
-- retry next hour) rather than queue every writer behind it.
CREATE OR REPLACE FUNCTION queen_proxy.usage_partitions_ensure(p_from date, p_to date)
RETURNS integer
LANGUAGE plpgsql
SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET lock_timeout = '5s' AS $$
DECLARE
    v_table   text;
    v_day     date;
    v_lo      timestamptz;
    v_hi      timestamptz;
    v_name    text;
    v_default text;
    v_count   integer := 0;
BEGIN
    IF p_from IS NULL OR p_to IS NULL OR p_to < p_from OR p_to - p_from > 400 THEN
        RAISE EXCEPTION 'usage_partitions_ensure: from and to must be dates with from <= to, at most 400 days apart (got %, %)',
            coalesce(p_from::text, 'NULL'), coalesce(p_to::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('queen_proxy.usage_partitions'), 0);
    FOREACH v_table IN ARRAY ARRAY['usage_minutes', 'request_minutes'] LOOP
        IF (SELECT relkind FROM pg_class WHERE oid = to_regclass('queen_proxy.' || v_table)) IS DISTINCT FROM 'p' THEN
            CONTINUE; -- not partitioned (yet): nothing to create
        END IF;
        SELECT partition_name INTO v_default FROM queen_proxy.usage_partitions(v_table) WHERE is_default;
        v_day := p_from;
        WHILE v_day <= p_to LOOP
            v_lo := v_day::timestamp AT TIME ZONE 'UTC';
            v_hi := (v_day + 1)::timestamp AT TIME ZONE 'UTC';
            IF NOT EXISTS (SELECT 1 FROM queen_proxy.usage_partitions(v_table) p
                            WHERE NOT p.is_default AND p.from_at < v_hi AND p.to_at > v_lo) THEN
                v_name := v_table || '_p' || to_char(v_day, 'YYYYMMDD');
                EXECUTE format('CREATE TABLE queen_proxy.%I (LIKE queen_proxy.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE)',
                               v_name, v_table);
                IF v_default IS NOT NULL THEN
                    EXECUTE format('LOCK TABLE queen_proxy.%I IN ACCESS EXCLUSIVE MODE', v_default);
                    EXECUTE format('WITH moved AS (DELETE FROM queen_proxy.%I WHERE minute >= $1 AND minute < $2 RETURNING *) '
                                   'INSERT INTO queen_proxy.%I SELECT * FROM moved', v_default, v_name)
                        USING v_lo, v_hi;
                END IF;
                EXECUTE format('ALTER TABLE queen_proxy.%I ATTACH PARTITION queen_proxy.%I FOR VALUES FROM (%L) TO (%L)',
                               v_table, v_name, v_lo, v_hi);
                v_count := v_count + 1;
            END IF;
            v_day := v_day + 1;
        END LOOP;
    END LOOP;
    RETURN v_count;
END;
$$;

-- The reference's prune, same contract: deletes minute rows older than (UTC
-- today - p_keep_days) but only where the matching usage_days row (cluster,
-- UTC day, op class) exists, so a day that was never rolled up is never
-- lost; returns the number of rows removed. A day partition wholly before
-- the cutoff whose every row is rolled up is dropped whole (its rows
-- counted in the same scan that checks the roll-up); one with a row not
-- rolled up, the DEFAULT partition and the pre-partitioning table lose
-- their rolled-up rows before the cutoff by DELETE, as before. The cutoff
-- is a UTC midnight, a partition boundary, so in steady state every prune
-- is drops. Dropping a partition locks the parent for an instant; a drop
-- that cannot get the lock within lock_timeout is left for the next run.
CREATE OR REPLACE FUNCTION queen_proxy.prune_usage_minutes(p_keep_days integer DEFAULT 90)
RETURNS integer
LANGUAGE plpgsql
SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET lock_timeout = '5s' AS $$
DECLARE
    v_cutoff   timestamptz;
    v_count    integer := 0;
    v_rows     integer;
    v_unrolled integer;
    v_dropped  boolean;
    r          record;
BEGIN
    IF p_keep_days IS NULL OR p_keep_days < 1 THEN
        RAISE EXCEPTION 'prune_usage_minutes: keep_days must be at least 1 (got %)', coalesce(p_keep_days::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    v_cutoff := ((now() AT TIME ZONE 'UTC')::date - p_keep_days)::timestamp AT TIME ZONE 'UTC';
    PERFORM pg_advisory_xact_lock(hashtext('queen_proxy.usage_partitions'), 0);
    FOR r IN SELECT * FROM queen_proxy.usage_partitions('usage_minutes') WHERE from_at < v_cutoff ORDER BY from_at, partition_name LOOP
        v_dropped := false;
        IF NOT r.is_default AND r.to_at <= v_cutoff THEN
            EXECUTE format('SELECT coalesce(sum(g.n), 0)::integer, count(*) FILTER (WHERE d.cluster_id IS NULL)::integer
                              FROM (SELECT cluster_id, (minute AT TIME ZONE ''UTC'')::date AS day, op_class, count(*) AS n
                                      FROM queen_proxy.%I GROUP BY 1, 2, 3) g
                              LEFT JOIN queen_proxy.usage_days d
                                ON d.cluster_id = g.cluster_id AND d.day = g.day AND d.op_class = g.op_class',
                           r.partition_name) INTO v_rows, v_unrolled;
            IF v_unrolled = 0 THEN
                BEGIN
                    EXECUTE format('DROP TABLE queen_proxy.%I', r.partition_name);
                    v_count := v_count + v_rows;
                    v_dropped := true;
                EXCEPTION WHEN lock_not_available THEN
                    RAISE NOTICE 'prune_usage_minutes: % is busy; dropped at a later run', r.partition_name;
                    CONTINUE;
                END;
            END IF;
        END IF;
        IF NOT v_dropped THEN
            EXECUTE format('DELETE FROM queen_proxy.%I m
                             WHERE m.minute < $1
                               AND EXISTS (SELECT 1 FROM queen_proxy.usage_days d
                                            WHERE d.cluster_id = m.cluster_id
                                              AND d.day = (m.minute AT TIME ZONE ''UTC'')::date
                                              AND d.op_class = m.op_class)', r.partition_name)
                USING v_cutoff;
            GET DIAGNOSTICS v_rows = ROW_COUNT;
            v_count := v_count + v_rows;
        END IF;
    END LOOP;
    RETURN v_count;
END;
$$;

-- The prune of 021, same contract (p_keep_days at least 1; returns the
-- rows removed): a day partition whose whole day is older than
-- p_keep_days is dropped whole, so a count is kept between p_keep_days
-- and one day more. The DEFAULT partition and the pre-partitioning table
-- lose their rows older than p_keep_days by DELETE, as before.
CREATE OR REPLACE FUNCTION queen_proxy.prune_request_minutes(p_keep_days integer DEFAULT 35)
RETURNS integer
LANGUAGE plpgsql
SET TimeZone = 'UTC' SET DateStyle = 'ISO, YMD' SET lock_timeout = '5s' AS $$
DECLARE
    v_cutoff timestamptz;
    v_count  integer := 0;
    v_rows   integer;
    r        record;
BEGIN
    IF p_keep_days IS NULL OR p_keep_days < 1 THEN
        RAISE EXCEPTION 'prune_request_minutes: keep_days must be at least 1 (got %)', coalesce(p_keep_days::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    v_cutoff := now() - make_interval(days => p_keep_days);
    PERFORM pg_advisory_xact_lock(hashtext('queen_proxy.usage_partitions'), 0);
    FOR r IN SELECT * FROM queen_proxy.usage_partitions('request_minutes') WHERE from_at < v_cutoff ORDER BY from_at, partition_name LOOP
        IF NOT r.is_default AND r.to_at <= v_cutoff THEN
            EXECUTE format('SELECT count(*)::integer FROM queen_proxy.%I', r.partition_name) INTO v_rows;
            BEGIN
                EXECUTE format('DROP TABLE queen_proxy.%I', r.partition_name);
                v_count := v_count + v_rows;
            EXCEPTION WHEN lock_not_available THEN
                RAISE NOTICE 'prune_request_minutes: % is busy; dropped at a later run', r.partition_name;
            END;
        ELSIF r.is_default OR r.from_at = '-infinity' OR r.to_at = 'infinity' OR r.to_at > r.from_at + interval '1 day' THEN
            EXECUTE format('DELETE FROM queen_proxy.%I WHERE minute < $1', r.partition_name) USING v_cutoff;
            GET DIAGNOSTICS v_rows = ROW_COUNT;
            v_count := v_count + v_rows;
        END IF;
    END LOOP;
    RETURN v_count;
END;
$$;

-- The conversion, table by table.
DO $$
DECLARE
    v_table   text;
    v_rel     regclass;
    v_pk      text;
    v_indexes text[];
    v_upper   date;
    v_legacy  text;
    v_n       integer;
    v_rows    boolean;
    r         record;
BEGIN
    FOREACH v_table IN ARRAY ARRAY['usage_minutes', 'request_minutes'] LOOP
        v_rel := to_regclass('queen_proxy.' || v_table);
        IF (SELECT relkind FROM pg_class WHERE oid = v_rel) = 'p' THEN
            CONTINUE; -- converted already
        END IF;
        EXECUTE format('LOCK TABLE queen_proxy.%I IN ACCESS EXCLUSIVE MODE', v_table);

        SELECT pg_get_constraintdef(oid) INTO v_pk FROM pg_constraint WHERE conrelid = v_rel AND contype = 'p';
        IF v_pk IS NULL OR NOT EXISTS (
                SELECT 1 FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
                 WHERE c.conrelid = v_rel AND c.contype = 'p' AND a.attname = 'minute') THEN
            RAISE EXCEPTION '036_usage_partitions: queen_proxy.% has no primary key containing minute (%), which partitioning by minute needs',
                v_table, coalesce(v_pk, 'none');
        END IF;
        -- The indexes that are not constraints (idx_<table>_minute), as
        -- statements that name the table, to make again on the parent.
        SELECT coalesce(array_agg(pg_get_indexdef(x.indexrelid)), '{}') INTO v_indexes
          FROM pg_index x
         WHERE x.indrelid = v_rel
           AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid AND c.conrelid = v_rel);

        EXECUTE format('SELECT EXISTS (SELECT 1 FROM queen_proxy.%I), (max(minute) AT TIME ZONE ''UTC'')::date + 1 FROM queen_proxy.%I',
                       v_table, v_table) INTO v_rows, v_upper;
        v_upper := greatest(v_upper, (now() AT TIME ZONE 'UTC')::date + 1);
        v_legacy := v_table || '_before_' || to_char(v_upper, 'YYYYMMDD');

        -- Free the index names for the parent, then the table's name.
        v_n := 0;
        FOR r IN SELECT i.relname::text AS name, EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid AND c.contype = 'p') AS pk
                   FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
                  WHERE x.indrelid = v_rel ORDER BY i.relname LOOP
            v_n := v_n + 1;
            EXECUTE format('ALTER INDEX queen_proxy.%I RENAME TO %I', r.name,
                           v_legacy || CASE WHEN r.pk THEN '_pkey' ELSE '_idx' || v_n END);
        END LOOP;
        EXECUTE format('ALTER TABLE queen_proxy.%I RENAME TO %I', v_table, v_legacy);

        EXECUTE format('CREATE TABLE queen_proxy.%I (LIKE queen_proxy.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMMENTS) '
                       'PARTITION BY RANGE (minute)', v_table, v_legacy);
        EXECUTE format('ALTER TABLE queen_proxy.%I ADD CONSTRAINT %I %s', v_table, v_table || '_pkey', v_pk);
        FOR r IN SELECT conname::text AS name, pg_get_constraintdef(oid) AS def
                   FROM pg_constraint WHERE conrelid = v_rel AND contype = 'f' ORDER BY conname LOOP
            EXECUTE format('ALTER TABLE queen_proxy.%I ADD CONSTRAINT %I %s', v_table, r.name, r.def);
        END LOOP;
        FOR v_n IN 1 .. coalesce(array_length(v_indexes, 1), 0) LOOP
            EXECUTE v_indexes[v_n]; -- names queen_proxy.<table>, now the parent
        END LOOP;

        IF v_rows THEN
            EXECUTE format('ALTER TABLE queen_proxy.%I ATTACH PARTITION queen_proxy.%I FOR VALUES FROM (MINVALUE) TO (%L)',
                           v_table, v_legacy, v_upper::timestamp AT TIME ZONE 'UTC');
        ELSE
            EXECUTE format('DROP TABLE queen_proxy.%I', v_legacy);
        END IF;
        EXECUTE format('CREATE TABLE queen_proxy.%I PARTITION OF queen_proxy.%I DEFAULT', v_table || '_default', v_table);
    END LOOP;
END;
$$;

-- Yesterday (a minute closed at midnight is written just after it) to a
-- week ahead; the gateways keep a week ahead from then on.
SELECT queen_proxy.usage_partitions_ensure((now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 7);
