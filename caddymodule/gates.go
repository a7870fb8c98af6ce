package caddymodule

import (
	"errors"
	"net/http"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/internal/harden"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/tenancy"
)

// checkRequestSize applies the head limits, refuses a credential header
// sent twice (which of two values would count is a question nobody should
// have to answer), and caps the body.
func (g *Gateway) checkRequestSize(r *http.Request) *apierror.Error {
	if e := harden.CheckHead(r, g.headLimits); e != nil {
		return headTooLarge(e.Status, e.Message)
	}
	if len(r.Header.Values("Authorization")) > 1 || len(r.Header.Values(headerActCluster)) > 1 {
		return errDuplicateHeader
	}
	if r.ContentLength > g.MaxBodyBytes {
		return errBodyTooLarge
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(nil, r.Body, g.MaxBodyBytes)
	}
	return nil
}

// classify sets the route class, refusing ambiguous paths (400), blocked
// routes, and operator routes while they are disabled (both 404, alike).
func (g *Gateway) classify(r *http.Request, st *requestState) *apierror.Error {
	route, err := tenancy.ClassifyRoute(r.Method, r.URL.EscapedPath())
	if err != nil {
		g.logger.Debug("ambiguous path refused", zap.String("request_id", st.rid), zap.Error(err))
		return ambiguousPathRefusal(err)
	}
	st.route, st.classified = route, true
	if tenancy.URLNamesReserved(r.URL.EscapedPath()) || tenancy.URLNamesReserved(r.URL.RawQuery) {
		return errReservedName
	}
	if e := g.readPopQuery(r, st); e != nil {
		return e
	}
	if e := queryStorageRefusal(r.URL.RawQuery); e != nil {
		return e
	}
	switch {
	case route.Class == tenancy.ClassBlocked:
		return errRouteBlocked
	case route.Class == tenancy.ClassOperator && !g.app.OperatorEnabled:
		return errRouteBlocked
	}
	return nil
}

// reclassifyKVBatch makes a KV batch that stays wholly inside the Kafka or
// S3 facades' reserved key spaces a consume: those facades serve consumers
// and need no kv plan feature. Such a batch is bounded on its own
// (limits.CheckCarveOut) and its operations are metered. It reads the body,
// so it runs only after authentication.
func (g *Gateway) reclassifyKVBatch(r *http.Request, st *requestState, c *tenancy.Cluster) *apierror.Error {
	if st.route != kvBatchRoute {
		return nil
	}
	batch, e := g.readBatch(r, st)
	if e != nil || batch.CarveOut.Ops == 0 {
		return e
	}
	carve := batch.CarveOut
	if refusal := limits.CheckCarveOut(len(st.body), carve.Ops, carve.Heaviest.Index, carve.Heaviest.Bytes,
		c.Limits, g.app.MaxBatchItems); refusal != nil {
		return payloadTooLarge(refusal.Message)
	}
	batch.Items.Release() // a consume: no size caps of a kv batch apply
	st.route = tenancy.Route{Class: tenancy.ClassConsume}
	st.carveOutOps = carve.Ops
	return nil
}

// readBatch reads a mixed batch (a KV or timers batch, or a streams
// cycle) once, for every step that decides on it: the carve-out, the push
// block, the size caps. A batch refused for its text gets the text's
// refusal, as every body does from whoever reads it first; a batch it
// accepts is valid UTF-8 without a byte-order mark.
func (g *Gateway) readBatch(r *http.Request, st *requestState) (*tenancy.Batch, *apierror.Error) {
	if st.batch == nil {
		body, e := g.bufferUnchecked(r, st)
		if e != nil {
			return nil, e
		}
		var b tenancy.Batch
		if st.route.Feature == tenancy.FeatureStreams {
			b.Items, b.Grows, b.Err = limits.ReadCycle(body)
		} else {
			b = tenancy.ReadBatch(body)
		}
		st.batch = &b
	}
	if st.batch.Err != nil {
		if e := bodyTextRefusal(st.body); e != nil {
			return nil, e
		}
	}
	return st.batch, nil
}

// kvBatchRoute is the class of POST /api/v1/kv before its body is read.
var kvBatchRoute = tenancy.Route{Class: tenancy.ClassGated, Feature: tenancy.FeatureKV, Op: tenancy.GatedMixed}

// planGatesReadBody reports whether the plan gates' verdict on a route
// depends on its body: a mixed batch is push-blocked only when it adds
// data, and a KV batch may be a carve-out that needs no kv feature.
func planGatesReadBody(route tenancy.Route) bool {
	return route.Class == tenancy.ClassGated && route.Op == tenancy.GatedMixed
}

