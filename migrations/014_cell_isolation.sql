-- 014_cell_isolation: whether a cell's broker keeps clusters apart.
--
-- A cluster's queues live in the namespace the gateway names with
-- x-queen-tenant, but only a broker with tenancy scopes by that header; the
-- public Queen broker (0.15.1) ignores it, and every cluster on such a cell
-- shares one namespace. The gateway probes each cell it serves and records
-- the verdict here, so that operators see it and so that no second cluster
-- is placed on a cell known not to scope, whatever tool places it.
--
--   unknown   not probed yet, or the last probe could not decide
--   scoped    the broker keeps a namespace per x-queen-tenant
--   unscoped  the broker ignores x-queen-tenant: one cluster at most
ALTER TABLE queen_proxy.cells
    ADD COLUMN IF NOT EXISTS tenant_scoping text NOT NULL DEFAULT 'unknown'
        CHECK (tenant_scoping IN ('unknown', 'scoped', 'unscoped')),
    ADD COLUMN IF NOT EXISTS tenant_scoping_checked_at timestamptz,
    ADD COLUMN IF NOT EXISTS tenant_scoping_detail text;

-- Records a probe's verdict for a cell. Returns false when the cell does not
-- exist (it was removed while the probe ran).
CREATE OR REPLACE FUNCTION queen_proxy.record_cell_tenant_scoping(p_cell_id uuid, p_verdict text, p_detail text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_verdict IS NULL OR p_verdict NOT IN ('unknown', 'scoped', 'unscoped') THEN
        RAISE EXCEPTION 'record_cell_tenant_scoping: verdict must be unknown, scoped or unscoped (got %)',
            coalesce(p_verdict, 'NULL') USING ERRCODE = '22023';
    END IF;
    UPDATE queen_proxy.cells
       SET tenant_scoping = p_verdict, tenant_scoping_checked_at = now(), tenant_scoping_detail = p_detail
     WHERE id = p_cell_id;
    RETURN FOUND;
END;
$$;

-- The cluster a cell that does not scope keeps serving: its oldest cluster
-- (ties broken by id), whatever its status, since a suspended or deleting
-- cluster's data is still in the shared namespace. Adding a cluster never
-- changes it; removing the keeper hands the cell to the next oldest.
CREATE OR REPLACE FUNCTION queen_proxy.cell_keeper_cluster(p_cell_id uuid)
RETURNS uuid
LANGUAGE sql STABLE AS $$
    SELECT id FROM queen_proxy.clusters
     WHERE cell_id = p_cell_id
     ORDER BY created_at NULLS LAST, id
     LIMIT 1
$$;

-- Refuses a second cluster on a cell known not to scope by tenant, on
-- insert and on a move, from any path (the CLI, the console, plain SQL).
-- The cell row is locked so two concurrent placements cannot both pass.
CREATE OR REPLACE FUNCTION queen_proxy.refuse_shared_unscoped_cell()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_scoping text;
    v_slug    text;
    v_others  integer;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.cell_id IS NOT DISTINCT FROM OLD.cell_id THEN
        RETURN NEW;
    END IF;
    SELECT tenant_scoping, slug INTO v_scoping, v_slug
      FROM queen_proxy.cells WHERE id = NEW.cell_id FOR UPDATE;
    IF v_scoping IS DISTINCT FROM 'unscoped' THEN
        RETURN NEW;
    END IF;
    SELECT count(*) INTO v_others FROM queen_proxy.clusters WHERE cell_id = NEW.cell_id AND id <> NEW.id;
    IF v_others > 0 THEN
        RAISE EXCEPTION 'cell "%" runs a broker that does not scope by x-queen-tenant, and it already holds a cluster: a second one would share its queues; place the cluster on a dedicated cell, or run a broker with tenancy on this cell', v_slug
            USING ERRCODE = '55000';
    END IF;
    RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS clusters_refuse_shared_unscoped_cell ON queen_proxy.clusters;
CREATE TRIGGER clusters_refuse_shared_unscoped_cell
    BEFORE INSERT OR UPDATE OF cell_id ON queen_proxy.clusters
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.refuse_shared_unscoped_cell();
