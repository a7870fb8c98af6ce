package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/internal/harden"
	"github.com/queengate/queengate/tenancy"
)

// authenticate turns the request's credential into a principal (kept in
// st) and settles the cluster it acts on. Every answer follows the
// reference's 401-versus-403 rules; where the credential names the
// cluster, an unknown cluster and a cluster without a role get the same
// answer, so the header cannot be used to enumerate clusters.
func (g *Gateway) authenticate(r *http.Request, st *requestState, t target) (*tenancy.Cluster, *apierror.Error) {
	cred, err := tenancy.ExtractCredential(r.Header, g.app.cookieNames, r.TLS != nil)
	if err != nil {
		return nil, errDuplicateHeader
	}
	if cred.Kind == tenancy.CredentialNone {
		return nil, errMissingCredential
	}
	if cred.FromCookie {
		if e := g.crossSiteRefusal(r, st); e != nil {
			return nil, e
		}
	}
	if cred.Kind == tenancy.CredentialAPIKey && t.actAs != "" {
		return nil, errKeyActAs
	}
	// A bearer that claims to come from a configured identity provider
	// is that provider's to verify; API keys never get here, and without
	// a jwt_issuer nothing is looked at.
	var iss *tenancy.TokenIssuer
	if cred.Kind == tenancy.CredentialSession && !cred.FromCookie && g.app.tokenIssuers != nil {
		iss = g.app.tokenIssuers.For(cred.Value)
	}
	addr := clientAddr(r)
	if ok, retry := g.failures.Allow(addr); !ok && !g.passesBackoff(cred, iss, addr, st.now()) {
		return nil, tooManyFailures(retry)
	}
	if cred.Kind == tenancy.CredentialAPIKey {
		return g.authenticateKey(r.Context(), st, t, cred.Value, addr)
	}
	if iss != nil {
		return g.authenticateIssuerToken(r.Context(), st, t, iss, cred.Value, addr)
	}
	return g.authenticateSession(r.Context(), st, t, cred.Value, addr)
}

// passesBackoff reports whether a credential presented from an address in
// backoff is known to be valid without a lookup, so that the failure guard
// lets it through: an API key that authenticated before (the guard's
// memory, harden/knownvalid.go), a generated key the key cache holds as
// live, or a session token whose signature verifies (which no guess can
// produce), and so is an identity provider's token that verifies with the
// keys already fetched (none is fetched for it). None of these answers
// depends on the database. A generated key
// the gateway does not know yet is looked up within a gateway-wide budget
// (harden.FailureGuard.AllowUnguessableLookup), so a client in backoff can
// add at most that budget's lookups to the database, shared with every
// other address in backoff.
func (g *Gateway) passesBackoff(cred tenancy.Credential, iss *tenancy.TokenIssuer, addr netip.Addr, now time.Time) bool {
	if iss != nil {
		_, err := iss.VerifyCached(cred.Value)
		return err == nil
	}
	if cred.Kind == tenancy.CredentialAPIKey {
		if g.failures.Known(keyDigest(cred.Value, addr)) {
			return true
		}
		// A generated key the cache holds as live is known too (it may
		// have authenticated through another site's guard).
		if !tenancy.WellFormedAPIKey(cred.Value) {
			return false
		}
		if k := g.app.Cache().KnownAPIKey(cred.Value); k != nil && !k.Expired(now) {
			return true
		}
		// Any other generated key cannot be a guess: it is looked up,
		// within the gateway-wide budget that keeps addresses in backoff
		// from loading the database (harden/lookupbudget.go).
		return g.failures.AllowUnguessableLookup()
	}
	keys := g.app.sessionKeys
	if keys == nil {
		return false
	}
	_, err := keys.Verify(cred.Value)
	return err == nil
}

// keyDigest is how the failure guard remembers an API key: a generated key
// (256 random bits) for every address, any other only for the address it
// authenticated from, so that a client in backoff cannot test guesses of
// a weak key against the guard's memory.
func keyDigest(presented string, addr netip.Addr) harden.CredentialDigest {
	return harden.DigestCredential(presented, addr, !tenancy.WellFormedAPIKey(presented))
}

func (g *Gateway) authenticateKey(ctx context.Context, st *requestState, t target, presented string, addr netip.Addr) (*tenancy.Cluster, *apierror.Error) {
	key, e := g.lookupKey(ctx, presented, st.now())
	if e != nil {
		g.failures.Fail(addr)
		return nil, e
	}
	var cluster *tenancy.Cluster
	switch {
	case t.unknownHost:
		return nil, t.unknownHostRefusal()
	case t.sharedHost:
		cluster = key.Cluster
	case key.Cluster.ID != t.cluster.ID:
		return nil, errKeyClusterMismatch
	default:
		cluster = t.cluster
	}
	g.app.backend.toucher.Touch(key.ID)
	g.failures.Succeed(keyDigest(presented, addr))
	st.principal = tenancy.Principal{Kind: tenancy.PrincipalAPIKey, KeyID: key.ID, Scopes: key.Scopes}
	return cluster, nil
}

