package fakebroker

import (
	"crypto/ed25519"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// TenantHeader is the request header that selects the tenant a request acts for.
const TenantHeader = "x-queen-tenant"

// DefaultTenant is the tenant of requests that carry no TenantHeader.
const DefaultTenant = "00000000-0000-0000-0000-000000000001"

// QueueMode is the consumer group name the broker uses for plain queue
// consumption (no consumerGroup parameter).
const QueueMode = "__QUEUE_MODE__"

// Options configures a Broker. The zero value is a usable configuration.
type Options struct {
	// Name identifies the broker instance. /health and the shared-state
	// routes report it as server_id, so tests can tell two cells apart.
	// Empty means "fakebroker".
	Name string

	// RequireTenant makes every tenant-scoped route answer 400
	// {"error":"x-queen-tenant header is required"} when the request has no
	// TenantHeader, instead of falling back to DefaultTenant. No real broker
	// makes this refusal (a Rust broker serves such a request as the
	// default tenant, see TenancyRust): a test that uses it shows the
	// gateway's behaviour with the header present, never what a lost
	// header would do.
	RequireTenant bool

	// IgnoreTenant makes the broker behave like the public Queen broker
	// 0.15.1, which has no tenancy: TenantHeader is ignored and every
	// request acts on one shared namespace (DefaultTenant). SetIgnoreTenant
	// changes it while the broker runs.
	IgnoreTenant bool

	// Token, when not empty, makes every route except OPTIONS and /health
	// answer 401 {"error":"Unauthorized"} unless the request carries
	// "Authorization: Bearer <Token>". The recorded broker ran with auth off,
	// so this shape is not from the fixtures, and no Queen broker checks a
	// static secret (the Rust brokers know JWT only): it stands for
	// something in front of the broker that checks the cell secret. SetTokens changes the
	// accepted tokens while the broker runs.
	Token string

	// JWTSecret (HS256) and JWTPublicKey (EdDSA), when either is set, make
	// the broker authenticate like a Queen broker with JWT_ENABLED: every
	// route except OPTIONS and /health needs "Authorization: Bearer <jwt>"
	// signed so and carrying exp (30 s clock skew), else 401
	// {"error":"Authentication required"} (no token) or
	// {"error":"Invalid or expired token"}. The verified sub and role are
	// logged on the Request, and pushed messages carry the sub as
	// producerSub. Do not combine with Token.
	JWTSecret    []byte
	JWTPublicKey ed25519.PublicKey

	// RequestLogSize is how many requests Requests keeps (default 1000).
	RequestLogSize int

	// PartitionOrder, when set, replaces the partition-id order the broker
	// uses wherever it ranks a queue's partitions (the candidates of a pop
	// without a partition, the rows of consumer-groups/lagging): it reports
	// whether partition a of queue comes before partition b. Partition ids
	// are random, so tests that need a reproducible choice set this.
	PartitionOrder func(queue, a, b string) bool

	// ReportKVTimerBytes adds the top-level kvBytes, kvRows, timerBytes and
	// timerRows fields of newer brokers to GET /api/v1/resources/queues
	// (values set with SetKVTimerBytes, zero by default).
	ReportKVTimerBytes bool

	// Tenancy selects the tenancy contract. Empty is this fake's own model
	// (the header used verbatim as the tenant, see the package
	// documentation); TenancyRust follows Queen's Rust brokers
	// (rusttenancy.go). IgnoreTenant overrides either.
	Tenancy string

	// RetainedBytesInterval is the period of the TenancyRust slow lane that
	// refreshes retainedBytes (default ten minutes, the 1.x default).
	RetainedBytesInterval time.Duration

	// NoRequestLog keeps no request log (Requests returns nothing). For
	// load benchmarks, where copying every request's headers and body
	// would cost the fake more than answering it.
	NoRequestLog bool

	// DiscardCompleted removes a message from its partition as soon as an
	// autoAck pop in queue mode completes it, as if completed messages had
	// no retention at all, instead of keeping it until retention evicts it.
	// Pops look through a partition's messages from the oldest, so without
	// it a long benchmark of pushes and autoAck pops slows down as
	// completed messages pile up.
	DiscardCompleted bool
}

// Broker is an in-memory fake Queen broker. It implements http.Handler; use
// Start, Listen or Serve to put it on a TCP port.
type Broker struct {
	opts    Options
	jwt     *jwtAuth // nil when JWT authentication is off
	ids     idGen
	started time.Time

	mu        sync.Mutex
	tenants   map[string]*tenant
	waiters   map[waitKey]chan struct{}
	pushMode  PushOutcome
	pushHook  func(PushItem) PushOutcome
	fault     *AnswerFault
	popMaint  bool
	migration migrationState
	reqTotal  int64
	msgTotal  int64

	retainedLaneAt time.Time // TenancyRust: when the retained-bytes lane last ran
	rustCondition  int       // TenancyRust: SetRustCellCondition's status, 0 for none

	parked       atomic.Int64
	ignoreTenant atomic.Bool
	tokens       atomic.Pointer[[]string] // the bearer tokens accepted; empty: no token needed
	poll         time.Duration            // re-check interval of parked pops
	log          *requestLog

	closed    chan struct{}
	closeOnce sync.Once

	srvMu sync.Mutex
	srv   *http.Server
	url   string
}

// New returns an empty broker.
func New(opts Options) *Broker {
	if opts.Name == "" {
		opts.Name = "fakebroker"
	}
	if opts.Tenancy != "" && opts.Tenancy != TenancyRust {
		panic("fakebroker: unknown Options.Tenancy " + opts.Tenancy)
	}
	if opts.Tenancy == TenancyRust && (opts.RequireTenant || opts.Token != "") {
		// Neither has a counterpart on a Rust broker: it never refuses a
		// request for lacking the tenant header and has no static-secret
		// authentication (JWT only).
		panic("fakebroker: RequireTenant and Token model no Rust broker; do not combine them with TenancyRust")
	}
	if opts.RequestLogSize <= 0 {
		opts.RequestLogSize = 1000
	}
	b := &Broker{
		opts:      opts,
		jwt:       newJWTAuth(opts),
		started:   time.Now(),
		tenants:   make(map[string]*tenant),
		waiters:   make(map[waitKey]chan struct{}),
		poll:      defaultPollInterval,
		log:       newRequestLog(opts.RequestLogSize),
		closed:    make(chan struct{}),
		migration: migrationState{status: "idle"},
	}
	b.retainedLaneAt = b.started
	b.ignoreTenant.Store(opts.IgnoreTenant)
	if opts.Token != "" {
		b.SetTokens(opts.Token)
	} else {
		b.SetTokens()
	}
	return b
}

// SetTokens replaces the bearer tokens the broker accepts (see
// Options.Token), as if it were restarted with a new setting: more than one
// is a broker that accepts both the old and the new credential during a
// rotation; none turns the check off.
func (b *Broker) SetTokens(tokens ...string) {
	accepted := append([]string(nil), tokens...)
	b.tokens.Store(&accepted)
}

// tokenAccepted reports whether an Authorization header carries one of
// the accepted tokens, or no token is needed.
func (b *Broker) tokenAccepted(authorization string) bool {
	accepted := *b.tokens.Load()
	if len(accepted) == 0 {
		return true
	}
	for _, t := range accepted {
		if authorization == "Bearer "+t {
			return true
		}
	}
	return false
}

// SetIgnoreTenant switches between scoping by TenantHeader (false) and the
// public 0.15.1 broker's single shared namespace (true), as if the cell's
// broker were replaced by the other kind. Data already stored stays where
// it is.
func (b *Broker) SetIgnoreTenant(ignore bool) { b.ignoreTenant.Store(ignore) }

// Start serves the broker on a free port of 127.0.0.1 and returns its base
// URL, for example "http://127.0.0.1:41234".
func (b *Broker) Start() (string, error) {
	return b.Listen("127.0.0.1:0")
}

// Listen serves the broker on addr in the background and returns its base URL.
func (b *Broker) Listen(addr string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	url := "http://" + l.Addr().String()
	go func() { _ = b.Serve(l) }()
	return url, nil
}

// Serve serves the broker on l until Close is called. It returns nil after
// Close, and the server's error otherwise.
func (b *Broker) Serve(l net.Listener) error {
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second}
	b.srvMu.Lock()
	select {
	case <-b.closed:
		b.srvMu.Unlock()
		_ = l.Close()
		return nil
	default:
	}
	b.srv = srv
	b.url = "http://" + l.Addr().String()
	b.srvMu.Unlock()
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// URL returns the base URL the broker is served on, or "" if it is not served.
func (b *Broker) URL() string {
	b.srvMu.Lock()
	defer b.srvMu.Unlock()
	return b.url
}

// Close stops serving, releases parked long-polls and hanging requests, and
// closes open connections. It is safe to call more than once.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() { close(b.closed) })
	b.srvMu.Lock()
	srv := b.srv
	b.srv = nil
	b.srvMu.Unlock()
	if srv != nil {
		return srv.Close()
	}
	return nil
}

