-- 022_drain: a cluster's traffic stops everywhere before it leaves a cell.
--
-- A status change reaches every gateway within a second, but a request a
-- gateway admitted before it learned the change is still on its way to the
-- cell: a push whose body was still arriving, or one the gateway was about
-- to forward. Deleting a keeper's queues while such pushes land would leave
-- them on the broker, and the next keeper of a cell without tenancy would
-- pop them. So a cluster leaving a cell (deleted, or released as keeper) is
-- drained first:
--
--   1. begin_cluster_drain(cluster, reason) records that the cluster is
--      leaving its current cell and tells every gateway (queen_proxy_inval);
--   2. every gateway stops forwarding the cluster to that cell, waits until
--      the requests it already admitted for it have ended, and records
--      ack_cluster_drain(drain, gateway);
--   3. cluster_drain_waiting(cluster) lists the live gateways that have not
--      acknowledged yet; once it is empty, nothing of the cluster reaches
--      the cell any more, and release_keeper (below) accepts the release.
--
-- "Live" is a heartbeat: every gateway records one each second in
-- gateway_instances (gateway_heartbeat). One whose heartbeat is older than
-- gateway_lapse() is not waited for; a gateway stops serving a keeper on
-- its own well before its heartbeat is that old, and drops everything it
-- cached once it beats again, so it cannot serve what it missed.
--
-- SQLSTATEs as in 002: 22023 invalid argument, P0002 unknown row, 55000 an
-- object in the wrong state.

