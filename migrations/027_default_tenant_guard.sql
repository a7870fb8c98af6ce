-- 027_default_tenant_guard: no cluster may use the broker's default tenant.
--
-- A Queen broker that scopes by x-queen-tenant serves every request that
-- carries no tenant header (and every request, with tenancy off) as the
-- tenant 00000000-0000-0000-0000-000000000001. A cluster given that id as
-- its broker_tenant_uuid would share its queues with whatever reaches the
-- broker without a header: the broker's own tools, a misrouted client, a
-- request of the gateway's that lost its header. A random id never
-- collides with it; a hand-set one could, so the database refuses it.
DO $$
DECLARE
    v_slugs text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conname = 'clusters_broker_tenant_not_default'
                      AND conrelid = 'queen_proxy.clusters'::regclass) THEN
        SELECT string_agg(slug, ', ' ORDER BY slug) INTO v_slugs
          FROM queen_proxy.clusters
         WHERE broker_tenant_uuid = '00000000-0000-0000-0000-000000000001'::uuid;
        IF v_slugs IS NOT NULL THEN
            RAISE EXCEPTION '027_default_tenant_guard: cluster(s) % use the broker''s default tenant 00000000-0000-0000-0000-000000000001 as broker_tenant_uuid, which every request without a tenant header reaches; give each a new broker_tenant_uuid (and move its queues on the broker) before upgrading', v_slugs
                USING ERRCODE = '23514';
        END IF;
        ALTER TABLE queen_proxy.clusters ADD CONSTRAINT clusters_broker_tenant_not_default
            CHECK (broker_tenant_uuid <> '00000000-0000-0000-0000-000000000001'::uuid);
    END IF;
END;
$$;
