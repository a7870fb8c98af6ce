package tenancy

import (
	"errors"
	"strings"

	"github.com/queengate/queengate/wire"
)

// Class is what a request route does to a cluster; it decides the scope a
// credential needs, the limits that apply and how the request is metered.
type Class uint8

// Route classes. The zero value is ClassBlocked so that a forgotten
// assignment fails closed.
const (
	ClassBlocked    Class = iota // never exposed: 404 route_blocked
	ClassProduce                 // push or transaction; counts messages
	ClassConsume                 // pop, ack, lease, fetch, partition discovery
	ClassQueueAdmin              // configure, deletes, seeks, subscriptions, DLQ purge and replay
	ClassRead                    // listings, status, analytics, message reads, SPA fallback
	ClassGated                   // a plan-gated feature family; see Route.Feature and Route.Op
	ClassOperator                // cell-wide surface only a live operator may open
)

// String returns the class name used in logs and metrics labels.
func (c Class) String() string {
	switch c {
	case ClassBlocked:
		return "blocked"
	case ClassProduce:
		return "produce"
	case ClassConsume:
		return "consume"
	case ClassQueueAdmin:
		return "queue_admin"
	case ClassRead:
		return "read"
	case ClassGated:
		return "gated"
	case ClassOperator:
		return "operator"
	}
	return "unknown"
}

// Feature is the plan feature a gated route needs.
type Feature uint8

// Plan features; FeatureNone is the feature of every class but ClassGated.
const (
	FeatureNone Feature = iota
	FeatureStreams
	FeatureTraces
	FeatureKV
	FeatureTimers
	FeatureEphemeral
)

// String returns the feature's plan key ("streams", "kv", ...), or "none".
func (f Feature) String() string {
	switch f {
	case FeatureNone:
		return "none"
	case FeatureStreams:
		return "streams"
	case FeatureTraces:
		return "traces"
	case FeatureKV:
		return "kv"
	case FeatureTimers:
		return "timers"
	case FeatureEphemeral:
		return "ephemeral"
	}
	return "unknown"
}

// Allows reports whether the plan's features let a route needing feat
// through. FeatureNone needs nothing; an unknown feature is refused.
func (f Features) Allows(feat Feature) bool {
	switch feat {
	case FeatureNone:
		return true
	case FeatureStreams:
		return f.Streams
	case FeatureTraces:
		return f.Traces
	case FeatureKV:
		return f.KV
	case FeatureTimers:
		return f.Timers
	case FeatureEphemeral:
		return f.Ephemeral
	}
	return false
}

// GatedOp is the quota half of a gated route: whether it can make the
// cluster's stored data grow, and so whether a push block applies to it.
type GatedOp uint8

// Gated operations.
const (
	GatedNone  GatedOp = iota // not a gated route
	GatedRead                 // reads only; never push-blocked
	GatedGrow                 // always grows stored data; push-blocked
	GatedOpen                 // does not grow stored data but is no plain read (ack, delete, query); never push-blocked
	GatedMixed                // a batch; push-blocked only when its body grows
)

// String returns the operation name: "none", "read", "grow", "open" or "mixed".
func (o GatedOp) String() string {
	switch o {
	case GatedNone:
		return "none"
	case GatedRead:
		return "read"
	case GatedGrow:
		return "grow"
	case GatedOpen:
		return "open"
	case GatedMixed:
		return "mixed"
	}
	return "unknown"
}

// Route is the classification of one request. Feature and Op are set only
// for ClassGated.
type Route struct {
	Class   Class
	Feature Feature
	Op      GatedOp
}

// String renders a gated route as "gated(feature,op)" and any other route as
// its class name.
func (r Route) String() string {
	if r.Class != ClassGated {
		return r.Class.String()
	}
	return "gated(" + r.Feature.String() + "," + r.Op.String() + ")"
}

// ErrAmbiguousPath is wrapped by every error ClassifyRoute returns: the path
// could be read in more than one way, so the gateway refuses it (400
// bad_request) rather than classify one reading and forward another.
var ErrAmbiguousPath = errors.New("ambiguous request path")

// ambiguousPath is an ErrAmbiguousPath with its reason. The values below are
// preallocated so that refusing a path costs no allocation.
type ambiguousPath struct{ reason string }

