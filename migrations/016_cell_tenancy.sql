-- 016_cell_tenancy: the operator's word on a cell's tenancy, a verdict that
-- follows the broker it was taken on, and a keeper that is the cell's first
-- cluster and never hands its data to the next one.
--
-- cells.tenancy_stated is what the operator says of the cell's broker:
--   probe     (default) the gateway's probe decides, as before
--   scoped    the broker keeps a namespace per x-queen-tenant: every cluster
--             is served unless a decided probe says otherwise, and then only
--             the keeper is (a contradiction, reported loudly)
--   unscoped  the broker ignores x-queen-tenant: the keeper only, whatever a
--             probe finds
--
-- cells.tenant_scoping (014) is what the last probe found; it describes the
-- broker at base_url reached with cell_secret, so changing either resets it
-- to unknown in the same statement.
--
-- clusters.placed_at is when the cluster was put on its cell (on insert, and
-- again on every move): the keeper of a cell is its earliest placed cluster,
-- so a cluster moved in later never takes the cell from its keeper, however
-- old the cluster is. The column is owned by a trigger; writes to it are
-- ignored.

ALTER TABLE queen_proxy.cells
    ADD COLUMN IF NOT EXISTS tenancy_stated text NOT NULL DEFAULT 'probe'
        CHECK (tenancy_stated IN ('probe', 'scoped', 'unscoped')),
    ADD COLUMN IF NOT EXISTS keeper_residue jsonb;

ALTER TABLE queen_proxy.clusters ADD COLUMN IF NOT EXISTS placed_at timestamptz;
DROP TRIGGER IF EXISTS clusters_stamp_placed_at ON queen_proxy.clusters;
-- Until now the keeper was the oldest cluster by created_at (NULLs last, ties
-- by id); stamping placed_at from created_at keeps every cell's keeper.
UPDATE queen_proxy.clusters SET placed_at = coalesce(created_at, now()) WHERE placed_at IS NULL;
ALTER TABLE queen_proxy.clusters
    ALTER COLUMN placed_at SET DEFAULT now(),
    ALTER COLUMN placed_at SET NOT NULL;
CREATE INDEX IF NOT EXISTS clusters_cell_placed_idx ON queen_proxy.clusters (cell_id, placed_at, id);

-- clock_timestamp, not now(): two clusters placed in one transaction are
-- ordered as they were placed, not by their random ids.
CREATE OR REPLACE FUNCTION queen_proxy.stamp_cluster_placed_at()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.cell_id IS DISTINCT FROM OLD.cell_id THEN
        NEW.placed_at := clock_timestamp();
    ELSE
        NEW.placed_at := OLD.placed_at;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER clusters_stamp_placed_at
    BEFORE INSERT OR UPDATE OF cell_id, placed_at ON queen_proxy.clusters
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.stamp_cluster_placed_at();

-- The cluster a cell that does not scope keeps serving: the first one placed
-- on it (ties broken by id), whatever its status, since a suspended or
-- deleting cluster's data is still in the shared namespace.
CREATE OR REPLACE FUNCTION queen_proxy.cell_keeper_cluster(p_cell_id uuid)
RETURNS uuid
LANGUAGE sql STABLE AS $$
    SELECT id FROM queen_proxy.clusters
     WHERE cell_id = p_cell_id
     ORDER BY placed_at, id
     LIMIT 1
$$;

-- Whether a cell with this statement and this verdict serves its keeper only:
-- stated unscoped always; stated scoped only when a probe found it unscoped
-- (the contradiction); probed unless the probe found it scoped. This is the
-- one definition of "a cell not known to scope" that the keeper guard below
-- and the gateway share.
CREATE OR REPLACE FUNCTION queen_proxy.tenancy_keeper_only(p_tenancy_stated text, p_tenant_scoping text)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_tenancy_stated
        WHEN 'unscoped' THEN true
        WHEN 'scoped' THEN p_tenant_scoping IS NOT DISTINCT FROM 'unscoped'
        ELSE p_tenant_scoping IS DISTINCT FROM 'scoped'
    END
