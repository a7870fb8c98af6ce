-- 029_cell_grants: how a cell's broker takes per-tenant feature grants.
--
-- Queen's Rust brokers with tenancy on answer KV, timers, locks and
-- ephemeral queues (and so Kafka offset commits, which are KV) with 403
-- feature_gated until the tenant holds a grant. The raft-storage line takes
-- grants over HTTP; on the 1.x line they are rows in the cell's own
-- database, which the control plane cannot reach. The operator states which
-- per cell; the control plane acts on it whenever it places a cluster on a
-- cell whose broker keeps tenants apart, and when the cluster leaves:
--   api     it issues the grants the cluster's plan needs, and withdraws them
--   verify  it reads, as the cluster, whether the broker grants them, and
--           refuses the placement naming the rows the operator must write
--   none    the broker gates nothing by grant (tenancy off, or 0.15)
-- The default, verify, only refuses what the broker itself refuses, so a
-- cell added without a statement never takes a cluster its broker gates.
ALTER TABLE queen_proxy.cells
    ADD COLUMN IF NOT EXISTS grants text NOT NULL DEFAULT 'verify';

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conname = 'cells_grants_check'
                      AND conrelid = 'queen_proxy.cells'::regclass) THEN
        ALTER TABLE queen_proxy.cells ADD CONSTRAINT cells_grants_check
            CHECK (grants IN ('api', 'verify', 'none'));
    END IF;
END;
$$;