func (e *ambiguousPath) Error() string { return ErrAmbiguousPath.Error() + ": " + e.reason }
func (e *ambiguousPath) Unwrap() error { return ErrAmbiguousPath }

var (
	errNotAbsolute    = &ambiguousPath{"path does not start with /"}
	errEmptySegment   = &ambiguousPath{"empty path segment"}
	errDotSegment     = &ambiguousPath{"dot segment"}
	errBadEscape      = &ambiguousPath{"malformed percent escape"}
	errEncodedSlash   = &ambiguousPath{"percent-encoded /"}
	errBackslash      = &ambiguousPath{"backslash"}
	errControlByte    = &ambiguousPath{"control byte"}
	errMeaningChanged = &ambiguousPath{"percent-decoding changes the route"}
	errCaseChanged    = &ambiguousPath{"route names are lower case; this path only matches a route in another case"}
	errMethodCase     = &ambiguousPath{"the method must be upper case (POST, not post)"}
)

// Route constants shared by the rule table.
var (
	routeBlocked    = Route{Class: ClassBlocked}
	routeProduce    = Route{Class: ClassProduce}
	routeConsume    = Route{Class: ClassConsume}
	routeQueueAdmin = Route{Class: ClassQueueAdmin}
	routeRead       = Route{Class: ClassRead}
	routeOperator   = Route{Class: ClassOperator}
)

func gatedRoute(f Feature, op GatedOp) Route { return Route{Class: ClassGated, Feature: f, Op: op} }

// ClassifyRoute maps a request method and its raw, still-escaped path
// (without the query) to its Route. A path the broker could read differently
// from the gateway (dot or empty segments, encoded slashes, backslashes,
// control bytes, malformed escapes, or escapes that change the route) is
// refused with an error wrapping ErrAmbiguousPath; the gateway answers 400
// bad_request and never forwards such a request.
//
// Methods and route names are matched exactly, in their case. The broker
// (uWebSockets) routes on the method as sent, in upper case, and older
// uWebSockets releases lower-cased it first, so "post" is served as POST by
// some brokers and not at all by others; a method with a lower-case letter
// is refused rather than classified one way and served another. The
// broker's route segments are lower case and matched case-sensitively, so a
// path whose class would change if it were lower-cased ("/API/V1/PUSH",
// classed as a plain read here, a push in lower case) is refused too.
func ClassifyRoute(method, rawPath string) (Route, error) {
	if hasLowerASCII(method) {
		return routeBlocked, errMethodCase
	}
	escaped, err := checkPath(rawPath)
	if err != nil {
		return routeBlocked, err
	}
	r := classifyPath(method, rawPath)
	decoded := rawPath
	if escaped {
		decoded = unescapePath(rawPath)
		if classifyPath(method, decoded) != r {
			return routeBlocked, errMeaningChanged
		}
	}
	if hasUpperASCII(decoded) && classifyPath(method, lowerASCII(decoded)) != r {
		return routeBlocked, errCaseChanged
	}
	return r, nil
}

func hasLowerASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			return true
		}
	}
	return false
}

// lowerASCII lower-cases ASCII letters only: case is all the broker's
// byte-exact route match could disagree on.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func hasUpperASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// IsDLQReplay reports whether the request replays dead letters: POST
// /api/v1/messages/{a}/{b}/retry or POST /api/v1/dlq/{id}/replay. Such a
// request is classed QueueAdmin but pushes messages, so it is push-blocked.
func IsDLQReplay(method, rawPath string) bool {
	if method != "POST" {
		return false
	}
	return isRetryShape(rawPath) || isReplayShape(rawPath)
}

