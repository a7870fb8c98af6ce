-- 018_leader_peer: the leader's peer address in its lease, and a takeover
-- that a standby makes only after it asked the leader.
--
-- A leader cut off from the database alone cannot renew, yet may still be
-- alive and serving. Its lease now names the address on which it answers
-- its peers (holder_peer_url); a standby that finds the lease expired first
-- asks that address, and takes the lease only when the leader does not
-- answer as leader, with a compare-and-set on the epoch it saw, so that a
-- renewal or another standby's takeover in between wins.
ALTER TABLE queen_proxy.gateway_leases
    ADD COLUMN IF NOT EXISTS holder_peer_url text NOT NULL DEFAULT '';

-- One attempt at the group's lease by p_holder, for p_ttl_ms milliseconds:
-- it renews the lease when p_holder holds it; otherwise, when p_take_epoch
-- is given, it takes the lease if it has expired and is still at that epoch
-- (0: there is no lease yet). p_peer_url is written as the holder's peer
-- address whenever p_holder holds the lease afterwards. Returns the lease as
-- it is afterwards (holder '' and epoch 0 when there is none), whether it has
-- expired, and whether this attempt made p_holder the holder.
CREATE OR REPLACE FUNCTION queen_proxy.gateway_lease_attempt(
    p_group text, p_holder text, p_ttl_ms integer, p_peer_url text, p_take_epoch bigint)
RETURNS TABLE (holder text, epoch bigint, holder_peer_url text, expired boolean, taken_over boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_prev  text;
    v_epoch bigint;
BEGIN
    IF p_group IS NULL OR btrim(p_group) = '' OR p_holder IS NULL OR btrim(p_holder) = '' THEN
        RAISE EXCEPTION 'gateway_lease_attempt: group and holder are required' USING ERRCODE = '22023';
    END IF;
    IF p_ttl_ms IS NULL OR p_ttl_ms < 100 THEN
        RAISE EXCEPTION 'gateway_lease_attempt: ttl must be at least 100 ms (got %)', coalesce(p_ttl_ms::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    SELECT l.holder, l.epoch INTO v_prev, v_epoch
      FROM queen_proxy.gateway_leases l WHERE l.group_name = p_group FOR UPDATE;
    IF NOT FOUND THEN
        IF p_take_epoch IS DISTINCT FROM 0 THEN
            RETURN QUERY SELECT ''::text, 0::bigint, ''::text, true, false;
            RETURN;
        END IF;
        INSERT INTO queen_proxy.gateway_leases AS l (group_name, holder, expires_at, holder_peer_url)
        VALUES (p_group, p_holder, now() + make_interval(secs => p_ttl_ms / 1000.0), coalesce(p_peer_url, ''))
        ON CONFLICT (group_name) DO NOTHING;
        RETURN QUERY SELECT l.holder, l.epoch, l.holder_peer_url, l.expires_at < now(), l.holder = p_holder
            FROM queen_proxy.gateway_leases l WHERE l.group_name = p_group;
        RETURN;
    END IF;
    UPDATE queen_proxy.gateway_leases l
       SET holder          = p_holder,
           epoch           = CASE WHEN l.holder = p_holder THEN l.epoch ELSE l.epoch + 1 END,
           acquired_at     = CASE WHEN l.holder = p_holder THEN l.acquired_at ELSE now() END,
           renewed_at      = now(),
           expires_at      = now() + make_interval(secs => p_ttl_ms / 1000.0),
           holder_peer_url = coalesce(p_peer_url, '')
     WHERE l.group_name = p_group
       AND (l.holder = p_holder
            OR (p_take_epoch IS NOT NULL AND l.epoch = p_take_epoch AND l.expires_at < now()));
    RETURN QUERY SELECT l.holder, l.epoch, l.holder_peer_url, l.expires_at < now(),
                        l.holder = p_holder AND v_prev <> p_holder
        FROM queen_proxy.gateway_leases l WHERE l.group_name = p_group;
END;
$$;

-- The function of 015, kept for gateways of the previous release during a
-- rolling upgrade. A takeover through it now clears the peer address, so
-- that a standby never asks the previous holder's address about a lease it
-- no longer holds.
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
       SET holder          = p_holder,
           epoch           = CASE WHEN l.holder = p_holder THEN l.epoch ELSE l.epoch + 1 END,
           acquired_at     = CASE WHEN l.holder = p_holder THEN l.acquired_at ELSE now() END,
           renewed_at      = now(),
           expires_at      = now() + make_interval(secs => p_ttl_ms / 1000.0),
           holder_peer_url = CASE WHEN l.holder = p_holder THEN l.holder_peer_url ELSE '' END
     WHERE l.group_name = p_group
       AND (l.holder = p_holder OR (p_may_take AND l.expires_at < now()));
    RETURN QUERY SELECT l.holder, l.epoch, l.expires_at, l.holder = p_holder AND v_prev <> p_holder
        FROM queen_proxy.gateway_leases l WHERE l.group_name = p_group;
END;
$$;

-- A release now also clears the peer address: the holder has stopped
-- serving before it releases, so a standby takes the lease without asking.
CREATE OR REPLACE FUNCTION queen_proxy.release_gateway_lease(p_group text, p_holder text)
RETURNS boolean
LANGUAGE sql AS $$
    WITH released AS (
        UPDATE queen_proxy.gateway_leases
           SET expires_at = now() - interval '1 millisecond',
               holder_peer_url = ''
         WHERE group_name = p_group AND holder = p_holder
        RETURNING 1
    )
    SELECT EXISTS (SELECT 1 FROM released)
$$;
