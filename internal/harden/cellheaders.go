package harden

import (
	"net/http"
	"net/textproto"
	"strings"

	"github.com/queengate/queengate/internal/cellclient"
)

// CellOwnedHeaders are the request headers only the gateway sets for the
// cell: the cell's credential, the cluster's broker namespace and the
// gateway's request id. A client's copies never reach the cell.
var CellOwnedHeaders = []string{cellclient.HeaderAuthorization, cellclient.HeaderTenant, cellclient.HeaderRequestID}

// hopByHopHeaders are the fields RFC 9110 §7.6.1 reserves for one hop, plus
// the non-standard Proxy-Connection that libcurl still sends.
var hopByHopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// ScrubForCell removes from a request's header what a client could use to
// change, after the gateway ran, the headers the gateway sets for the cell.
//
// Caddy's reverse_proxy deletes every header the client names in
// Connection, and it does so after the handlers before it have set theirs:
// "Connection: x-queen-tenant" would take the cluster's namespace off the
// request. So the Connection contract is honoured here, before the gateway
// sets anything: the named headers are dropped as the hop-by-hop fields
// they were declared to be, and Connection itself goes with the other
// hop-by-hop fields, leaving reverse_proxy nothing to act on. Upgrade goes
// too: the cell speaks plain HTTP, and a switched protocol would carry
// bytes the gateway neither reads nor meters.
//
// A header that spells a cell-owned name with underscores for dashes
// (X_Queen_Tenant) is dropped as well: some servers treat the two
// spellings as one.
func ScrubForCell(h http.Header) {
	for _, line := range h["Connection"] {
		for token := range strings.SplitSeq(line, ",") {
			if token = textproto.TrimString(token); token != "" {
				h.Del(token)
			}
		}
	}
	for _, name := range hopByHopHeaders {
		if name == "Te" && onlyTrailers(h["Te"]) {
			continue // "TE: trailers" is end-to-end advice reverse_proxy keeps
		}
		delete(h, name)
	}
	for name := range h {
		if strings.IndexByte(name, '_') >= 0 && isCellOwnedSpelling(name) {
			delete(h, name)
		}
	}
}

// onlyTrailers reports whether a TE header says exactly "trailers".
func onlyTrailers(values []string) bool {
	return len(values) == 1 && strings.EqualFold(textproto.TrimString(values[0]), "trailers")
}

// isCellOwnedSpelling reports whether name is a cell-owned header under
// another spelling: any case, underscores for dashes.
func isCellOwnedSpelling(name string) bool {
	spelled := strings.ReplaceAll(name, "_", "-")
	for _, owned := range CellOwnedHeaders {
		if strings.EqualFold(spelled, owned) {
			return true
		}
	}
	return false
}