// checkPath refuses an ambiguous path and reports whether it holds any
// percent escape. A single trailing slash is a legal route form; every other
// empty segment is not.
func checkPath(p string) (escaped bool, err error) {
	if p == "" || p[0] != '/' {
		return false, errNotAbsolute
	}
	var segLen, segDots int // decoded length and dot count of the current segment
	for i := 1; i < len(p); {
		c := p[i]
		switch {
		case c == '/':
			if segLen == 0 {
				return escaped, errEmptySegment
			}
			if isDotSegment(segLen, segDots) {
				return escaped, errDotSegment
			}
			segLen, segDots = 0, 0
			i++
			continue
		case c == '%':
			b, ok := unhexPair(p, i+1)
			if !ok {
				return escaped, errBadEscape
			}
			if err := checkByte(b, true); err != nil {
				return escaped, err
			}
			escaped = true
			c = b
			i += 3
		default:
			if err := checkByte(c, false); err != nil {
				return escaped, err
			}
			i++
		}
		segLen++
		if c == '.' {
			segDots++
		}
	}
	if isDotSegment(segLen, segDots) {
		return escaped, errDotSegment
	}
	return escaped, nil
}

// checkByte refuses a byte no route may hold, raw or decoded. A decoded "/"
// would split a segment the broker sees whole, or the other way round.
func checkByte(b byte, decoded bool) error {
	switch {
	case b < 0x20 || b == 0x7f:
		return errControlByte
	case b == '\\':
		return errBackslash
	case b == '/' && decoded:
		return errEncodedSlash
	}
	return nil
}

func isDotSegment(segLen, segDots int) bool {
	return segLen > 0 && segLen <= 2 && segDots == segLen
}

// unhexPair decodes the two hex digits at p[i:i+2].
func unhexPair(p string, i int) (byte, bool) {
	if i+1 >= len(p) {
		return 0, false
	}
	hi, lo := wire.HexDigit[p[i]], wire.HexDigit[p[i+1]]
	return hi<<4 | lo, hi|lo <= 0xF
}

