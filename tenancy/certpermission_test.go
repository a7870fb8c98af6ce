package tenancy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// statusLookup answers from a slug -> status table and records every slug
// it was asked for.
type statusLookup struct {
	statuses map[string]Status
	asked    []string
}

func (l *statusLookup) lookup(_ context.Context, slug string) (*Cluster, error) {
	l.asked = append(l.asked, slug)
	st, ok := l.statuses[slug]
	if !ok {
		return nil, fmt.Errorf("cluster by slug %q: %w", slug, ErrNotFound)
	}
	return &Cluster{ID: "id-" + slug, Slug: slug, Status: st}, nil
}

func TestCertPermissionDecision(t *testing.T) {
	domains := []string{"eu1.example.com", "eu2.example.com"}
	statuses := map[string]Status{
		"acme-prod":  StatusActive,
		"blocked":    StatusPushBlocked,
		"paused":     StatusSuspended,
		"going-away": StatusDeleting,
		"eu1":        StatusActive,
	}
	cases := []struct {
		name     string
		wantErr  error // nil: allowed
		wantSlug string
		lookedUp bool
	}{
		{"acme-prod.eu1.example.com", nil, "acme-prod", true},
		{"acme-prod.eu2.example.com", nil, "acme-prod", true},
		{"ACME-Prod.EU1.Example.com", nil, "acme-prod", true},
		{"blocked.eu1.example.com", nil, "blocked", true},
		{"paused.eu1.example.com", nil, "paused", true}, // suspended keeps its certificate
		{"going-away.eu1.example.com", ErrClusterDeleting, "going-away", true},
		{"nosuch.eu1.example.com", ErrNotFound, "nosuch", true},

		// Wrong shape: refused before any lookup.
		{"x.acme-prod.eu1.example.com", ErrNotClusterHostname, "", false},
		{"acme-prod.eu3.example.com", ErrNotClusterHostname, "", false},
		{"acme-prod.example.com", ErrNotClusterHostname, "", false},
		{"acme-prod.eu1.example.com.evil.org", ErrNotClusterHostname, "", false},
		{"acme-prod.xeu1.example.com", ErrNotClusterHostname, "", false},
		{"eu1.example.com", ErrNotClusterHostname, "", false},
		{"*.eu1.example.com", ErrNotClusterHostname, "", false},
		{"acme-*.eu1.example.com", ErrNotClusterHostname, "", false},
		{"acme-prod.eu1.example.com.", ErrNotClusterHostname, "", false},
		{".acme-prod.eu1.example.com", ErrNotClusterHostname, "", false},
		{"acme-prod..eu1.example.com", ErrNotClusterHostname, "", false},
		{"acme-prod.eu1.example.com:443", ErrNotClusterHostname, "", false},
		{"acme_prod.eu1.example.com", ErrNotClusterHostname, "", false},
		{"-acme.eu1.example.com", ErrNotClusterHostname, "", false},
		{"acme-.eu1.example.com", ErrNotClusterHostname, "", false},
		{"acme prod.eu1.example.com", ErrNotClusterHostname, "", false},
		{strings.Repeat("a", 64) + ".eu1.example.com", ErrNotClusterHostname, "", false},
		{"127.0.0.1", ErrNotClusterHostname, "", false},
		{"192.0.2.1", ErrNotClusterHostname, "", false},
		{"::1", ErrNotClusterHostname, "", false},
		{"[::1]", ErrNotClusterHostname, "", false},
		{"localhost", ErrNotClusterHostname, "", false},
		{"", ErrNotClusterHostname, "", false},
	}
	for _, tc := range cases {
		l := &statusLookup{statuses: statuses}
		slug, err := CertificateAllowed(context.Background(), tc.name, domains, l.lookup)
		switch {
		case tc.wantErr == nil && err != nil:
			t.Errorf("%q: refused (%v), want allowed", tc.name, err)
		case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
			t.Errorf("%q: err = %v, want %v", tc.name, err, tc.wantErr)
		}
		if slug != tc.wantSlug {
			t.Errorf("%q: slug %q, want %q", tc.name, slug, tc.wantSlug)
		}
		if got := len(l.asked) > 0; got != tc.lookedUp {
			t.Errorf("%q: looked up %v, want a lookup: %v", tc.name, l.asked, tc.lookedUp)
		}
	}
}

func TestCertPermissionWithoutBaseDomainsRefusesAll(t *testing.T) {
	l := &statusLookup{statuses: map[string]Status{"acme": StatusActive}}
	for _, domains := range [][]string{nil, {}} {
		if _, err := CertificateAllowed(context.Background(), "acme.eu1.example.com", domains, l.lookup); !errors.Is(err, ErrNotClusterHostname) {
			t.Fatalf("domains %v: err = %v, want ErrNotClusterHostname", domains, err)
		}
	}
}

