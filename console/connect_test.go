package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/meter"
)

// TestConnect: the Connect page's data names the address a client uses
// (the cluster's own, and the shared hosts where the key names the
// cluster), the limits a client meets, and snippets for that address.
func TestConnect(t *testing.T) {
	e := newEnv(t)
	w := e.world()
	viewer := e.token(w.users["viewer"])
	e.exec(`SELECT queen_proxy.set_limit_override($1::uuid, '{"max_req_per_sec": 77, "max_batch_items": null}')`, w.clusterID)
	e.cache.InvalidateCluster(w.clusterID)

	c := e.get(w.host+":8443", "/api/console/connect", viewer).want(200, "").json()
	own := "http://" + w.host + ":8443"
	if c["url"] != own || c["cluster_url"] != own || c["api_key_env"] != APIKeyEnv {
		t.Fatalf("connect %v, want the cluster's own address %s", c, own)
	}
	if shared, _ := c["shared_urls"].([]any); len(shared) != 1 || shared[0] != "http://api."+baseDomain+":8443" {
		t.Fatalf("shared urls %v", c["shared_urls"])
	}
	lim := c["limits"].(map[string]any)
	if lim["max_req_per_sec"] != float64(77) || lim["max_batch_items"] != nil || lim["req_burst"] != float64(200) {
		t.Fatalf("limits %v, want the effective ones (override 77 req/s, unlimited batches, the pro plan's burst)", lim)
	}
	snippets := c["snippets"].([]any)
	langs := []string{}
	for _, s := range snippets {
		s := s.(map[string]any)
		langs = append(langs, s["lang"].(string))
		if !strings.Contains(s["code"].(string), own) || !strings.Contains(s["code"].(string), APIKeyEnv) {
			t.Fatalf("snippet %s does not use %s and $%s:\n%s", s["lang"], own, APIKeyEnv, s["code"])
		}
	}
	if strings.Join(langs, ",") != "js,python,go,sh" {
		t.Fatalf("snippets %v", langs)
	}
	js := snippets[0].(map[string]any)["code"].(string)
	if !strings.Contains(js, "url: '"+own+"'") || !strings.Contains(js, "bearerToken: process.env."+APIKeyEnv) {
		t.Fatalf("the JS snippet does not pass url and bearerToken:\n%s", js)
	}

	// An API key is not a console credential.
	e.get(w.host, "/api/console/connect", "").want(401, "")
	e.write("POST", w.host, "/api/console/connect", viewer, "{}").want(405, "")
}

// TestConnectLocalhost: a *.localhost cluster name, which Node and the
// other SDKs' runtimes on glibc do not resolve, yields to a shared host;
// any other name is what the SDK uses.
func TestConnectLocalhost(t *testing.T) {
	s := &Surface{o: Options{
		Clusters: testClusters{shared: map[string]bool{"127.0.0.1": true}},
		IsHTTPS:  func(*http.Request) bool { return false },
	}}
	for _, tc := range []struct{ host, sdk, own string }{
		{"dev.localhost:8080", "http://127.0.0.1:8080", "http://dev.localhost:8080"},
		{"acme.eu1.example.com", "http://acme.eu1.example.com", "http://acme.eu1.example.com"},
		{"127.0.0.1:8080", "http://127.0.0.1:8080", ""},
	} {
		r := httptest.NewRequest(http.MethodGet, "/api/console/connect", nil)
		r.Host = tc.host
		sdk, own, shared := s.connectAddresses(r)
		if sdk != tc.sdk || own != tc.own || len(shared) != 1 {
			t.Errorf("Host %s: sdk %q own %q shared %v, want %q %q", tc.host, sdk, own, shared, tc.sdk, tc.own)
		}
	}
}

// TestStorageQuotaInactiveInOverview: the overview says whether the
// storage cap is enforced: unknown before a listing, false while the
// broker reports no retained bytes, true once it does.
func TestStorageQuotaInactiveInOverview(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status *limits.StorageStatus
		want   any
	}{
		{"no listing yet", nil, nil},
		{"the broker reports no bytes", &limits.StorageStatus{Known: true}, false},
		{"the broker reports bytes", &limits.StorageStatus{Known: true, Reported: true, Measured: 10}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var live []meter.Unflushed
			e := newEnv(t, func(o *Options) { o.State = testState{live: &live, storage: tc.status} })
			w := e.world()
			o := e.get(w.host, "/api/console/overview", e.token(w.users["viewer"])).want(200, "").json()
			if st := o["storage"].(map[string]any); st["quota_active"] != tc.want {
				t.Fatalf("storage %v, want quota_active %v", st, tc.want)
			}
		})
	}
}
