package tenancy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/cellclient"
	"github.com/queengate/queengate/internal/fakebroker"
)

func TestGrantsFor(t *testing.T) {
	for _, c := range []struct {
		f    Features
		want []GrantKind
	}{
		// The Kafka carve-out commits offsets through KV on any plan.
		{Features{}, []GrantKind{GrantKV}},
		{Features{KV: true, Timers: true}, []GrantKind{GrantKV}},
		{Features{Ephemeral: true}, []GrantKind{GrantKV, GrantEphemeral}},
		{Features{KV: true, Ephemeral: true, Streams: true, Traces: true}, []GrantKind{GrantKV, GrantEphemeral, GrantStreams}},
	} {
		if got := GrantsFor(c.f); !reflect.DeepEqual(got, c.want) {
			t.Errorf("GrantsFor(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
}

func rustBroker(t *testing.T) (*fakebroker.Broker, cellclient.Client) {
	t.Helper()
	b := fakebroker.New(fakebroker.Options{Tenancy: fakebroker.TenancyRust})
	u, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, cellclient.Client{BaseURL: u}
}

// TestIssueVerifyWithdrawGrants: against the Rust brokers' model, a fresh
// tenant is found missing its grants, issuing them (twice: harmless) makes
// them present to the broker and to the verification, withdrawing them
// takes them away, and another tenant is never touched.
func TestIssueVerifyWithdrawGrants(t *testing.T) {
	ctx := context.Background()
	b, cell := rustBroker(t)
	const tenant, other = "6f1c2a1e-0b7d-4d43-9a55-3f1d2b8e9c01", "0d4b7e62-2c11-4f7a-8b3e-5a9c1d2e3f40"
	kinds := []GrantKind{GrantKV, GrantEphemeral, GrantStreams}

	missing, err := VerifyGrants(ctx, cell, tenant, kinds)
	if err != nil || !reflect.DeepEqual(missing, []GrantKind{GrantKV, GrantEphemeral}) {
		t.Fatalf("before any grant: missing %v, %v; want kv, ephemeral (streams are not checked)", missing, err)
	}
	for i := 0; i < 2; i++ {
		if err := IssueGrants(ctx, cell, tenant, kinds); err != nil {
			t.Fatalf("issue #%d: %v", i+1, err)
		}
	}
	for _, k := range kinds {
		if !b.Granted(tenant, string(k)) || b.Granted(other, string(k)) {
			t.Fatalf("after issuing: %s granted to the tenant %v, to another %v", k, b.Granted(tenant, string(k)), b.Granted(other, string(k)))
		}
	}
	if missing, err := VerifyGrants(ctx, cell, tenant, kinds); err != nil || len(missing) != 0 {
		t.Fatalf("after issuing: missing %v, %v", missing, err)
	}
	if err := WithdrawGrants(ctx, cell, tenant, AllGrantKinds); err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		if b.Granted(tenant, string(k)) {
			t.Fatalf("after withdrawing: %s still granted", k)
		}
	}
}

// TestGrantsFailClosed: an answer that proves nothing is an error, never
// a grant: a broker without the quota route cannot issue, and a 5xx (or a
// 403 that is not feature_gated) verifies nothing. A broker without KV
// (404) gates nothing.
func TestGrantsFailClosed(t *testing.T) {
	ctx := context.Background()
	status, body := http.StatusNotFound, `{"error":"not found"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	cell := cellclient.Client{BaseURL: srv.URL, Authorization: cellclient.Bearer("s3cret")}
	const tenant = "6f1c2a1e-0b7d-4d43-9a55-3f1d2b8e9c01"
	if err := IssueGrants(ctx, cell, tenant, []GrantKind{GrantKV}); err == nil || !strings.Contains(err.Error(), "grant kv: the broker answered HTTP 404") {
		t.Fatalf("issue on a broker without the route: %v", err)
	}
	if missing, err := VerifyGrants(ctx, cell, tenant, []GrantKind{GrantKV, GrantEphemeral}); err != nil || len(missing) != 0 {
		t.Fatalf("verify on a broker without KV: %v, %v", missing, err)
	}
	for _, c := range []struct {
		status int
		body   string
	}{{500, `{"error":"boom"}`}, {403, `{"error":"forbidden"}`}, {503, ``}} {
		status, body = c.status, c.body
		if _, err := VerifyGrants(ctx, cell, tenant, []GrantKind{GrantKV}); err == nil {
			t.Errorf("verify on HTTP %d %s: no error", c.status, c.body)
		}
	}
	status, body = http.StatusForbidden, `{"code":"feature_gated","error":"no grant"}`
	if missing, err := VerifyGrants(ctx, cell, tenant, []GrantKind{GrantKV}); err != nil || len(missing) != 1 {
		t.Fatalf("raft-storage envelope of feature_gated: %v, %v", missing, err)
	}
}

func TestKVQuotaSQL(t *testing.T) {
	const tenant = "6f1c2a1e-0b7d-4d43-9a55-3f1d2b8e9c01"
	want := "INSERT INTO queen.kv_quota (tenant_id) SELECT '" + tenant + "'::uuid WHERE NOT EXISTS (SELECT 1 FROM queen.kv_quota WHERE tenant_id = '" + tenant + "'::uuid);"
	if got := KVQuotaGrantSQL(tenant); got != want {
		t.Fatalf("KVQuotaGrantSQL = %q", got)
	}
	if got := KVQuotaWithdrawSQL(tenant); got != "DELETE FROM queen.kv_quota WHERE tenant_id = '"+tenant+"'::uuid;" {
		t.Fatalf("KVQuotaWithdrawSQL = %q", got)
	}
}

// FuzzIsFeatureGated: whatever a broker answers a 403 with, only its
// feature_gated code reads as a missing grant, and reading never panics.
func FuzzIsFeatureGated(f *testing.F) {
	for _, s := range []string{`{"error":"feature_gated","reason":"feature_gated"}`, `{"code":"feature_gated"}`,
		`{"error":"forbidden"}`, `[]`, `"feature_gated"`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if isFeatureGated(raw) && !strings.Contains(string(raw), "feature_gated") && !strings.Contains(string(raw), `\u`) {
			t.Fatalf("%q read as feature_gated", raw)
		}
	})
}
