package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/tenancy"
)

// requestState is what the pipeline learns about one request as it goes.
type requestState struct {
	rid        string
	arrived    time.Time // when the pipeline took the request: its id's time, the instant keys are checked for expiry
	route      tenancy.Route
	classified bool
	body       []byte // the request body, once a step had to read it
	buffered   bool
	principal  tenancy.Principal
	cluster    *tenancy.Cluster // once known: the Host's, then the credential's

	longPoll    bool           // a pop that waits upstream (wait, read as the broker reads it)
	popAutoAck  bool           // a pop that acknowledges what it delivers (autoAck, read so too)
	longPollMs  int64          // the wait it asks for
	batch       *tenancy.Batch // a KV or timers batch, once read (gates.go)
	carveOutOps int            // operations of a KV batch served as a consume (reserved key space)
	reqDecision limits.Decision
	msgDecision limits.Decision
	msgChecked  bool
	produced    int                 // items a push, transaction or ephemeral push carries, as counted at admission
	resendable  bool                // a push whose every item carries a transactionId: safe to send again
	cycle       limits.ProduceBatch // a streams cycle's sink items, as grouped at admission

	// Storage the pipeline points into instead of allocating each piece
	// on its own: the values of the headers it sets, the buffered body's
	// reader, the context that carries the cluster to the upstream, and
	// the response wrapper. The state lives as long as anything refers
	// to it.
	headers    headerValues
	held       heldBody        // the buffered body, pooled once nothing reads it (bodybuffer.go)
	bodyReader bodyReader      // r.Body once the body is buffered
	forwarded  bool            // the request went on to the proxy, its body with it
	detached   detachedContext // a produce route's or an answered pop's exchange: the client's context without its cancellation
	popPhase   popPhase        // a pop's exchange: whether its answer began before its client left (detach.go)
	ctx        clusterContext
	rw         meteredResponse
	scrub      cellErrorScrub // between rw and the client: withholds cell internals
}

// startRequest gives a request its state and its id: on the response
// (every answer carries it) and as a Caddy variable for access logs.
func startRequest(w http.ResponseWriter, r *http.Request) *requestState {
	now := time.Now()
	st := &requestState{rid: requestIDAt(now), arrived: now}
	st.headers.set(w.Header(), headerRequestID, slotResponseRequestID, st.rid)
	caddyhttp.SetVar(r.Context(), varRequestID, (*requestIDVar)(st))
	return st
}

// now is the instant the request arrived, or the clock's for a state made
// without startRequest: never the zero time, before which every key would
// count as unexpired.
func (st *requestState) now() time.Time {
	if st.arrived.IsZero() {
		return time.Now()
	}
	return st.arrived
}

// releaseBuffers ends the request's use of its pooled buffers: the kept
// copy of the answer and the answer's tally (billing is done), and the
// pipeline's hold on the
// buffered body, with the reader's too when the body never went on to the
// proxy (nobody else holds that reader). A forwarded body's reader is the
// transport's to close, when it has sent the body.
func (st *requestState) releaseBuffers() {
	st.rw.releaseKept()
	st.rw.releaseTally()
	if st.held.buf == nil {
		return
	}
	st.body = nil
	if !st.forwarded {
		_ = st.bodyReader.Close()
	}
	st.held.release()
}

// requestIDVar and clusterSlugVar are the request id and the cluster slug
// as Caddy variables: pointers a placeholder renders through String, so
// setting them on every request boxes no string.
type (
	requestIDVar   requestState
	clusterSlugVar tenancy.Cluster
)

func (v *requestIDVar) String() string   { return v.rid }
func (v *clusterSlugVar) String() string { return v.Slug }

