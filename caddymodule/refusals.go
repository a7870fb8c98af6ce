package caddymodule

import (
	"net/http"

	"github.com/queengate/queengate/internal/apierror"
)

// The refusals the pipeline answers with, wire-compatible with queen_proxy.
var (
	errClusterUnknown = &apierror.Error{Status: http.StatusMisdirectedRequest, Code: apierror.ClusterUnknown, Message: "no cluster for this host"}
	// A cluster of a cell another gateway fronts: its limits are counted
	// there, so this gateway admits none of its traffic. The reference's
	// code for a misdirected Host, with a message that says why.
	errClusterElsewhere = &apierror.Error{Status: http.StatusMisdirectedRequest, Code: apierror.ClusterUnknown, Message: "this gateway does not front the cell of this cluster; reach it through the gateway of its own cell"}
	errConsoleOnlyHost  = &apierror.Error{Status: http.StatusMisdirectedRequest, Code: apierror.ConsoleOnlyHost, Message: "this host serves the console and the operator routes only; send Queen API requests to the cluster's own hostname"}
	errClusterSuspended = &apierror.Error{Status: http.StatusForbidden, Code: apierror.ClusterSuspended, Message: "cluster suspended"}

	errAmbiguousPath      = &apierror.Error{Status: http.StatusBadRequest, Code: apierror.BadRequest, Message: "ambiguous request path: percent-encoded separators, dot segments and empty segments are refused"}
	errDuplicateHeader    = &apierror.Error{Status: http.StatusBadRequest, Code: apierror.BadRequest, Message: "a credential header (Authorization, x-queen-act-cluster) may be sent only once"}
	errRouteBlocked       = &apierror.Error{Status: http.StatusNotFound, Code: apierror.RouteBlocked, Message: "not available"}
	errFeatureGated       = &apierror.Error{Status: http.StatusForbidden, Code: apierror.FeatureGated, Message: "not in your plan"}
	errPushBlocked        = &apierror.Error{Status: http.StatusForbidden, Code: apierror.PushBlocked, Message: "pushes blocked (billing hold)"}
	errStorageQuota       = &apierror.Error{Status: http.StatusForbidden, Code: apierror.StorageQuotaExceeded, Message: "storage quota exceeded; pushes blocked"}
	errMonthlyQuota       = &apierror.Error{Status: http.StatusForbidden, Code: apierror.QuotaExceeded, Message: "monthly message quota (monthly_msgs_quota) exhausted; pushes blocked until the next calendar month"}
	errBodyTooLarge       = &apierror.Error{Status: http.StatusRequestEntityTooLarge, Code: apierror.PayloadTooLarge, Message: "request body exceeds cap"}
	errBodyUnreadable     = &apierror.Error{Status: http.StatusBadRequest, Code: apierror.BadRequest, Message: "request body could not be read: malformed chunked framing, or cut short"}
	errMissingCredential  = &apierror.Error{Status: http.StatusUnauthorized, Code: apierror.Unauthorized, Message: "missing bearer credential"}
	errInvalidCredential  = &apierror.Error{Status: http.StatusUnauthorized, Code: apierror.Unauthorized, Message: "invalid credential"}
	errUnknownKey         = &apierror.Error{Status: http.StatusUnauthorized, Code: apierror.Unauthorized, Message: "unknown or revoked api key"}
	errSessionGone        = &apierror.Error{Status: http.StatusUnauthorized, Code: apierror.Unauthorized, Message: "session no longer valid"}
	errKeyClusterMismatch = &apierror.Error{Status: http.StatusForbidden, Code: apierror.Forbidden, Message: "key/cluster mismatch"}
	errTokenOtherCluster  = &apierror.Error{Status: http.StatusForbidden, Code: apierror.Forbidden, Message: "token not valid for this cluster"}
	errNoRole             = &apierror.Error{Status: http.StatusForbidden, Code: apierror.Forbidden, Message: "no role on this cluster"}
	errNoSuchActCluster   = &apierror.Error{Status: http.StatusForbidden, Code: apierror.Forbidden, Message: "no such cluster, or no role on it"}
	errKeyActAs           = &apierror.Error{Status: http.StatusForbidden, Code: apierror.Forbidden, Message: "api keys are bound to their own cluster; x-queen-act-cluster is not honoured for them"}
	errNameACluster       = &apierror.Error{Status: http.StatusForbidden, Code: apierror.Forbidden, Message: "this host serves several clusters; name one with x-queen-act-cluster"}
	errNotPermitted       = &apierror.Error{Status: http.StatusForbidden, Code: apierror.Forbidden, Message: "operation not permitted for this credential"}
	errBadGateway         = &apierror.Error{Status: http.StatusBadGateway, Code: apierror.BadGateway, Message: "upstream unreachable"}
	errUpstreamTimeout    = &apierror.Error{Status: http.StatusGatewayTimeout, Code: apierror.UpstreamTimeout, Message: "upstream timeout"}
	errCellCredential     = &apierror.Error{Status: http.StatusBadGateway, Code: apierror.BadGateway, Message: "cell credential unavailable"}
)

// tooManyFailures answers an address that failed authentication too often.
func tooManyFailures(retryAfter int) *apierror.Error {
	return &apierror.Error{Status: http.StatusTooManyRequests, Code: apierror.RateLimited,
		Message: "too many requests from this address", RetryAfter: retryAfter}
}

// tooManyHostLookups answers a host the cluster cache cannot answer, from
// an address (or a gateway) that has spent its lookups of unknown hosts.
func tooManyHostLookups(retryAfter int) *apierror.Error {
	return &apierror.Error{Status: http.StatusTooManyRequests, Code: apierror.RateLimited,
		Message: "too many requests for hosts this gateway does not know", RetryAfter: retryAfter}
}

// headTooLarge answers a request head over a limit (414 or 431).
func headTooLarge(status int, msg string) *apierror.Error {
	return &apierror.Error{Status: status, Code: apierror.RequestHeadersTooLarge, Message: msg}
}
