package limits

import (
	"strconv"
	"sync"
)

// Names of the two policies in the RateLimit headers.
const (
	RateLimitPolicyRequests = "req"
	RateLimitPolicyMessages = "msgs"
)

// RateLimitHeaders renders the values of the RateLimit-Policy and RateLimit
// response header fields for a cluster's request and message buckets, so a
// client can pace itself before it ever meets a 429.
//
// The syntax follows draft-ietf-httpapi-ratelimit-headers-11 (May 2026;
// unchanged from -10 for these fields): both fields are Structured Field
// Lists whose members are a quoted policy name with parameters.
//
//	RateLimit-Policy: "req";q=50;w=5, "msgs";q=200;w=5
//	RateLimit: "msgs";r=12;t=5
//
// RateLimit-Policy lists every limited bucket (an unlimited one is left
// out): q is the bucket capacity and w the window, capacity / rate rounded
// up (at least 1 s), i.e. the time an empty bucket takes to refill, so q/w
// is the sustained rate. A bucket with no refill (rate 0) has no window and
// carries no w. The "msgs" quota is counted in messages; the draft's unit
// registry has no such unit, so no qu parameter is sent (clients key on the
// policy name).
//
// RateLimit carries only the bucket closest to empty: a refused decision
// first (the larger Retry-After if both were refused), else the smaller
// share Remaining / Limit, the request bucket on a tie. r is the whole
// tokens left and t the seconds until that bucket is full again (omitted
// when it never refills). On a refusal t is capped at the Retry-After,
// because the draft says a Retry-After sent alongside must not point before
// the end of the effective window.
//
// Both values are "" when both decisions are unlimited.
func RateLimitHeaders(req, msgs Decision) (policy, limit string) {
	if req.Unlimited && msgs.Unlimited {
		return "", ""
	}
	buf := make([]byte, 0, 64)
	policy = renderedPolicies.get(req, msgs, buf)

	name, d := RateLimitPolicyRequests, req
	if req.Unlimited || (!msgs.Unlimited && closerToEmpty(msgs, req)) {
		name, d = RateLimitPolicyMessages, msgs
	}
	buf = append(buf[:0], '"')
	buf = append(buf, name...)
	buf = append(buf, `";r=`...)
	buf = strconv.AppendInt(buf, max(0, d.Remaining), 10)
	t := d.ResetSecs
	if !d.Allowed && d.RetryAfter > 0 && (t < 0 || t > d.RetryAfter) {
		t = d.RetryAfter
	}
	if t >= 0 {
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, int64(t), 10)
	}
	return policy, string(buf)
}

func appendPolicy(buf []byte, name string, d Decision) []byte {
	buf = append(buf, '"')
	buf = append(buf, name...)
	buf = append(buf, `";q=`...)
	buf = strconv.AppendInt(buf, max(0, d.Limit), 10)
	if d.Window > 0 {
		buf = append(buf, ";w="...)
		buf = strconv.AppendInt(buf, int64(d.Window), 10)
	}
	return buf
}

// closerToEmpty reports whether a is strictly closer to empty than b.
func closerToEmpty(a, b Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return a.RetryAfter > b.RetryAfter
	}
	return share(a) < share(b)
}

// share is the fraction of the bucket left; an empty or zero-capacity
// bucket is 0.
func share(d Decision) float64 {
	if d.Limit <= 0 || d.Remaining <= 0 {
		return 0
	}
	return float64(d.Remaining) / float64(d.Limit)
}

// renderPolicy is the RateLimit-Policy value for the two buckets.
func renderPolicy(req, msgs Decision, buf []byte) string {
	buf = buf[:0]
	if !req.Unlimited {
		buf = appendPolicy(buf, RateLimitPolicyRequests, req)
	}
	if !msgs.Unlimited {
		if len(buf) > 0 {
			buf = append(buf, ", "...)
		}
		buf = appendPolicy(buf, RateLimitPolicyMessages, msgs)
	}
	return string(buf)
}

// policyKey is what a RateLimit-Policy value depends on: the buckets'
// capacities and windows, fixed per cluster until its limits change.
type policyKey struct {
	reqLimit, msgsLimit         int64
	reqWindow, msgsWindow       int
	reqUnlimited, msgsUnlimited bool
}

// policyMemo keeps the rendered RateLimit-Policy values, so that the one
// a cluster sends on every response is not built again each time. It is
// bounded: when full it starts over.
type policyMemo struct {
	mu sync.RWMutex
	m  map[policyKey]string
}

const policyMemoMax = 4096

var renderedPolicies = &policyMemo{m: map[policyKey]string{}}

func (p *policyMemo) get(req, msgs Decision, buf []byte) string {
	k := policyKey{req.Limit, msgs.Limit, req.Window, msgs.Window, req.Unlimited, msgs.Unlimited}
	p.mu.RLock()
	v, ok := p.m[k]
	p.mu.RUnlock()
	if ok {
		return v
	}
	v = renderPolicy(req, msgs, buf)
	p.mu.Lock()
	if len(p.m) >= policyMemoMax {
		clear(p.m)
	}
	p.m[k] = v
	p.mu.Unlock()
	return v
}
