//go:build realbroker

package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/realbroker"
	"github.com/queengate/queengate/tenancy"
)

// learnedIDs are the ids one side of a contract run learned from its own
// broker's answers, for the later requests that name them: the two brokers
// mint different ids for the same requests.
type learnedIDs struct {
	lease, txn, partition string
}

func (ids *learnedIDs) expand(s string) string {
	return strings.NewReplacer("{lease}", ids.lease, "{txn}", ids.txn, "{pid}", ids.partition).Replace(s)
}

// learnPop keeps the ids of the first message of a pop answer.
func learnPop(ids *learnedIDs, r response) {
	var pop struct {
		Messages []struct {
			LeaseID       string `json:"leaseId"`
			TransactionID string `json:"transactionId"`
			PartitionID   string `json:"partitionId"`
		} `json:"messages"`
	}
	if json.Unmarshal(r.body, &pop) == nil && len(pop.Messages) > 0 {
		m := pop.Messages[0]
		ids.lease, ids.txn, ids.partition = m.LeaseID, m.TransactionID, m.PartitionID
	}
}

// gatewayRefusal is one of the refusals docs/enforcement.md documents.
type gatewayRefusal struct {
	status int
	code   string
}

// routeCase is one representative request of a route class. With refusal
// nil, the gateway must answer what the broker answers the same request
// sent directly (status and answer shape); otherwise it must answer the
// documented refusal, whatever the broker would have done. The same request
// also goes to a fake broker, which must answer as the real one unless the
// case says why not.
type routeCase struct {
	name    string
	class   string // tenancy.Route.String() of the request; "" for a path the classifier refuses
	method  string
	path    string // {lease}, {txn} and {pid} are the side's learned ids
	body    string
	refusal *gatewayRefusal
	learn   func(*learnedIDs, response)
	// fakeDiffers says why the fake broker (in its IgnoreTenant mode,
	// given the same requests) answers otherwise; every other case it must
	// answer as the real broker does.
	fakeDiffers string
}

var (
	refusedBlocked   = &gatewayRefusal{http.StatusNotFound, "route_blocked"}
	refusedAmbiguous = &gatewayRefusal{http.StatusBadRequest, "bad_request"}
)

