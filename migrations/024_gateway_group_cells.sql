-- 024_gateway_group_cells: which gateway group fronts which cell.
--
-- Every per-cluster limit is enforced from one gateway's memory, so it holds
-- only while one gateway (a lone one, or the leader of a group) admits a
-- cluster's traffic. A gateway configured with the cells it fronts records
-- them here at start; a gateway serves a cluster only when its cell is one of
-- its own and no other group is recorded for that cell. A cell is fronted by
-- one group: the primary key makes a second group's claim fail, whichever
-- gateway starts first, and the losing gateway says so instead of serving.
--
--   cell_slug   the cell, by slug: a gateway may be configured for a cell
--               before `caddy queen cell add` creates it, and its claim then
--               holds the cell from the start
--   group_name  the leader_group, or the gateway_name of a gateway of its own
--   claimed_by  the gateway_name of the member that first recorded the claim
--   stated_at   when a gateway of the group last stated it (at its start)
CREATE TABLE IF NOT EXISTS queen_proxy.gateway_group_cells (
    cell_slug  text        PRIMARY KEY CHECK (btrim(cell_slug) <> ''),
    group_name text        NOT NULL CHECK (btrim(group_name) <> ''),
    claimed_by text        NOT NULL DEFAULT '',
    claimed_at timestamptz NOT NULL DEFAULT now(),
    stated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_gateway_group_cells_group ON queen_proxy.gateway_group_cells (group_name);

-- Every gateway caches a cluster with the group that fronts its cell: a new,
-- changed or released claim invalidates each cluster on the cell (delivered
-- at COMMIT), so the gateway that no longer fronts it refuses it at once.
CREATE OR REPLACE FUNCTION queen_proxy.notify_gateway_group_cell_changed()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_cluster uuid;
    v_slug    text;
BEGIN
    FOREACH v_slug IN ARRAY ARRAY[CASE WHEN TG_OP <> 'INSERT' THEN OLD.cell_slug END,
                                  CASE WHEN TG_OP <> 'DELETE' THEN NEW.cell_slug END] LOOP
        CONTINUE WHEN v_slug IS NULL;
        FOR v_cluster IN SELECT c.id FROM queen_proxy.clusters c
                JOIN queen_proxy.cells ce ON ce.id = c.cell_id WHERE ce.slug = v_slug LOOP
            PERFORM pg_notify('queen_proxy_inval', v_cluster::text);
        END LOOP;
    END LOOP;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS gateway_group_cells_notify ON queen_proxy.gateway_group_cells;
CREATE TRIGGER gateway_group_cells_notify
    AFTER INSERT OR DELETE OR UPDATE OF cell_slug, group_name ON queen_proxy.gateway_group_cells
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.notify_gateway_group_cell_changed();

-- Records that p_group fronts each of p_cells, as stated by its member
-- p_gateway, where no other group does. Idempotent: a member restating its
-- group's claim only refreshes stated_at. Returns one row per cell, with the
-- group recorded for it afterwards (claimed: whether that is p_group) and
-- whether the cell exists yet; the caller refuses to serve a cell another
-- group holds.
CREATE OR REPLACE FUNCTION queen_proxy.claim_gateway_cells(p_group text, p_gateway text, p_cells text[])
RETURNS TABLE (cell_slug text, group_name text, claimed_by text, claimed_at timestamptz, claimed boolean, cell_exists boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_slug text;
BEGIN
    IF p_group IS NULL OR btrim(p_group) = '' THEN
        RAISE EXCEPTION 'claim_gateway_cells: group is required' USING ERRCODE = '22023';
    END IF;
    FOREACH v_slug IN ARRAY coalesce(p_cells, '{}'::text[]) LOOP
        IF v_slug IS NULL OR btrim(v_slug) = '' THEN
            RAISE EXCEPTION 'claim_gateway_cells: empty cell slug' USING ERRCODE = '22023';
        END IF;
        INSERT INTO queen_proxy.gateway_group_cells AS g (cell_slug, group_name, claimed_by)
        VALUES (v_slug, p_group, coalesce(p_gateway, ''))
        ON CONFLICT ON CONSTRAINT gateway_group_cells_pkey DO UPDATE
            SET stated_at = now()
            WHERE g.group_name = EXCLUDED.group_name;
    END LOOP;
    RETURN QUERY
        SELECT g.cell_slug, g.group_name, g.claimed_by, g.claimed_at, g.group_name = p_group,
               EXISTS (SELECT 1 FROM queen_proxy.cells ce WHERE ce.slug = g.cell_slug)
          FROM queen_proxy.gateway_group_cells g
         WHERE g.cell_slug = ANY (coalesce(p_cells, '{}'::text[]))
         ORDER BY g.cell_slug;
END;
$$;

-- Forgets which group fronts p_cell, so that another group may claim it (a
-- cell handed to new gateways: stop the old group's gateways first, or they
-- state their claim again when they next start). Returns the group that
-- held it, or NULL when none did.
CREATE OR REPLACE FUNCTION queen_proxy.release_gateway_cell(p_cell text)
RETURNS text
LANGUAGE sql AS $$
    DELETE FROM queen_proxy.gateway_group_cells WHERE cell_slug = p_cell RETURNING group_name
$$;