// ServeHTTP is the data-plane pipeline, in its load-bearing order. Each
// step either refuses the request with the error envelope or hands it on.
//
// No step before authentication reads the request body: an anonymous
// caller costs the gateway its request head, never its body.
//
// On a normal listener the cluster's status and plan gates answer before
// authentication, as queen_proxy does, where the request head decides
// them. On a shielded listener (shield mode, or any shared host) they wait
// for a live credential, so anonymous callers learn nothing about which
// clusters exist or what state they are in; the same holds wherever the
// credential names the cluster (shared hosts, x-queen-act-cluster).
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	st := startRequest(w, r)
	defer st.releaseBuffers()
	if g.serveHealth(w, r) {
		return nil
	}
	// The standby of a group serves nothing: only the leader enforces the
	// cell's limits and meters its usage.
	if g.app.backend.standby() {
		return g.refuse(w, r, st, errStandby)
	}
	if g.surface != nil && g.surface.Owns(r.URL.Path) {
		g.surface.ServeHTTP(w, r)
		return nil
	}
	// A console-only host (the operators') serves no data plane, whatever
	// the credential: refused before any lookup, limit or meter. Its root
	// leads a browser to the console.
	if g.ConsoleOnly {
		if r.URL.Path == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			http.Redirect(w, r, "/console/", http.StatusFound)
			return nil
		}
		return g.refuse(w, r, st, errConsoleOnlyHost)
	}

	// 0. The request head and body size, before anything is looked up.
	if e := g.checkRequestSize(r); e != nil {
		return g.refuse(w, r, st, e)
	}

	// 1. Cluster resolution: the Host names the cluster, unless the
	// credential will (shared hosts, x-queen-act-cluster).
	t, e := g.resolveTarget(r)
	if e != nil {
		return g.refuse(w, r, st, e)
	}
	st.cluster = t.cluster
	gatesFirst := t.cluster != nil && !g.shielded()

	// 2. Status gate: suspended and deleting clusters are not served, nor
	// one being drained off its cell.
	if gatesFirst {
		if e := statusRefusal(t.cluster); e != nil {
			return g.refuse(w, r, st, e)
		}
	}

	// 3. Classification: ambiguous paths are refused, blocked routes (and
	// operator routes while they are off) do not exist.
	if e := g.classify(r, st); e != nil {
		return g.refuse(w, r, st, e)
	}

	// 3b. Plan gates that the request head decides: feature flags and push
	// blocks. A mixed batch's verdict needs its body, so it waits for 3e.
	gatesAhead := gatesFirst && !planGatesReadBody(st.route)
	if gatesAhead {
		if e := g.planGates(r, st, t.cluster); e != nil {
			return g.refuse(w, r, st, e)
		}
	}

	// 3c. Authentication, behind the failure guard. Nothing before this
	// step reads the request body: an anonymous caller costs no more than
	// its head.
	cluster, e := g.authenticate(r, st, t)
	if e != nil {
		return g.refuse(w, r, st, e)
	}
	// A cluster the credential named (shared host, x-queen-act-cluster)
	// is held to the same rule as the Host's at step 1, before any limit.
	if !g.app.fronting.Serves(cluster) {
		return g.refuse(w, r, st, errClusterElsewhere)
	}
	st.cluster = cluster
	preauthConn(r.Context()).Authenticated()
	caddyhttp.SetVar(r.Context(), varClusterSlug, (*clusterSlugVar)(cluster))
	g.app.backend.noteCell(cluster)
	if !gatesFirst {
		if e := statusRefusal(cluster); e != nil {
			return g.refuse(w, r, st, e)
		}
	}

	// 3d. A KV batch wholly inside a reserved key space is a consume,
	// within the carve-out's own bounds.
	if e := g.reclassifyKVBatch(r, st, cluster); e != nil {
		return g.refuse(w, r, st, e)
	}

	// 3e. The plan gates not applied at 3b, now that the route is final.
	if !gatesAhead {
		if e := g.planGates(r, st, cluster); e != nil {
			return g.refuse(w, r, st, e)
		}
	}

	// 3f. Authorization against the route's final class.
	if !tenancy.Authorize(&st.principal, st.route) {
		if st.route.Class == tenancy.ClassOperator {
			return g.refuse(w, r, st, errRouteBlocked)
		}
		return g.refuse(w, r, st, errNotPermitted)
	}

	// 3g. Isolation: a cell whose broker does not keep clusters apart (or
	// is not yet verified to) serves only its keeper, the first cluster
	// placed on it.
	if e := g.admitOnCell(r, cluster); e != nil {
		return g.refuse(w, r, st, e)
	}

	// 4a. The cluster's request bucket.
	if e := g.admitRequest(w, st, cluster); e != nil {
		return g.refuse(w, r, st, e)
	}

	// 4b. A route billed from what it adds keeps its exchange going
	// (under the upstream timeout) if the client leaves, as a pop does
	// once its answer began: the cell may commit it anyway. Such an
	// exchange holds a share of the gateway's in-flight budget until it
	// ends (inflight.go); a push's or a transaction's is taken for the
	// length it announced before its body is read, so that a refused body
	// is not read.
	var held inflightHold
	defer held.release()
	if st.route.Class == tenancy.ClassProduce {
		if e := held.take(cluster.ID, max(r.ContentLength, 0), g.app.inflightCaps()); e != nil {
			return g.refuse(w, r, st, e)
		}
	}

	// 4c. Bodies that add data: size caps, queue and partition admission,
	// the message bucket, the storage estimate.
	if e := g.admitBody(r, st, cluster); e != nil {
		return g.refuse(w, r, st, e)
	}
	_, rule := billingOf(r, st)
	detach := detaches(rule)
	if detach {
		if e := held.take(cluster.ID, inflightBytes(r, st), g.app.inflightCaps()); e != nil {
			return g.refuse(w, r, st, e)
		}
	}
	g.setRateLimitHeaders(w, st, cluster)

	// 4d. A long-poll pop holds a parked slot until the cell answers.
	release, e := g.parkSlot(r, st, cluster)
	if e != nil {
		return g.refuse(w, r, st, e)
	}
	defer release()

	// 5. Forward to the cluster's cell, bounded by the upstream timeout.
	fr, cancel, e := g.prepareForward(r, st, cluster, rule)
	if e != nil {
		return g.refuse(w, r, st, e)
	}
	defer cancel()
	r = fr

	// 5b. Checked again, from memory, now that the body is in: the
	// cluster's status or cell may have changed while it arrived. From
	// here until the exchange ends the request counts as on its way to
	// the cell, which a drain of the cluster waits for.
	flight, e := g.enterCell(r.Context(), cluster)
	if e != nil {
		return g.refuse(w, r, st, e)
	}
	defer flight.Leave()

	// 6. Relay the answer as it comes, and meter it from what it says.
	client := st.scrub.attach(w, r, g.logger, &st.rid)
	st.rw = meteredResponse{ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: client},
		keep: rule != billPlain, rule: rule, detached: detach || rule == billPop, onHead: release}
	st.rw.tallyAnswers(rule, st)
	if st.rw.keep {
		var judge errorFreeJudge
		if rule == billPop {
			judge = &st.rw
		}
		st.scrub.holdInKept(&st.rw.body, judge)
	}
	rw := &st.rw
	var err error
	st.forwarded = true
	if rw.detached {
		var aborted bool
		if aborted, err = relay(next, rw, r); aborted {
			// The cell's answer broke off: what a produce request
			// committed is unknown; a pop is billed what it had begun
			// to deliver.
			counters.request(st, 2)
			fate := exchangeUnanswered
			if rule == billPop {
				fate = exchangeCut
			}
			g.recordUsage(r, st, cluster, rw, fate)
			g.tallyRequest(st, http.StatusBadGateway)
			panic(http.ErrAbortHandler)
		}
	} else {
		err = next.ServeHTTP(rw, r)
	}
	st.scrub.finish()
	if g.app.MetricsPerCluster {
		counters.forwardedFor(cluster.Slug)
	}
	if err == nil || rw.started {
		counters.request(st, 0)
		g.recordUsage(r, st, cluster, rw, exchangeAnswered)
		g.tallyRequest(st, rw.status)
		return err
	}
	counters.request(st, 2)
	fate := exchangeFailed
	if detach && mayHaveReachedCell(err) {
		fate = exchangeUnanswered
	}
	g.recordUsage(r, st, cluster, rw, fate)
	g.noteCellFailure(cluster, err)
	return g.upstreamFailure(w, r, st, err)
}