// routeCases is the contract of every class of tenancy.ClassifyRoute, in
// an order that builds the state the later requests read: each request
// goes to both brokers, so both hold the same messages throughout.
// Requests the gateway refuses come last (the broker serves some of them,
// which would leave the two brokers apart).
var routeCases = []routeCase{
	{name: "push", class: "produce", method: "POST", path: "/api/v1/push",
		body: `{"items":[{"queue":"rc","partition":"p1","payload":{"n":1},"transactionId":"rc-1"},` +
			`{"queue":"rc","partition":"p1","payload":{"n":2},"transactionId":"rc-2"},{"queue":"rc","payload":{"n":3}}]}`},
	{name: "push duplicate", class: "produce", method: "POST", path: "/api/v1/push",
		body: `{"items":[{"queue":"rc","partition":"p1","payload":{"n":1},"transactionId":"rc-1"}]}`},
	{name: "push without payload", class: "produce", method: "POST", path: "/api/v1/push",
		body: `{"items":[{"queue":"rc","partition":"p2","transactionId":"rc-bare"}]}`},
	{name: "push refused by the broker", class: "produce", method: "POST", path: "/api/v1/push", body: `{"items":[]}`},
	{name: "transaction", class: "produce", method: "POST", path: "/api/v1/transaction",
		body: `{"operations":[{"type":"push","items":[{"queue":"rc","partition":"p1","payload":{"n":4},"transactionId":"rc-4"}]}]}`},
	{name: "transaction with a duplicate", class: "produce", method: "POST", path: "/api/v1/transaction",
		body: `{"operations":[{"type":"push","items":[{"queue":"rc","partition":"p1","payload":{"n":5},"transactionId":"rc-5"},` +
			`{"queue":"rc","partition":"p1","payload":{"n":1},"transactionId":"rc-1"}]}]}`},
	{name: "transaction flat form", class: "produce", method: "POST", path: "/api/v1/transaction",
		body: `{"operations":[{"type":"push","queue":"rc","partition":"p2","payload":{"n":6},"transactionId":"rc-6"}]}`},
	{name: "configure", class: "queue_admin", method: "POST", path: "/api/v1/configure",
		body: `{"queue":"rc","options":{"leaseTime":30,"retryLimit":2}}`},
	{name: "configure a queue to delete", class: "queue_admin", method: "POST", path: "/api/v1/configure", body: `{"queue":"rc-gone"}`},
	{name: "delete queue", class: "queue_admin", method: "DELETE", path: "/api/v1/resources/queues/rc-gone"},
	{name: "queue detail", class: "read", method: "GET", path: "/api/v1/resources/queues/rc",
		fakeDiffers: "live statistics (the broker's newest and oldest message times come from a periodic refresh) and partitions in id order"},
	{name: "unknown queue", class: "read", method: "GET", path: "/api/v1/resources/queues/nothing-here"},
	{name: "queue list", class: "read", method: "GET", path: "/api/v1/resources/queues",
		fakeDiffers: "retainedBytes per queue, which only newer brokers report (internal/fakebroker/doc.go)"},
	{name: "message list", class: "read", method: "GET", path: "/api/v1/messages?queue=rc"},
	{name: "status queues", class: "read", method: "GET", path: "/api/v1/status/queues"},
	{name: "consumer groups", class: "read", method: "GET", path: "/api/v1/consumer-groups"},
	{name: "dlq", class: "read", method: "GET", path: "/api/v1/dlq"},
	{name: "trace names", class: "read", method: "GET", path: "/api/v1/traces/names"},
	{name: "overview", class: "read", method: "GET", path: "/api/v1/resources/overview"},
	{name: "spa fallback", class: "read", method: "GET", path: "/"},
	{name: "head", class: "read", method: "HEAD", path: "/api/v1/resources/queues"},
	{name: "upper-case read", class: "read", method: "GET", path: "/API/V1/RESOURCES/QUEUES"},
	{name: "pop with lease", class: "consume", method: "GET", path: "/api/v1/pop/queue/rc/partition/p1?batch=1", learn: learnPop},
	{name: "pop of a leased partition", class: "consume", method: "GET", path: "/api/v1/pop/queue/rc/partition/p1?batch=1"},
	{name: "lease extend", class: "consume", method: "POST", path: "/api/v1/lease/{lease}/extend", body: `{"seconds":30}`},
	{name: "trace", class: "gated(traces,open)", method: "POST", path: "/api/v1/traces",
		body: `{"transactionId":"{txn}","partitionId":"{pid}","traceNames":["contract"],"data":{"text":"seen"}}`},
	{name: "traces of a message", class: "read", method: "GET", path: "/api/v1/traces/{pid}/{txn}",
		fakeDiffers: `worker_id "1" where this broker, with one worker, says "0"`},
	{name: "ack", class: "consume", method: "POST", path: "/api/v1/ack",
		body: `{"transactionId":"{txn}","partitionId":"{pid}","leaseId":"{lease}","status":"completed"}`},
	{name: "pop after ack", class: "consume", method: "GET", path: "/api/v1/pop/queue/rc/partition/p1?batch=1", learn: learnPop},
	{name: "ack batch", class: "consume", method: "POST", path: "/api/v1/ack/batch",
		body: `{"acknowledgments":[{"transactionId":"{txn}","partitionId":"{pid}","leaseId":"{lease}","status":"completed"}]}`},
	{name: "pop autoAck", class: "consume", method: "GET", path: "/api/v1/pop/queue/rc/partition/p1?batch=10&autoAck=true", learn: learnPop},
	{name: "empty pop", class: "consume", method: "GET", path: "/api/v1/pop/queue/rc/partition/p1?batch=1"},
	{name: "message read", class: "read", method: "GET", path: "/api/v1/messages/{pid}/{txn}"},
	{name: "message delete", class: "queue_admin", method: "DELETE", path: "/api/v1/messages/{pid}/{txn}"},
	{name: "ack malformed", class: "consume", method: "POST", path: "/api/v1/ack", body: `{}`},
	{name: "fetch", class: "consume", method: "POST", path: "/api/v1/fetch", body: `{}`},
	{name: "subscription without timestamp", class: "queue_admin", method: "POST", path: "/api/v1/consumer-groups/g1/subscription", body: `{"queue":"rc"}`},
	{name: "consumer group delete", class: "queue_admin", method: "DELETE", path: "/api/v1/consumer-groups/g1"},
	{name: "dlq retry", class: "queue_admin", method: "POST", path: "/api/v1/messages/{pid}/{txn}/retry"},
	{name: "streams state", class: "gated(streams,open)", method: "POST", path: "/streams/v1/state/get", body: `{}`},
	{name: "streams register", class: "gated(streams,open)", method: "POST", path: "/streams/v1/queries", body: `{}`},
	{name: "streams cycle", class: "gated(streams,mixed)", method: "POST", path: "/streams/v1/cycle", body: `{}`},
	{name: "kv put", class: "gated(kv,grow)", method: "PUT", path: "/api/v1/kv/ns/k", body: `{"value":1}`},
	{name: "kv get", class: "gated(kv,read)", method: "GET", path: "/api/v1/kv/ns/k"},
	{name: "kv batch", class: "gated(kv,mixed)", method: "POST", path: "/api/v1/kv", body: `[]`},
	{name: "timers batch", class: "gated(timers,mixed)", method: "POST", path: "/api/v1/timers", body: `{"operations":[]}`},
	{name: "timer delete", class: "gated(timers,open)", method: "DELETE", path: "/api/v1/timers/rc/t1"},
	{name: "ephemeral push", class: "gated(ephemeral,grow)", method: "POST", path: "/api/v1/ephemeral/push", body: `{"queue":"e","messages":[1]}`},
	{name: "ephemeral queues", class: "gated(ephemeral,read)", method: "GET", path: "/api/v1/ephemeral/queues"},

	{name: "operator status", class: "operator", method: "GET", path: "/api/v1/status", refusal: refusedBlocked,
		fakeDiffers: "live statistics; the broker's come from a periodic refresh"},
	{name: "operator prometheus", class: "operator", method: "GET", path: "/metrics/prometheus", refusal: refusedBlocked,
		fakeDiffers: "process figures"},
	{name: "operator system metrics", class: "operator", method: "GET", path: "/api/v1/analytics/system-metrics", refusal: refusedBlocked},
	{name: "operator maintenance", class: "operator", method: "GET", path: "/api/v1/system/maintenance", refusal: refusedBlocked},
	{name: "blocked shared state", class: "blocked", method: "GET", path: "/api/v1/system/shared-state", refusal: refusedBlocked,
		fakeDiffers: "server_id is the fake's Options.Name"},
	{name: "blocked metrics", class: "blocked", method: "GET", path: "/metrics", refusal: refusedBlocked},
	{name: "blocked discovery pop", class: "blocked", method: "GET", path: "/api/v1/pop", refusal: refusedBlocked},
	{name: "blocked internal", class: "blocked", method: "GET", path: "/internal/api/shared-state/stats", refusal: refusedBlocked,
		fakeDiffers: "server_id is the fake's Options.Name"},
	{name: "blocked stats refresh", class: "blocked", method: "POST", path: "/api/v1/stats/refresh", refusal: refusedBlocked},
	{name: "blocked write outside the api", class: "blocked", method: "POST", path: "/anything", body: `{}`, refusal: refusedBlocked},
	{name: "escaped route name", class: "", method: "POST", path: "/api/v1/pu%73h",
		body: `{"items":[{"queue":"rc-escaped","payload":1}]}`, refusal: refusedAmbiguous},
	{name: "upper-case push", class: "", method: "POST", path: "/API/V1/PUSH",
		body: `{"items":[{"queue":"rc-upper","payload":1}]}`, refusal: refusedAmbiguous},
	{name: "lower-case method", class: "", method: "post", path: "/api/v1/configure",
		body: `{"queue":"rc-lower","options":{"retentionSeconds":999999999}}`, refusal: refusedAmbiguous},
}

