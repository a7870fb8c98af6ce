package limits

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sfList matches the shape this package emits: a Structured Field List of
// quoted tokens with integer parameters.
var sfList = regexp.MustCompile(`^"[a-z]+"(;[a-z]+=[0-9]+)+(, "[a-z]+"(;[a-z]+=[0-9]+)+)*$`)

func TestRateLimitHeaders(t *testing.T) {
	req := Decision{Allowed: true, Limit: 10, Remaining: 7, ResetSecs: 1, Window: 2}
	msgs := Decision{Allowed: true, Limit: 100, Remaining: 20, ResetSecs: 4, Window: 5}
	cases := []struct {
		name          string
		req, msgs     Decision
		policy, limit string
	}{
		{"both unlimited", unlimitedDecision, unlimitedDecision, "", ""},
		{"request bucket only", req, unlimitedDecision,
			`"req";q=10;w=2`, `"req";r=7;t=1`},
		{"message bucket only", unlimitedDecision, msgs,
			`"msgs";q=100;w=5`, `"msgs";r=20;t=4`},
		{"message bucket closer to empty", req, msgs,
			`"req";q=10;w=2, "msgs";q=100;w=5`, `"msgs";r=20;t=4`},
		{"request bucket closer to empty",
			Decision{Allowed: true, Limit: 10, Remaining: 1, ResetSecs: 2, Window: 2}, msgs,
			`"req";q=10;w=2, "msgs";q=100;w=5`, `"req";r=1;t=2`},
		{"tie goes to the request bucket",
			Decision{Allowed: true, Limit: 10, Remaining: 2, ResetSecs: 2, Window: 2}, msgs,
			`"req";q=10;w=2, "msgs";q=100;w=5`, `"req";r=2;t=2`},
		{"a refusal wins and t is capped at its Retry-After",
			Decision{Allowed: true, Limit: 10, Remaining: 0, ResetSecs: 2, Window: 2},
			Decision{Allowed: false, RetryAfter: 3, Limit: 100, Remaining: 40, ResetSecs: 6, Window: 5},
			`"req";q=10;w=2, "msgs";q=100;w=5`, `"msgs";r=40;t=3`},
		{"batch that never fits: t stays the reset time",
			req, Decision{Allowed: false, RetryAfter: 60, Limit: 5, Remaining: 5, ResetSecs: 0, Window: 1},
			`"req";q=10;w=2, "msgs";q=5;w=1`, `"msgs";r=5;t=0`},
		{"both refused: the longer wait",
			Decision{Allowed: false, RetryAfter: 1, Limit: 10, ResetSecs: 2, Window: 2},
			Decision{Allowed: false, RetryAfter: 9, Limit: 100, Remaining: 10, ResetSecs: 9, Window: 5},
			`"req";q=10;w=2, "msgs";q=100;w=5`, `"msgs";r=10;t=9`},
		{"no refill: no window, no reset",
			Decision{Allowed: true, Limit: 3, Remaining: 1, ResetSecs: -1}, unlimitedDecision,
			`"req";q=3`, `"req";r=1`},
		{"no refill and refused: t is the Retry-After",
			Decision{Allowed: false, RetryAfter: 60, Limit: 3, ResetSecs: -1}, unlimitedDecision,
			`"req";q=3`, `"req";r=0;t=60`},
		{"capacity zero counts as empty",
			Decision{Allowed: true, Limit: 1000, Remaining: 1, ResetSecs: 1, Window: 1},
			Decision{Allowed: true, Limit: 0, Remaining: 0, ResetSecs: 0, Window: 1},
			`"req";q=1000;w=1, "msgs";q=0;w=1`, `"msgs";r=0;t=0`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			policy, limit := RateLimitHeaders(tc.req, tc.msgs)
			if policy != tc.policy || limit != tc.limit {
				t.Fatalf("got\n  RateLimit-Policy: %s\n  RateLimit: %s\nwant\n  RateLimit-Policy: %s\n  RateLimit: %s",
					policy, limit, tc.policy, tc.limit)
			}
			if policy != "" && (!sfList.MatchString(policy) || !sfList.MatchString(limit)) {
				t.Fatalf("not a structured field list: %q %q", policy, limit)
			}
		})
	}
}

func TestRateLimitHeadersFromBuckets(t *testing.T) {
	// The free plan: 5 req/s burst 25, 20 msgs/s burst 100.
	c := NewManualClock(testStart)
	b := NewBuckets(c.Now)
	lim := AllUnlimited()
	lim.MaxReqPerSec, lim.ReqBurst, lim.MaxMsgsPerSec, lim.MsgsBurst = 5, 25, 20, 100
	req := b.CheckRequest("c", lim)
	msgs := b.CheckMessages("c", lim, 90)
	policy, limit := RateLimitHeaders(req, msgs)
	if policy != `"req";q=25;w=5, "msgs";q=100;w=5` || limit != `"msgs";r=10;t=5` {
		t.Fatalf("after a 90-message push: %s | %s", policy, limit)
	}
	c.Advance(2 * time.Second) // +40 msgs, req full again
	req, msgs = b.Peek("c", lim)
	if _, limit := RateLimitHeaders(req, msgs); limit != `"msgs";r=50;t=3` {
		t.Fatalf("after 2 s: %s", limit)
	}
}

func BenchmarkRateLimitHeaders(b *testing.B) {
	req := Decision{Allowed: true, Limit: 200, Remaining: 150, ResetSecs: 1, Window: 4}
	msgs := Decision{Allowed: true, Limit: 800, Remaining: 20, ResetSecs: 4, Window: 4}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		RateLimitHeaders(req, msgs)
	}
}

// TestRateLimitPolicyIsRememberedPerLimits: the policy a cluster sends on
// every response is rendered once per set of limits (one allocation per
// call is left, the RateLimit value), and the memo stays bounded.
func TestRateLimitPolicyIsRememberedPerLimits(t *testing.T) {
	req := Decision{Allowed: true, Limit: 50, Remaining: 10, ResetSecs: 2, Window: 5}
	msgs := Decision{Allowed: true, Limit: 200, Remaining: 150, ResetSecs: 1, Window: 5}
	policy, _ := RateLimitHeaders(req, msgs)
	if policy != `"req";q=50;w=5, "msgs";q=200;w=5` {
		t.Fatalf("policy %s", policy)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = RateLimitHeaders(req, msgs) }); n > 1 {
		t.Fatalf("RateLimitHeaders allocates %v times, want 1 (the RateLimit value)", n)
	}
	for i := range policyMemoMax + 10 {
		other := req
		other.Limit = int64(1000 + i)
		if p, _ := RateLimitHeaders(other, msgs); !strings.HasPrefix(p, `"req";q=`+strconv.Itoa(1000+i)+`;w=5`) {
			t.Fatalf("policy %s for limit %d", p, 1000+i)
		}
	}
	renderedPolicies.mu.RLock()
	size := len(renderedPolicies.m)
	renderedPolicies.mu.RUnlock()
	if size > policyMemoMax {
		t.Fatalf("the memo holds %d policies, more than %d", size, policyMemoMax)
	}
}
