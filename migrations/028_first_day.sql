-- 028_first_day: two things an operator met on the first day.
--
-- 1. Whether a cell's broker reports retained bytes,
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

-- 2. 019's place_cluster, restated with the same contract but for the
-- refusal's hint: it suggested raising a cell's capacity whatever held the
-- cells back, which cannot help a keeper-only cell (its broker does not
-- keep clusters apart, so it serves one cluster). Now the capacity is
-- suggested only when a cell is full, and a keeper-only cell is explained.
CREATE OR REPLACE FUNCTION queen_proxy.place_cluster(p_plan_code text)
RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_plan    text := lower(btrim(p_plan_code));
    v_class   text;
    v_cell    uuid;
    v_state   text;
    v_summary text;
    v_full    boolean;
    v_keeper  boolean;
    v_hint    text;
BEGIN
    SELECT cell_class INTO v_class FROM queen_proxy.plans WHERE code = v_plan;
    IF v_class IS NULL THEN
        RAISE EXCEPTION 'place_cluster: unknown plan %', coalesce(p_plan_code, 'NULL') USING ERRCODE = 'P0002';
    END IF;
    LOOP
        -- Each statement reads what is committed now (READ COMMITTED).
        SELECT id INTO v_cell FROM queen_proxy.cells
         WHERE class = v_class
           AND queen_proxy.cell_placement(status, class, capacity_slots, used_slots,
                                          tenancy_stated, tenant_scoping, keeper_residue) = 'open'
         ORDER BY queen_proxy.cell_load(capacity_slots, used_slots), used_slots, slug
         LIMIT 1;
        EXIT WHEN v_cell IS NULL;
        BEGIN
            SELECT queen_proxy.cell_placement(status, class, capacity_slots, used_slots,
                                              tenancy_stated, tenant_scoping, keeper_residue)
              INTO v_state FROM queen_proxy.cells WHERE id = v_cell FOR UPDATE;
            IF v_state = 'open' THEN
                RETURN v_cell;
            END IF;
            RAISE EXCEPTION USING ERRCODE = 'QG019'; -- gives the lock back
        EXCEPTION WHEN SQLSTATE 'QG019' THEN
            NULL; -- filled (or closed) while this one waited: choose again
        END;
    END LOOP;
    SELECT string_agg(format('%s %s', n, state), ', ' ORDER BY state),
           coalesce(bool_or(state = 'full'), false),
           coalesce(bool_or(state IN ('keeper-only', 'residue')), false)
      INTO v_summary, v_full, v_keeper
      FROM (SELECT queen_proxy.cell_placement(status, class, capacity_slots, used_slots,
                                              tenancy_stated, tenant_scoping, keeper_residue) AS state, count(*) AS n
              FROM queen_proxy.cells WHERE class = v_class GROUP BY 1) s;
    v_hint := format('add one (caddy queen cell add <slug> --region <region> --url <broker URL> --class %s --capacity N)', v_class);
    IF v_full THEN
        v_hint := v_hint || ' or raise a cell''s capacity (caddy queen cell update <cell> --capacity N)';
    END IF;
    IF v_keeper THEN
        v_hint := v_hint || '; a keeper-only cell takes no second cluster whatever its capacity: its broker does not keep clusters apart (docs/isolation.md)';
    END IF;
    RAISE EXCEPTION 'place_cluster: no active % cell has room for a cluster of plan % (% cells: %): %',
        v_class, v_plan, v_class, coalesce(v_summary, 'none'), v_hint
        USING ERRCODE = '55000';
END;
$$;
