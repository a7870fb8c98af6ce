-- 030_platform_tenant: the operators' own tenant.
--
-- Every user belongs to a tenant, so an operator of the platform had to be
-- created in some customer's tenant, and was deleted with it. The platform
-- tenant is the operators' home: created here, with the fixed slug
-- 'platform', marked is_platform (at most one tenant is). It is never a
-- customer's: it holds no clusters unless an operator creates some there,
-- and it cannot be deleted, set to 'deleting', renamed to another slug, or
-- lose its mark, whatever path tries (the tenant delete command, or SQL).
--
-- A database in which a customer's tenant already has the slug 'platform'
-- is refused, with the way out in the message: guessing which tenant the
-- operators should live in would be worse.

ALTER TABLE queen_proxy.tenants ADD COLUMN IF NOT EXISTS is_platform boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX IF NOT EXISTS tenants_one_platform ON queen_proxy.tenants (is_platform) WHERE is_platform;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM queen_proxy.tenants WHERE is_platform) THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM queen_proxy.tenants WHERE slug = 'platform') THEN
        RAISE EXCEPTION '030_platform_tenant: a customer tenant already has the slug platform, which is the operators'' own tenant; give that tenant another slug (UPDATE queen_proxy.tenants SET slug = ... WHERE slug = ''platform'') before upgrading'
            USING ERRCODE = '23505';
    END IF;
    INSERT INTO queen_proxy.tenants (slug, name, is_platform) VALUES ('platform', 'Platform operators', true);
END;
$$;

-- Refuses what would make the platform tenant go away or stop being it.
CREATE OR REPLACE FUNCTION queen_proxy.keep_platform_tenant()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.is_platform THEN
            RAISE EXCEPTION 'keep_platform_tenant: the platform tenant % holds the operators and cannot be deleted', OLD.slug
                USING ERRCODE = '23514', CONSTRAINT = 'tenants_platform_kept';
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.is_platform AND (NOT NEW.is_platform OR NEW.slug <> OLD.slug OR NEW.status = 'deleting') THEN
        RAISE EXCEPTION 'keep_platform_tenant: the platform tenant % holds the operators; it cannot be deleted, renamed or unmarked', OLD.slug
            USING ERRCODE = '23514', CONSTRAINT = 'tenants_platform_kept';
    END IF;
    IF NEW.is_platform AND NOT OLD.is_platform THEN
        RAISE EXCEPTION 'keep_platform_tenant: tenant % is a customer''s and cannot become the platform tenant', OLD.slug
            USING ERRCODE = '23514', CONSTRAINT = 'tenants_platform_kept';
    END IF;
    RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS tenants_platform_kept ON queen_proxy.tenants;
CREATE TRIGGER tenants_platform_kept
    BEFORE UPDATE OR DELETE ON queen_proxy.tenants
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.keep_platform_tenant();
