package tenancy

import (
	"context"
	"testing"
	"time"
)

// KnownAPIKey answers from memory only: what get would serve without
// waiting, never a lookup, never a cached miss.
func TestKnownAPIKeyLooksNothingUp(t *testing.T) {
	cc, src, clock := newTestCache(t)
	if cc.KnownAPIKey("qk_live_acme") != nil || src.lookups.Load() != 0 {
		t.Fatal("a key never looked up is known, or KnownAPIKey looked it up")
	}
	if _, err := cc.APIKey(context.Background(), "qk_live_acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := cc.APIKey(context.Background(), "qk_live_nope"); err == nil {
		t.Fatal("an unknown key was found")
	}
	lookups := src.lookups.Load()
	if k := cc.KnownAPIKey("qk_live_acme"); k == nil || k.ID != "k1" {
		t.Fatalf("a live cached key: %v", k)
	}
	if cc.KnownAPIKey("qk_live_nope") != nil {
		t.Fatal("a cached miss is known")
	}
	clock.Advance(31 * time.Second) // stale, within the grace: get serves it
	if cc.KnownAPIKey("qk_live_acme") == nil {
		t.Fatal("a stale entry within the grace is not known")
	}
	clock.Advance(11 * time.Minute) // past the grace: get would wait for the database
	if cc.KnownAPIKey("qk_live_acme") != nil {
		t.Fatal("an entry past the grace is known")
	}
	if n := src.lookups.Load(); n != lookups {
		t.Fatalf("KnownAPIKey caused %d lookups", n-lookups)
	}
	cc.InvalidateAll()
	if cc.KnownAPIKey("qk_live_acme") != nil {
		t.Fatal("an invalidated key is known")
	}
}