// prepareForward readies the request for the cell: the cell's credential,
// the upstream deadline (cancel releases it), the cluster for the dynamic
// upstream, and the headers the cell sees. A detached request's deadline
// is the gateway's alone: the client leaving does not cancel it (a pop's,
// once its answer began).
func (g *Gateway) prepareForward(r *http.Request, st *requestState, c *tenancy.Cluster, rule billing) (*http.Request, context.CancelFunc, *apierror.Error) {
	cellAuth, e := g.cellCredential(c, st)
	if e != nil {
		return nil, nil, e
	}
	parent := r.Context()
	var stop func()
	switch {
	case detaches(rule):
		st.detached = detachedContext{parent: parent}
		parent = &st.detached
	case rule == billPop:
		parent, stop = st.detachOnAnswer(parent)
	}
	ctx, cancel := context.WithTimeout(parent, g.upstreamTimeout(st))
	if stop != nil {
		timeout := cancel
		cancel = func() {
			timeout()
			stop()
		}
	}
	st.ctx = clusterContext{Context: ctx, cluster: c}
	r = r.WithContext(&st.ctx)
	// Client trailers would reach the cell after the gateway's headers
	// (reverse_proxy relays them at the body's end): none are forwarded.
	r.Trailer = nil
	g.setUpstreamHeaders(r.Header, c, st.rid, cellAuth, &st.headers)
	markResendable(r.Header, st.resendable, &st.rid)
	return r, cancel, nil
}

