// Package apierror is the one place where the gateway's error contract
// lives: the machine-readable codes clients switch on, and the JSON envelope
// every gateway-generated error is written in.
package apierror

import (
	"net/http"
	"strconv"
	"strings"
)

// Code is a machine-readable error code. Codes are a wire contract shared
// with queen_proxy: add new ones here, never ad hoc.
type Code string

// The error codes of the contract.
const (
	Unauthorized           Code = "unauthorized"
	Forbidden              Code = "forbidden"
	RateLimited            Code = "rate_limited"
	QuotaExceeded          Code = "quota_exceeded"
	StorageQuotaExceeded   Code = "storage_quota_exceeded"
	ClusterSuspended       Code = "cluster_suspended"
	PushBlocked            Code = "push_blocked"
	FeatureGated           Code = "feature_gated"
	RouteBlocked           Code = "route_blocked"
	ClusterUnknown         Code = "cluster_unknown"
	PayloadTooLarge        Code = "payload_too_large"
	BadGateway             Code = "bad_gateway"
	UpstreamTimeout        Code = "upstream_timeout"
	InvalidRequest         Code = "invalid_request"
	BadRequest             Code = "bad_request"
	RequestHeadersTooLarge Code = "request_headers_too_large"

	// CellNotIsolated is queengate's own: the cluster's cell runs a broker
	// that does not keep clusters apart (or is not yet known to), and the
	// cell serves only its keeper (the first cluster placed on it).
	CellNotIsolated Code = "cell_not_isolated"
	// GatewayStandby is queengate's own: the gateway is the standby of its
	// group and serves nothing; the leader does.
	GatewayStandby Code = "gateway_standby"
	// ExchangeCapacity is queengate's own: the produce requests in flight
	// to the cells (each may outlive its client) are at the bound of the
	// cluster's share or the gateway's; nothing was forwarded.
	ExchangeCapacity Code = "exchange_capacity"
	// ClusterDraining is queengate's own: the cluster is leaving its cell
	// (moved off it as its keeper, or being deleted), and nothing more of
	// it is sent there.
	ClusterDraining Code = "cluster_draining"
	// GatewayLapsed is queengate's own: the gateway has not reached the
	// control-plane database for too long to serve a cell's keeper (the
	// control plane may have handed the cell on without it).
	GatewayLapsed Code = "gateway_lapsed"
	// ConsoleOnlyHost is queengate's own: the host serves the console,
	// identity and operator routes alone (queen_gateway console_only, the
	// operator host); Queen API requests go to a cluster's own hostname.
	ConsoleOnlyHost Code = "console_only_host"

	// The identity, console and operator surfaces.
	CSRFRejected     Code = "csrf_rejected"
	NotConfigured    Code = "not_configured"
	NotFound         Code = "not_found"
	Conflict         Code = "conflict"
	InternalError    Code = "internal_error"
	InvalidState     Code = "invalid_state"
	EmailUnverified  Code = "email_unverified"
	DomainNotAllowed Code = "domain_not_allowed"
	NotProvisioned   Code = "not_provisioned"
	// InvitationRequired is queengate's own: the console does not create
	// an account for an e-mail address no account has yet; an operator
	// does (until the address's owner can accept an e-mail invitation).
	InvitationRequired Code = "invitation_required"
	// AccountUnclaimed is queengate's own: a provider sign-in found an
	// account for its verified e-mail that a cluster admin created and
	// nobody has signed in to, and does not link to it.
	AccountUnclaimed Code = "account_unclaimed"
	// EmailNotSent is queengate's own: the mail relay did not take a
	// message the request needed sent (an invitation), so nothing the
	// message would have announced was kept.
	EmailNotSent Code = "email_not_sent"
	// LinkInvalid is queengate's own: an e-mailed link's token is
	// malformed, unknown, for another purpose, expired, used or revoked.
	LinkInvalid Code = "link_invalid"
)

// Error is one gateway-generated refusal: the status, the code and a short
// human message.
type Error struct {
	Status  int
	Code    Code
	Message string
	// RetryAfter, when positive, is sent as the Retry-After header in
	// whole seconds.
	RetryAfter int
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Write sends e as the JSON envelope {"error","code","request_id"}.
func Write(w http.ResponseWriter, e *Error, requestID string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	var b strings.Builder
	b.Grow(64 + len(e.Message) + len(requestID))
	b.WriteString(`{"error":`)
	writeJSONString(&b, e.Message)
	b.WriteString(`,"code":`)
	writeJSONString(&b, string(e.Code))
	b.WriteString(`,"request_id":`)
	writeJSONString(&b, requestID)
	b.WriteString("}")
	h.Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(e.Status)
	_, _ = w.Write([]byte(b.String()))
}

// writeJSONString writes s as a JSON string. Messages are the gateway's own
// constants, but escape fully anyway so no caller can break the envelope.
func writeJSONString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
