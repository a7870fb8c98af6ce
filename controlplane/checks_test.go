package controlplane

import (
	"slices"
	"strings"
	"testing"
)

func TestOperatorArgumentChecks(t *testing.T) {
	if got, err := CheckScopes([]string{" Read", "produce", "read"}); err != nil || !slices.Equal(got, []string{"produce", "read"}) {
		t.Fatalf("CheckScopes = %v, %v; want [produce read]", got, err)
	}
	if _, err := CheckScopes([]string{"write"}); KindOf(err) != Invalid {
		t.Fatalf("CheckScopes(write) = %v, want Invalid", err)
	}
	if _, err := CheckScopes(nil); err == nil || err.Error() != "at least one scope is required (produce, consume, read, admin)" {
		t.Fatalf("CheckScopes(nil) = %v", err)
	}
	if got, err := CheckEmail(" Ops@Example.COM "); err != nil || got != "ops@example.com" {
		t.Fatalf("CheckEmail = %q, %v", got, err)
	}
	for _, bad := range []string{"", "nobody", "@x", "x@", "a@b@c", "a b@c", "<a@b>", strings.Repeat("a", 250) + "@b.cd"} {
		if _, err := CheckEmail(bad); KindOf(err) != Invalid {
			t.Errorf("CheckEmail(%q) = %v, want Invalid", bad, err)
		}
	}
	if got, err := CheckRole("Admin"); err != nil || got != "admin" {
		t.Fatalf("CheckRole = %q, %v", got, err)
	}
	if _, err := CheckRole("owner"); KindOf(err) != Invalid {
		t.Fatalf("CheckRole(owner) = %v", err)
	}
	if _, err := CheckKeyName(strings.Repeat("é", MaxKeyNameLen+1)); KindOf(err) != Invalid {
		t.Fatalf("CheckKeyName(too long) = %v", err)
	}
	if got, err := CheckKeyName("  ci  "); err != nil || got != "ci" {
		t.Fatalf("CheckKeyName = %q, %v", got, err)
	}
	if _, err := CheckKeyHash(strings.Repeat("A", 64)); KindOf(err) != Invalid {
		t.Fatalf("CheckKeyHash(upper) = %v", err)
	}
	if _, err := CheckKeyHash(HashKey("qk_live_x")); err != nil {
		t.Fatalf("CheckKeyHash(HashKey) = %v", err)
	}
	if _, err := CheckSlug("tenant", "-acme"); KindOf(err) != Invalid {
		t.Fatalf("CheckSlug(-acme) = %v", err)
	}
	if err := CheckPassword("short"); KindOf(err) != Invalid {
		t.Fatalf("CheckPassword(short) = %v", err)
	}
}
