-- 019_placement: the database chooses a cell for a new cluster, and keeps
-- each cell's slot count exact so that the choice can be trusted.
--
-- cells.used_slots is the number of clusters placed on the cell. Until now
-- nothing kept it; from here a trigger on clusters counts every insert, move
-- and delete (a tenant delete cascading included), and a plain write to it
-- is replaced by a recount, so it is exact whichever tool changes clusters.
--
-- cells.capacity_slots is how many clusters the cell takes; 0 means no cap
-- (the default, and what every cell had while capacity was informational,
-- so existing cells keep taking clusters). A cap is enforced on every
-- placement, named or chosen: the cell row is locked while it is counted,
-- so two concurrent creates never overfill it.
--
-- place_cluster(plan) is the one choice of a cell. create_cluster calls it
-- when no cell is named, so the CLI, the console and plain SQL place alike.

-- What a cell answers to "may a new cluster be placed here by choice?":
--   open         yes
--   draining     no: status draining (it keeps serving its clusters)
--   dead         no: status dead
--   full         no: used_slots has reached capacity_slots (a cap above 0)
--   keeper-only  no: its broker is not known to scope by tenant
--                (tenancy_keeper_only, 016) and it already holds its keeper;
--                a second cluster would be served nothing, or its queues
--   residue      no: such a cell is empty but a keeper left queues on its
--                broker (cells.keeper_residue, 016)
--   occupied     no: a dedicated cell holds its one cluster already
-- It reads only the cell's own columns, so a locked row is re-judged on its
-- latest version when a concurrent placement changed it.
CREATE OR REPLACE FUNCTION queen_proxy.cell_placement(
    p_status text, p_class text, p_capacity_slots integer, p_used_slots integer,
    p_tenancy_stated text, p_tenant_scoping text, p_keeper_residue jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p_status IS DISTINCT FROM 'active' THEN coalesce(p_status, 'dead')
        WHEN p_capacity_slots > 0 AND p_used_slots >= p_capacity_slots THEN 'full'
        WHEN queen_proxy.tenancy_keeper_only(p_tenancy_stated, p_tenant_scoping) AND p_used_slots > 0 THEN 'keeper-only'
        WHEN queen_proxy.tenancy_keeper_only(p_tenancy_stated, p_tenant_scoping)
             AND coalesce(jsonb_array_length(p_keeper_residue), 0) > 0 THEN 'residue'
        WHEN p_class = 'dedicated' AND p_used_slots > 0 THEN 'occupied'
        ELSE 'open'
    END
$$;

-- The share of a cell in use, the first key of "least loaded": used over
-- capacity, and 0 for a cell without a cap (it never fills).
CREATE OR REPLACE FUNCTION queen_proxy.cell_load(p_capacity_slots integer, p_used_slots integer)
RETURNS numeric
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_capacity_slots > 0 THEN p_used_slots::numeric / p_capacity_slots ELSE 0 END
$$;

-- Counts a cluster in and out of its cell and enforces the cell's cap. The
-- increment is one UPDATE of the cell row, which waits for any concurrent
-- placement on the cell to commit and then counts on top of it.
CREATE OR REPLACE FUNCTION queen_proxy.count_cell_slots()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_slug     text;
    v_used     integer;
    v_capacity integer;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.cell_id IS NOT DISTINCT FROM OLD.cell_id THEN
        RETURN NULL;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE queen_proxy.cells SET used_slots = greatest(used_slots - 1, 0) WHERE id = OLD.cell_id;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        UPDATE queen_proxy.cells SET used_slots = used_slots + 1 WHERE id = NEW.cell_id
        RETURNING slug, used_slots, capacity_slots INTO v_slug, v_used, v_capacity;
        IF v_capacity > 0 AND v_used > v_capacity THEN
            RAISE EXCEPTION 'cell "%" is full: it holds % of its % cluster slot(s); raise its capacity (caddy queen cell update % --capacity N) or place the cluster on another cell',
                v_slug, v_used - 1, v_capacity, v_slug
                USING ERRCODE = '55000';
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS clusters_count_cell_slots ON queen_proxy.clusters;
CREATE TRIGGER clusters_count_cell_slots
    AFTER INSERT OR DELETE OR UPDATE OF cell_id ON queen_proxy.clusters
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.count_cell_slots();

-- used_slots belongs to the trigger above (it writes from inside a trigger
-- on clusters, pg_trigger_depth 2 or more here). Any other write of it is
-- replaced by a recount, so a hand-made UPDATE cannot make it wrong and
-- "UPDATE queen_proxy.cells SET used_slots = 0" repairs it. A cap may not be
-- set below the clusters a cell holds (0, no cap, always may).
CREATE OR REPLACE FUNCTION queen_proxy.guard_cell_slots()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.used_slots := 0;
    ELSIF NEW.used_slots IS DISTINCT FROM OLD.used_slots AND pg_trigger_depth() < 2 THEN
        NEW.used_slots := (SELECT count(*) FROM queen_proxy.clusters WHERE cell_id = NEW.id);
    END IF;
    IF NEW.capacity_slots > 0 AND NEW.capacity_slots < NEW.used_slots
       AND (TG_OP = 'INSERT' OR NEW.capacity_slots IS DISTINCT FROM OLD.capacity_slots) THEN
        RAISE EXCEPTION 'cell "%" holds % cluster(s): its capacity cannot go below that (0 is no cap); move clusters off it first (caddy queen cluster move <cluster> --to <cell>)',
            NEW.slug, NEW.used_slots
            USING ERRCODE = '55000';
    END IF;
    RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS cells_guard_slots ON queen_proxy.cells;
CREATE TRIGGER cells_guard_slots
    BEFORE INSERT OR UPDATE OF used_slots, capacity_slots ON queen_proxy.cells
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.guard_cell_slots();

-- Recount once (the guard above recounts whatever is written), so that a
-- database where used_slots was never kept becomes exact.
UPDATE queen_proxy.cells ce SET used_slots = n.clusters
  FROM (SELECT c.id, count(cl.id)::int AS clusters
          FROM queen_proxy.cells c LEFT JOIN queen_proxy.clusters cl ON cl.cell_id = c.id
         GROUP BY c.id) n
 WHERE n.id = ce.id AND ce.used_slots IS DISTINCT FROM n.clusters;

-- Chooses the cell for a new cluster of the plan: of the plan's cell_class,
-- open (cell_placement above), least loaded first (cell_load, then fewer
-- clusters, then slug). The chosen cell row stays locked until the caller's
-- transaction ends, so the cluster the caller inserts next takes the slot it
-- was chosen for. A concurrent placement on the same cell waits for that
-- lock, then judges the cell again on its new count; when it is no longer
-- open the lock is given back (the subtransaction is rolled back) and the
-- choice is made again from the committed counts. Holding no lock while
-- waiting for another, two placements cannot deadlock. No room is SQLSTATE
-- 55000 with what to add; an unknown plan P0002.
CREATE OR REPLACE FUNCTION queen_proxy.place_cluster(p_plan_code text)
RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_plan    text := lower(btrim(p_plan_code));
    v_class   text;
    v_cell    uuid;
    v_state   text;
    v_summary text;
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
    SELECT string_agg(format('%s %s', n, state), ', ' ORDER BY state) INTO v_summary
      FROM (SELECT queen_proxy.cell_placement(status, class, capacity_slots, used_slots,
                                              tenancy_stated, tenant_scoping, keeper_residue) AS state, count(*) AS n
              FROM queen_proxy.cells WHERE class = v_class GROUP BY 1) s;
    RAISE EXCEPTION 'place_cluster: no active % cell has room for a cluster of plan % (% cells: %): add one (caddy queen cell add <slug> --region <region> --url <broker URL> --class % --capacity N) or raise a cell''s capacity (caddy queen cell update <cell> --capacity N)',
        v_class, v_plan, v_class, coalesce(v_summary, 'none'), v_class
        USING ERRCODE = '55000';
END;
$$;

-- 002's create_cluster, restated: a NULL cell is placed by place_cluster,
-- and the audit row says whether the cell was chosen or named.
CREATE OR REPLACE FUNCTION queen_proxy.create_cluster(
    p_tenant_id uuid,
    p_slug      text,
    p_plan_code text,
    p_cell_id   uuid
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_slug    text := lower(btrim(p_slug));
    v_plan_id uuid;
    v_cell_id uuid := p_cell_id;
    v_id      uuid;
BEGIN
    IF v_slug IS NULL OR v_slug = '' THEN
        RAISE EXCEPTION 'create_cluster: slug is required' USING ERRCODE = '22023';
    END IF;
    IF v_slug !~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$' THEN
        RAISE EXCEPTION 'create_cluster: slug % is not a DNS label (a-z, 0-9, inner hyphens, at most 63 characters)', v_slug
            USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM queen_proxy.tenants WHERE id = p_tenant_id) THEN
        RAISE EXCEPTION 'create_cluster: unknown tenant %', p_tenant_id USING ERRCODE = 'P0002';
    END IF;
    SELECT id INTO v_plan_id FROM queen_proxy.plans WHERE code = p_plan_code;
    IF v_plan_id IS NULL THEN
        RAISE EXCEPTION 'create_cluster: unknown plan %', coalesce(p_plan_code, 'NULL') USING ERRCODE = 'P0002';
    END IF;
    IF v_cell_id IS NULL THEN
        v_cell_id := queen_proxy.place_cluster(p_plan_code);
    ELSIF NOT EXISTS (SELECT 1 FROM queen_proxy.cells WHERE id = v_cell_id) THEN
        RAISE EXCEPTION 'create_cluster: unknown cell %', v_cell_id USING ERRCODE = 'P0002';
    END IF;

    INSERT INTO queen_proxy.clusters (tenant_id, cell_id, plan_id, slug)
    VALUES (p_tenant_id, v_cell_id, v_plan_id, v_slug)
    RETURNING id INTO v_id;

    PERFORM queen_proxy.record_operation(p_tenant_id, v_id, 'control_plane', NULL, 'cluster_created', v_id::text,
        jsonb_build_object('slug', v_slug, 'plan_code', p_plan_code, 'cell_id', v_cell_id, 'placed', p_cell_id IS NULL));
    RETURN v_id;
END;
$$;

-- 016's update_cell with a capacity (NULL leaves it; 0 is no cap). The
-- six-argument form stays for callers of 016 and changes no capacity.
CREATE OR REPLACE FUNCTION queen_proxy.update_cell(
    p_cell_id      uuid,
    p_base_url     text,
    p_cell_secret  text,
    p_clear_secret boolean,
    p_tenancy      text,
    p_region       text,
    p_capacity     integer)
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
    IF p_capacity IS NOT NULL AND p_capacity < 0 THEN
        RAISE EXCEPTION 'update_cell: invalid capacity %: use 0 (no cap) or more', p_capacity USING ERRCODE = '22023';
    END IF;
    UPDATE queen_proxy.cells SET
        base_url       = coalesce(p_base_url, base_url),
        cell_secret    = CASE WHEN coalesce(p_clear_secret, false) THEN NULL ELSE coalesce(p_cell_secret, cell_secret) END,
        tenancy_stated = coalesce(p_tenancy, tenancy_stated),
        region         = coalesce(btrim(p_region), region),
        capacity_slots = coalesce(p_capacity, capacity_slots)
     WHERE id = p_cell_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'update_cell: unknown cell %', p_cell_id USING ERRCODE = 'P0002';
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION queen_proxy.update_cell(
    p_cell_id      uuid,
    p_base_url     text,
    p_cell_secret  text,
    p_clear_secret boolean,
    p_tenancy      text,
    p_region       text)
RETURNS void
LANGUAGE sql AS $$
    SELECT queen_proxy.update_cell(p_cell_id, p_base_url, p_cell_secret, p_clear_secret, p_tenancy, p_region, NULL::integer)
$$;

-- Removes a cell that holds no cluster. A cell whose broker still holds a
-- keeper's queues (keeper_residue) is kept unless p_forget_residue says the
-- broker goes with its data: a cell re-added for the same broker would not
-- know about them. Recorded in the outbox (kind cell_removed: cells belong
-- to no tenant, so there is no audit row); nothing is cached about a cell
-- without clusters, so no gateway needs telling. Returns the removed cell
-- as JSON; P0002 for an unknown cell, 55000 when refused.
CREATE OR REPLACE FUNCTION queen_proxy.remove_cell(p_cell_id uuid, p_forget_residue boolean DEFAULT false)
RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_cell     queen_proxy.cells;
    v_clusters integer;
    v_out      jsonb;
BEGIN
    SELECT * INTO v_cell FROM queen_proxy.cells WHERE id = p_cell_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'remove_cell: unknown cell %', p_cell_id USING ERRCODE = 'P0002';
    END IF;
    SELECT count(*) INTO v_clusters FROM queen_proxy.clusters WHERE cell_id = p_cell_id;
    IF v_clusters > 0 THEN
        RAISE EXCEPTION 'remove_cell: cell "%" still holds % cluster(s): move each to another cell first (caddy queen cluster list --cell %, then caddy queen cluster move <cluster> --to <cell>); drain it meanwhile so nothing new is placed there (caddy queen cell drain %)',
            v_cell.slug, v_clusters, v_cell.slug, v_cell.slug
            USING ERRCODE = '55000';
    END IF;
    IF coalesce(jsonb_array_length(v_cell.keeper_residue), 0) > 0 AND NOT coalesce(p_forget_residue, false) THEN
        RAISE EXCEPTION 'remove_cell: cell "%" is empty, but cluster "%" left queues on its broker as the keeper of a broker not known to keep tenants apart; delete them there, or remove the cell with --forget-residue if the broker is retired with its data',
            v_cell.slug, v_cell.keeper_residue -> -1 ->> 'cluster_slug'
            USING ERRCODE = '55000';
    END IF;
    DELETE FROM queen_proxy.cells WHERE id = p_cell_id;
    v_out := jsonb_build_object('cell_id', v_cell.id, 'slug', v_cell.slug, 'region', v_cell.region,
        'base_url', v_cell.base_url, 'class', v_cell.class, 'residue_forgotten', v_cell.keeper_residue, 'at', now());
    PERFORM queen_proxy.emit_outbox('cell_removed', v_out);
    RETURN v_out;
END;
$$;