func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, st *requestState, e *apierror.Error) error {
	closeUnreadBody(w, r, st)
	counters.request(st, 1)
	counters.refused(e.Code)
	g.tallyRequest(st, e.Status)
	g.logger.Debug("request refused",
		zap.String("request_id", st.rid), zap.String("code", string(e.Code)),
		zap.Int("status", e.Status), zap.String("host", r.Host), zap.String("path", r.URL.Path))
	apierror.Write(w, e, st.rid)
	return nil
}

// closeUnreadBody makes an HTTP/1 refusal of a caller not (yet)
// authenticated close its connection when the request's body has not
// been read: else the server would read up to 256 KiB of that body (to
// keep the connection) before it sent the refusal, and again when the
// handler is done, so a caller that never sends the body it announced
// would hold the connection unanswered, and an anonymous one would cost
// the gateway a body. The connection's read deadline passes at once, so
// nothing more of it is read; the refusal is still written. Callers that
// authenticated keep their connection (the server takes the rest of a
// small body, as for any answer).
func closeUnreadBody(w http.ResponseWriter, r *http.Request, st *requestState) {
	if r.ProtoMajor != 1 || st.principal.Kind != 0 || st.buffered || r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return
	}
	w.Header()["Connection"] = []string{"close"}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// tallyRequest counts the request for the console's per-key usage and
// refusal charts, when it can be put down to a cluster.
func (g *Gateway) tallyRequest(st *requestState, status int) {
	if st.cluster == nil {
		return
	}
	key := ""
	if st.principal.Kind == tenancy.PrincipalAPIKey || st.principal.Kind == tenancy.PrincipalToken {
		key = st.principal.KeyID
	}
	g.app.backend.requests.Record(st.cluster.ID, key, status)
}

// upstreamFailure answers a request the cell did not: 413 when the client
// sent more body than allowed, 504 when the upstream timeout passed,
// nothing when the client went away, else 502.
func (g *Gateway) upstreamFailure(w http.ResponseWriter, r *http.Request, st *requestState, err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return g.refuse(w, r, st, errBodyTooLarge)
	}
	if errors.Is(r.Context().Err(), context.Canceled) {
		return nil
	}
	e := errBadGateway
	var he caddyhttp.HandlerError
	if errors.Is(r.Context().Err(), context.DeadlineExceeded) ||
		(errors.As(err, &he) && he.StatusCode == http.StatusGatewayTimeout) {
		e = errUpstreamTimeout
	}
	g.tallyRequest(st, e.Status)
	g.logger.Error("upstream request failed",
		zap.String("request_id", st.rid), zap.String("code", string(e.Code)),
		zap.String("host", r.Host), zap.String("path", r.URL.Path), zap.Error(err))
	apierror.Write(w, e, st.rid)
	return nil
}