$$;

CREATE OR REPLACE FUNCTION queen_proxy.cell_keeper_only(p_cell_id uuid)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT queen_proxy.tenancy_keeper_only(tenancy_stated, tenant_scoping)
      FROM queen_proxy.cells WHERE id = p_cell_id
$$;

-- A verdict describes the broker it was taken on. Changing the URL or the
-- credential resets it in the same statement, whatever else the statement
-- sets, so no cell is ever "scoped" on a broker no probe has seen.
CREATE OR REPLACE FUNCTION queen_proxy.reset_cell_tenant_scoping()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_why text;
BEGIN
    IF NEW.base_url IS DISTINCT FROM OLD.base_url AND NEW.cell_secret IS DISTINCT FROM OLD.cell_secret THEN
        v_why := 'the broker URL and its credential changed';
    ELSIF NEW.base_url IS DISTINCT FROM OLD.base_url THEN
        v_why := 'the broker URL changed';
    ELSIF NEW.cell_secret IS DISTINCT FROM OLD.cell_secret THEN
        v_why := 'the broker credential changed';
    ELSE
        RETURN NEW;
    END IF;
    NEW.tenant_scoping := 'unknown';
    NEW.tenant_scoping_checked_at := NULL;
    NEW.tenant_scoping_detail := format('verdict reset at %s: %s (was %s); not probed since',
        to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), v_why, OLD.tenant_scoping);
    RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS cells_reset_tenant_scoping ON queen_proxy.cells;
CREATE TRIGGER cells_reset_tenant_scoping
    BEFORE UPDATE OF base_url, cell_secret ON queen_proxy.cells
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.reset_cell_tenant_scoping();

-- Every gateway caches a cluster with its cell's URL, credential, stated
-- tenancy and status: a change of any of them invalidates each cluster on
-- the cell (delivered at COMMIT), whichever tool made it.
CREATE OR REPLACE FUNCTION queen_proxy.notify_cell_changed()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_cluster uuid;
BEGIN
    FOR v_cluster IN SELECT id FROM queen_proxy.clusters WHERE cell_id = NEW.id LOOP
        PERFORM pg_notify('queen_proxy_inval', v_cluster::text);
    END LOOP;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS cells_notify_changed ON queen_proxy.cells;
