package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/tenancy"
)

// cellHeaderGateway is a real Caddy in front of a raw cell with one
// cluster, its key, and the values the cell must receive.
type cellHeaderGateway struct {
	port     int
	cell     *rawCell
	host     string
	key      string
	tenant   string
	cellAuth string
}

func startCellHeaderGateway(t testing.TB, slug string) *cellHeaderGateway {
	t.Helper()
	const secret = "raw-cell-secret"
	db := pgtest.NewDatabase(t)
	cell := startRawCell(t)
	cp := newControlPlane(t, db)
	cellID := cp.cell(slug+"-cell", cell.URL(), secret)
	cl := cp.cluster(cp.tenant(slug+"-t"), slug, cellID)
	_, key := cp.key(cl.id)
	port := freePort(t)
	startGateway(t, gatewayCaddyfile(port, db, "", ""))
	return &cellHeaderGateway{port: port, cell: cell, host: slug + ".eu1.example.test", key: key,
		tenant: cl.brokerTenant, cellAuth: "Bearer " + secret}
}

// request is a raw HTTP/1.1 request to the cluster with the client's key
// and the given extra head lines (each ending in CRLF) and body framing.
func (g *cellHeaderGateway) request(method, path, extra, body string) string {
	return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n%s\r\n%s",
		method, path, g.host, g.key, extra, body)
}

// chunked frames body as one chunk followed by a trailer section.
func chunked(body, trailer string) string {
	return fmt.Sprintf("%x\r\n%s\r\n0\r\n%s\r\n", len(body), body, trailer)
}

const pushBody = `{"items":[{"queue":"hop","payload":{"n":1}}]}`

// TestClientCannotRemoveOrForgeCellHeaders sends what a hostile client may
// send through a real Caddy to a cell that records the raw bytes, and
// checks that the cell always receives exactly the gateway's tenant,
// credential and request id, and never a client trailer.
func TestClientCannotRemoveOrForgeCellHeaders(t *testing.T) {
	g := startCellHeaderGateway(t, "hop")
	const other = "11111111-2222-4333-8444-555555555555"
	get := func(extra string) string { return g.request("GET", "/api/v1/resources/queues", extra, "") }
	for _, tc := range []struct {
		name string
		raw  string
	}{
		{"Connection names the tenant and the credential", get("Connection: x-queen-tenant, authorization\r\n")},
		{"Connection names them in other cases and orders", get("Connection: AUTHORIZATION,X-Queen-Tenant\r\nConnection: x-QUEEN-request-ID\r\n")},
		{"Connection with keep-alive and close tokens", get("Connection: keep-alive, X-Queen-Request-Id, close\r\n")},
		{"Connection tokens with odd whitespace", get("Connection: \t x-queen-tenant \t,, ,authorization\r\n")},
		{"Proxy-Connection names the tenant", get("Proxy-Connection: x-queen-tenant\r\nKeep-Alive: timeout=5\r\n")},
		{"a websocket upgrade", get("Connection: Upgrade, x-queen-tenant\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")},
		{"an h2c upgrade", get("Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n")},
		{"TE and Proxy-Authorization", get("TE: trailers, deflate\r\nProxy-Authorization: Basic Zm9vOmJhcg==\r\nConnection: te\r\n")},
		{"forged tenant, twice", get("X-Queen-Tenant: " + other + "\r\nx-queen-tenant: " + other + "\r\n")},
		{"forged tenant with underscores", get("X_Queen_Tenant: " + other + "\r\nx_queen_request_id: forged\r\nAUTHORIZATION_: x\r\n")},
		{"forged request id", get("X-Queen-Request-Id: forged\r\nX-Queen-Request-Id: forged-again\r\n")},
		{"a folded tenant line", get("X-Queen-Tenant: " + other + "\r\n  " + other + "\r\n")},
		{"a chunked push with trailers naming the cell headers", g.request("POST", "/api/v1/push",
			"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nTrailer: X-Queen-Tenant, Authorization, X-Queen-Request-Id\r\n",
			chunked(pushBody, "X-Queen-Tenant: "+other+"\r\nAuthorization: Bearer stolen\r\nX-Queen-Request-Id: forged\r\n"))},
		{"a chunked push with undeclared trailers", g.request("POST", "/api/v1/push",
			"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: x-queen-tenant\r\n",
			chunked(pushBody, "X-Queen-Tenant: "+other+"\r\n"))},
		{"a chunked ack with a trailer", g.request("POST", "/api/v1/ack",
			"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nTrailer: X-Queen-Tenant\r\nTE: trailers\r\n",
			chunked(`{"transactionId":"t-1","partitionId":"1accaf93-9b03-46d1-b256-323f38572e2e","status":"completed"}`, "X-Queen-Tenant: "+other+"\r\n"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := sendRaw(t, g.port, tc.raw)
			if resp == nil {
				t.Fatal("no response")
			}
			rid := resp.Header.Get("X-Queen-Request-Id")
			if resp.Header.Get("X-Raw-Cell") != "answered" || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d body %s: the request did not reach the cell", resp.StatusCode, body)
			}
			fwd := g.cell.withRequestID(rid)
			if len(fwd) != 1 {
				t.Fatalf("cell received %d requests with id %q, want 1", len(fwd), rid)
			}
			checkCellHeaders(t, fwd[0], g.tenant, g.cellAuth, rid)
		})
	}
}

