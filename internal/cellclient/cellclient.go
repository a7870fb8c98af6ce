// Package cellclient is how the gateway's own tools talk to a cell's broker
// directly, outside any client's request: the queue inventory, the scoping
// probe, feature grants at placement, the CLI's keeper check and the
// console's queue listing. It is the one place that puts the broker tenant
// (x-queen-tenant) and the cell credential (Authorization) on such a
// request, and bounds how long it may take and how much of the answer is
// read. Requests a client sends through the gateway take the proxy path
// (caddymodule), not this one.
package cellclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The headers a cell reads the gateway's authority from. Set only here on
// the gateway's own requests; the proxy path sets the same names
// (internal/harden.CellOwnedHeaders) for clients' requests.
const (
	HeaderTenant        = "X-Queen-Tenant"
	HeaderAuthorization = "Authorization"
	HeaderRequestID     = "X-Queen-Request-Id"
)

const (
	// DefaultTimeout bounds one request whose context has no deadline.
	DefaultTimeout = 15 * time.Second
	// DefaultMaxAnswer is how much of an answer is read unless the
	// Client says otherwise.
	DefaultMaxAnswer = 1 << 20
)

// ErrAnswerTooLarge: the answer is longer than the Client reads. Nothing
// of it is returned: a cut answer could read as a different, shorter one.
var ErrAnswerTooLarge = errors.New("the cell's answer is larger than the gateway reads")

// ErrNoTenant: a request names no broker tenant. The broker would serve it
// as its default tenant, whose namespace belongs to no cluster, so it is
// never sent.
var ErrNoTenant = errors.New("no broker tenant (x-queen-tenant) for a request to a cell")

// defaultHTTP is shared by every Client that names none, so that requests
// to the same cell reuse connections. Its transport is Go's default one
// (proxy from the environment, HTTP/2 where TLS offers it) with at least
// TLS 1.2 and verified certificates.
var defaultHTTP = func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: t}
}()

// Bearer is the Authorization header value for a cell secret
// (cells.cell_secret), empty for none.
func Bearer(secret string) string {
	if secret == "" {
		return ""
	}
	return "Bearer " + secret
}

// Client reaches one cell's broker. The zero value of each optional field
// means the default.
type Client struct {
	// BaseURL is the cell's broker URL (cells.base_url); a trailing slash
	// is dropped.
	BaseURL string
	// Authorization is the complete Authorization header value for the
	// cell (see Bearer); empty sends none.
	Authorization string
	// HTTP sends the requests; nil uses one shared client (Go's default
	// transport, TLS 1.2 or later).
	HTTP *http.Client
	// Timeout bounds one request whose context has no deadline; 0 means
	// DefaultTimeout. A context's own deadline always applies.
	Timeout time.Duration
	// MaxAnswer is the most of an answer that is read; a longer one is
	// ErrAnswerTooLarge. 0 means DefaultMaxAnswer.
	MaxAnswer int64
}

// Request is one request to the cell.
type Request struct {
	Method string
	// Path is the path and query, e.g. "/api/v1/resources/queues".
	Path string
	// Tenant is the broker tenant the request acts as (x-queen-tenant);
	// required.
	Tenant string
	// Body is sent as JSON when it is not empty.
	Body []byte
	// RequestID, when not empty, is sent as x-queen-request-id so the
	// cell's logs name the request the gateway logged.
	RequestID string
}

// Answer is the cell's answer: any status, the caller judges it.
type Answer struct {
	Status int
	Body   []byte
}

// OK reports a 2xx status.
func (a Answer) OK() bool { return a.Status/100 == 2 }

// Do sends r to the cell and reads the whole answer. Only a request that
// could not be sent, an answer that could not be read whole, or one larger
// than MaxAnswer is an error; every error names the method and path and
// wraps its cause. Answer.Status is set whenever the cell answered.
func (c Client) Do(ctx context.Context, r Request) (Answer, error) {
	fail := func(a Answer, err error) (Answer, error) {
		return a, fmt.Errorf("%s %s on the cell: %w", r.Method, r.Path, err)
	}
	if r.Tenant == "" {
		return fail(Answer{}, ErrNoTenant)
	}
	if _, ok := ctx.Deadline(); !ok {
		timeout := c.Timeout
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var body io.Reader
	if len(r.Body) > 0 {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, strings.TrimRight(c.BaseURL, "/")+r.Path, body)
	if err != nil {
		return fail(Answer{}, err)
	}
	// Set by their canonical names, one value each: nothing the proxy
	// path's scrubbing would drop, nothing a cell could read two ways.
	req.Header.Set(HeaderTenant, r.Tenant)
	req.Header.Set("Accept", "application/json")
	if len(r.Body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Authorization != "" {
		req.Header.Set(HeaderAuthorization, c.Authorization)
	}
	if r.RequestID != "" {
		req.Header.Set(HeaderRequestID, r.RequestID)
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fail(Answer{}, err)
	}
	defer resp.Body.Close()
	limit := c.MaxAnswer
	if limit <= 0 {
		limit = DefaultMaxAnswer
	}
	a := Answer{Status: resp.StatusCode}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fail(a, fmt.Errorf("reading the answer (HTTP %d): %w", a.Status, err))
	}
	if int64(len(raw)) > limit {
		return fail(a, fmt.Errorf("%w (HTTP %d, more than %d bytes)", ErrAnswerTooLarge, a.Status, limit))
	}
	a.Body = raw
	return a, nil
}