// lookupKey finds a live key. Strings that cannot be a key are refused
// without a database lookup.
func (g *Gateway) lookupKey(ctx context.Context, presented string, now time.Time) (*tenancy.APIKey, *apierror.Error) {
	if !plausibleAPIKey(presented) {
		return nil, errUnknownKey
	}
	key, err := g.app.Cache().APIKey(ctx, presented)
	if err != nil {
		if errors.Is(err, tenancy.ErrUnavailable) {
			g.logger.Warn("api key lookup failed; refusing the unconfirmed key", zap.Error(err))
		}
		return nil, errUnknownKey
	}
	if key.Expired(now) {
		return nil, errUnknownKey
	}
	return key, nil
}

// plausibleAPIKey accepts what an API key can look like: the production
// shape qk_<env>_<43 base64url characters>, and also older hand-made keys
// (the reference's development seed is one), so long as they stay within
// the base64url alphabet and a sane length.
func plausibleAPIKey(s string) bool {
	if len(s) < 8 || len(s) > 200 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (g *Gateway) authenticateSession(ctx context.Context, st *requestState, t target, token string, addr netip.Addr) (*tenancy.Cluster, *apierror.Error) {
	claims, e := g.verifySession(ctx, token)
	if e != nil {
		g.failures.Fail(addr)
		return nil, e
	}
	if t.unknownHost {
		return nil, t.unknownHostRefusal()
	}
	cluster, named := t.cluster, false
	switch {
	case t.actAs != "":
		cluster, named = g.namedCluster(ctx, t.actAs), true
	case t.sharedHost && claims.Cluster != "":
		cluster, named = g.namedCluster(ctx, claims.Cluster), true
	case t.sharedHost:
		return nil, errNameACluster
	}
	if named && cluster == nil {
		return nil, errNoSuchActCluster
	}
	p, e := g.membership(ctx, claims, cluster, named)
	if e != nil {
		return nil, e
	}
	st.principal = p
	return cluster, nil
}

// verifySession checks a session token's signature, claims and the
// deny-list. The reason for a refusal goes to the log, never to the caller.
func (g *Gateway) verifySession(ctx context.Context, token string) (tenancy.SessionClaims, *apierror.Error) {
	claims, err := g.app.Identities().VerifyLiveSession(ctx, g.app.sessionKeys, token)
	if err != nil {
		g.logger.Debug("session token refused", zap.Error(err))
		return claims, errInvalidCredential
	}
	return claims, nil
}

// namedCluster resolves a cluster named by reference, nil when there is
// none (or the database cannot confirm it).
func (g *Gateway) namedCluster(ctx context.Context, ref string) *tenancy.Cluster {
	c, err := g.clusterByReference(ctx, ref)
	if err != nil {
		return nil
	}
	return c
}

// membership decides a session's role on the cluster: the token's own
// cluster claim, else a live operator's admin, else the cluster_roles row.
func (g *Gateway) membership(ctx context.Context, claims tenancy.SessionClaims, cluster *tenancy.Cluster, named bool) (tenancy.Principal, *apierror.Error) {
	p := tenancy.Principal{Kind: tenancy.PrincipalUser, UserID: claims.UserID}
	ids := g.app.Identities()
	if g.app.OperatorEnabled && ids.IsOperator(ctx, claims.UserID) {
		p.Operator = true
	}
	if claims.Cluster != "" {
		if claims.Cluster != cluster.ID {
			return p, errTokenOtherCluster
		}
		p.Role = tenancy.ParseRole(claims.Role)
		return p, nil
	}
	if p.Operator {
		p.Role = tenancy.RoleAdmin
		return p, nil
	}
	role, err := ids.Role(ctx, claims.UserID, cluster.ID)
	if err == nil {
		p.Role = role
		return p, nil
	}
	if !ids.UserExists(ctx, claims.UserID) {
		return p, errSessionGone
	}
	if named {
		return p, errNoSuchActCluster
	}
	return p, errNoRole
}

// clientAddr is the client's address as Caddy determined it (honouring its
// trusted_proxies setting), else the connection's peer.
func clientAddr(r *http.Request) netip.Addr {
	if a := clientAddrOf(r.Context()); a.IsValid() {
		return a
	}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr()
	}
	return netip.Addr{}
}
