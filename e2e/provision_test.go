package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/provision"
)

// A signup service drives a real gateway through the provisioning API: it
// ensures a tenant, a cluster and a key twice (the same objects both
// times), a client pushes with the key through the gateway to the cell,
// the service suspends the cluster over the API and the next push is
// refused. Every request and answer is checked against openapi.yaml.
func TestProvisioningAPIEndToEnd(t *testing.T) {
	broker := startBroker(t, fakebroker.Options{Name: "cell-a"})
	url := pgtest.URL(t)
	cp := newControlPlane(t, url)
	cp.cell("cell-a", broker.URL(), "")
	tok, err := controlplane.CreateMachineToken(context.Background(), cp.pool, controlplane.NewMachineToken{
		Name: "signup", Scopes: []string{"provision", "read", "usage"}})
	if err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	startGateway(t, fmt.Sprintf(`{
	admin off
	persist_config off
	http_port %d
	default_bind 127.0.0.1
	log {
		level ERROR
	}
	queen {
		database_url %s
		base_domain eu1.example.test
	}
}
http:// {
	queen_provision
	queen_gateway
}
`, port, url))
	c := client(port)
	api := fmt.Sprintf("http://provision.example.test:%d", port)
	router := openAPIRouter(t, api)
	call := func(method, path, body string, header ...string) response {
		t.Helper()
		return provisionCall(t, c, router, method, api+provision.Prefix+path, tok.Token, body, header...)
	}

	var first map[string]any
	for round := range 2 {
		tn := call("PUT", "/tenants/acme", `{"name":"Acme Inc"}`)
		cl := call("PUT", "/clusters/acme-prod", `{"tenant":"acme","plan":"pro"}`)
		k := call("POST", "/clusters/acme-prod/keys", `{"name":"signup","scopes":["produce","consume"]}`,
			"Idempotency-Key", "signup-acme-prod-key")
		wantCreated := 201
		if round == 1 {
			wantCreated = 200
		}
		if tn.status != wantCreated || cl.status != wantCreated || k.status != 201 {
			t.Fatalf("round %d: tenant %d %s, cluster %d %s, key %d %s", round, tn.status, tn.body, cl.status, cl.body, k.status, k.body)
		}
		got := map[string]any{"tenant": tn.json(t)["id"], "cluster": cl.json(t)["id"], "key": k.json(t)["id"], "secret": k.json(t)["key"]}
		if round == 0 {
			first = got
			continue
		}
		for name, v := range first {
			if got[name] != v {
				t.Fatalf("the second round answered %s %v, the first %v", name, got[name], v)
			}
		}
	}
	if n := cp.scalar(`SELECT count(*)::text FROM queen_proxy.api_keys`); n != "1" {
		t.Fatalf("%s keys after two rounds", n)
	}

	key := first["secret"].(string)
	push := func() response {
		return do(t, c, "POST", fmt.Sprintf("http://acme-prod.eu1.example.test:%d/api/v1/push", port), key,
			`{"items":[{"queue":"orders","payload":{"n":1}}]}`)
	}
	if r := push(); r.status >= 300 {
		t.Fatalf("push with the provisioned key: %d %s", r.status, r.body)
	}
	if n := len(forwarded(broker)); n != 1 {
		t.Fatalf("the cell saw %d requests, want the push", n)
	}

	if r := call("PUT", "/clusters/acme-prod/status", `{"status":"suspended"}`); r.status != 200 {
		t.Fatalf("suspend: %d %s", r.status, r.body)
	}
	assertRefusal(t, push(), http.StatusForbidden, "cluster_suspended")
	if n := len(forwarded(broker)); n != 1 {
		t.Fatalf("a push after the suspension reached the cell (%d requests)", n)
	}

	// The API is not served on a cluster's hostname, though the site has it.
	r := do(t, c, "GET", fmt.Sprintf("http://acme-prod.eu1.example.test:%d%s/plans", port, provision.Prefix), tok.Token, "")
	assertRefusal(t, r, http.StatusNotFound, "not_found")
	if !strings.Contains(string(r.body), "cluster hostnames") {
		t.Fatalf("refusal on a cluster host: %s", r.body)
	}

	// A revoked token is refused by the running gateway within a second
	// (its cached answer is dropped by the invalidation).
	if r := call("GET", "/plans", ""); r.status != 200 {
		t.Fatalf("plans: %d %s", r.status, r.body)
	}
	if _, err := controlplane.RevokeMachineToken(context.Background(), cp.pool, "signup"); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 5*time.Second, func() error {
		if r := do(t, c, "GET", api+provision.Prefix+"/plans", tok.Token, ""); r.status != 401 {
			return fmt.Errorf("status %d", r.status)
		}
		return nil
	})
	t.Logf("the revoked token was refused %v after the revocation", took)
	if took > time.Second {
		t.Fatalf("revocation took %v", took)
	}
}

// openAPIRouter routes requests to openapi.yaml's operations served at
// base.
func openAPIRouter(t *testing.T, base string) routers.Router {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(provision.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	doc.Servers = openapi3.Servers{{URL: base + provision.Prefix}}
	r, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// provisionCall sends a request to the API and fails the test when the
// request or the answer does not match openapi.yaml.
func provisionCall(t *testing.T, c *http.Client, router routers.Router, method, url, token, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	route, params, err := router.FindRoute(req)
	if err != nil {
		t.Fatalf("%s %s is not in openapi.yaml: %v", method, url, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		t.Fatalf("%s %s: the request does not match openapi.yaml: %v", method, url, err)
	}
	req.Body = io.NopCloser(strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(out)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}); err != nil {
		t.Fatalf("%s %s: the answer %d %s does not match openapi.yaml: %v", method, url, resp.StatusCode, out, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: out}
}
