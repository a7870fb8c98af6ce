package console

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/crossorigin"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/meter"
	"github.com/queengate/queengate/tenancy"
)

// ClusterResolver finds clusters the way the data plane does.
type ClusterResolver interface {
	// ClusterForHost returns the cluster a (canonical) Host names; an
	// error when it names none or the database cannot confirm it.
	ClusterForHost(ctx context.Context, host string) (*tenancy.Cluster, error)
	// ClusterByReference resolves a slug or a cluster id.
	ClusterByReference(ctx context.Context, ref string) (*tenancy.Cluster, error)
	// SharedHost reports whether a (canonical) Host serves several
	// clusters, the credential naming one.
	SharedHost(host string) bool
	// APIKey returns the live API key presented, with its cluster.
	APIKey(ctx context.Context, presented string) (*tenancy.APIKey, error)
}

// ClusterState is the live, in-memory state of a cluster the gateway
// keeps: what the overview and the queue listing show.
type ClusterState interface {
	// PushBlock is why pushes are refused now: "", "storage",
	// "monthly_quota" or "billing".
	PushBlock(c *tenancy.Cluster) string
	// Storage is the cluster's last storage measurement.
	Storage(clusterID string) limits.StorageStatus
	// CellCredential is the Authorization value that reads the cluster's
	// queue listing from its cell ("" for none).
	CellCredential(c *tenancy.Cluster) string
	// CellServes reports whether the cluster's cell may serve it: a cell
	// whose broker does not keep clusters apart serves only its oldest
	// cluster, and the console reads nothing from the cell for the others.
	CellServes(ctx context.Context, c *tenancy.Cluster) bool
	// ServingGateway is the gateway that serves the cell now: its name,
	// its group ("" for a gateway of its own) and this gateway's role.
	ServingGateway() (name, group, role string)
	// FrontedCells are the cells this gateway is configured to front;
	// empty when it fronts every cell no group claimed.
	FrontedCells() []string
	// Unflushed is the cluster's metered usage not yet written to
	// usage_minutes (the open minute, and closed ones waiting for the
	// next flush). Every request of a cluster crosses its cell's one
	// gateway, so this and the table together are all of it.
	Unflushed(clusterID string) []meter.Unflushed
}

// RequestState is the part of the live state that holds the request
// counts (per key and outcome) not yet written to request_minutes; a
// ClusterState that has it makes the refusal charts current.
type RequestState interface {
	UnflushedRequests(clusterID string) []meter.RequestCount
}

// Options are the surface's dependencies and settings.
type Options struct {
	// Pool is the control-plane database. Required.
	Pool *pgxpool.Pool
	// Sessions mints and verifies session tokens; nil means logins answer
	// 503 not_configured and nothing authenticates.
	Sessions *tenancy.SessionKeys
	// SessionTTL is the life of a session minted at login (default 24h).
	SessionTTL time.Duration
	// Cookies names the session cookies.
	Cookies tenancy.CookieNames
	// CookieDomain, when set, is the Domain of the session cookie (which
	// is then always Secure).
	CookieDomain string
	// Identities answers roles, operator bits and the deny-list. Required.
	Identities *tenancy.IdentityCache
	// OperatorEnabled makes users' operator bits live (the queen app's
	// operator_enabled).
	OperatorEnabled bool
	// OperatorAPI opens /api/operator/*.
	OperatorAPI bool
	// Clusters resolves clusters. Required.
	Clusters ClusterResolver
	// State is the live cluster state; nil shows none.
	State ClusterState
	// CellClient reads queue listings from cells (default: 10 s timeout).
	CellClient *http.Client
	// OnClusterChanged is called after a console write changed a
	// cluster's keys or roles, so this process drops cached answers at
	// once (every gateway also hears the database's notification).
	OnClusterChanged func(clusterID string)
	// PublicURL is the external base URL of the sign-in host (OAuth
	// callbacks, the allowed origin); optional.
	PublicURL string
	// CORSOrigins are the origins (or "*") allowed to call the surface
	// from a browser.
	CORSOrigins []string
	// Google and GitHub configure OAuth sign-in; nil (or without id and
	// secret) means not offered.
	Google *ProviderConfig
	GitHub *ProviderConfig
	// Mail sends invitations, password resets and address verification;
	// nil offers none of them. It needs PublicURL, which links are built
	// from.
	Mail MailSender
	// InvitationTTL, ResetTTL and VerificationTTL are the lives of the
	// links (defaults DefaultInvitationTTL, DefaultResetTTL,
	// DefaultVerificationTTL).
	InvitationTTL   time.Duration
	ResetTTL        time.Duration
	VerificationTTL time.Duration
	// ResetGuard limits reset requests per address and per account
	// (default: a guard with DefaultResetRate).
	ResetGuard *LoginGuard
	// OIDC are generic OpenID Connect providers, offered in this order
	// after Google and GitHub.
	OIDC []OIDCProviderConfig
	// Autoprovision creates unknown OAuth users; nil refuses them.
	Autoprovision *AutoprovisionConfig
	// StateKey signs OAuth state (at least 32 bytes). Required for OAuth.
	StateKey []byte
	// Guard is the login brute-force guard (default: a new one with the
	// default settings).
	Guard *LoginGuard
	// App is the console web app's files, index.html at the root; nil
	// serves a placeholder page.
	App fs.FS
	// ProviderClient makes the calls to OAuth providers (default: 10 s
	// timeout).
	ProviderClient *http.Client
	// ClientIP is the client's address (default: the connection's peer).
	ClientIP func(*http.Request) netip.Addr
	// IsHTTPS reports whether the client reached the gateway over HTTPS
	// (default: r.TLS != nil).
	IsHTTPS func(*http.Request) bool
	// Log is the logger (default: none).
	Log *zap.Logger
	// Now is the clock (default: time.Now).
	Now func() time.Time
}

