package tenancy

import (
	"errors"
	"strings"
	"testing"
)

// TestClassifyRouteCase: a method or a path the
// broker would match differently because of letter case is refused, never
// classified one way and served another.
func TestClassifyRouteCase(t *testing.T) {
	refused := []struct{ method, path, why string }{
		{"post", "/api/v1/configure", "method must be upper case"},
		{"Post", "/api/v1/push", "method must be upper case"},
		{"pOST", "/api/v1/transaction", "method must be upper case"},
		{"get", "/api/v1/resources/queues", "method must be upper case"},
		{"delete", "/api/v1/resources/queues/orders", "method must be upper case"},
		{"post", "/api/v1/kv", "method must be upper case"},
		{"get", "/health", "method must be upper case"},
		{"POST", "/API/V1/PUSH", "another case"},
		{"GET", "/API/v1/push", "another case"},
		{"POST", "/Api/v1/system/maintenance", "another case"},
		{"POST", "/api/v1/Push", "another case"},
		{"POST", "/api/v1/CONFIGURE", "another case"},
		{"GET", "/api/v1/POP/queue/orders", "another case"},
		{"DELETE", "/api/v1/resources/QUEUES/orders", "another case"},
		{"POST", "/api/v1/messages/" + testPID + "/" + testTxID + "/RETRY", "another case"},
		{"POST", "/api/v1/dlq/" + testDLQID + "/REPLAY", "another case"},
		{"POST", "/Streams/v1/cycle", "another case"},
		{"GET", "/Internal/api/notify", "another case"},
		{"GET", "/METRICS/prometheus", "another case"},
		{"POST", "/api/v1/pu%53h", "another case"}, // the escape decodes to an upper-case S
	}
	for _, c := range refused {
		r, err := ClassifyRoute(c.method, c.path)
		if !errors.Is(err, ErrAmbiguousPath) || !strings.Contains(err.Error(), c.why) || r != routeBlocked {
			t.Errorf("ClassifyRoute(%s %q) = %v, %v; want refused (%s)", c.method, c.path, r, err, c.why)
		}
	}
	// Case in names the tenant chooses never changes a route's class, and
	// upper case where no route could match in any case changes nothing.
	kept := []routeCase{
		{"GET", "/api/v1/pop/queue/Orders", routeConsume},
		{"GET", "/api/v1/pop/queue/ORDERS/partition/EU-West", routeConsume},
		{"POST", "/api/v1/lease/ABC/extend", routeConsume},
		{"DELETE", "/api/v1/resources/queues/Orders", routeQueueAdmin},
		{"GET", "/api/v1/messages/" + strings.ToUpper(testPID) + "/TX-1", routeRead},
		{"PUT", "/api/v1/kv/NS/Key", gatedRoute(FeatureKV, GatedGrow)},
		{"GET", "/Health", routeRead},
		{"GET", "/assets/Index-4F9A.js", routeRead},
		{"GET", "/API/V1/RESOURCES/QUEUES", routeRead}, // a read either way; the broker answers 404
	}
	for _, c := range kept {
		if r, err := ClassifyRoute(c.method, c.path); err != nil || r != c.want {
			t.Errorf("ClassifyRoute(%s %q) = %v, %v; want %v", c.method, c.path, r, err, c.want)
		}
	}
}
