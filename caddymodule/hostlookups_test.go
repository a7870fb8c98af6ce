package caddymodule

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/queengate/queengate/internal/harden"
)

// TestUnknownHostLookupsAreBounded: hosts the cache cannot answer are
// looked up within the address's budget; past it the answer is 429 with
// Retry-After, and nothing reaches the cell. A cluster found gives its
// token back, and a name found to be none is answered from memory.
func TestUnknownHostLookupsAreBounded(t *testing.T) {
	g := testGateway(t)
	g.app.backend.hostLookups = harden.NewHostLookups(harden.HostLookupsConfig{PerAddress: 0.01, PerAddressBurst: 2})
	const target = "/api/v1/resources/queues"
	// A real cluster, looked up and found, costs nothing.
	w, seen := serve(t, g, "acme.eu1.example.com", target, "qk_live_acme", nil)
	expect(t, w, seen, http.StatusOK, "")
	for _, host := range []string{"nope1", "nope2"} {
		w, seen := serve(t, g, host+".eu1.example.com", target, "qk_live_acme", nil)
		expect(t, w, seen, http.StatusMisdirectedRequest, "cluster_unknown")
	}
	// Remembered: no lookup, no token.
	w, seen = serve(t, g, "nope1.eu1.example.com", target, "qk_live_acme", nil)
	expect(t, w, seen, http.StatusMisdirectedRequest, "cluster_unknown")
	w, seen = serve(t, g, "nope3.eu1.example.com", target, "qk_live_acme", nil)
	expect(t, w, seen, http.StatusTooManyRequests, "rate_limited")
	if ra, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q, want 1 to 60 seconds", w.Header().Get("Retry-After"))
	}
	// A cluster the cache holds is never held back.
	w, seen = serve(t, g, "acme.eu1.example.com", target, "qk_live_acme", nil)
	expect(t, w, seen, http.StatusOK, "")
}
