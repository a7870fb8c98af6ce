package caddymodule

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/queengate/queengate/tenancy"
)

func TestRewriteUpstreamHeaders(t *testing.T) {
	g := &Gateway{app: &App{cookieNames: tenancy.CookieNames{Fleet: "queen_session"}}}
	h := http.Header{}
	h.Set("Authorization", "Bearer qk_live_client")
	h.Add("X-Queen-Tenant", "spoofed")
	h.Add("X-Queen-Tenant", "spoofed-too")
	h.Set("Cookie", "a=b")
	c := &tenancy.Cluster{BrokerTenant: "9b2c2f4e-0000-4000-8000-000000000001"}
	g.rewriteUpstreamHeaders(h, c, "rid1", "Bearer s3cret")
	if got := h.Values("X-Queen-Tenant"); len(got) != 1 || got[0] != c.BrokerTenant {
		t.Errorf("x-queen-tenant %v", got)
	}
	if got := h.Get("Authorization"); got != "Bearer s3cret" {
		t.Errorf("authorization %q", got)
	}
	if h.Get("X-Queen-Request-Id") != "rid1" || h.Get("Cookie") != "a=b" {
		t.Errorf("headers %v", h)
	}
	h.Set("Authorization", "Bearer qk_live_client")
	g.rewriteUpstreamHeaders(h, c, "rid2", "")
	if _, present := h["Authorization"]; present {
		t.Error("without a cell credential no Authorization may reach the cell")
	}
}

func TestStripSessionCookies(t *testing.T) {
	cases := []struct {
		in   []string
		want []string
	}{
		{[]string{"a=b"}, []string{"a=b"}},
		{[]string{"queen_session=tok; a=b"}, []string{"a=b"}},
		{[]string{"a=b; queen_session_cell=t; __Host-queen_session_cell=u;c=d"}, []string{"a=b; c=d"}},
		{[]string{"queen_session=tok", "x=y"}, []string{"x=y"}},
		{[]string{"queen_session=tok"}, nil},
		{[]string{"queen_session_other=keep"}, []string{"queen_session_other=keep"}},
	}
	for _, c := range cases {
		h := http.Header{"Cookie": append([]string{}, c.in...)}
		stripSessionCookies(h, "queen_session")
		if got := h["Cookie"]; strings.Join(got, "|") != strings.Join(c.want, "|") {
			t.Errorf("stripSessionCookies(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestUpstreamTimeout(t *testing.T) {
	g := &Gateway{
		UpstreamTimeout: caddy.Duration(35 * time.Second),
		LongPollMax:     caddy.Duration(90 * time.Second),
		LongPollMargin:  caddy.Duration(10 * time.Second),
	}
	cases := map[string]time.Duration{
		"/api/v1/push":                                  35 * time.Second,
		"/api/v1/pop/queue/q?batch=1":                   35 * time.Second,
		"/api/v1/pop/queue/q?wait=true":                 40 * time.Second,
		"/api/v1/pop/queue/q?wait=true&timeout=5000":    15 * time.Second,
		"/api/v1/pop/queue/q?wait=true&timeout=3600000": 100 * time.Second,
	}
	for target, want := range cases {
		r := httptest.NewRequest("GET", target, nil)
		st := &requestState{}
		st.longPoll, st.longPollMs = tenancy.LongPoll(r.URL.Path, r.URL.RawQuery)
		if got := g.upstreamTimeout(st); got != want {
			t.Errorf("upstreamTimeout(%s) = %v, want %v", target, got, want)
		}
	}
}

func TestCellDialAddress(t *testing.T) {
	good := map[string]string{
		"http://127.0.0.1:6632":          "127.0.0.1:6632",
		"http://broker.example.com":      "broker.example.com:80",
		"http://[::1]:6632/":             "[::1]:6632",
		"http://broker.example.com:6632": "broker.example.com:6632",
	}
	for in, want := range good {
		if got, err := cellDialAddress(in); err != nil || got != want {
			t.Errorf("cellDialAddress(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"https://broker:443", "127.0.0.1:6632", "http://", "inprocess://self", "::"} {
		if _, err := cellDialAddress(bad); err == nil {
			t.Errorf("cellDialAddress(%q) accepted", bad)
		}
	}
}

func TestRequestIDIsUUIDv7Hex(t *testing.T) {
	pattern := regexp.MustCompile(`^[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}$`)
	seen := map[string]bool{}
	prev := ""
	for range 1000 {
		id := newRequestID()
		if !pattern.MatchString(id) {
			t.Fatalf("request id %q is not a UUIDv7 in hex", id)
		}
		if seen[id] {
			t.Fatalf("duplicate request id %q", id)
		}
		if id[:12] < prev {
			t.Fatalf("request ids not time-ordered: %q after %q", id[:12], prev)
		}
		prev = id[:12]
		seen[id] = true
	}
}

func BenchmarkNewRequestID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = newRequestID()
	}
}
