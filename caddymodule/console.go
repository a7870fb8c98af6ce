package caddymodule

import (
	"context"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/queengate/queengate/console"
	"github.com/queengate/queengate/console/webapp"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/meter"
	"github.com/queengate/queengate/tenancy"
)

// webSurface is the gateway's own web surface, answered before the data
// plane: identity (/auth/*), the console API (/api/console/*), the
// operator API (/api/operator/*), the console app (/console) and the JWKS
// of the session signer. Requests it owns never reach a cell.
type webSurface interface {
	// Owns reports whether the surface answers this path.
	Owns(path string) bool
	http.Handler
}

// consoleApp is the console web app's files, embedded in the binary.
var consoleApp fs.FS = webapp.FS

// buildSurface returns the web surface for this handler, or nil when the
// gateway serves the data plane only (no identity block).
func (g *Gateway) buildSurface() (webSurface, error) {
	a := g.app
	id := a.Identity
	if id == nil {
		return nil, nil
	}
	if err := id.provision(a); err != nil {
		return nil, err
	}
	repl := caddy.NewReplacer()
	opts := console.Options{
		Pool:            a.backend.pool,
		Sessions:        a.sessionKeys,
		Cookies:         a.cookieNames,
		CookieDomain:    strings.TrimSpace(id.CookieDomain),
		Identities:      a.Identities(),
		OperatorEnabled: a.OperatorEnabled,
		OperatorAPI:     id.OperatorAPI,
		Clusters:        gatewayClusters{g},
		State:           gatewayState{g},
		OnClusterChanged: func(clusterID string) {
			a.Cache().InvalidateCluster(clusterID)
		},
		PublicURL:   id.PublicURL,
		CORSOrigins: id.CORSOrigins,
		StateKey:    id.stateKey,
		Guard:       id.guard,
		App:         consoleApp,
		ClientIP:    clientAddr,
		IsHTTPS:     requestIsHTTPS,
		Log:         g.logger.Named("console"),
	}
	if a.Sessions != nil {
		opts.SessionTTL = time.Duration(a.Sessions.TTL)
	}
	if p := id.Google; p != nil {
		opts.Google = providerOptions(p, repl.ReplaceAll)
	}
	if p := id.GitHub; p != nil {
		opts.GitHub = providerOptions(p, repl.ReplaceAll)
	}
	if em := id.Email; em != nil && id.mail != nil {
		opts.Mail = id.mail
		opts.InvitationTTL = time.Duration(em.InvitationTTL)
		opts.ResetTTL = time.Duration(em.ResetTTL)
		opts.VerificationTTL = time.Duration(em.VerificationTTL)
		opts.ResetGuard = resetGuard()
	}
	for _, p := range id.OIDC {
		opts.OIDC = append(opts.OIDC, p.console(repl.ReplaceAll))
	}
	if ap := id.Autoprovision; ap != nil {
		opts.Autoprovision = &console.AutoprovisionConfig{Tenant: strings.ToLower(ap.Tenant), Role: ap.Role}
	}
	return console.New(opts)
}

func providerOptions(p *OAuthProviderConfig, expand func(string, string) string) *console.ProviderConfig {
	return &console.ProviderConfig{
		ClientID: expand(p.ClientID, ""), ClientSecret: expand(p.ClientSecret, ""),
		AuthURL: p.AuthURL, TokenURL: p.TokenURL, UserInfoURL: p.UserInfoURL, EmailsURL: p.EmailsURL,
		JWKSURL: p.JWKSURL, AllowedDomains: p.AllowedDomains,
	}
}

// requestIsHTTPS reports whether the client reached Caddy over HTTPS: TLS
// here, or a trusted proxy (Caddy's trusted_proxies) that says so.
func requestIsHTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool)
	if !trusted {
		return false
	}
	proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(proto), "https")
}

// gatewayClusters resolves clusters for the surface exactly as the
// gateway's pipeline does.
type gatewayClusters struct{ g *Gateway }

func (c gatewayClusters) ClusterForHost(ctx context.Context, host string) (*tenancy.Cluster, error) {
	return c.g.clusterForHost(ctx, host, clientAddrOf(ctx))
}

func (c gatewayClusters) ClusterByReference(ctx context.Context, ref string) (*tenancy.Cluster, error) {
	return c.g.clusterByReference(ctx, ref)
}

func (c gatewayClusters) SharedHost(host string) bool {
	return host != "" && slices.Contains(c.g.SharedHosts, host)
}

// SharedHosts lists the hosts that serve every cluster, the API key
// naming one: the Connect page offers them to clients.
func (c gatewayClusters) SharedHosts() []string { return slices.Clone(c.g.SharedHosts) }

func (c gatewayClusters) APIKey(ctx context.Context, presented string) (*tenancy.APIKey, error) {
	if !plausibleAPIKey(presented) {
		return nil, tenancy.ErrNotFound
	}
	return c.g.app.Cache().APIKey(ctx, presented)
}

// gatewayState is the live cluster state the app keeps.
type gatewayState struct{ g *Gateway }

func (s gatewayState) PushBlock(c *tenancy.Cluster) string {
	a := s.g.app
	switch limits.DecidePushBlock(c.ID, c.Status == tenancy.StatusPushBlocked, a.pushBlockSources) {
	case limits.PushBlockedStorage:
		return "storage"
	case limits.PushBlockedMonthly:
		return "monthly_quota"
	case limits.PushBlockedBilling:
		return "billing"
	}
	return ""
}

func (s gatewayState) Storage(clusterID string) limits.StorageStatus {
	return s.g.app.backend.storage.Status(clusterID)
}

func (s gatewayState) CellCredential(c *tenancy.Cluster) string {
	return s.g.app.inventoryCredential(c)
}

func (s gatewayState) ServingGateway() (name, group, role string) {
	return s.g.app.backend.servingGateway()
}

func (s gatewayState) FrontedCells() []string {
	return slices.Clone(s.g.app.fronting.Cells)
}

func (s gatewayState) CellServes(ctx context.Context, c *tenancy.Cluster) bool {
	return s.g.app.backend.isolation.Admit(ctx, tenancy.ProbeCellOf(c), c.ID).Serve
}

func (s gatewayState) Unflushed(clusterID string) []meter.Unflushed {
	return s.g.app.backend.meter.Unflushed(clusterID)
}

func (s gatewayState) UnflushedRequests(clusterID string) []meter.RequestCount {
	return s.g.app.backend.requests.Unflushed(clusterID)
}