// isIsolationProbe reports whether r is one of the requests the gateway's
// cell isolation probe sends (docs/isolation.md), which use tenant ids of
// their own.
func isIsolationProbe(r rawRequest) bool {
	return strings.Contains(r.Path, tenancy.ProbeQueuePrefix) || strings.Contains(string(r.Body), tenancy.ProbeQueuePrefix)
}

// FuzzClientHeadersReachCellAsGatewaySets sends a request with arbitrary
// extra head lines through a real Caddy: whatever they are, a request the
// cell answered carries exactly the gateway's tenant, credential and
// request id, and every request the cell received carries the cluster's
// tenant and the cell's credential.
func FuzzClientHeadersReachCellAsGatewaySets(f *testing.F) {
	for _, seed := range []string{
		"Connection: x-queen-tenant, authorization\r\n",
		"Connection: X-QUEEN-REQUEST-ID\r\nConnection: authorization\r\n",
		"Connection: Upgrade\r\nUpgrade: websocket\r\n",
		"Proxy-Connection: x-queen-tenant\r\nKeep-Alive: 5\r\nTE: trailers\r\n",
		"X-Queen-Tenant: 11111111-2222-4333-8444-555555555555\r\n",
		"X_Queen_Tenant: 11111111-2222-4333-8444-555555555555\r\n",
		"X-Queen-Request-Id: forged\r\n",
		"Transfer-Encoding: chunked\r\nTrailer: X-Queen-Tenant\r\n",
	} {
		f.Add(seed)
	}
	g := startCellHeaderGateway(f, "hopfuzz")
	f.Fuzz(func(t *testing.T, extra string) {
		// One request per input: the head ends at the first blank line.
		if i := strings.Index(extra, "\r\n\r\n"); i >= 0 {
			extra = extra[:i+2]
		}
		if extra != "" && !strings.HasSuffix(extra, "\r\n") {
			extra += "\r\n"
		}
		before := len(g.cell.requests())
		body := ""
		if strings.Contains(strings.ToLower(extra), "chunked") {
			body = chunked("", "X-Queen-Tenant: forged\r\n")
		}
		resp, _ := sendRaw(t, g.port, g.request("GET", "/api/v1/resources/queues", extra, body))
		if resp != nil && resp.Header.Get("X-Raw-Cell") == "answered" {
			rid := resp.Header.Get("X-Queen-Request-Id")
			fwd := g.cell.withRequestID(rid)
			if len(fwd) != 1 {
				t.Fatalf("cell answered, but received %d requests with id %q", len(fwd), rid)
			}
			checkCellHeaders(t, fwd[0], g.tenant, g.cellAuth, rid)
		}
		for _, r := range g.cell.requests()[before:] {
			if isIsolationProbe(r) {
				continue // the gateway's own probe, under random tenants
			}
			if got := r.fieldValues("X-Queen-Tenant"); len(got) != 1 || got[0] != g.tenant {
				t.Fatalf("cell received x-queen-tenant %q, want [%s]\n%s", got, g.tenant, r.Raw)
			}
			if got := r.fieldValues("Authorization"); len(got) != 1 || got[0] != g.cellAuth {
				t.Fatalf("cell received Authorization %q\n%s", got, r.Raw)
			}
		}
	})
}
