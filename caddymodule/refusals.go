package caddymodule

import (
	"net/http"

	"github.com/queengate/queengate/internal/apierror"
)

// The refusals the pipeline answers with, wire-compatible with queen_proxy.
var (
	errClusterUnknown     = &apierror.Error{Status: http.StatusMisdirectedRequest, Code: apierror.ClusterUnknown, Message: "no cluster for this host"}
	errClusterSuspended   = &apierror.Error{Status: http.StatusForbidden, Code: apierror.ClusterSuspended, Message: "cluster suspended"}
	errMissingCredential  = &apierror.Error{Status: http.StatusUnauthorized, Code: apierror.Unauthorized, Message: "missing bearer credential"}
	errInvalidCredential  = &apierror.Error{Status: http.StatusUnauthorized, Code: apierror.Unauthorized, Message: "invalid credential"}
	errUnknownKey         = &apierror.Error{Status: http.StatusUnauthorized, Code: apierror.Unauthorized, Message: "unknown or revoked api key"}
	errKeyClusterMismatch = &apierror.Error{Status: http.StatusForbidden, Code: apierror.Forbidden, Message: "key/cluster mismatch"}
	errBadGateway         = &apierror.Error{Status: http.StatusBadGateway, Code: apierror.BadGateway, Message: "upstream unreachable"}
	errUpstreamTimeout    = &apierror.Error{Status: http.StatusGatewayTimeout, Code: apierror.UpstreamTimeout, Message: "upstream timeout"}
)