// planGates applies the cluster's plan: feature flags, then the push
// blocks for routes that add data.
func (g *Gateway) planGates(r *http.Request, st *requestState, c *tenancy.Cluster) *apierror.Error {
	route := st.route
	if route.Class == tenancy.ClassGated && !c.Features.Allows(route.Feature) {
		return errFeatureGated
	}
	adds := route.Class == tenancy.ClassProduce ||
		route.Class == tenancy.ClassGated && route.Op == tenancy.GatedGrow ||
		tenancy.IsDLQReplay(r.Method, r.URL.EscapedPath())
	mixed := route.Class == tenancy.ClassGated && route.Op == tenancy.GatedMixed
	if !adds && !mixed {
		return nil
	}
	block := g.pushBlock(c)
	if block == nil || adds {
		return block
	}
	// A mixed batch is refused only when it would add data.
	batch, e := g.readBatch(r, st)
	if e != nil {
		return e
	}
	if batch.Grows {
		return block
	}
	return nil
}

// pushBlock is the cluster's push-block verdict as a refusal, or nil.
func (g *Gateway) pushBlock(c *tenancy.Cluster) *apierror.Error {
	// A raised or removed storage cap releases the block at once.
	g.app.backend.storage.SetCap(c.ID, c.Limits.MaxRetainedBytes)
	switch limits.DecidePushBlock(c.ID, c.Status == tenancy.StatusPushBlocked, g.app.pushBlockSources) {
	case limits.PushBlockedStorage:
		return errStorageQuota
	case limits.PushBlockedMonthly:
		return errMonthlyQuota
	case limits.PushBlockedBilling:
		return errPushBlocked
	}
	return nil
}

// bufferBody reads the whole request body once (bounded by the body cap)
// and puts it back so it is forwarded byte for byte. A body that is not
// valid UTF-8, or starts with a byte-order mark, is refused with 400
// (bodycheck.go).
func (g *Gateway) bufferBody(r *http.Request, st *requestState) ([]byte, *apierror.Error) {
	if st.buffered {
		return st.body, nil
	}
	body, e := g.bufferUnchecked(r, st)
	if e != nil {
		return nil, e
	}
	// Whoever reads the body first refuses what no reader may see.
	if e := bodyTextRefusal(body); e != nil {
		return nil, e
	}
	return body, nil
}

// bufferUnchecked is bufferBody without the text check, for a reader that
// checks the text itself at least as strictly (admitProduce): its caller
// must refuse with bodyTextRefusal whatever that reader does not accept.
func (g *Gateway) bufferUnchecked(r *http.Request, st *requestState) ([]byte, *apierror.Error) {
	if st.buffered {
		return st.body, nil
	}
	if r.Body == nil || r.Body == http.NoBody {
		st.buffered = true
		return nil, nil
	}
	box, err := readBody(r.Body, r.ContentLength)
	_ = r.Body.Close()
	if err != nil {
		return nil, g.unreadableBody(st, err)
	}
	body := *box
	st.body, st.buffered = body, true
	st.held.box, st.held.buf = box, body
	st.held.holds.Store(2) // the pipeline's, and r.Body's
	st.bodyReader.reset(&st.held)
	r.Body = &st.bodyReader
	r.ContentLength = int64(len(body))
	r.GetBody = st.held.reader
	return body, nil
}

// unreadableBody is the refusal of a body that could not be read whole:
// 413 when it is over the cap, else 400 (malformed chunked framing, or a
// body cut short), never forwarded.
func (g *Gateway) unreadableBody(st *requestState, err error) *apierror.Error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return errBodyTooLarge
	}
	g.logger.Debug("request body unreadable", zap.String("request_id", st.rid), zap.Error(err))
	return errBodyUnreadable
}

// cellBearers remembers "Bearer <secret>" per cell secret, so that the
// value is not built again for every request. The map is replaced, never
// changed, so reads take no lock; it is small (one entry per secret in
// use) and starts afresh if secrets are rotated many times.
var cellBearers bearerCache

type bearerCache struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]string]
}

const maxCachedBearers = 256

func (b *bearerCache) get(secret string) string {
	if m := b.m.Load(); m != nil {
		if v, ok := (*m)[secret]; ok {
			return v
		}
	}
	v := "Bearer " + secret
	b.mu.Lock()
	defer b.mu.Unlock()
	next := map[string]string{secret: v}
	if old := b.m.Load(); old != nil && len(*old) < maxCachedBearers {
		for k, x := range *old {
			next[k] = x
		}
	}
	b.m.Store(&next)
	return v
}

// cellCredential is the Authorization value the cell gets: a minted JWT
// for cells configured so, else the cell's static secret (or nothing).
func (g *Gateway) cellCredential(c *tenancy.Cluster, st *requestState) (string, *apierror.Error) {
	tokens := g.app.cellTokensFor(c.CellSlug)
	if tokens == nil {
		if c.CellSecret == "" {
			return "", nil
		}
		return cellBearers.get(c.CellSecret), nil
	}
	tok, err := tokens.Token(st.principal.Subject(), tenancy.BrokerRole(st.route))
	if err != nil {
		g.logger.Error("cell token not minted", zap.String("request_id", st.rid),
			zap.String("cell", c.CellSlug), zap.Error(err))
		return "", errCellCredential
	}
	return "Bearer " + tok, nil
}