CREATE TRIGGER cells_notify_changed
    AFTER UPDATE ON queen_proxy.cells
    FOR EACH ROW
    WHEN (OLD.base_url IS DISTINCT FROM NEW.base_url
       OR OLD.cell_secret IS DISTINCT FROM NEW.cell_secret
       OR OLD.tenancy_stated IS DISTINCT FROM NEW.tenancy_stated
       OR OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION queen_proxy.notify_cell_changed();

-- Records a probe's verdict only if the cell still points at the broker the
-- probe reached (base_url and cell_secret as the probe read them; '' for no
-- secret). Returns false when the cell is gone or was changed meanwhile, so
-- a probe of the old broker cannot overwrite the reset above.
CREATE OR REPLACE FUNCTION queen_proxy.record_cell_tenant_scoping(
    p_cell_id uuid, p_verdict text, p_detail text, p_base_url text, p_cell_secret text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF p_verdict IS NULL OR p_verdict NOT IN ('unknown', 'scoped', 'unscoped') THEN
        RAISE EXCEPTION 'record_cell_tenant_scoping: verdict must be unknown, scoped or unscoped (got %)',
            coalesce(p_verdict, 'NULL') USING ERRCODE = '22023';
    END IF;
    UPDATE queen_proxy.cells
       SET tenant_scoping = p_verdict, tenant_scoping_checked_at = now(), tenant_scoping_detail = p_detail
     WHERE id = p_cell_id AND base_url = p_base_url AND coalesce(cell_secret, '') = coalesce(p_cell_secret, '');
    RETURN FOUND;
END;
$$;

-- 014's placement guard, now also for a cell stated unscoped: such a cell
-- takes one cluster at most, whatever a probe recorded.
CREATE OR REPLACE FUNCTION queen_proxy.refuse_shared_unscoped_cell()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_scoping text;
    v_stated  text;
    v_slug    text;
    v_others  integer;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.cell_id IS NOT DISTINCT FROM OLD.cell_id THEN
        RETURN NEW;
    END IF;
    SELECT tenant_scoping, tenancy_stated, slug INTO v_scoping, v_stated, v_slug
      FROM queen_proxy.cells WHERE id = NEW.cell_id FOR UPDATE;
    IF v_scoping IS DISTINCT FROM 'unscoped' AND v_stated IS DISTINCT FROM 'unscoped' THEN
        RETURN NEW;
    END IF;
    SELECT count(*) INTO v_others FROM queen_proxy.clusters WHERE cell_id = NEW.cell_id AND id <> NEW.id;
    IF v_others > 0 THEN
        RAISE EXCEPTION 'cell "%" runs a broker that does not scope by x-queen-tenant (%), and it already holds a cluster: a second one would share its queues; place the cluster on a dedicated cell, or run a broker with tenancy on this cell',
            v_slug, CASE WHEN v_stated = 'unscoped' THEN 'stated by the operator' ELSE 'found by the probe' END
            USING ERRCODE = '55000';
    END IF;
    RETURN NEW;
END;
$$;

-- The keeper's data never passes on. On a cell that serves its keeper only
-- (cell_keeper_only), the keeper leaving while other clusters stay (a move,
-- a DELETE, a tenant delete cascading to it) would make the next cluster the
-- keeper, and it would be served the queues the old keeper left in the
-- broker's one namespace. The database cannot see the broker, so the leave is
-- refused unless this transaction has called release_keeper for the cluster,
-- which asserts its queues are gone from the broker (the CLI checks, and
-- deletes them on request, before calling it). Emptying the cell needs no
-- release: no cluster is left to be served the data. But the data stays on
-- the broker, so the cell records whose it is (cells.keeper_residue), and
-- the next cluster placed on it, which would be its keeper, is refused
-- until release_cell_residue says those queues are gone too.
--
-- It runs AFTER each row, at the end of the statement, so a statement that
-- removes every cluster of a cell (a tenant delete) sees the cell empty.
CREATE OR REPLACE FUNCTION queen_proxy.refuse_keeper_handover()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_slug        text;
    v_stated      text;
    v_scoping     text;
    v_next        uuid;
    v_next_placed timestamptz;
    v_released    text[];
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.cell_id IS NOT DISTINCT FROM OLD.cell_id THEN
        RETURN NULL;
    END IF;
    SELECT slug, tenancy_stated, tenant_scoping INTO v_slug, v_stated, v_scoping
      FROM queen_proxy.cells WHERE id = OLD.cell_id FOR UPDATE;
    IF NOT FOUND OR NOT queen_proxy.tenancy_keeper_only(v_stated, v_scoping) THEN
        RETURN NULL;
    END IF;
    v_released := string_to_array(coalesce(current_setting('queen_proxy.keeper_released', true), ''), ',');
    SELECT id, placed_at INTO v_next, v_next_placed FROM queen_proxy.clusters
     WHERE cell_id = OLD.cell_id ORDER BY placed_at, id LIMIT 1;
    IF v_next IS NULL THEN
        -- The cell is empty now: nobody is served the data, but the next
        -- cluster placed here would be its keeper. Remember whose it is.
        IF NOT OLD.id::text = ANY (v_released) THEN
            UPDATE queen_proxy.cells
               SET keeper_residue = coalesce(keeper_residue, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
                       'cluster_id', OLD.id, 'cluster_slug', OLD.slug,
                       'broker_tenant_uuid', OLD.broker_tenant_uuid, 'left_at', now()))
             WHERE id = OLD.cell_id;
        END IF;
        RETURN NULL;
    END IF;
    IF (v_next_placed, v_next) < (OLD.placed_at, OLD.id) OR OLD.id::text = ANY (v_released) THEN
        RETURN NULL; -- OLD was not the keeper, or its queues are gone
    END IF;
    RAISE EXCEPTION 'cluster "%" is the keeper of cell "%", whose broker is not known to keep tenants apart (stated %, probe %): once it leaves, the next cluster on the cell would be served its queues; delete its queues on the cell''s broker first (caddy queen cluster move|tenant delete ... --delete-queues), then call queen_proxy.release_keeper(''%'') in the same transaction, or empty the cell',
        OLD.slug, v_slug, v_stated, v_scoping, OLD.id
        USING ERRCODE = '55000';
END;
$$;

DROP TRIGGER IF EXISTS clusters_refuse_keeper_handover ON queen_proxy.clusters;
CREATE TRIGGER clusters_refuse_keeper_handover
    AFTER UPDATE OF cell_id OR DELETE ON queen_proxy.clusters
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.refuse_keeper_handover();

-- Asserts, for the rest of this transaction, that the cluster's queues are
-- gone from its cell's broker, so it may leave the cell as its keeper. The
-- caller must have checked the broker (listing queues as the cluster's
-- x-queen-tenant with the cell's secret); evidence says what it saw or did
-- and is audited (action keeper_released). Returns false for an unknown
-- cluster.
CREATE OR REPLACE FUNCTION queen_proxy.release_keeper(p_cluster_id uuid, p_evidence jsonb)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant uuid;
    v_cell   uuid;
    v_prior  text := coalesce(current_setting('queen_proxy.keeper_released', true), '');
BEGIN
    SELECT tenant_id, cell_id INTO v_tenant, v_cell FROM queen_proxy.clusters WHERE id = p_cluster_id;
    IF v_tenant IS NULL THEN
        RETURN false;
    END IF;
    PERFORM set_config('queen_proxy.keeper_released',
        CASE WHEN v_prior = '' THEN p_cluster_id::text ELSE v_prior || ',' || p_cluster_id::text END, true);
    PERFORM queen_proxy.record_operation(v_tenant, p_cluster_id, 'control_plane', NULL, 'keeper_released',
        p_cluster_id::text, jsonb_build_object('cell_id', v_cell) || coalesce(p_evidence, '{}'::jsonb));
    RETURN true;
END;
$$;

-- Refuses placing a cluster on an empty cell not known to scope that holds
-- a keeper's residue (above): it would become the keeper and be served the
-- queues left there. release_cell_residue in the same transaction lifts it
-- and clears the residue. Placing on a cell known to scope is not refused.
CREATE OR REPLACE FUNCTION queen_proxy.refuse_placement_on_residue()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_slug     text;
    v_stated   text;
    v_scoping  text;
    v_residue  jsonb;
    v_released text[];
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.cell_id IS NOT DISTINCT FROM OLD.cell_id THEN
        RETURN NEW;
    END IF;
    SELECT slug, tenancy_stated, tenant_scoping, keeper_residue INTO v_slug, v_stated, v_scoping, v_residue
      FROM queen_proxy.cells WHERE id = NEW.cell_id FOR UPDATE;
    IF v_residue IS NULL OR jsonb_array_length(v_residue) = 0
       OR NOT queen_proxy.tenancy_keeper_only(v_stated, v_scoping)
       OR EXISTS (SELECT 1 FROM queen_proxy.clusters WHERE cell_id = NEW.cell_id AND id <> NEW.id) THEN
        RETURN NEW;
    END IF;
    v_released := string_to_array(coalesce(current_setting('queen_proxy.keeper_released', true), ''), ',');
    IF 'cell:' || NEW.cell_id::text = ANY (v_released) THEN
        UPDATE queen_proxy.cells SET keeper_residue = NULL WHERE id = NEW.cell_id;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'cell "%" is empty, but cluster "%" left it as the keeper of a broker not known to keep tenants apart without its queues being deleted: the next cluster placed there would be served them; delete them on the cell''s broker first (caddy queen cluster create|move ... --delete-queues), then call queen_proxy.release_cell_residue(''%'') in the same transaction',
        v_slug, v_residue -> -1 ->> 'cluster_slug', NEW.cell_id
        USING ERRCODE = '55000';
END;
$$;

DROP TRIGGER IF EXISTS clusters_refuse_placement_on_residue ON queen_proxy.clusters;
CREATE TRIGGER clusters_refuse_placement_on_residue
    BEFORE INSERT OR UPDATE OF cell_id ON queen_proxy.clusters
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.refuse_placement_on_residue();

-- Asserts, for the rest of this transaction, that the queues of every
-- cluster in the cell's keeper_residue are gone from its broker, so a
-- cluster may be placed on it; the placement clears the residue. Recorded
-- in the outbox (kind cell_residue_released) with the evidence, since the
-- clusters and tenants may be gone. Returns false for an unknown cell.
CREATE OR REPLACE FUNCTION queen_proxy.release_cell_residue(p_cell_id uuid, p_evidence jsonb)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_residue jsonb;
    v_prior   text := coalesce(current_setting('queen_proxy.keeper_released', true), '');
BEGIN
    SELECT coalesce(keeper_residue, '[]'::jsonb) INTO v_residue FROM queen_proxy.cells WHERE id = p_cell_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM set_config('queen_proxy.keeper_released',
        CASE WHEN v_prior = '' THEN 'cell:' || p_cell_id::text ELSE v_prior || ',cell:' || p_cell_id::text END, true);
    PERFORM queen_proxy.emit_outbox('cell_residue_released', jsonb_build_object(
        'cell_id', p_cell_id, 'residue', v_residue, 'evidence', coalesce(p_evidence, '{}'::jsonb), 'at', now()));
    RETURN true;
END;
$$;

-- Changes a cell's connection and stated tenancy; a NULL argument leaves its
-- field as it is, p_clear_secret removes the secret. The triggers above reset
-- the verdict on a new URL or secret and tell every gateway. SQLSTATE P0002
-- for an unknown cell, 22023 for an invalid value.
CREATE OR REPLACE FUNCTION queen_proxy.update_cell(
    p_cell_id      uuid,
    p_base_url     text,
    p_cell_secret  text,
    p_clear_secret boolean,
    p_tenancy      text,
    p_region       text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_base_url IS NOT NULL AND p_base_url !~ '^https?://[^/\s]+' THEN
        RAISE EXCEPTION 'update_cell: invalid broker URL %: want http://host:port', p_base_url USING ERRCODE = '22023';
    END IF;
    IF p_cell_secret IS NOT NULL AND coalesce(p_clear_secret, false) THEN
        RAISE EXCEPTION 'update_cell: give a new secret or clear it, not both' USING ERRCODE = '22023';
    END IF;
    IF p_cell_secret IS NOT NULL AND p_cell_secret = '' THEN
        RAISE EXCEPTION 'update_cell: the secret is empty; clear it instead' USING ERRCODE = '22023';
    END IF;
    IF p_tenancy IS NOT NULL AND p_tenancy NOT IN ('probe', 'scoped', 'unscoped') THEN
        RAISE EXCEPTION 'update_cell: invalid tenancy %: use probe, scoped or unscoped', p_tenancy USING ERRCODE = '22023';
    END IF;
    IF p_region IS NOT NULL AND btrim(p_region) = '' THEN
        RAISE EXCEPTION 'update_cell: the region is empty' USING ERRCODE = '22023';
    END IF;
    UPDATE queen_proxy.cells SET
        base_url       = coalesce(p_base_url, base_url),
        cell_secret    = CASE WHEN coalesce(p_clear_secret, false) THEN NULL ELSE coalesce(p_cell_secret, cell_secret) END,
        tenancy_stated = coalesce(p_tenancy, tenancy_stated),
        region         = coalesce(btrim(p_region), region)
     WHERE id = p_cell_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'update_cell: unknown cell %', p_cell_id USING ERRCODE = 'P0002';
    END IF;
END;
$$;
