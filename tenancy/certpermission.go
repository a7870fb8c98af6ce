package tenancy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
)

// Why an on-demand TLS certificate is refused, besides ErrNotFound (no such
// cluster) and ErrUnavailable (the database did not answer and the cluster
// is not known from before).
var (
	// ErrNotClusterHostname: the name is not exactly "<slug>.<base
	// domain>" for one of the configured base domains.
	ErrNotClusterHostname = errors.New("not a cluster hostname")

	// ErrClusterDeleting: the cluster (or its tenant) is being deleted.
	ErrClusterDeleting = errors.New("cluster is being deleted")
)

// ClusterLookup finds a cluster by the slug of its hostname. It must return
// an error wrapping ErrNotFound when there is no such cluster;
// (*ClusterCache).ClusterBySlug is the production lookup.
type ClusterLookup func(ctx context.Context, slug string) (*Cluster, error)

// maxCertName is the longest DNS name there is (RFC 1035, without the
// root dot).
const maxCertName = 253

// CertificateAllowed decides whether the gateway may obtain (or renew) a TLS
// certificate for name, the server name a client asked for in its TLS
// handshake. It returns nil only when name is exactly "<slug>.<base domain>"
// for one of baseDomains (lowercase, without leading or trailing dots, as
// the queen app keeps them), the slug is a valid cluster slug, and lookup
// finds that cluster in any status but deleting.
//
// Suspended clusters keep their certificate, so that their clients get a
// proper 403 cluster_suspended over TLS rather than a failed handshake;
// a cluster being deleted gets none. Names with extra labels, names under
// other domains, wildcard names, IP addresses and names with a port or a
// trailing dot are refused without a lookup. When lookup cannot confirm the
// cluster (ErrNotFound, ErrUnavailable, a cancelled handshake, any other
// error), the certificate is refused: it fails closed.
//
// The slug is returned whenever the name had the right shape, for logging.
func CertificateAllowed(ctx context.Context, name string, baseDomains []string, lookup ClusterLookup) (slug string, err error) {
	slug, ok := certNameSlug(name, baseDomains)
	if !ok {
		return "", fmt.Errorf("%w: %q is not <slug>.<base domain> for a configured base domain", ErrNotClusterHostname, name)
	}
	c, err := lookup(ctx, slug)
	switch {
	case err != nil:
		return slug, fmt.Errorf("cluster %q: %w", slug, err)
	case c == nil:
		return slug, fmt.Errorf("cluster %q: %w", slug, ErrNotFound)
	case c.Status == StatusDeleting:
		return slug, fmt.Errorf("cluster %q: %w", slug, ErrClusterDeleting)
	}
	return slug, nil
}

// certNameSlug returns the slug of a server name that has exactly the shape
// of a cluster hostname under one of baseDomains.
func certNameSlug(name string, baseDomains []string) (string, bool) {
	n := strings.ToLower(name)
	if n == "" || len(n) > maxCertName ||
		strings.ContainsAny(n, ":*[] \t\r\n") ||
		strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".") ||
		strings.Contains(n, "..") || net.ParseIP(n) != nil {
		return "", false
	}
	slug, ok := SlugUnderDomain(n, baseDomains)
	if !ok || !ValidSlug(slug) {
		return "", false
	}
	return slug, true
}