func TestCertPermissionFailsClosedOnLookupErrors(t *testing.T) {
	domains := []string{"eu1.example.com"}
	for _, tc := range []struct {
		name   string
		lookup ClusterLookup
		want   error
	}{
		{"unavailable", func(context.Context, string) (*Cluster, error) {
			return nil, fmt.Errorf("%w: connection refused", ErrUnavailable)
		}, ErrUnavailable},
		{"cancelled handshake", func(ctx context.Context, _ string) (*Cluster, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, context.Canceled},
		{"nil cluster without error", func(context.Context, string) (*Cluster, error) { return nil, nil }, ErrNotFound},
		{"unexpected error", func(context.Context, string) (*Cluster, error) { return nil, errors.New("boom") }, nil},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		if tc.name == "cancelled handshake" {
			cancel()
		}
		_, err := CertificateAllowed(ctx, "acme.eu1.example.com", domains, tc.lookup)
		cancel()
		if err == nil {
			t.Errorf("%s: allowed, want refused", tc.name)
		} else if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// certSource is a Source for the cluster cache that can be taken down,
// counting the cluster lookups that reach it.
type certSource struct {
	mu       sync.Mutex
	clusters map[string]*Cluster
	down     bool
	lookups  int
}

func (s *certSource) ClusterBySlug(_ context.Context, slug string) (*Cluster, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookups++
	if s.down {
		return nil, errors.New("dial tcp: connection refused")
	}
	if c, ok := s.clusters[slug]; ok {
		cp := *c
		return &cp, nil
	}
	return nil, ErrNotFound
}

func (s *certSource) ClusterByID(context.Context, string) (*Cluster, error) {
	return nil, ErrNotFound
}

func (s *certSource) APIKeyByHash(context.Context, string) (*APIKey, error) {
	return nil, ErrNotFound
}

func (s *certSource) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookups
}

// TestCertPermissionThroughTheClusterCache runs the decision against the
// real cluster cache: a cached cluster costs no database query per
// handshake, and during a database outage a known cluster keeps its
// certificate within the stale grace while an unknown one is refused.
func TestCertPermissionThroughTheClusterCache(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
	}
	src := &certSource{clusters: map[string]*Cluster{
		"known":  {ID: "1", Slug: "known", Status: StatusActive},
		"unseen": {ID: "2", Slug: "unseen", Status: StatusActive},
	}}
	cache := NewClusterCache(src, CacheConfig{
		TTL: 30 * time.Second, StaleGrace: 10 * time.Minute, Now: clock,
	}, nil)
	domains := []string{"eu1.example.com"}
	allowed := func(name string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := CertificateAllowed(ctx, name, domains, cache.ClusterBySlug)
		return err
	}

	if err := allowed("known.eu1.example.com"); err != nil {
		t.Fatalf("known cluster refused: %v", err)
	}
	for range 100 {
		if err := allowed("known.eu1.example.com"); err != nil {
			t.Fatalf("known cluster refused on a cache hit: %v", err)
		}
	}
	if n := src.count(); n != 1 {
		t.Fatalf("%d database lookups for 101 handshakes of one cached cluster, want 1", n)
	}
	if err := allowed("x.known.eu1.example.com"); !errors.Is(err, ErrNotClusterHostname) {
		t.Fatalf("extra label: %v", err)
	}
	if n := src.count(); n != 1 {
		t.Fatalf("a malformed name reached the database (%d lookups)", n)
	}

	src.mu.Lock()
	src.down = true
	src.mu.Unlock()
	advance(time.Minute) // past the TTL, within the stale grace
	if err := allowed("known.eu1.example.com"); err != nil {
		t.Fatalf("known cluster refused during an outage within the stale grace: %v", err)
	}
	if err := allowed("unseen.eu1.example.com"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("never-seen cluster during an outage: err = %v, want ErrUnavailable", err)
	}
	advance(10 * time.Minute) // past the stale grace
	if err := allowed("known.eu1.example.com"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("known cluster past the stale grace: err = %v, want ErrUnavailable", err)
	}

	src.mu.Lock()
	src.down = false
	src.clusters["known"].Status = StatusDeleting
	src.mu.Unlock()
	if err := allowed("known.eu1.example.com"); !errors.Is(err, ErrClusterDeleting) {
		t.Fatalf("deleting cluster after the outage: err = %v, want ErrClusterDeleting", err)
	}
}
