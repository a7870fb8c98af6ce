-- 035_email_links: the one-time links the gateway sends by e-mail
-- (member invitations, password resets, address verification), and
-- whether a user's e-mail address was ever proven.
--
-- A link carries a random token; only its SHA-256 is stored, computed
-- over the purpose and the token together, so a token is good for the
-- purpose it was issued for and nothing else. Each row names the address
-- it was sent to and, except an invitation (whose account does not exist
-- yet), the user it is for. consume_email_token spends a token: one
-- UPDATE that succeeds once, before the expiry, while the row is neither
-- used nor revoked, and, for a user's link, while the user still has the
-- address the link was sent to.

ALTER TABLE queen_proxy.users ADD COLUMN IF NOT EXISTS email_verified_at timestamptz;

CREATE TABLE IF NOT EXISTS queen_proxy.email_tokens (
    id          uuid        PRIMARY KEY DEFAULT public.gen_random_uuid(),
    purpose     text        NOT NULL,
    token_hash  bytea       NOT NULL UNIQUE,
    email       text        NOT NULL,
    user_id     uuid        REFERENCES queen_proxy.users (id) ON DELETE CASCADE,
    tenant_id   uuid        REFERENCES queen_proxy.tenants (id) ON DELETE CASCADE,
    cluster_id  uuid        REFERENCES queen_proxy.clusters (id) ON DELETE CASCADE,
    role        text,
    created_by  uuid        REFERENCES queen_proxy.users (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz,
    revoked_at  timestamptz,
    CONSTRAINT email_tokens_purpose_valid
        CHECK (purpose IN ('invitation', 'password_reset', 'email_verification')),
    CONSTRAINT email_tokens_hash_sha256 CHECK (octet_length(token_hash) = 32),
    CONSTRAINT email_tokens_invitation_names_cluster
        CHECK (purpose <> 'invitation'
               OR (cluster_id IS NOT NULL AND tenant_id IS NOT NULL
                   AND role IN ('admin', 'producer', 'consumer', 'viewer'))),
    CONSTRAINT email_tokens_link_names_user CHECK (purpose = 'invitation' OR user_id IS NOT NULL)
);

CREATE INDEX IF NOT EXISTS idx_email_tokens_pending_invitations
    ON queen_proxy.email_tokens (cluster_id, email)
    WHERE purpose = 'invitation' AND used_at IS NULL AND revoked_at IS NULL;
CREATE INDEX IF NOT EXISTS idx_email_tokens_user
    ON queen_proxy.email_tokens (user_id, purpose) WHERE used_at IS NULL AND revoked_at IS NULL;
CREATE INDEX IF NOT EXISTS idx_email_tokens_expires ON queen_proxy.email_tokens (expires_at);

-- Spends a token of the purpose: marks it used and returns its row, or
-- returns nothing when no live token has this hash (unknown, another
-- purpose, expired, used, revoked, or sent to an address its user no
-- longer has). Spending a password reset revokes the user's other reset
-- links; spending an invitation revokes the other pending invitations of
-- the same address to the same cluster.
CREATE OR REPLACE FUNCTION queen_proxy.consume_email_token(p_purpose text, p_hash bytea)
RETURNS SETOF queen_proxy.email_tokens
LANGUAGE plpgsql AS $$
DECLARE
    v queen_proxy.email_tokens;
BEGIN
    UPDATE queen_proxy.email_tokens t SET used_at = clock_timestamp()
     WHERE t.token_hash = p_hash AND t.purpose = p_purpose
       AND t.used_at IS NULL AND t.revoked_at IS NULL AND t.expires_at > clock_timestamp()
       AND (t.user_id IS NULL
            OR EXISTS (SELECT 1 FROM queen_proxy.users u WHERE u.id = t.user_id AND u.email = t.email))
    RETURNING t.* INTO v;
    IF v.id IS NULL THEN
        RETURN;
    END IF;
    IF p_purpose = 'password_reset' THEN
        UPDATE queen_proxy.email_tokens SET revoked_at = clock_timestamp()
         WHERE user_id = v.user_id AND purpose = 'password_reset' AND id <> v.id
           AND used_at IS NULL AND revoked_at IS NULL;
    ELSIF p_purpose = 'invitation' THEN
        UPDATE queen_proxy.email_tokens SET revoked_at = clock_timestamp()
         WHERE cluster_id = v.cluster_id AND email = v.email AND purpose = 'invitation' AND id <> v.id
           AND used_at IS NULL AND revoked_at IS NULL;
    END IF;
    RETURN NEXT v;
END;
$$;

-- Forgets links that ended (expired, used or revoked) before p_before.
CREATE OR REPLACE FUNCTION queen_proxy.prune_email_tokens(p_before timestamptz)
RETURNS bigint
LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM queen_proxy.email_tokens
         WHERE expires_at < p_before OR used_at < p_before OR revoked_at < p_before
        RETURNING 1)
    SELECT count(*) FROM gone;
$$;
