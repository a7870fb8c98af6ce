-- 017_usage_unanswered: produce requests the broker never answered.
--
-- A push, transaction, ephemeral push, streams sink item or DLQ replay that
-- the gateway forwarded may have been committed by the broker even when no
-- answer came back (the connection to the cell broke, or the gateway's
-- upstream timeout passed, after the request was written). The gateway bills
-- such a request's admitted items rather than nothing, and says so here:
-- unanswered_msgs counts the messages of a row that were billed without the
-- broker's confirmation. They are already counted in msgs, so every reader of
-- msgs (the monthly quota, the roll-up, invoices) includes them; the column
-- only tells them apart. Writers that do not know the column (older gateways,
-- queen_proxy) leave it at 0.
ALTER TABLE queen_proxy.usage_minutes
    ADD COLUMN IF NOT EXISTS unanswered_msgs bigint NOT NULL DEFAULT 0;
ALTER TABLE queen_proxy.usage_days
    ADD COLUMN IF NOT EXISTS unanswered_msgs bigint NOT NULL DEFAULT 0;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conname = 'usage_minutes_unanswered_within_msgs'
                      AND conrelid = 'queen_proxy.usage_minutes'::regclass) THEN
        ALTER TABLE queen_proxy.usage_minutes ADD CONSTRAINT usage_minutes_unanswered_within_msgs
            CHECK (unanswered_msgs >= 0 AND unanswered_msgs <= msgs);
    END IF;
END;
$$;

-- The roll-up of 004, carrying unanswered_msgs into usage_days as well.
CREATE OR REPLACE FUNCTION queen_proxy.rollup_usage_days(p_through date DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_yesterday date := (now() AT TIME ZONE 'UTC')::date - 1;
    v_through   date := least(coalesce(p_through, v_yesterday), v_yesterday);
    v_rows      integer;
BEGIN
    INSERT INTO queen_proxy.usage_days AS d
           (cluster_id, day, op_class, msgs, reqs, bytes_in, bytes_out, unanswered_msgs)
    SELECT m.cluster_id, (m.minute AT TIME ZONE 'UTC')::date, m.op_class,
           sum(m.msgs), sum(m.reqs), sum(m.bytes_in), sum(m.bytes_out), sum(m.unanswered_msgs)
      FROM queen_proxy.usage_minutes m
     WHERE m.minute < ((v_through + 1)::timestamp AT TIME ZONE 'UTC')
     GROUP BY 1, 2, 3
    ON CONFLICT (cluster_id, day, op_class) DO UPDATE
       SET msgs = EXCLUDED.msgs, reqs = EXCLUDED.reqs,
           bytes_in = EXCLUDED.bytes_in, bytes_out = EXCLUDED.bytes_out,
           unanswered_msgs = EXCLUDED.unanswered_msgs;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END;
$$;
