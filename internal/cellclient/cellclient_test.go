package cellclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/cellclient"
	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/harden"
)

const (
	tenantA = "11111111-2222-4333-8444-555555555555"
	tenantB = "66666666-7777-4888-9999-aaaaaaaaaaaa"
)

// tenancyBroker is the fake broker scoping by x-queen-tenant, with a cell
// secret in front of it.
func tenancyBroker(t *testing.T, secret string) (*fakebroker.Broker, string) {
	t.Helper()
	b := fakebroker.New(fakebroker.Options{Token: secret})
	u, err := b.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, u
}

// queueNames lists the queues tenant sees on the cell.
func queueNames(t *testing.T, c cellclient.Client, tenant string) []string {
	t.Helper()
	a, err := c.Do(context.Background(), cellclient.Request{Method: http.MethodGet, Path: "/api/v1/resources/queues", Tenant: tenant})
	if err != nil || !a.OK() {
		t.Fatalf("listing as %s: %+v %v", tenant, a, err)
	}
	var doc struct {
		Queues []struct{ Name string } `json:"queues"`
	}
	if err := json.Unmarshal(a.Body, &doc); err != nil {
		t.Fatalf("listing as %s: %v: %s", tenant, err, a.Body)
	}
	var names []string
	for _, q := range doc.Queues {
		names = append(names, q.Name)
	}
	return names
}

// TestClientActsAsTheTenantWithTheCredential: what the client configures
// as one tenant is that tenant's on a broker that scopes by tenant (the
// header reached it), the cell secret is what lets it in, and the broker
// logged exactly the headers the client means to send.
func TestClientActsAsTheTenantWithTheCredential(t *testing.T) {
	b, u := tenancyBroker(t, "s3cret")
	c := cellclient.Client{BaseURL: u + "/", Authorization: cellclient.Bearer("s3cret")}
	a, err := c.Do(context.Background(), cellclient.Request{Method: http.MethodPost, Path: "/api/v1/configure", Tenant: tenantA,
		Body: []byte(`{"queue":"orders","options":{"leaseTime":30}}`), RequestID: "rid-1"})
	if err != nil || !a.OK() || !strings.Contains(string(a.Body), `"configured":true`) {
		t.Fatalf("configure: HTTP %d %s %v", a.Status, a.Body, err)
	}
	if got := queueNames(t, c, tenantA); len(got) != 1 || got[0] != "orders" {
		t.Fatalf("tenant A sees %v, want [orders]", got)
	}
	if got := queueNames(t, c, tenantB); len(got) != 0 {
		t.Fatalf("tenant B sees %v: the tenant header did not reach the broker", got)
	}

	var configure *fakebroker.Request
	for _, r := range b.Requests() {
		if r.Path == "/api/v1/configure" {
			configure = &r
		}
	}
	if configure == nil {
		t.Fatal("the broker logged no configure request")
	}
	// The proxy path's rule for cell-owned headers leaves every header the
	// client sets standing: one value each, nothing named in Connection.
	h := configure.Header.Clone()
	harden.ScrubForCell(h)
	for name, want := range map[string]string{cellclient.HeaderTenant: tenantA, cellclient.HeaderAuthorization: "Bearer s3cret",
		cellclient.HeaderRequestID: "rid-1", "Content-Type": "application/json"} {
		if got := h.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("%s after the cell-header rule: %q, want [%s]", name, got, want)
		}
	}

	// Without the secret, or with another, the cell refuses: a status,
	// not an error, for the caller to judge.
	for _, auth := range []string{"", cellclient.Bearer("wrong")} {
		a, err := cellclient.Client{BaseURL: u, Authorization: auth}.Do(context.Background(),
			cellclient.Request{Method: http.MethodGet, Path: "/api/v1/resources/queues", Tenant: tenantA})
		if err != nil || a.Status != http.StatusUnauthorized || a.OK() {
			t.Errorf("Authorization %q: %+v %v, want HTTP 401", auth, a, err)
		}
	}
}

// TestClientRefusesWhatItCannotDoSafely: no tenant sends nothing (the
// broker would serve the default tenant); an answer over the bound is an
// error with nothing of it returned; a cell that does not answer is
// bounded by the timeout; an unreachable cell is an error naming the
// request.
func TestClientRefusesWhatItCannotDoSafely(t *testing.T) {
	b, u := tenancyBroker(t, "")
	before := len(b.Requests())
	_, err := cellclient.Client{BaseURL: u}.Do(context.Background(), cellclient.Request{Method: http.MethodGet, Path: "/api/v1/resources/queues"})
	if !errors.Is(err, cellclient.ErrNoTenant) {
		t.Fatalf("no tenant: %v, want ErrNoTenant", err)
	}
	if n := len(b.Requests()) - before; n != 0 {
		t.Fatalf("no tenant: the broker received %d requests", n)
	}

	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("x", 101)))
	}))
	defer big.Close()
	a, err := cellclient.Client{BaseURL: big.URL, MaxAnswer: 100}.Do(context.Background(), cellclient.Request{Method: http.MethodGet, Path: "/", Tenant: tenantA})
	if !errors.Is(err, cellclient.ErrAnswerTooLarge) || a.Body != nil || a.Status != http.StatusOK {
		t.Fatalf("101 bytes over a bound of 100: %+v %v", a, err)
	}
	if a, err := (cellclient.Client{BaseURL: big.URL, MaxAnswer: 101}).Do(context.Background(), cellclient.Request{Method: http.MethodGet, Path: "/", Tenant: tenantA}); err != nil || len(a.Body) != 101 {
		t.Fatalf("101 bytes within a bound of 101: %d bytes, %v", len(a.Body), err)
	}

	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }))
	defer slow.Close()
	defer close(block)
	t0 := time.Now()
	_, err = cellclient.Client{BaseURL: slow.URL, Timeout: 50 * time.Millisecond}.Do(context.Background(), cellclient.Request{Method: http.MethodGet, Path: "/", Tenant: tenantA})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a cell that does not answer: %v, want a deadline error", err)
	}
	t.Logf("a silent cell was given up after %v (Timeout 50ms)", time.Since(t0))

	_, err = cellclient.Client{BaseURL: "http://127.0.0.1:1"}.Do(context.Background(), cellclient.Request{Method: http.MethodDelete, Path: "/api/v1/resources/queues/q", Tenant: tenantA})
	if err == nil || !strings.Contains(err.Error(), "DELETE /api/v1/resources/queues/q") {
		t.Fatalf("unreachable cell: %v", err)
	}
}
