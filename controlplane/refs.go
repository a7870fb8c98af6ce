package controlplane

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/queengate/queengate/tenancy"
)

// uuidText matches a UUID in its canonical text form.
var uuidText = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// normalize is how the SQL functions store slugs, codes and e-mails.
func normalize(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// checkSlug validates a tenant or cluster slug as the SQL functions would,
// and returns it normalised.
func checkSlug(noun, raw string) (string, error) {
	s := normalize(raw)
	if s == "" {
		return "", errorf(Invalid, "%s slug is required", noun)
	}
	// The rule the gateway resolves hostnames by, so that every slug made
	// here names a host it serves.
	if !tenancy.ValidSlug(s) {
		return "", errorf(Invalid, "invalid %s slug %q: use 1 to 63 characters from a-z, 0-9 and inner hyphens", noun, raw)
	}
	return s, nil
}

// ref is an object an operator named, as found in the database.
type ref struct {
	ID     string
	Name   string // slug, code or e-mail
	Status string
	Tenant string // owning tenant id, for clusters and users
}

// lookup finds one row by a name or id. query selects id, name, status and
// tenant (as text, possibly NULL-free placeholders) with $1 as the key.
func lookup(ctx context.Context, db DB, noun, raw, query string) (ref, error) {
	key := normalize(raw)
	if key == "" {
		return ref{}, errorf(Invalid, "%s is required", noun)
	}
	var r ref
	err := db.QueryRow(ctx, query, key).Scan(&r.ID, &r.Name, &r.Status, &r.Tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return ref{}, errorf(NotFound, "unknown %s %q", noun, strings.TrimSpace(raw))
	}
	if err != nil {
		return ref{}, dbError(fmt.Sprintf("look up %s %q", noun, strings.TrimSpace(raw)), err)
	}
	return r, nil
}

func lookupTenant(ctx context.Context, db DB, raw string) (ref, error) {
	return lookup(ctx, db, "tenant", raw, `SELECT id::text, slug, status, id::text
		FROM queen_proxy.tenants WHERE slug = $1 OR id::text = $1`)
}

func lookupCluster(ctx context.Context, db DB, raw string) (ref, error) {
	return lookup(ctx, db, "cluster", raw, `SELECT id::text, slug, status, tenant_id::text
		FROM queen_proxy.clusters WHERE slug = $1 OR id::text = $1`)
}

func lookupCell(ctx context.Context, db DB, raw string) (ref, error) {
	return lookup(ctx, db, "cell", raw, `SELECT id::text, slug, status, ''
		FROM queen_proxy.cells WHERE lower(slug) = $1 OR id::text = $1`)
}

func lookupPlan(ctx context.Context, db DB, raw string) (ref, error) {
	return lookup(ctx, db, "plan", raw, `SELECT id::text, code, cell_class, ''
		FROM queen_proxy.plans WHERE code = $1`)
}

func lookupUser(ctx context.Context, db DB, raw string) (ref, error) {
	return lookup(ctx, db, "user", raw, `SELECT id::text, email, '', tenant_id::text
		FROM queen_proxy.users WHERE email = $1 OR id::text = $1`)
}
