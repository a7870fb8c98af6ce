package provision

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// env is a migrated database with a cell that scopes by tenant, an API in
// front of it and a token with every scope.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	url    string
	api    *API
	srv    *httptest.Server
	token  string
	router routers.Router
}

func newEnv(t *testing.T) *env {
	t.Helper()
	url := pgtest.NewDatabase(t)
	pool := pgtest.PoolFor(t, url)
	if _, err := migrations.Apply(ctxT(t), pool); err != nil {
		t.Fatal(err)
	}
	if _, err := controlplane.AddCell(ctxT(t), pool, controlplane.NewCell{Slug: "eu1-a", Region: "eu1",
		BaseURL: "http://127.0.0.1:6632", Class: "shared", Tenancy: "scoped", Grants: "none"}); err != nil {
		t.Fatal(err)
	}
	// A cell of the other class: placement passes over it (the plans of
	// the tests are shared), a move may name it.
	if _, err := controlplane.AddCell(ctxT(t), pool, controlplane.NewCell{Slug: "eu1-b", Region: "eu1",
		BaseURL: "http://127.0.0.1:6633", Class: "dedicated", Tenancy: "scoped", Grants: "none"}); err != nil {
		t.Fatal(err)
	}
	api, err := New(Options{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	e := &env{t: t, pool: pool, url: url, api: api, srv: srv}
	e.token = e.newToken("signup", []string{"provision", "read", "usage"}, 0, 0)
	e.router = specRouter(t, srv.URL)
	return e
}

func (e *env) newToken(name string, scopes []string, rate, burst int) string {
	e.t.Helper()
	tok, err := controlplane.CreateMachineToken(ctxT(e.t), e.pool, controlplane.NewMachineToken{
		Name: name, Scopes: scopes, RatePerSecond: rate, Burst: burst})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok.Token
}

// specRouter routes requests to the operations of openapi.yaml, served
// at base.
func specRouter(t *testing.T, base string) routers.Router {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI())
	if err != nil {
		t.Fatalf("openapi.yaml does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not valid: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: base + Prefix}}
	r, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// reply is an answer of the API, its body decoded.
type reply struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

func (r reply) str(key string) string {
	s, _ := r.body[key].(string)
	return s
}

// call sends a request as the token and checks both the request and the
// answer against openapi.yaml: a request the document does not describe,
// or an answer that does not match it, fails the test.
func (e *env) call(token, method, path string, body any, header ...string) reply {
	e.t.Helper()
	var rd io.Reader
	var raw []byte
	if body != nil {
		if s, isString := body.(string); isString {
			raw = []byte(s)
		} else {
			raw, _ = json.Marshal(body)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.srv.URL+Prefix+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	route, params, err := e.router.FindRoute(req)
	if err != nil {
		e.t.Fatalf("%s %s is not in openapi.yaml: %v", method, path, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	if rd != nil {
		req.Body = io.NopCloser(bytes.NewReader(raw))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	rep := reply{status: resp.StatusCode, header: resp.Header, raw: out}
	_ = json.Unmarshal(out, &rep.body)
	// A request the document calls invalid must be refused: the
	// document and the API agree on what a malformed request is.
	if reqErr != nil && rep.status < 400 {
		e.t.Fatalf("%s %s: openapi.yaml refuses the request (%v) but the API answered %d %s", method, path, reqErr, rep.status, out)
	}
	if err := openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(out)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}); err != nil {
		e.t.Fatalf("%s %s: the answer %d %s does not match openapi.yaml: %v", method, path, resp.StatusCode, out, err)
	}
	if rep.status >= 400 {
		if rep.str("code") == "" || rep.str("error") == "" {
			e.t.Fatalf("%s %s: error %d without the envelope: %s", method, path, rep.status, out)
		}
	}
	return rep
}

func (e *env) want(r reply, status int, contains ...string) {
	e.t.Helper()
	if r.status != status {
		e.t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	for _, s := range contains {
		if !strings.Contains(string(r.raw), s) {
			e.t.Fatalf("answer %s lacks %q", r.raw, s)
		}
	}
}

func (e *env) scalar(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(ctxT(e.t), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}
