package console

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
)

var errNotProvisioned = apiErr(http.StatusForbidden, apierror.NotProvisioned,
	"no account for this e-mail address; ask an administrator to invite you")

var errAccountUnclaimed = apiErr(http.StatusForbidden, apierror.AccountUnclaimed,
	"an account for this e-mail address was created by a cluster administrator, not by an operator, and was never signed in to; it is not linked to your sign-in. Ask an operator to confirm or remove it")

// linkableAccount is the SQL test (on users u) of whether a provider
// sign-in with a verified e-mail may link to the account holding that
// e-mail: one the control plane or an operator created, one a verified
// sign-in of the address's owner created (autoprovision), or one that has
// been signed in to before. An account a cluster admin created in the
// console, for an address its tenant need not own, is none of these.
const linkableAccount = `(u.created_from IN ('control_plane', 'operator', 'signup') OR u.last_login_at IS NOT NULL)`

// resolveAccount finds the user an OAuth identity signs in as: the linked
// identity, else the user with the verified e-mail (linking the identity
// to it when linkableAccount allows), else the account an invitation this
// browser is accepting creates (invitation: its token, or ""), else a new
// user when autoprovision is configured.
func (s *Surface) resolveAccount(ctx context.Context, provider string, id providerIdentity, invitation string) (string, *apierror.Error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for attempt := 0; attempt < 2; attempt++ {
		userID, e := s.findOrLink(ctx, provider, id)
		if e != nil || userID != "" {
			return userID, e
		}
		if invitation != "" {
			return s.acceptWithProvider(ctx, invitation, provider, id)
		}
		if s.o.Autoprovision == nil {
			return "", errNotProvisioned
		}
		userID, err := s.provision(ctx, provider, id)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			continue // a concurrent sign-in created it first: find it
		}
		if errors.Is(err, errNoAutoprovisionTenant) {
			s.o.Log.Error("autoprovision tenant does not exist", zap.String("tenant", s.o.Autoprovision.Tenant))
			return "", errInternal
		}
		if err != nil {
			s.o.Log.Error("autoprovision failed", zap.Error(err))
			return "", errDatabase
		}
		return userID, nil
	}
	return "", errDatabase
}

// findOrLink returns the user of a linked identity, or links the identity
// to the user with its e-mail; "" when there is neither.
func (s *Surface) findOrLink(ctx context.Context, provider string, id providerIdentity) (string, *apierror.Error) {
	var userID string
	err := s.o.Pool.QueryRow(ctx, `SELECT user_id::text FROM queen_proxy.identities
		WHERE provider = $1 AND provider_id = $2`, provider, id.ProviderID).Scan(&userID)
	if err == nil {
		return userID, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return "", errDatabase
	}
	var tenantID string
	err = s.o.Pool.QueryRow(ctx, `SELECT id::text, tenant_id::text FROM queen_proxy.users WHERE email = $1`,
		id.Email).Scan(&userID, &tenantID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", errDatabase
	}
	unclaimed := false
	err = pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		// The account's row is locked so that what decides the link (its
		// origin, its sign-ins) cannot change before the link commits.
		var linkable bool
		if err := tx.QueryRow(ctx, `SELECT `+linkableAccount+` FROM queen_proxy.users u
			WHERE u.id = $1::uuid FOR SHARE`, userID).Scan(&linkable); err != nil {
			return err
		}
		if !linkable {
			unclaimed = true
			return nil
		}
		tag, err := tx.Exec(ctx, `INSERT INTO queen_proxy.identities (user_id, provider, provider_id, email, verified)
			VALUES ($1::uuid, $2, $3, $4, true) ON CONFLICT (provider, provider_id) DO NOTHING`,
			userID, provider, id.ProviderID, id.Email)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT queen_proxy.record_operation($1::uuid, NULL, 'user', $2::uuid,
			'identity_linked', $2::text, jsonb_build_object('provider', $3::text))`, tenantID, userID, provider)
		return err
	})
	if err != nil {
		s.o.Log.Error("identity not linked", zap.Error(err))
		return "", errDatabase
	}
	if unclaimed {
		s.o.Log.Warn("provider sign-in not linked to an account a cluster admin created and nobody signed in to",
			zap.String("provider", provider), zap.String("user_id", userID))
		return "", errAccountUnclaimed
	}
	return userID, nil
}

var errNoAutoprovisionTenant = errors.New("autoprovision tenant not found")

// provision creates a user without a password in the autoprovision
// tenant, links the identity and grants the configured role on every
// cluster of the tenant, in one transaction.
func (s *Surface) provision(ctx context.Context, provider string, id providerIdentity) (string, error) {
	var userID string
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		var tenantID string
		err := tx.QueryRow(ctx, `SELECT id::text FROM queen_proxy.tenants WHERE slug = $1`, s.o.Autoprovision.Tenant).Scan(&tenantID)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNoAutoprovisionTenant
		}
		if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT queen_proxy.create_user($1::uuid, $2, NULL, $3)::text`,
			tenantID, id.Email, provider).Scan(&userID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_user_origin($1::uuid, 'signup', NULL)`, userID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO queen_proxy.identities (user_id, provider, provider_id, email, verified)
			VALUES ($1::uuid, $2, $3, $4, true)`, userID, provider, id.ProviderID, id.Email); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.grant_cluster_role(c.id, $2, $3)
			FROM queen_proxy.clusters c WHERE c.tenant_id = $1::uuid ORDER BY c.slug`,
			tenantID, id.Email, s.o.Autoprovision.Role); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT queen_proxy.record_operation($1::uuid, NULL, 'user', $2::uuid, 'signup', $2::text,
			jsonb_build_object('provider', $3::text, 'email', $4::text))`, tenantID, userID, provider, id.Email)
		return err
	})
	return userID, err
}
