package provision

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzDecode: any body is either decoded into the request type or refused
// with a 400 that names a field; it never panics, and what it accepts has
// no member the type lacks.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"name":"a","scopes":["read"]}`, `{"bogus":1}`, `{"name":7}`, `[1]`, `{} {}`, ``, `{"key_hash":null}`, "{\"name\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c := &call{body: body}
		var req issueKeyRequest
		err := c.decode(&req)
		if err == nil {
			return
		}
		ref, ok := err.(apiRefusal)
		if !ok || ref.e.Status != http.StatusBadRequest || !strings.Contains(ref.e.Message, ": ") {
			t.Fatalf("decode(%q) = %v, want a 400 naming a field", body, err)
		}
	})
}

// FuzzMatch: any path either finds one route, whose parameters hold no
// slash and are not empty, or is refused; it never panics.
func FuzzMatch(f *testing.F) {
	for _, s := range []string{"/provision/v1/tenants/acme", "/provision/v1/keys/%2F/rotate", "/provision/v1//plans",
		"/provision/v1/clusters/a/roles/x%40y", "/provision/v1/tenants/%zz", "/other"} {
		f.Add("GET", s)
	}
	a := &API{}
	a.routes = a.routeTable()
	f.Fuzz(func(t *testing.T, method, path string) {
		r, err := http.NewRequest(method, "http://h"+path, nil)
		if err != nil {
			return
		}
		rt, params, e := a.match(r)
		if e != nil {
			return
		}
		// r.Method, not method: net/http reads an empty method as GET.
		if rt.method != r.Method {
			t.Fatalf("%s %s matched %s %s", r.Method, path, rt.method, rt.pattern)
		}
		for name, v := range params {
			if v == "" || strings.Contains(v, "/") {
				t.Fatalf("%s %s: parameter %s = %q", method, path, name, v)
			}
		}
	})
}
