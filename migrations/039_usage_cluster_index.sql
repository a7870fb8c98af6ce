-- 039_usage_cluster_index: indexes that let a read of one cluster's usage
-- touch that cluster's rows only, and answer from the index alone.
--
-- The primary keys start with cluster_id too, but they hold nothing else, so
-- a read of one cluster's totals had to fetch every row from the heap; for a
-- month of a cluster that is tens of thousands of random heap reads, and the
-- planner, pricing them, often preferred idx_usage_minutes_minute (the whole
-- fleet's rows of the period, filtered by cluster) instead. Carrying the
-- counters in the index makes the cluster's range an index-only scan (the
-- partitions are append-mostly and vacuumed, so their visibility maps are
-- nearly all set): the CLI's month of one cluster, the tenant's month and the
-- console's charts read a few pages instead of the fleet's period.
--
-- idx_usage_minutes_minute and idx_request_minutes_minute stay: the usage
-- export and the roll-up read a period of every cluster, and the prune reads
-- the oldest rows of a partition that straddles the retention (the table
-- attached by 036 before it ages out) by minute alone.
--
-- Created on the partitioned parents, so each day's partition, the DEFAULT
-- one and every partition made later get their own; IF NOT EXISTS keeps the
-- migration a no-op on its later runs. (A partitioned parent's index cannot
-- be built CONCURRENTLY, and migrations run in a transaction anyway: on a
-- large existing table this build holds writes to usage_minutes for as long
-- as it takes, which is why docs/upgrading.md gives its cost.)
CREATE INDEX IF NOT EXISTS idx_usage_minutes_cluster_minute
    ON queen_proxy.usage_minutes (cluster_id, minute)
    INCLUDE (op_class, msgs, reqs, bytes_in, bytes_out);

CREATE INDEX IF NOT EXISTS idx_request_minutes_cluster_minute
    ON queen_proxy.request_minutes (cluster_id, minute)
    INCLUDE (key_id, outcome, reqs);