CREATE TABLE IF NOT EXISTS queen_proxy.gateway_instances (
    id           uuid        PRIMARY KEY,
    name         text        NOT NULL CHECK (btrim(name) <> ''),
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS queen_proxy.cluster_drains (
    cluster_id uuid        PRIMARY KEY REFERENCES queen_proxy.clusters (id) ON DELETE CASCADE,
    cell_id    uuid        NOT NULL,
    drain_id   uuid        NOT NULL UNIQUE,
    reason     text        NOT NULL CHECK (reason IN ('delete', 'leave')),
    started_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS queen_proxy.cluster_drain_acks (
    drain_id   uuid        NOT NULL REFERENCES queen_proxy.cluster_drains (drain_id) ON DELETE CASCADE,
    gateway_id uuid        NOT NULL REFERENCES queen_proxy.gateway_instances (id) ON DELETE CASCADE,
    acked_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (drain_id, gateway_id)
);

-- How long after its last heartbeat a gateway still counts as serving. A
-- gateway stops forwarding a keeper's traffic after 6 s without a heartbeat
-- (caddymodule), so a gateway past this has stopped on its own.
CREATE OR REPLACE FUNCTION queen_proxy.gateway_lapse()
RETURNS interval
LANGUAGE sql IMMUTABLE AS $$ SELECT interval '10 seconds' $$;

-- Records that gateway p_gateway is alive. Returns true when it was alive
-- already (its last heartbeat within the lapse); false for a new or lapsed
-- one, which must drop what it cached: drains may have gone on without it.
-- Rows lapsed for a day are removed.
CREATE OR REPLACE FUNCTION queen_proxy.gateway_heartbeat(p_gateway uuid, p_name text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_prev timestamptz;
BEGIN
    IF p_gateway IS NULL OR p_name IS NULL OR btrim(p_name) = '' THEN
        RAISE EXCEPTION 'gateway_heartbeat: gateway id and name are required' USING ERRCODE = '22023';
    END IF;
    SELECT heartbeat_at INTO v_prev FROM queen_proxy.gateway_instances WHERE id = p_gateway FOR UPDATE;
    IF FOUND THEN
        UPDATE queen_proxy.gateway_instances SET heartbeat_at = now(), name = p_name WHERE id = p_gateway;
    ELSE
        INSERT INTO queen_proxy.gateway_instances (id, name) VALUES (p_gateway, p_name);
    END IF;
    DELETE FROM queen_proxy.gateway_instances WHERE heartbeat_at < now() - interval '1 day';
    RETURN v_prev IS NOT NULL AND v_prev >= now() - queen_proxy.gateway_lapse();
END;
$$;

-- A gateway that stops says so, so that no drain waits for it.
CREATE OR REPLACE FUNCTION queen_proxy.gateway_leave(p_gateway uuid)
RETURNS void
LANGUAGE sql AS $$ DELETE FROM queen_proxy.gateway_instances WHERE id = p_gateway $$;

-- Starts draining a cluster off its current cell (step 1 above) and returns
-- the drain's id. A drain of the cluster on that cell already under way is
-- returned as it is (its acknowledgments stand); one left from another cell
-- is replaced. p_reason: 'delete' (the cluster is being deleted) or 'leave'
-- (it leaves the cell as its keeper). Audited as cluster_drain_started.
CREATE OR REPLACE FUNCTION queen_proxy.begin_cluster_drain(p_cluster uuid, p_reason text)
RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_cell   uuid;
    v_tenant uuid;
    v_drain  uuid;
BEGIN
    IF p_reason IS NULL OR p_reason NOT IN ('delete', 'leave') THEN
        RAISE EXCEPTION 'begin_cluster_drain: reason must be delete or leave (got %)', coalesce(p_reason, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    SELECT cell_id, tenant_id INTO v_cell, v_tenant FROM queen_proxy.clusters WHERE id = p_cluster FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'begin_cluster_drain: unknown cluster %', p_cluster USING ERRCODE = 'P0002';
    END IF;
    SELECT drain_id INTO v_drain FROM queen_proxy.cluster_drains WHERE cluster_id = p_cluster AND cell_id = v_cell;
    IF FOUND THEN
        RETURN v_drain;
    END IF;
    DELETE FROM queen_proxy.cluster_drains WHERE cluster_id = p_cluster;
    v_drain := public.gen_random_uuid();
    INSERT INTO queen_proxy.cluster_drains (cluster_id, cell_id, drain_id, reason) VALUES (p_cluster, v_cell, v_drain, p_reason);
    PERFORM queen_proxy.record_operation(v_tenant, p_cluster, 'control_plane', NULL, 'cluster_drain_started', p_cluster::text,
        jsonb_build_object('cell_id', v_cell, 'drain_id', v_drain, 'reason', p_reason));
    PERFORM pg_notify('queen_proxy_inval', p_cluster::text);
    RETURN v_drain;
END;
$$;

-- Ends a cluster's drain: every gateway serves it on its cell again (for a
-- leave that did not happen). Returns whether there was one. Audited as
-- cluster_drain_ended.
CREATE OR REPLACE FUNCTION queen_proxy.end_cluster_drain(p_cluster uuid)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_drain  uuid;
    v_tenant uuid;
BEGIN
    DELETE FROM queen_proxy.cluster_drains WHERE cluster_id = p_cluster RETURNING drain_id INTO v_drain;
    IF v_drain IS NULL THEN
        RETURN false;
    END IF;
    SELECT tenant_id INTO v_tenant FROM queen_proxy.clusters WHERE id = p_cluster;
    PERFORM queen_proxy.record_operation(v_tenant, p_cluster, 'control_plane', NULL, 'cluster_drain_ended', p_cluster::text,
        jsonb_build_object('drain_id', v_drain));
    PERFORM pg_notify('queen_proxy_inval', p_cluster::text);
    RETURN true;
END;
$$;

-- A gateway acknowledges a drain: it forwards nothing more of the cluster to
-- the cell, and what it had admitted has ended. Returns false when the drain
-- is gone (ended, or the cluster left) or the gateway is not registered.
CREATE OR REPLACE FUNCTION queen_proxy.ack_cluster_drain(p_drain uuid, p_gateway uuid)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM queen_proxy.cluster_drains WHERE drain_id = p_drain)
       OR NOT EXISTS (SELECT 1 FROM queen_proxy.gateway_instances WHERE id = p_gateway) THEN
        RETURN false;
    END IF;
    INSERT INTO queen_proxy.cluster_drain_acks (drain_id, gateway_id) VALUES (p_drain, p_gateway)
        ON CONFLICT DO NOTHING;
    RETURN true;
END;
$$;

-- The live gateways that have not acknowledged the drain of the cluster off
-- its current cell. Refuses (55000) a cluster with no such drain: nothing
-- has told the gateways to stop.
CREATE OR REPLACE FUNCTION queen_proxy.cluster_drain_waiting(p_cluster uuid)
RETURNS TABLE (gateway_id uuid, gateway_name text, heartbeat_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_drain uuid;
BEGIN
    SELECT d.drain_id INTO v_drain
      FROM queen_proxy.cluster_drains d JOIN queen_proxy.clusters c ON c.id = d.cluster_id AND c.cell_id = d.cell_id
     WHERE d.cluster_id = p_cluster;
    IF v_drain IS NULL THEN
        RAISE EXCEPTION 'cluster_drain_waiting: cluster % is not being drained off its cell; call queen_proxy.begin_cluster_drain first',
            p_cluster USING ERRCODE = '55000';
    END IF;
    RETURN QUERY
        SELECT g.id, g.name, g.heartbeat_at FROM queen_proxy.gateway_instances g
         WHERE g.heartbeat_at >= now() - queen_proxy.gateway_lapse()
           AND NOT EXISTS (SELECT 1 FROM queen_proxy.cluster_drain_acks a WHERE a.drain_id = v_drain AND a.gateway_id = g.id)
         ORDER BY g.name, g.id;
END;
$$;

-- Whether the cluster's traffic to its current cell has stopped everywhere.
CREATE OR REPLACE FUNCTION queen_proxy.cluster_drained(p_cluster uuid)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RETURN NOT EXISTS (SELECT 1 FROM queen_proxy.cluster_drain_waiting(p_cluster));
EXCEPTION WHEN SQLSTATE '55000' THEN
    RETURN false;
END;
$$;

-- A drain belongs to the cell it was started on: once the cluster is on
-- another cell, it is served there, and a move back later is not fenced by
-- a drain left behind. A cluster taken out of 'deleting' is served again.
CREATE OR REPLACE FUNCTION queen_proxy.clusters_end_stale_drains()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.cell_id IS DISTINCT FROM OLD.cell_id THEN
        DELETE FROM queen_proxy.cluster_drains WHERE cluster_id = NEW.id AND cell_id IS DISTINCT FROM NEW.cell_id;
    END IF;
    IF OLD.status = 'deleting' AND NEW.status <> 'deleting' THEN
        DELETE FROM queen_proxy.cluster_drains WHERE cluster_id = NEW.id AND reason = 'delete';
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS clusters_end_stale_drains ON queen_proxy.clusters;
CREATE TRIGGER clusters_end_stale_drains
    AFTER UPDATE OF cell_id, status ON queen_proxy.clusters
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.clusters_end_stale_drains();

CREATE OR REPLACE FUNCTION queen_proxy.tenants_end_stale_drains()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'deleting' AND NEW.status <> 'deleting' THEN
        DELETE FROM queen_proxy.cluster_drains d USING queen_proxy.clusters c
         WHERE c.id = d.cluster_id AND c.tenant_id = NEW.id AND c.status <> 'deleting' AND d.reason = 'delete';
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS tenants_end_stale_drains ON queen_proxy.tenants;
CREATE TRIGGER tenants_end_stale_drains
    AFTER UPDATE OF status ON queen_proxy.tenants
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.tenants_end_stale_drains();

-- 016's release_keeper, now only once the keeper's traffic has stopped
-- everywhere: listing its queues while pushes admitted earlier are still on
-- their way proves nothing, since they land after the listing.
CREATE OR REPLACE FUNCTION queen_proxy.release_keeper(p_cluster_id uuid, p_evidence jsonb)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant  uuid;
    v_cell    uuid;
    v_slug    text;
    v_waiting text;
    v_prior   text := coalesce(current_setting('queen_proxy.keeper_released', true), '');
BEGIN
    SELECT tenant_id, cell_id, slug INTO v_tenant, v_cell, v_slug FROM queen_proxy.clusters WHERE id = p_cluster_id;
    IF v_tenant IS NULL THEN
        RETURN false;
    END IF;
    IF NOT queen_proxy.cluster_drained(p_cluster_id) THEN
        IF EXISTS (SELECT 1 FROM queen_proxy.cluster_drains d WHERE d.cluster_id = p_cluster_id AND d.cell_id = v_cell) THEN
            SELECT string_agg(w.gateway_name, ', ') INTO v_waiting FROM queen_proxy.cluster_drain_waiting(p_cluster_id) w;
        END IF;
        RAISE EXCEPTION 'release_keeper: cluster "%" may still be sending traffic to its cell (%): call queen_proxy.begin_cluster_drain(''%'', ''leave''), wait until queen_proxy.cluster_drain_waiting(''%'') is empty, then check its queues on the broker and release it',
            v_slug, coalesce('gateways not done: ' || v_waiting, 'no drain started'), p_cluster_id, p_cluster_id
            USING ERRCODE = '55000';
    END IF;
    PERFORM set_config('queen_proxy.keeper_released',
        CASE WHEN v_prior = '' THEN p_cluster_id::text ELSE v_prior || ',' || p_cluster_id::text END, true);
    PERFORM queen_proxy.record_operation(v_tenant, p_cluster_id, 'control_plane', NULL, 'keeper_released',
        p_cluster_id::text, jsonb_build_object('cell_id', v_cell) || coalesce(p_evidence, '{}'::jsonb));
    RETURN true;
END;
$$;
