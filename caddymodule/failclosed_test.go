package caddymodule

import (
	"strings"
	"testing"

	"github.com/queengate/queengate/tenancy"
)

// TestReadLikeTheBroker: long-poll query values, method and path case, and
// cookie-authenticated writes, at the handler: what the broker would read otherwise is refused before it is
// forwarded, and a cookie-authenticated write from another site is too.
func TestReadLikeTheBroker(t *testing.T) {
	env := newTestEnv(t)
	g := env.g
	const pro = "pro.eu1.example.com"
	push := `{"items":[{"queue":"q","payload":1}]}`
	refused := []struct {
		name string
		c    call
		code string
	}{
		{"lower-case method", call{method: "post", host: pro, target: "/api/v1/configure", auth: "qk_live_admin", body: `{"queue":"q"}`}, "bad_request"},
		{"upper-case path", call{method: "POST", host: pro, target: "/API/V1/PUSH", auth: "qk_live_produce", body: push}, "bad_request"},
		{"malformed escape in wait", call{host: pro, target: "/api/v1/pop/queue/q?wait=%7", auth: "qk_live_consume"}, "bad_request"},
		{"malformed escape in autoAck", call{host: pro, target: "/api/v1/pop/queue/q?autoAck=tr%ue", auth: "qk_live_consume"}, "bad_request"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			w, seen := g.do(t, tc.c, nil)
			expect(t, w, seen, 400, tc.code)
		})
	}

	tok := env.session(t, userAdmin, "")
	cookie := func(origin string) map[string]string {
		h := map[string]string{"Cookie": "queen_session=" + tok}
		if origin != "" {
			h["Origin"] = origin
		}
		return h
	}
	crossSite := []struct {
		name   string
		c      call
		status int
		code   string
	}{
		{"cookie push from another site", call{method: "POST", host: pro, target: "/api/v1/push", body: push, header: cookie("http://evil.example")}, 403, "csrf_rejected"},
		{"cookie autoAck pop from another site", call{host: pro, target: "/api/v1/pop/queue/q?autoAck=true", header: cookie("http://evil.example")}, 403, "csrf_rejected"},
		{"cookie autoAck=1 pop from another site", call{host: pro, target: "/api/v1/pop/queue/q?batch=5&autoAck=1", header: cookie("http://evil.example")}, 403, "csrf_rejected"},
		{"cookie delete without any origin", call{method: "DELETE", host: pro, target: "/api/v1/resources/queues/q", header: cookie("")}, 403, "csrf_rejected"},
		{"cookie push from its own origin", call{method: "POST", host: pro, target: "/api/v1/push", body: push, header: cookie("http://" + pro)}, 200, ""},
		{"cookie pop that only leases, from another site", call{host: pro, target: "/api/v1/pop/queue/q", header: cookie("http://evil.example")}, 403, "csrf_rejected"},
		{"cookie pop that only leases, from its own origin", call{host: pro, target: "/api/v1/pop/queue/q", header: cookie("http://" + pro)}, 200, ""},
		{"bearer push from another site", call{method: "POST", host: pro, target: "/api/v1/push", body: push, auth: "qk_live_produce", header: map[string]string{"Origin": "http://evil.example"}}, 200, ""},
	}
	for _, tc := range crossSite {
		t.Run(tc.name, func(t *testing.T) {
			w, seen := g.do(t, tc.c, nil)
			expect(t, w, seen, tc.status, tc.code)
		})
	}
}

// TestProbeNamesAreRefused: no tenant request may name the isolation
// probe's queue, namespace or task, in any spelling the
// broker reads as that name; such requests never reach the cell.
func TestProbeNamesAreRefused(t *testing.T) {
	env := newTestEnv(t)
	g := env.g
	const pro = "pro.eu1.example.com"
	const name = tenancy.ProbeQueuePrefix + "0123456789abcdef0123456789abcdef"
	refused := []struct {
		name string
		c    call
	}{
		{"delete by path", call{method: "DELETE", host: pro, target: "/api/v1/resources/queues/" + name, auth: "qk_live_admin"}},
		{"read by path, upper case", call{host: pro, target: "/api/v1/resources/queues/" + strings.ToUpper(name), auth: "qk_live_admin"}},
		{"path with percent escapes", call{method: "DELETE", host: pro, target: "/api/v1/resources/queues/%71ueengate%2Disolation-probe-1", auth: "qk_live_admin"}},
		{"pop by path", call{host: pro, target: "/api/v1/pop/queue/" + name, auth: "qk_live_consume"}},
		{"namespace in the query", call{host: pro, target: "/api/v1/pop?namespace=" + tenancy.ProbeQueuePrefix + "ns-1", auth: "qk_live_consume"}},
		{"query with percent escapes", call{host: pro, target: "/api/v1/messages?queue=%51ueengate-isolation-probe-x", auth: "qk_live_admin"}},
		{"configure by body", call{method: "POST", host: pro, target: "/api/v1/configure", auth: "qk_live_admin", body: `{"queue":"` + name + `","options":{"leaseTime":30}}`}},
		{"configure with a json escape", call{method: "POST", host: pro, target: "/api/v1/configure", auth: "qk_live_admin", body: `{"queue":"\u0071ueengate-isolation-probe-1","options":{}}`}},
		{"push with escaped dashes", call{method: "POST", host: pro, target: "/api/v1/push", auth: "qk_live_produce", body: `{"items":[{"queue":"queengate\u002Disolation\u002dprobe\u002d1","payload":1}]}`}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			w, seen := g.do(t, tc.c, nil)
			expect(t, w, seen, 400, "bad_request")
			if !strings.Contains(w.Body.String(), "reserved for the gateway's isolation probe") {
				t.Fatalf("refusal does not say why: %s", w.Body)
			}
		})
	}
	w, seen := g.do(t, call{method: "POST", host: pro, target: "/api/v1/push", auth: "qk_live_produce", body: `{"items":[{"queue":"queengate-isolation","payload":1}]}`}, nil)
	expect(t, w, seen, 200, "")
}
