package console

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/internal/crossorigin"
	"github.com/queengate/queengate/tenancy"
)

// caller is an authenticated human on one cluster.
type caller struct {
	claims   tenancy.SessionClaims
	cluster  *tenancy.Cluster
	role     tenancy.Role
	operator bool // a live operator
}

// target resolves the cluster a console or operator request works on and
// authenticates its session, with the data plane's rules. actAsAnywhere
// honours x-queen-act-cluster on every host (the operator API); the
// console honours it on shared hosts only.
func (s *Surface) target(r *http.Request, actAsAnywhere bool) (*caller, *apierror.Error) {
	if len(r.Header.Values(actClusterHeader)) > 1 {
		return nil, errDuplicateHeader
	}
	host := tenancy.CanonicalHost(r.Host)
	shared := s.o.Clusters.SharedHost(host)
	act := strings.TrimSpace(r.Header.Get(actClusterHeader))
	useAct := act != "" && (shared || actAsAnywhere)
	var hostCluster *tenancy.Cluster
	if !shared && !useAct {
		c, err := s.o.Clusters.ClusterForHost(r.Context(), host)
		if err != nil {
			return nil, errClusterUnknown
		}
		hostCluster = c
	}
	if s.o.Sessions == nil {
		return nil, errNotConfigured
	}
	cred, err := tenancy.ExtractCredential(r.Header, s.o.Cookies, s.o.IsHTTPS(r))
	if err != nil {
		return nil, errDuplicateHeader
	}
	switch cred.Kind {
	case tenancy.CredentialNone:
		return nil, errMissingCredential
	case tenancy.CredentialAPIKey:
		return nil, errKeyOnConsole
	}
	claims, e := s.verifySession(r.Context(), cred.Value)
	if e != nil {
		return nil, e
	}
	cluster, named := hostCluster, false
	switch {
	case useAct:
		cluster, named = s.namedCluster(r.Context(), act), true
	case shared && claims.Cluster != "":
		cluster, named = s.namedCluster(r.Context(), claims.Cluster), true
	case shared:
		return nil, errNameACluster
	}
	if named && cluster == nil {
		return nil, errNoSuchActCluster
	}
	c := &caller{claims: claims, cluster: cluster}
	if e := s.membership(r.Context(), c, named); e != nil {
		return nil, e
	}
	return c, nil
}

func (s *Surface) namedCluster(ctx context.Context, ref string) *tenancy.Cluster {
	c, err := s.o.Clusters.ClusterByReference(ctx, ref)
	if err != nil {
		return nil
	}
	return c
}

// membership sets the caller's role: the token's cluster claim, else a
// live operator's admin, else the cluster_roles row.
func (s *Surface) membership(ctx context.Context, c *caller, named bool) *apierror.Error {
	ids := s.o.Identities
	if s.o.OperatorEnabled && ids.IsOperator(ctx, c.claims.UserID) {
		c.operator = true
	}
	if c.claims.Cluster != "" {
		if c.claims.Cluster != c.cluster.ID {
			return errTokenOtherCluster
		}
		c.role = tenancy.ParseRole(c.claims.Role)
		return nil
	}
	if c.operator {
		c.role = tenancy.RoleAdmin
		return nil
	}
	role, err := ids.Role(ctx, c.claims.UserID, c.cluster.ID)
	if err == nil {
		c.role = role
		return nil
	}
	if !ids.UserExists(ctx, c.claims.UserID) {
		return errSessionGone
	}
	if named {
		return errNoSuchActCluster
	}
	if !errors.Is(err, tenancy.ErrNotFound) {
		return errDatabase
	}
	return errNoRole
}

// consoleCaller is the gate every console route passes: cluster, session,
// role, and the cluster's state (deleting: nothing; suspended: reads only).
func (s *Surface) consoleCaller(w http.ResponseWriter, r *http.Request, adminOnly bool) (*caller, bool) {
	c, e := s.target(r, false)
	if e != nil {
		writeError(w, e)
		return nil, false
	}
	if c.cluster.Status == tenancy.StatusDeleting || (!crossorigin.SafeMethod(r.Method) && c.cluster.Status == tenancy.StatusSuspended) {
		writeError(w, errClusterSuspended)
		return nil, false
	}
	if adminOnly && c.role != tenancy.RoleAdmin {
		writeError(w, errAdminRequired)
		return nil, false
	}
	return c, true
}

// serveConsole dispatches /api/console/*.
func (s *Surface) serveConsole(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, "/api/console/")
	m := r.Method
	get := m == http.MethodGet || m == http.MethodHead
	switch {
	case p == "overview" && get:
		if c, ok := s.consoleCaller(w, r, false); ok {
			s.overview(w, r, c)
		}
	case p == "connect" && get:
		if c, ok := s.consoleCaller(w, r, false); ok {
			s.connect(w, r, c)
		}
	case p == "usage" && get:
		if c, ok := s.consoleCaller(w, r, false); ok {
			s.usage(w, r, c)
		}
	case p == "requests" && get:
		if c, ok := s.consoleCaller(w, r, false); ok {
			s.requests(w, r, c)
		}
	case p == "queues" && get:
		if c, ok := s.consoleCaller(w, r, false); ok {
			s.queues(w, r, c)
		}
	case p == "keys" && (get || m == http.MethodPost):
		if c, ok := s.consoleCaller(w, r, true); ok {
			if get {
				s.listKeys(w, r, c)
			} else {
				s.createKey(w, r, c)
			}
		}
	case strings.HasPrefix(p, "keys/") && m == http.MethodDelete:
		if c, ok := s.consoleCaller(w, r, true); ok {
			s.revokeKey(w, r, c, strings.TrimPrefix(p, "keys/"))
		}
	case p == "members" && (get || m == http.MethodPost || m == http.MethodPatch || m == http.MethodDelete):
		c, ok := s.consoleCaller(w, r, true)
		if !ok {
			return
		}
		switch m {
		case http.MethodPost:
			s.grantMember(w, r, c, false)
		case http.MethodPatch:
			s.grantMember(w, r, c, true)
		case http.MethodDelete:
			s.removeMember(w, r, c)
		default:
			s.listMembers(w, r, c)
		}
	case p == "invitations" && get:
		if c, ok := s.consoleCaller(w, r, true); ok {
			s.listInvitations(w, r, c)
		}
	case strings.HasPrefix(p, "invitations/") && m == http.MethodDelete:
		if c, ok := s.consoleCaller(w, r, true); ok {
			s.revokeInvitation(w, r, c, strings.TrimPrefix(p, "invitations/"))
		}
	case p == "invitations" || strings.HasPrefix(p, "invitations/") ||
		p == "overview" || p == "connect" || p == "usage" || p == "requests" || p == "queues" || p == "keys" || p == "members" || strings.HasPrefix(p, "keys/"):
		writeError(w, errMethod)
	default:
		writeError(w, errNotFoundRoute)
	}
}
