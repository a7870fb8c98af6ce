-- 015_gateway_lease: one leader among the gateways of a group.
--
-- Two or more gateways may front one cell as a group; only the leader serves
-- the data plane, so every per-cluster limit stays exact. Leadership is a
-- lease in this table, timed by the database's clock (so the gateways'
-- clocks do not matter): the holder renews it well within its time to live;
-- once it has expired, any other gateway of the group may take it. A lease
-- rather than a session advisory lock, because a lock lives as long as its
-- connection, and PostgreSQL notices a connection whose machine died only
-- when TCP keepalives give up, minutes later; a lease expires on time.
CREATE TABLE IF NOT EXISTS queen_proxy.gateway_leases (
    group_name  text        PRIMARY KEY CHECK (btrim(group_name) <> ''),
    holder      text        NOT NULL CHECK (btrim(holder) <> ''),
    -- epoch grows by one at every change of holder.
    epoch       bigint      NOT NULL DEFAULT 1,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    renewed_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

-- Takes or renews the group's lease for p_holder for p_ttl_ms milliseconds,
-- when p_holder holds it or it has expired (p_may_take false only renews a
-- lease p_holder already holds). Returns the lease as it is afterwards (holder
-- '' when there is none): the caller leads when holder = p_holder.
CREATE OR REPLACE FUNCTION queen_proxy.acquire_gateway_lease(
    p_group text, p_holder text, p_ttl_ms integer, p_may_take boolean DEFAULT true)
RETURNS TABLE (holder text, epoch bigint, expires_at timestamptz, taken_over boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_prev text;
BEGIN
    IF p_group IS NULL OR btrim(p_group) = '' OR p_holder IS NULL OR btrim(p_holder) = '' THEN
        RAISE EXCEPTION 'acquire_gateway_lease: group and holder are required' USING ERRCODE = '22023';
    END IF;
    IF p_ttl_ms IS NULL OR p_ttl_ms < 100 THEN
        RAISE EXCEPTION 'acquire_gateway_lease: ttl must be at least 100 ms (got %)', coalesce(p_ttl_ms::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    SELECT l.holder INTO v_prev FROM queen_proxy.gateway_leases l WHERE l.group_name = p_group FOR UPDATE;
    IF NOT FOUND THEN
        IF NOT p_may_take THEN
            RETURN QUERY SELECT ''::text, 0::bigint, now(), false;
            RETURN;
        END IF;
        INSERT INTO queen_proxy.gateway_leases AS l (group_name, holder, expires_at)
        VALUES (p_group, p_holder, now() + make_interval(secs => p_ttl_ms / 1000.0))
        ON CONFLICT (group_name) DO NOTHING;
        RETURN QUERY SELECT l.holder, l.epoch, l.expires_at, l.holder = p_holder
            FROM queen_proxy.gateway_leases l WHERE l.group_name = p_group;
        RETURN;
    END IF;
    UPDATE queen_proxy.gateway_leases l
       SET holder      = p_holder,
           epoch       = CASE WHEN l.holder = p_holder THEN l.epoch ELSE l.epoch + 1 END,
           acquired_at = CASE WHEN l.holder = p_holder THEN l.acquired_at ELSE now() END,
           renewed_at  = now(),
           expires_at  = now() + make_interval(secs => p_ttl_ms / 1000.0)
     WHERE l.group_name = p_group
       AND (l.holder = p_holder OR (p_may_take AND l.expires_at < now()));
    RETURN QUERY SELECT l.holder, l.epoch, l.expires_at, l.holder = p_holder AND v_prev <> p_holder
        FROM queen_proxy.gateway_leases l WHERE l.group_name = p_group;
END;
$$;

-- Gives up the group's lease if p_holder holds it, so that another gateway
-- takes it at its next attempt (a graceful stop hands over at once).
-- Returns whether it was held.
CREATE OR REPLACE FUNCTION queen_proxy.release_gateway_lease(p_group text, p_holder text)
RETURNS boolean
LANGUAGE sql AS $$
    WITH released AS (
        UPDATE queen_proxy.gateway_leases
           SET expires_at = now() - interval '1 millisecond'
         WHERE group_name = p_group AND holder = p_holder
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM released)
$$;
