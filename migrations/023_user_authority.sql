-- 023_user_authority: who may act, checked where the act commits, and
-- where an account came from.
--
-- 1. A change of the operator bit reaches every gateway at once. Gateways
--    cache the bit; without a notification a withdrawn operator kept fleet
--    power until the cache entry expired. Every change of users.is_operator
--    (set_operator, or a plain UPDATE) and the deletion of an operator send
--    the nil-uuid payload on queen_proxy_inval, which tells every gateway
--    to drop what it caches about users (revocations, operator bits).
--
-- 2. Every audited act of a human is checked against the actor's standing
--    in the transaction that acts: the console and operator surfaces write
--    their audit row (record_operation, actor 'user') inside the same
--    transaction as the change, so a trigger on queen_proxy.operations
--    refuses the whole transaction when the actor no longer holds the power
--    the act needs, whatever code path wrote it:
--      operator_*            the operator bit;
--      console_user_invited  the operator bit (a cluster admin cannot create
--                            an account for an address its tenant does not
--                            own; an operator can);
--      console_* on a cluster the admin role on that cluster, or the
--                            operator bit (an operator acting as admin).
--    The actor's users row (and admin role row) is locked FOR SHARE, and
--    set_operator locks the users row FOR UPDATE, so a revocation either
--    commits before the check (and the act is refused) or waits until the
--    act has committed: nothing is done on the strength of an operator bit
--    after its revocation committed. Refused with SQLSTATE 42501 and the
--    constraint name operations_user_authority.
--
-- 3. users.created_from (control_plane, operator, console, signup) and
--    users.created_by (the acting user, if any) record where an account came
--    from. An OAuth sign-in links a provider identity only to an account an
--    operator or the control plane created, or one that has signed in
--    before, so an account a tenant created for an address it does not own
--    cannot capture that address's owner. Accounts created before this
--    column are classified by their audit rows.

ALTER TABLE queen_proxy.users ADD COLUMN IF NOT EXISTS created_from text NOT NULL DEFAULT 'control_plane';
ALTER TABLE queen_proxy.users ADD COLUMN IF NOT EXISTS created_by uuid
    REFERENCES queen_proxy.users (id) ON DELETE SET NULL;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conname = 'users_created_from_valid'
                      AND conrelid = 'queen_proxy.users'::regclass) THEN
        ALTER TABLE queen_proxy.users ADD CONSTRAINT users_created_from_valid
            CHECK (created_from IN ('control_plane', 'operator', 'console', 'signup'));
    END IF;
END;
$$;

-- Accounts made before this migration: their creating audit row says how.
UPDATE queen_proxy.users u
   SET created_from = CASE o.action WHEN 'console_user_invited' THEN 'console'
                                    WHEN 'operator_user_created' THEN 'operator'
                                    ELSE 'signup' END,
       created_by = CASE WHEN o.action = 'signup' THEN NULL
                         ELSE (SELECT x.id FROM queen_proxy.users x WHERE x.id = o.actor_id) END
  FROM queen_proxy.operations o
 WHERE o.actor = 'user'
   AND o.action IN ('console_user_invited', 'operator_user_created', 'signup')
   AND o.target = u.id::text
   AND u.created_from = 'control_plane';

CREATE INDEX IF NOT EXISTS idx_users_console_never_signed_in
    ON queen_proxy.users (created_at) WHERE created_from = 'console' AND last_login_at IS NULL;

-- Records where an account came from; called in the transaction that
-- created it. Only the surfaces that create accounts call it.
CREATE OR REPLACE FUNCTION queen_proxy.set_user_origin(p_user uuid, p_from text, p_by uuid)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_from IS NULL OR p_from NOT IN ('control_plane', 'operator', 'console', 'signup') THEN
        RAISE EXCEPTION 'set_user_origin: origin must be one of control_plane, operator, console, signup (got %)',
            coalesce(p_from, 'NULL') USING ERRCODE = '22023';
    END IF;
    UPDATE queen_proxy.users SET created_from = p_from, created_by = p_by WHERE id = p_user;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'set_user_origin: unknown user %', p_user USING ERRCODE = 'P0002';
    END IF;
END;
$$;

-- Tells every gateway that a user's standing changed.
CREATE OR REPLACE FUNCTION queen_proxy.notify_user_standing()
RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('queen_proxy_inval', '00000000-0000-0000-0000-000000000000');
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS users_operator_changed ON queen_proxy.users;
CREATE TRIGGER users_operator_changed
    AFTER UPDATE OF is_operator ON queen_proxy.users
    FOR EACH ROW WHEN (OLD.is_operator IS DISTINCT FROM NEW.is_operator)
    EXECUTE FUNCTION queen_proxy.notify_user_standing();

DROP TRIGGER IF EXISTS users_operator_deleted ON queen_proxy.users;
CREATE TRIGGER users_operator_deleted
    AFTER DELETE ON queen_proxy.users
    FOR EACH ROW WHEN (OLD.is_operator)
    EXECUTE FUNCTION queen_proxy.notify_user_standing();

-- The authority check of section 2.
CREATE OR REPLACE FUNCTION queen_proxy.check_user_authority()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_operator boolean;
    v_needs    text;
BEGIN
    IF NEW.actor <> 'user' THEN
        RETURN NEW;
    END IF;
    IF NEW.action LIKE 'operator\_%' OR NEW.action = 'console_user_invited' THEN
        v_needs := 'operator';
    ELSIF NEW.action LIKE 'console\_%' AND NEW.cluster_id IS NOT NULL THEN
        v_needs := 'admin';
    ELSE
        RETURN NEW;
    END IF;

    SELECT is_operator INTO v_operator FROM queen_proxy.users WHERE id = NEW.actor_id FOR SHARE;
    IF coalesce(v_operator, false) THEN
        RETURN NEW;
    END IF;
    IF v_needs = 'admin' THEN
        PERFORM 1 FROM queen_proxy.cluster_roles
          WHERE user_id = NEW.actor_id AND cluster_id = NEW.cluster_id AND role = 'admin'
            FOR SHARE;
        IF FOUND THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'check_user_authority: % needs the admin role on cluster % or the operator bit, which user % does not hold',
            NEW.action, NEW.cluster_id, coalesce(NEW.actor_id::text, 'NULL')
            USING ERRCODE = '42501', CONSTRAINT = 'operations_user_authority';
    END IF;
    RAISE EXCEPTION 'check_user_authority: % needs the operator bit, which user % does not hold',
        NEW.action, coalesce(NEW.actor_id::text, 'NULL')
        USING ERRCODE = '42501', CONSTRAINT = 'operations_user_authority';
END;
$$;

DROP TRIGGER IF EXISTS operations_user_authority ON queen_proxy.operations;
CREATE TRIGGER operations_user_authority
    BEFORE INSERT ON queen_proxy.operations
    FOR EACH ROW EXECUTE FUNCTION queen_proxy.check_user_authority();
