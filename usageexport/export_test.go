package usageexport_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/migrations"
	"github.com/queengate/queengate/usageexport"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(ctxT(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func scalar[T any](t *testing.T, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := pool.QueryRow(ctxT(t), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// billing is a billing receiver that deduplicates by event id, as
// OpenMeter does; answers decides each request's status, by number, and
// ingests lets a request be taken even though its answer is an error (an
// acknowledgement lost on the way back).
type billing struct {
	mu      sync.Mutex
	n       int
	answers func(n int) (status int, ingest bool)
	byID    map[string]usageexport.Event
	repeats int
	types   []string
	url     string
}

func newBilling(t *testing.T, answers func(int) (int, bool)) *billing {
	b := &billing{answers: answers, byID: map[string]usageexport.Event{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.url = "http://" + l.Addr().String() + "/api/v1/events"
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return b
}

func (b *billing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n++
	b.types = append(b.types, r.Header.Get("Content-Type")+" "+r.Header.Get("Authorization"))
	status, ingest := http.StatusOK, true
	if b.answers != nil {
		status, ingest = b.answers(b.n)
	}
	if ingest {
		var events []usageexport.Event
		if err := json.Unmarshal(body, &events); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, e := range events {
			if _, seen := b.byID[e.ID]; seen {
				b.repeats++
				continue
			}
			b.byID[e.ID] = e
		}
	}
	w.WriteHeader(status)
}

func (b *billing) msgs() (sum int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.byID {
		sum += e.Data.Msgs
	}
	return sum
}

// billable sums the events' billable_msgs, and checks each event's against
// its class: a billing system sums that one field.
func (b *billing) billable(t *testing.T) (sum int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, e := range b.byID {
		want := int64(0)
		if e.Data.OpClass == "push" || e.Data.OpClass == "txn" {
			want = e.Data.Msgs
		}
		if e.Data.BillableMsgs != want {
			t.Errorf("event %s (%s): billable_msgs %d, msgs %d", id, e.Data.OpClass, e.Data.BillableMsgs, e.Data.Msgs)
		}
		sum += e.Data.BillableMsgs
	}
	return sum
}

func setup(t *testing.T) (*pgxpool.Pool, string, string) {
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t))
	if _, err := migrations.Apply(ctxT(t), pool); err != nil {
		t.Fatal(err)
	}
	cell := scalar[string](t, pool, `INSERT INTO queen_proxy.cells (slug, region, base_url, class) VALUES ('c', 'r', 'http://192.0.2.1', 'shared') RETURNING id::text`)
	tenant := scalar[string](t, pool, `SELECT queen_proxy.create_tenant('acme', 'Acme')::text`)
	cluster := scalar[string](t, pool, `SELECT queen_proxy.create_cluster($1::uuid, 'acme-prod', 'pro', $2::uuid)::text`, tenant, cell)
	// The receiver was configured two hours ago.
	exec(t, pool, `INSERT INTO queen_proxy.usage_export_sinks (sink, start_at) VALUES ('billing', date_trunc('hour', now()) - interval '2 hours')`)
	return pool, tenant, cluster
}

func book(t *testing.T, pool *pgxpool.Pool, cluster string, minutesAgo int, op string, msgs int64) {
	exec(t, pool, `INSERT INTO queen_proxy.usage_minutes (cluster_id, minute, op_class, msgs, reqs, bytes_in)
		VALUES ($1::uuid, date_trunc('minute', now()) - make_interval(mins => $2), $3, $4::bigint, 1, $4::bigint * 10)
		ON CONFLICT (cluster_id, minute, op_class) DO UPDATE SET msgs = usage_minutes.msgs + EXCLUDED.msgs,
		reqs = usage_minutes.reqs + 1, bytes_in = usage_minutes.bytes_in + EXCLUDED.bytes_in`, cluster, minutesAgo, op, msgs)
}

// Events summed by unique id equal usage_minutes through a receiver
// outage, an acknowledgement lost after the receiver took a batch, and
// usage booked late into a minute already exported.
func TestExportedUsageEqualsBookedUsage(t *testing.T) {
	pool, tenant, cluster := setup(t)
	rcv := newBilling(t, func(n int) (int, bool) {
		switch n {
		case 1:
			return http.StatusServiceUnavailable, false // outage
		case 2:
			return http.StatusBadGateway, true // taken, answer lost
		}
		return http.StatusAccepted, true
	})
	for i := range 10 {
		book(t, pool, cluster, 3+i, "push", int64(10+i))
		book(t, pool, cluster, 3+i, "delivery", int64(i))
	}
	book(t, pool, cluster, 0, "push", 1000) // the open minute: not yet
	ex := usageexport.New(usageexport.Config{Pool: pool, Sink: "billing", URL: rcv.url, Batch: 7, AllowLoopback: true,
		Headers: map[string]string{"Authorization": "Bearer t0ken"}, Settle: time.Millisecond})
	closed := func() int64 {
		return scalar[int64](t, pool, `SELECT coalesce(sum(msgs), 0)::bigint FROM queen_proxy.usage_minutes WHERE minute < date_trunc('minute', now())`)
	}
	for round := 0; ; round++ {
		_, _, err := ex.RunOnce(ctxT(t))
		if err == nil {
			break
		}
		if round > 3 {
			t.Fatalf("still failing after %d rounds: %v", round, err)
		}
		t.Logf("round %d: %v", round, err)
	}
	if got, want := rcv.msgs(), closed(); got != want || want != 190 {
		t.Fatalf("exported %d msgs, usage_minutes has %d in closed minutes (want 190)", got, want)
	}
	if got := rcv.billable(t); got != 145 { // the pushes 10..19 of the closed minutes; deliveries are not billed
		t.Fatalf("exported %d billable messages, want 145", got)
	}
	if rcv.repeats == 0 {
		t.Fatal("the batch whose answer was lost was not sent again")
	}
	// Late usage into an exported minute: only the difference goes.
	book(t, pool, cluster, 5, "push", 7)
	made, sent, err := ex.RunOnce(ctxT(t))
	if err != nil || made != 1 || sent != 1 {
		t.Fatalf("late usage: made %d sent %d: %v", made, sent, err)
	}
	if got, want := rcv.msgs(), closed(); got != want {
		t.Fatalf("after late usage: exported %d, booked %d", got, want)
	}
	// Nothing new, nothing sent.
	if made, sent, err := ex.RunOnce(ctxT(t)); err != nil || made != 0 || sent != 0 {
		t.Fatalf("idle run: made %d sent %d: %v", made, sent, err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, h := range rcv.types {
		if h != usageexport.ContentType+" Bearer t0ken" {
			t.Fatalf("request headers %q", h)
		}
	}
	for _, e := range rcv.byID {
		if e.SpecVersion != "1.0" || e.Type != usageexport.EventType || e.Source != "queengate" || e.Subject != tenant ||
			e.Time != e.Data.PeriodStart || e.Data.ClusterSlug != "acme-prod" || len(e.ID) != 64 {
			t.Fatalf("event %+v", e)
		}
	}
}

// With hours, only closed hours go, one event per cluster, hour and op
// class.
func TestExportByHour(t *testing.T) {
	pool, _, cluster := setup(t)
	rcv := newBilling(t, nil)
	minutesIntoHour := scalar[int](t, pool, `SELECT extract(minute FROM now())::int`)
	for i := range 3 {
		book(t, pool, cluster, minutesIntoHour+1+i, "push", 5) // the previous hour
	}
	book(t, pool, cluster, 0, "push", 100) // this hour
	ex := usageexport.New(usageexport.Config{Pool: pool, Sink: "billing", URL: rcv.url, Granularity: "hour",
		Settle: time.Millisecond, AllowLoopback: true})
	made, sent, err := ex.RunOnce(ctxT(t))
	if err != nil || made != 1 || sent != 1 || rcv.msgs() != 15 {
		t.Fatalf("made %d sent %d, %d msgs exported, %v; want one event of 15", made, sent, rcv.msgs(), err)
	}
}