// Surface serves the identity, console, operator and app routes.
type Surface struct {
	o            Options
	publicOrigin string
	corsAny      bool
	corsOrigins  map[string]bool
	crossSite    *crossorigin.Policy // the CSRF rule, shared with the data plane
	providers    []*oauthProvider    // in the sign-in page's order
	app          fs.FS
	resetGuard   *LoginGuard
	mailSlots    chan struct{}
	lastPrune    atomic.Int64 // unix nanoseconds of the last prune of ended links
}

// DefaultSessionTTL is the life of a session minted at login when none is
// configured.
const DefaultSessionTTL = 24 * time.Hour

// New checks the options and builds the surface.
func New(o Options) (*Surface, error) {
	if o.Pool == nil || o.Identities == nil || o.Clusters == nil {
		return nil, errors.New("console: Pool, Identities and Clusters are required")
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Guard == nil {
		o.Guard = NewLoginGuard(LoginGuardConfig{})
	}
	if o.CellClient == nil {
		o.CellClient = &http.Client{Timeout: 10 * time.Second}
	}
	if o.ProviderClient == nil {
		o.ProviderClient = &http.Client{Timeout: 10 * time.Second}
	}
	if o.ClientIP == nil {
		o.ClientIP = peerAddr
	}
	if o.IsHTTPS == nil {
		o.IsHTTPS = func(r *http.Request) bool { return r.TLS != nil }
	}
	if o.InvitationTTL <= 0 {
		o.InvitationTTL = DefaultInvitationTTL
	}
	if o.ResetTTL <= 0 {
		o.ResetTTL = DefaultResetTTL
	}
	if o.VerificationTTL <= 0 {
		o.VerificationTTL = DefaultVerificationTTL
	}
	if o.ResetGuard == nil {
		o.ResetGuard = NewLoginGuard(DefaultResetRate)
	}
	if o.Mail != nil && o.PublicURL == "" {
		return nil, errors.New("console: e-mail needs the public URL its links point to")
	}
	s := &Surface{o: o, corsOrigins: map[string]bool{}, app: o.App, resetGuard: o.ResetGuard,
		mailSlots: make(chan struct{}, maxPendingMails)}
	if o.PublicURL != "" {
		origin, ok := normalizeOrigin(o.PublicURL)
		if !ok {
			return nil, fmt.Errorf("console: public URL %q is not an http(s) URL", o.PublicURL)
		}
		s.publicOrigin = origin
		s.o.PublicURL = strings.TrimRight(o.PublicURL, "/")
	}
	for _, c := range o.CORSOrigins {
		if c == "*" {
			s.corsAny = true
			continue
		}
		origin, ok := normalizeOrigin(c)
		if !ok {
			return nil, fmt.Errorf("console: CORS origin %q is not an http(s) origin", c)
		}
		s.corsOrigins[origin] = true
	}
	allowed := make([]string, 0, len(s.corsOrigins))
	for origin := range s.corsOrigins {
		allowed = append(allowed, origin)
	}
	s.crossSite = crossorigin.NewPolicy(s.publicOrigin, allowed, o.IsHTTPS)
	google, err := newGoogle(o.Google)
	if err != nil {
		return nil, err
	}
	github, err := newGitHub(o.GitHub)
	if err != nil {
		return nil, err
	}
	for _, p := range []*oauthProvider{google, github} {
		if p != nil {
			s.providers = append(s.providers, p)
		}
	}
	for _, c := range o.OIDC {
		p, err := newOIDC(c)
		if err != nil {
			return nil, err
		}
		for _, q := range s.providers {
			if q.path == p.path {
				return nil, fmt.Errorf("console: oidc provider %q configured twice", c.Name)
			}
		}
		s.providers = append(s.providers, p)
	}
	if len(s.providers) > 0 && len(o.StateKey) < 32 {
		return nil, errors.New("console: OAuth needs a state key of at least 32 bytes")
	}
	if o.Autoprovision != nil {
		if o.Autoprovision.Tenant == "" {
			return nil, errors.New("console: autoprovision needs a tenant")
		}
		if o.Autoprovision.Role == "" {
			s.o.Autoprovision = &AutoprovisionConfig{Tenant: o.Autoprovision.Tenant, Role: "viewer"}
		} else if tenancy.ParseRole(o.Autoprovision.Role) == tenancy.RoleNone {
			return nil, fmt.Errorf("console: autoprovision role %q is not admin, producer, consumer or viewer", o.Autoprovision.Role)
		}
	}
	if s.app == nil {
		s.app = placeholderApp
	}
	return s, nil
}

// Owns reports whether the surface answers a path.
func (s *Surface) Owns(p string) bool {
	switch {
	case p == jwksPath, p == "/console", p == "/auth", p == "/api/console", p == "/api/operator":
		return true
	}
	return strings.HasPrefix(p, "/auth/") || strings.HasPrefix(p, "/api/console/") ||
		strings.HasPrefix(p, "/api/operator/") || strings.HasPrefix(p, "/console/")
}

const (
	jwksPath = "/.well-known/jwks.json"
	// maxBodyBytes caps the bodies the surface reads (forms and JSON).
	maxBodyBytes = 64 << 10
)

// ServeHTTP applies the headers, CORS and CSRF rules every route shares and
// dispatches.
func (s *Surface) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if w.Header().Get(headerRequestID) == "" {
		w.Header().Set(headerRequestID, newRequestID())
	}
	s.securityHeaders(w, r)
	if s.cors(w, r) {
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	}
	if !crossorigin.SafeMethod(r.Method) {
		if e := s.csrfVerdict(r); e != nil {
			writeError(w, e)
			return
		}
	}
	p := r.URL.Path
	switch {
	case p == jwksPath:
		s.serveJWKS(w, r)
	case p == "/console" || strings.HasPrefix(p, "/console/"):
		s.serveApp(w, r)
	case strings.HasPrefix(p, "/auth/"):
		s.serveAuth(w, r)
	case strings.HasPrefix(p, "/api/console/"):
		s.serveConsole(w, r)
	case strings.HasPrefix(p, "/api/operator/"):
		s.serveOperator(w, r)
	default:
		writeError(w, errNotFoundRoute)
	}
}

