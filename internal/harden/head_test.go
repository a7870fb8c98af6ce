package harden

import (
	"net/http"
	"strings"
	"testing"
)

func request(uri string, headers map[string][]string) *http.Request {
	r := &http.Request{RequestURI: uri, Host: "acme.eu1.example.test", Header: http.Header{}}
	for k, vs := range headers {
		r.Header[k] = vs
	}
	return r
}

func TestCheckHead(t *testing.T) {
	lim := HeadLimits{}.WithDefaults()
	if lim.MaxURIBytes != 8192 || lim.MaxHeaders != 100 || lim.MaxHeaderValueBytes != 16384 || lim.MaxHeaderBytes != 65536 {
		t.Fatalf("defaults = %+v", lim)
	}
	many := make([]string, 99)
	for i := range many {
		many[i] = "x"
	}
	tooMany := append(append([]string{}, many...), "x")
	big := strings.Repeat("v", 16<<10)
	cases := []struct {
		name    string
		uri     string
		headers map[string][]string
		status  int
		msg     string
	}{
		{"plain", "/api/v1/push", map[string][]string{"Authorization": {"Bearer qk_x"}}, 0, ""},
		{"uri at limit", "/" + strings.Repeat("a", 8191), nil, 0, ""},
		{"uri over", "/" + strings.Repeat("a", 8192), nil, 414, "request URI too long"},
		{"99 lines plus host", "/", map[string][]string{"X-A": many}, 0, ""},
		{"101 lines with host", "/", map[string][]string{"X-A": tooMany}, 431, "too many request headers"},
		{"value at limit", "/", map[string][]string{"X-Big": {big}}, 0, ""},
		{"value over", "/", map[string][]string{"X-Big": {big + "v"}}, 431, "request header too large"},
		{"sum over", "/", map[string][]string{"X-A": {big}, "X-B": {big}, "X-C": {big}, "X-D": {big}}, 431, "request headers too large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckHead(request(c.uri, c.headers), lim)
			if c.status == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || err.Status != c.status || err.Message != c.msg {
				t.Fatalf("got %v, want %d %s", err, c.status, c.msg)
			}
		})
	}
}

func TestCheckHeadCountsHost(t *testing.T) {
	lim := HeadLimits{MaxHeaderValueBytes: 10}.WithDefaults()
	r := request("/", nil)
	r.Host = strings.Repeat("h", 11)
	if err := CheckHead(r, lim); err == nil || err.Status != 431 {
		t.Fatalf("an oversized Host passed: %v", err)
	}
}