// Parked returns how many pop requests are currently parked in a long-poll.
func (b *Broker) Parked() int {
	return int(b.parked.Load())
}

// SetKVTimerBytes sets the kvBytes and timerBytes reported for tenant
// (empty = DefaultTenant) when Options.ReportKVTimerBytes is set.
func (b *Broker) SetKVTimerBytes(tenantID string, kvBytes, timerBytes int64) {
	if tenantID == "" {
		tenantID = DefaultTenant
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tenantLocked(tenantID)
	t.kvBytes, t.timerBytes = kvBytes, timerBytes
}

// ServeHTTP records the request and answers it.
func (b *Broker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, tooLarge := readBody(r)
	var ident jwtIdentity
	var jwtErr error
	if b.jwt != nil {
		ident, jwtErr = b.jwt.verify(r)
	}
	rust := b.rust() && !b.ignoreTenant.Load()
	var rustTenant string
	rustTenantOK := true
	if rust {
		rustTenant, rustTenantOK = resolveRustTenant(r.Header)
	}
	if !b.opts.NoRequestLog {
		b.log.add(r, body, ident, rustTenant)
	}
	b.mu.Lock()
	b.reqTotal++
	b.mu.Unlock()

	if r.Method == http.MethodOptions {
		w.Header()["Content-Type"] = nil
		w.WriteHeader(http.StatusOK)
		return
	}
	if rust && !rustTenantOK {
		// server/src/tenant.rs: the tenant layer runs on every request,
		// before routing, and a malformed value never reaches a handler.
		writeJSON(w, http.StatusBadRequest, obj{"error": badTenantBody})
		return
	}
	rt, params := matchRoute(r.Method, r.URL.EscapedPath())
	if rt != nil && rt.rustOnly && !b.rust() {
		rt = nil
	}
	if rt == nil {
		if rust {
			writeRustNoRoute(w, r.URL.Path)
		} else {
			writeNotFound(w)
		}
		return
	}
	if rt.pattern != "/health" && !b.tokenAccepted(r.Header.Get("Authorization")) {
		writeJSON(w, http.StatusUnauthorized, obj{"error": "Unauthorized"})
		return
	}
	if b.jwt != nil && rt.pattern != "/health" && jwtErr != nil {
		writeJWTError(w, jwtErr)
		return
	}
	tenantID := r.Header.Get(TenantHeader)
	switch {
	case b.ignoreTenant.Load():
		tenantID = DefaultTenant
	case rust:
		tenantID = rustTenant
	case tenantID == "":
		if b.opts.RequireTenant && rt.scoped {
			writeJSON(w, http.StatusBadRequest, obj{"error": "x-queen-tenant header is required"})
			return
		}
		tenantID = DefaultTenant
	}
	if tooLarge {
		writeJSON(w, http.StatusRequestEntityTooLarge, obj{"error": "Request body too large"})
		return
	}
	if rust && rt.scoped && b.answerRustCondition(w) {
		return
	}
	rc := &reqCtx{
		w: w, r: r, body: body, params: params, tenant: tenantID, query: r.URL.Query(),
		producerSub: ident.sub, rust: rust,
	}
	if f := b.faultFor(r); f != nil {
		b.serveFaulty(w, f, rt.handler, rc)
		return
	}
	rt.handler(b, rc)
}