// securityHeaders are on every response of the surface.
func (s *Surface) securityHeaders(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "frame-ancestors 'none'")
	h.Set("Referrer-Policy", "same-origin")
	if s.o.IsHTTPS(r) {
		h.Set("Strict-Transport-Security", "max-age=31536000; includeSubDomains")
	}
}

// peerAddr is the connection's peer address.
func peerAddr(r *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if a, err := netip.ParseAddr(host); err == nil {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

// SafeNext returns next when it is a local path a redirect may go to, else
// "/": it must start with "/", not "//" or "/\", hold no "://" and no
// control characters.
func SafeNext(next string) string {
	if next == "" || next[0] != '/' || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		strings.Contains(next, "://") || len(next) > 2048 {
		return "/"
	}
	for i := 0; i < len(next); i++ {
		if next[i] < 0x20 || next[i] == 0x7f {
			return "/"
		}
	}
	return next
}

// loginURL is the sign-in page that comes back to next.
func loginURL(next string) string {
	return "/auth/login?next=" + url.QueryEscape(SafeNext(next))
}

// newRequestID is a random id for responses that reach the surface
// without one (the pipeline sets x-queen-request-id first).
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	const hexd = "0123456789abcdef"
	out := make([]byte, 32)
	for i, c := range b {
		out[2*i], out[2*i+1] = hexd[c>>4], hexd[c&0xf]
	}
	return string(out)
}