// TestRealBrokerRouteClasses sends every representative request through
// the gateway to one real broker and directly to a second one, in step:
// the gateway answers what the broker answers, or its documented refusal.
// A fake broker gets the same requests too, and must answer as the real
// one where the table does not say otherwise.
func TestRealBrokerRouteClasses(t *testing.T) {
	behind, beside := realbroker.Start(t), realbroker.Start(t)
	rc := newRealCell(t, behind, "rc-keeper", "")
	rc.start(t, "")

	seen := map[string]bool{}
	fake := startBroker(t, fakebroker.Options{IgnoreTenant: true})
	var viaGateway, viaBroker, viaFake learnedIDs
	for _, tc := range routeCases {
		rawPath, _, _ := strings.Cut(tc.path, "?")
		route, err := tenancy.ClassifyRoute(tc.method, rawPath)
		got := route.String()
		if err != nil {
			got = ""
		}
		if got != tc.class {
			t.Fatalf("%s: %s %s classifies as %q, the table says %q", tc.name, tc.method, tc.path, got, tc.class)
		}
		seen[route.Class.String()] = true

		gw := rc.send(t, tc.method, viaGateway.expand(tc.path), viaGateway.expand(tc.body))
		br := direct(t, beside, tc.method, viaBroker.expand(tc.path), viaBroker.expand(tc.body))
		fk := do(t, http.DefaultClient, tc.method, fake.URL()+viaFake.expand(tc.path), "", viaFake.expand(tc.body))
		if tc.learn != nil {
			tc.learn(&viaGateway, gw)
			tc.learn(&viaBroker, br)
			tc.learn(&viaFake, fk)
		}
		if tc.fakeDiffers == "" && (fk.status != br.status || answerShape(fk) != answerShape(br)) {
			t.Errorf("%s: the fake broker answers %s %s otherwise\n fake:    %d %s\n broker:  %d %s", tc.name, tc.method, tc.path,
				fk.status, answerShape(fk), br.status, answerShape(br))
		}
		if tc.refusal != nil {
			t.Logf("%s: the broker answers %d %.120s; the gateway refuses", tc.name, br.status, br.body)
			assertRefusal(t, gw, tc.refusal.status, tc.refusal.code)
			continue
		}
		if gw.status != br.status || answerShape(gw) != answerShape(br) {
			t.Errorf("%s: %s %s\n gateway: %d %s\n broker:  %d %s", tc.name, tc.method, tc.path,
				gw.status, answerShape(gw), br.status, answerShape(br))
		}
	}
	for c := tenancy.ClassBlocked; c <= tenancy.ClassOperator; c++ {
		if !seen[c.String()] {
			t.Errorf("no request of class %s in the table", c)
		}
	}
}
