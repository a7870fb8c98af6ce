package harden

import (
	"net/http"
	"reflect"
	"testing"
)

func TestScrubForCell(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   http.Header
		want http.Header
	}{
		{
			name: "headers named in Connection go, with Connection",
			in: http.Header{
				"Connection":     {"x-queen-tenant, AUTHORIZATION", "X-Custom"},
				"X-Queen-Tenant": {"t"}, "Authorization": {"Bearer k"}, "X-Custom": {"c"}, "Accept": {"*/*"},
			},
			want: http.Header{"Accept": {"*/*"}},
		},
		{
			name: "every hop-by-hop field goes; TE: trailers stays",
			in: http.Header{
				"Keep-Alive": {"5"}, "Proxy-Connection": {"close"}, "Proxy-Authorization": {"Basic x"},
				"Upgrade": {"websocket"}, "Trailer": {"X-Queen-Tenant"}, "Te": {"trailers"},
				"Transfer-Encoding": {"chunked"}, "Proxy-Authenticate": {"x"},
			},
			want: http.Header{"Te": {"trailers"}},
		},
		{
			name: "TE with codings goes",
			in:   http.Header{"Te": {"trailers, deflate"}},
			want: http.Header{},
		},
		{
			name: "underscore spellings of cell headers go, others stay",
			in: http.Header{
				"X_queen_tenant": {"t"}, "x_QUEEN_request_id": {"r"}, "Authorization_": {"keep: not the same name"},
				"X_custom_header": {"kept"},
			},
			want: http.Header{"Authorization_": {"keep: not the same name"}, "X_custom_header": {"kept"}},
		},
		{
			name: "Connection tokens with whitespace and empty elements",
			in:   http.Header{"Connection": {" \tx-queen-request-id\t,, ,"}, "X-Queen-Request-Id": {"forged"}, "Via": {"1.1 x"}},
			want: http.Header{"Via": {"1.1 x"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ScrubForCell(tc.in)
			if !reflect.DeepEqual(tc.in, tc.want) {
				t.Fatalf("got %v, want %v", tc.in, tc.want)
			}
		})
	}
}

// FuzzScrubForCell holds the scrub to its promise on any header set: once
// the gateway has set its own values after it, removing what the remaining
// Connection tokens name (as reverse_proxy does) cannot take any of them off.
func FuzzScrubForCell(f *testing.F) {
	f.Add("Connection", "x-queen-tenant, authorization", "X_Queen_Tenant", "x")
	f.Add("Proxy-Connection", "x-queen-request-id", "Upgrade", "websocket")
	f.Add("Te", "trailers", "Trailer", "X-Queen-Tenant")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := http.Header{}
		h.Add(k1, v1)
		h.Add(k2, v2)
		h.Add("Connection", v1)
		ScrubForCell(h)
		for _, name := range CellOwnedHeaders {
			h.Set(name, "gateway")
		}
		for _, line := range h["Connection"] {
			t.Fatalf("Connection %q survived the scrub", line)
		}
		for name := range h {
			if name != "X-Queen-Tenant" && name != "Authorization" && name != "X-Queen-Request-Id" && isCellOwnedSpelling(name) {
				t.Fatalf("%q survived as another spelling of a cell header", name)
			}
		}
		for _, name := range CellOwnedHeaders {
			if got := h.Values(name); len(got) != 1 || got[0] != "gateway" {
				t.Fatalf("%s = %q", name, got)
			}
		}
	})
}
