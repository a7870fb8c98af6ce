-- 028_storage_reporting: whether a cell's broker reports retained bytes,
-- so that the storage quota (max_retained_bytes) shows as inactive wherever
-- it is shown while the broker reports none (the public broker before
-- 0.16), not only in the serving gateway's memory.
--
--   storage_reporting  unknown       no queue listing has settled it yet
--                      reported      the listing carries retainedBytes: the
--                                    quota is enforced
--                      not_reported  the listing has queues but no byte
--                                    counts: the quota is inactive
--
-- The serving gateway writes it through record_cell_storage_reporting when
-- its inventory reconciler learns it; a new broker URL resets it, as it
-- resets the tenancy verdict.
ALTER TABLE queen_proxy.cells
    ADD COLUMN IF NOT EXISTS storage_reporting text NOT NULL DEFAULT 'unknown';

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'cells_storage_reporting_check') THEN
        ALTER TABLE queen_proxy.cells ADD CONSTRAINT cells_storage_reporting_check
            CHECK (storage_reporting IN ('unknown', 'reported', 'not_reported'));
    END IF;
END;
$$;

-- Records what the broker at p_base_url reported; false when the cell is
-- gone or points at another broker now.
CREATE OR REPLACE FUNCTION queen_proxy.record_cell_storage_reporting(
    p_cell_id uuid, p_reporting text, p_base_url text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_reporting IS NULL OR p_reporting NOT IN ('unknown', 'reported', 'not_reported') THEN
        RAISE EXCEPTION 'record_cell_storage_reporting: want unknown, reported or not_reported (got %)',
            coalesce(p_reporting, 'NULL') USING ERRCODE = '22023';
    END IF;
    UPDATE queen_proxy.cells SET storage_reporting = p_reporting
     WHERE id = p_cell_id AND base_url = p_base_url AND storage_reporting IS DISTINCT FROM p_reporting;
    RETURN FOUND OR EXISTS (SELECT 1 FROM queen_proxy.cells WHERE id = p_cell_id AND base_url = p_base_url);
END;
$$;

CREATE OR REPLACE FUNCTION queen_proxy.reset_cell_storage_reporting()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.storage_reporting := 'unknown';
    RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS trg_cells_storage_reporting_reset ON queen_proxy.cells;
CREATE TRIGGER trg_cells_storage_reporting_reset
    BEFORE UPDATE OF base_url ON queen_proxy.cells
    FOR EACH ROW
    WHEN (OLD.base_url IS DISTINCT FROM NEW.base_url)
    EXECUTE FUNCTION queen_proxy.reset_cell_storage_reporting();
