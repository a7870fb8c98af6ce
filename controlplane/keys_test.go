package controlplane

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
	"time"
)

var keyShape = regexp.MustCompile(`^qk_live_[A-Za-z0-9_-]{43}$`)

func TestGenerateKey(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 50; i++ {
		key, hash, err := GenerateKey("live")
		if err != nil {
			t.Fatal(err)
		}
		if !keyShape.MatchString(key) {
			t.Fatalf("key %q has the wrong shape", key)
		}
		raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(key, "qk_live_"))
		if err != nil || len(raw) != 32 {
			t.Fatalf("key body decodes to %d bytes, %v", len(raw), err)
		}
		sum := sha256.Sum256([]byte(key))
		if hash != hex.EncodeToString(sum[:]) || hash != HashKey(key) {
			t.Fatalf("hash %q is not the lowercase sha256 hex of %q", hash, key)
		}
		if seen[key] {
			t.Fatalf("key %q generated twice", key)
		}
		seen[key] = true
	}
	if key, _, err := GenerateKey("test"); err != nil || !strings.HasPrefix(key, "qk_test_") {
		t.Fatalf("env test: %q, %v", key, err)
	}
	for _, env := range []string{"", "Live", "li_ve", "averyveryverylongenv"} {
		_, _, err := GenerateKey(env)
		wantErr(t, err, Invalid, `invalid key environment "`+env+`": use 1 to 16 characters from a-z and 0-9, such as live or test`)
	}
}

func TestParseScopes(t *testing.T) {
	for in, want := range map[string]string{
		"produce,consume,read,admin": "produce,consume,read,admin",
		" Admin , read,read":         "read,admin",
		"consume":                    "consume",
	} {
		got, err := ParseScopes(in)
		if err != nil || strings.Join(got, ",") != want {
			t.Errorf("ParseScopes(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	_, err := ParseScopes("produce,write")
	wantErr(t, err, Invalid, `invalid scope "write": use produce, consume, read or admin`)
	_, err = ParseScopes(" , ")
	wantErr(t, err, Invalid, "at least one scope is required (produce, consume, read, admin)")
}

func TestParseExpiry(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]string{
		"2026-04-01T00:00:00Z":      "2026-04-01T00:00:00Z",
		"2026-04-01T02:00:00+02:00": "2026-04-01T00:00:00Z",
		"2026-04-01":                "2026-04-01T00:00:00Z",
		"720h":                      "2026-04-09T12:00:00Z",
		"90d":                       "2026-06-08T12:00:00Z",
		"1h30m":                     "2026-03-10T13:30:00Z",
	} {
		got, err := ParseExpiry(in, now)
		if err != nil || got == nil || got.Format(time.RFC3339) != want {
			t.Errorf("ParseExpiry(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, never := range []string{"", " never "} {
		if got, err := ParseExpiry(never, now); got != nil || err != nil {
			t.Errorf("ParseExpiry(%q) = %v, %v; want no expiry", never, got, err)
		}
	}
	_, err := ParseExpiry("2026-03-01", now)
	wantErr(t, err, Invalid, `invalid expiry "2026-03-01": it is not in the future`)
	_, err = ParseExpiry("-5h", now)
	wantErr(t, err, Invalid, `invalid expiry "-5h": use an RFC 3339 time (2027-01-31T00:00:00Z), a date (2027-01-31) or a duration (720h, 90d)`)
	_, err = ParseExpiry("next week", now)
	wantErr(t, err, Invalid, `invalid expiry "next week": use an RFC 3339 time (2027-01-31T00:00:00Z), a date (2027-01-31) or a duration (720h, 90d)`)
}

func TestKeys(t *testing.T) {
	pool, url := fresh(t)
	ctx := ctxT(t)
	w := provision(t, pool)
	l := listen(t, url)

	expires := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Microsecond)
	k := must[IssuedKey](t)(CreateKey(ctx, pool, NewKey{Cluster: "acme-prod", Name: " ci ", Scopes: []string{"produce", "read"},
		ExpiresAt: &expires}))
	if !keyShape.MatchString(k.Key) || k.Name != "ci" || strings.Join(k.Scopes, ",") != "produce,read" || k.Status != "live" ||
		k.ClusterSlug != "acme-prod" || k.ExpiresAt == nil || !k.ExpiresAt.Equal(expires) || k.RevokedAt != nil {
		t.Fatalf("issued %+v", k)
	}
	if h := scalar[string](t, pool, `SELECT key_hash FROM queen_proxy.api_keys WHERE id = $1::uuid`, k.ID); h != HashKey(k.Key) {
		t.Fatalf("stored hash %q, want sha256 of the key", h)
	}
	if n := scalar[int](t, pool, `SELECT count(*)::int FROM queen_proxy.operations
		WHERE action IN ('api_key_issued', 'api_key_expiry_set') AND target = $1`, k.ID); n != 2 {
		t.Fatalf("%d audit rows for the key, want issue and expiry", n)
	}
	if p := l.next(); p != w.cluster.ID {
		t.Fatalf("issuing announced %q", p)
	}

	other := must[IssuedKey](t)(CreateKey(ctx, pool, NewKey{Cluster: w.cluster.ID, Name: "dev", Env: "test", Scopes: Scopes}))
	if !strings.HasPrefix(other.Key, "qk_test_") || other.ExpiresAt != nil || len(other.Scopes) != 4 {
		t.Fatalf("issued %+v", other)
	}
	// An expired key is listed as such.
	if _, err := pool.Exec(ctx, `UPDATE queen_proxy.api_keys SET expires_at = now() - interval '1 second' WHERE id = $1::uuid`, other.ID); err != nil {
		t.Fatal(err)
	}

	revoked := must[APIKey](t)(RevokeKey(ctx, pool, strings.ToUpper(k.ID)))
	if revoked.Status != "revoked" || revoked.RevokedAt == nil {
		t.Fatalf("revoked %+v", revoked)
	}
	_, err := RevokeKey(ctx, pool, k.ID)
	wantErr(t, err, NotFound, `unknown or already revoked key "`+k.ID+`"`)
	_, err = RevokeKey(ctx, pool, "00000000-0000-0000-0000-000000000000")
	wantErr(t, err, NotFound, `unknown or already revoked key "00000000-0000-0000-0000-000000000000"`)
	_, err = RevokeKey(ctx, pool, "ci")
	wantErr(t, err, Invalid, `invalid key id "ci": want the id that key list shows`)

	live := must[[]APIKey](t)(ListKeys(ctx, pool, "acme-prod", false))
	if len(live) != 1 || live[0].ID != other.ID || live[0].Status != "expired" {
		t.Fatalf("live keys %+v", live)
	}
	all := must[[]APIKey](t)(ListKeys(ctx, pool, "acme-prod", true))
	if len(all) != 2 || all[0].ID != k.ID || all[0].Status != "revoked" {
		t.Fatalf("all keys %+v", all)
	}

	_, err = CreateKey(ctx, pool, NewKey{Cluster: "nope", Name: "x", Scopes: Scopes})
	wantErr(t, err, NotFound, `unknown cluster "nope"`)
	_, err = CreateKey(ctx, pool, NewKey{Cluster: "acme-prod", Name: " ", Scopes: Scopes})
	wantErr(t, err, Invalid, "key name is required")
	_, err = CreateKey(ctx, pool, NewKey{Cluster: "acme-prod", Name: "x"})
	wantErr(t, err, Invalid, "at least one scope is required (produce, consume, read, admin)")
	_, err = ListKeys(ctx, pool, "nope", false)
	wantErr(t, err, NotFound, `unknown cluster "nope"`)
}