// unescapePath decodes every percent escape once, as the broker does. The
// path must already have passed checkPath.
func unescapePath(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '%' {
			c, _ := unhexPair(p, i+1)
			b.WriteByte(c)
			i += 2
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// classifyPath applies the rule table of the reference (§2.2, first match
// wins) to a path taken literally, with queengate's deliberate differences:
// read prefixes admit GET and HEAD only, and unknown /streams/ paths are
// blocked. Rule numbers in comments are the reference's.
func classifyPath(method, p string) Route {
	if rest, ok := strings.CutPrefix(p, "/api/v1/"); ok {
		return classifyAPIv1(method, rest)
	}
	switch {
	case strings.HasPrefix(p, "/api/"): // 28
		return routeBlocked
	case p == "/metrics/prometheus": // 1
		return routeOperator
	case p == "/metrics", p == "/status", strings.HasPrefix(p, "/internal"): // 2
		return routeBlocked
	case isBrokerIdentityPath(p):
		return routeBlocked
	}
	if rest, ok := strings.CutPrefix(p, "/streams/"); ok { // 18, 19
		return classifyStreams(method, rest)
	}
	// 29: the SPA, /health, static files. Read, like every read prefix,
	// admits only what reads (and the CORS preflight the broker answers on
	// every path); a write to no route of the broker is refused, not
	// forwarded for the broker to answer.
	switch method {
	case "GET", "HEAD", "OPTIONS":
		return routeRead
	}
	return routeBlocked
}

// classifyAPIv1 classifies a path under /api/v1/; r is the rest of it.
func classifyAPIv1(method, r string) Route {
	if isOperatorPath(r) { // 1
		return routeOperator
	}
	// An operator path with a trailing slash is no route of either broker
	// today, but a broker that normalised slashes would answer it as the
	// operator route, cell-wide: refused rather than read.
	if trimmed := strings.TrimRight(r, "/"); trimmed != r && isOperatorPath(trimmed) {
		return routeBlocked
	}
	switch {
	case strings.HasPrefix(r, "migration"), strings.HasPrefix(r, "system"), r == "stats/refresh": // 2
		return routeBlocked
	case r == "pop", r == "pop/": // 3: discovery pop
		return routeBlocked
	case r == "push", r == "transaction": // 4, 5
		return routeProduce
	case strings.HasPrefix(r, "pop/queue/"), r == "ack", r == "ack/batch", strings.HasPrefix(r, "lease/"): // 6, 7, 8
		return routeConsume
	case r == "fetch", r == "partitions/changed": // 9, 10
		return onlyPOST(method, routeConsume)
	case r == "fetch/offsets", method == "POST" && r == "consumer-groups/positions":
		// The raft-storage broker's offset bounds and group positions:
		// reads of the caller's own tenant that a Kafka-shaped consumer
		// needs; neither claims, acks nor moves a cursor, so they are
		// consumption, not queue administration.
		return onlyPOST(method, routeConsume)
	case isCallerTargetedRest(r):
		return routeBlocked
	case r == "locks", strings.HasPrefix(r, "locks/"):
		// Locks are KV rows (and need the broker's KV grant) in a body
		// shape the gateway does not read: neither the reserved key
		// spaces nor the storage quota could be applied to it.
		return routeBlocked
	case r == "configure": // 11
		return routeQueueAdmin
	case method == "DELETE" && strings.HasPrefix(r, "resources/queues/"): // 12
		return routeQueueAdmin
	case isRetryRest(r), isReplayRest(r): // 13, 14
		return onlyPOST(method, routeQueueAdmin)
	case method == "DELETE" && (strings.HasPrefix(r, "messages/") || r == "dlq"): // 15, 16
		return routeQueueAdmin
	case (method == "DELETE" || method == "POST") && strings.HasPrefix(r, "consumer-groups"): // 17
		return routeQueueAdmin
	case method == "POST" && r == "traces": // 20
		return gatedRoute(FeatureTraces, GatedOpen)
	case r == "kv", r == "kv/": // 21
		return onlyPOST(method, gatedRoute(FeatureKV, GatedMixed))
	case strings.HasPrefix(r, "kv/"): // 22
		return classifyKVKey(method)
	case r == "timers", r == "timers/": // 23
		return onlyPOST(method, gatedRoute(FeatureTimers, GatedMixed))
	case strings.HasPrefix(r, "timers/"): // 24
		return classifyTimerKey(method)
	case strings.HasPrefix(r, "ephemeral/"): // 25
		return classifyEphemeral(method, r[len("ephemeral/"):])
	case r == "messages", strings.HasPrefix(r, "messages/"): // 26
		return onlyReadMethods(method)
	case isReadPrefix(r): // 27, GET and HEAD only
		return classifyReadPrefix(method, r)
	}
	return routeBlocked // 28: unknown /api/ fails closed
}

// isBrokerIdentityPath reports the broker's own sign-in and cluster
// surfaces outside /api/: /auth (a Rust broker with authentication off
// answers GET /auth/me with an operator identity naming its host) and
// /raft (the raft-storage broker's peer routes). They are never a
// tenant's; the gateway's console answers /auth/ itself before a request
// is classified, so what reaches this rule would go to the broker.
func isBrokerIdentityPath(p string) bool {
	return p == "/auth" || strings.HasPrefix(p, "/auth/") || p == "/raft" || strings.HasPrefix(p, "/raft/")
}

// isCallerTargetedRest reports the routes of the Rust brokers that act on
// the tenant the CALLER names in the query or body, not on the request's
// own: a tenant's purge and the feature grants. Whoever reaches them can
// wipe or grant any tenant, so every method is blocked, reads included.
// (/api/v1/system/quota and /system/quotas are under the blocked system
// prefix already.)
func isCallerTargetedRest(r string) bool {
	switch r {
	case "resources/tenant", "resources/tenant/", "resources/quota", "resources/quota/":
		return true
	}
	return strings.HasPrefix(r, "resources/tenant/") || strings.HasPrefix(r, "resources/quota/")
}

// isOperatorPath reports the closed operator list of rule 1, less the
// /metrics/prometheus member that lives outside /api/v1/.
func isOperatorPath(r string) bool {
	switch r {
	case "status", "status/buffers",
		"analytics/system-metrics", "analytics/worker-metrics", "analytics/postgres-stats",
		"system/maintenance", "system/maintenance/pop":
		return true
	}
	return false
}

// isReadPrefix is rule 27's condition: plain string prefixes, as in the
// reference, plus the exact /api/v1/dlq.
func isReadPrefix(r string) bool {
	return strings.HasPrefix(r, "resources") ||
		strings.HasPrefix(r, "status") ||
		strings.HasPrefix(r, "analytics") ||
		strings.HasPrefix(r, "consumer-groups") ||
		strings.HasPrefix(r, "traces") ||
		r == "dlq"
}

// classifyReadPrefix admits GET and HEAD under a read prefix, and the
// explicit allowlist of reads that must use another method. Anything else
// there is a write nobody has classified, so it is blocked.
func classifyReadPrefix(method, r string) Route {
	if method == "POST" && r == "resources/kv/list" { // the KV browser's cursor is a key, too long for a query
		return routeRead
	}
	return onlyReadMethods(method)
}

func onlyReadMethods(method string) Route {
	if method == "GET" || method == "HEAD" {
		return routeRead
	}
	return routeBlocked
}

func onlyPOST(method string, r Route) Route {
	if method == "POST" {
		return r
	}
	return routeBlocked
}

// classifyKVKey is rule 22, /api/v1/kv/{ns}/{key...}.
func classifyKVKey(method string) Route {
	switch method {
	case "GET":
		return gatedRoute(FeatureKV, GatedRead)
	case "PUT":
		return gatedRoute(FeatureKV, GatedGrow)
	case "DELETE":
		return gatedRoute(FeatureKV, GatedOpen)
	}
	return routeBlocked
}

// classifyTimerKey is rule 24, /api/v1/timers/{queue}[/{timerKey...}].
func classifyTimerKey(method string) Route {
	switch method {
	case "GET":
		return gatedRoute(FeatureTimers, GatedRead)
	case "DELETE":
		return gatedRoute(FeatureTimers, GatedOpen)
	}
	return routeBlocked
}

// classifyEphemeral is rule 25; r is the path after /api/v1/ephemeral/.
func classifyEphemeral(method, r string) Route {
	switch method {
	case "POST":
		switch r {
		case "push":
			return gatedRoute(FeatureEphemeral, GatedGrow)
		case "ack", "configure", "reset":
			return gatedRoute(FeatureEphemeral, GatedOpen)
		}
	case "GET":
		switch {
		case r == "pop":
			return gatedRoute(FeatureEphemeral, GatedOpen)
		case r == "queues":
			return gatedRoute(FeatureEphemeral, GatedRead)
		case strings.HasPrefix(r, "queues/") && strings.HasSuffix(r, "/depth"):
			return gatedRoute(FeatureEphemeral, GatedRead)
		}
	case "DELETE":
		if strings.HasPrefix(r, "queue/") {
			return gatedRoute(FeatureEphemeral, GatedOpen)
		}
	}
	return routeBlocked
}

// classifyStreams is rules 18 and 19 made fail-closed: only the three
// known stream routes are open; r is the path after /streams/.
func classifyStreams(method, r string) Route {
	if method != "POST" {
		return routeBlocked
	}
	switch r {
	case "v1/cycle":
		return gatedRoute(FeatureStreams, GatedMixed)
	case "v1/queries", "v1/state/get":
		return gatedRoute(FeatureStreams, GatedOpen)
	}
	return routeBlocked
}

// isRetryShape reports /api/v1/messages/{a}/{b}/retry with exactly two
// non-empty segments in between.
func isRetryShape(p string) bool {
	r, ok := strings.CutPrefix(p, "/api/v1/")
	return ok && isRetryRest(r)
}

// isReplayShape reports /api/v1/dlq/{id}/replay with one non-empty segment.
func isReplayShape(p string) bool {
	r, ok := strings.CutPrefix(p, "/api/v1/")
	return ok && isReplayRest(r)
}

func isRetryRest(r string) bool {
	mid, ok := cutAround(r, "messages/", "/retry")
	if !ok {
		return false
	}
	a, b, ok := strings.Cut(mid, "/")
	return ok && isSegment(a) && isSegment(b)
}

func isReplayRest(r string) bool {
	id, ok := cutAround(r, "dlq/", "/replay")
	return ok && isSegment(id)
}

// cutAround returns s without prefix and suffix when it has both and they
// do not overlap.
func cutAround(s, prefix, suffix string) (string, bool) {
	if len(s) < len(prefix)+len(suffix) || !strings.HasPrefix(s, prefix) || !strings.HasSuffix(s, suffix) {
		return "", false
	}
	return s[len(prefix) : len(s)-len(suffix)], true
}

// isSegment reports one non-empty path segment.
func isSegment(s string) bool {
	return s != "" && strings.IndexByte(s, '/') < 0
}
