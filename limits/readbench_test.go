package limits_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/threadcpu"
	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/tenancy"
	"github.com/queengate/queengate/wire"
)

// The request side of a produce, as the gateway reads it between buffering
// the body and forwarding it (caddymodule's admitProduce and readProduce):
// the produce reading (which checks the JSON and its text itself; the text
// check every other body gets runs only on a body it refuses), the
// reserved-name search, the size caps and the queue and partition
// admission. BenchmarkRequestReading measures it against
// encoding/json.Valid on the same body, interleaved in one run, and
// reports the ratio; docs/benchmarks.md records the goal (5×).

// sdkPayloads are order messages as a producer sends them: a small one
// (about 100 bytes) and a large one (about 1 KB), with the variety of real
// text (a few non-ASCII letters, an escaped quote, numbers of every form).
func sdkPayload(i int, large bool) string {
	if !large {
		return fmt.Sprintf(`{"orderId":%d,"customer":"customer-%d","amount":%d.%02d,"currency":"EUR","status":"paid"}`,
			100000+i, i%97, 10+i%900, i%100)
	}
	var sb strings.Builder
	sb.WriteString(fmt.Sprintf(`{"orderId":%d,"customer":{"id":"customer-%d","name":"Jürgen Müller-%d","email":"j.mueller%d@example.com","tier":"gold"},`,
		100000+i, i%97, i, i))
	sb.WriteString(`"shipping":{"street":"Bahnhofstraße 12","city":"Zürich","zip":"8001","country":"CH","instructions":"ring twice, \"back door\""},`)
	sb.WriteString(`"lines":[`)
	for l := 0; l < 5; l++ {
		if l > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(fmt.Sprintf(`{"sku":"SKU-%05d","title":"Wireless keyboard, model %d","qty":%d,"unitPrice":%d.99,"discount":0.1e1,"tags":["office","bluetooth"]}`,
			(i*7+l)%100000, l, 1+(i+l)%4, 20+l*13))
	}
	sb.WriteString(fmt.Sprintf(`],"total":%d.45,"currency":"CHF","paid":true,"giftWrap":false,"coupon":null,"createdAt":"2026-12-01T22:%02d:%02d.123Z","notes":"leave at the reception desk if nobody answers; invoice by e-mail"}`,
		200+i%700, i%60, i%60))
	return sb.String()
}

// sdkPush is a push of n items to four partitions of one queue, each with
// a transactionId and every other one with a traceId, as the SDK sends it.
func sdkPush(n int, large bool) []byte {
	var sb bytes.Buffer
	sb.WriteString(`{"items":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"queue":"orders","partition":"customer-%d","payload":%s,"transactionId":"01a22ac0-cdf8-75d8-a2e3-%012x"`,
			i%4, sdkPayload(i, large), i)
		if i%2 == 0 {
			fmt.Fprintf(&sb, `,"traceId":"3f1c2b9a-5d4e-4a6b-9c8d-%012x"`, i)
		}
		sb.WriteByte('}')
	}
	sb.WriteString(`]}`)
	return sb.Bytes()
}

// sdkTransaction is a transaction of n pushed items (one push operation)
// after an ack, as the SDK sends it.
func sdkTransaction(n int, large bool) []byte {
	push := sdkPush(n, large)
	var sb bytes.Buffer
	sb.WriteString(`{"operations":[{"type":"ack","transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5","partitionId":"e2e25fb6-3992-491d-bc97-e488082bce43","status":"completed"},{"type":"push",`)
	sb.Write(push[1 : len(push)-1])
	sb.WriteString(`}],"requiredLeases":["01a22ac1-1857-7000-b13e-11121ff4f283"]}`)
	return sb.Bytes()
}

// memAdmissionStore is an empty registry: every pair is new once, then
// known, as for a producer that has pushed before.
type memAdmissionStore struct{}

func (memAdmissionStore) LoadQueues(context.Context, string) ([]limits.QueueRow, error) {
	return nil, nil
}
func (memAdmissionStore) PersistQueues(context.Context, []limits.QueueRow) error { return nil }
func (memAdmissionStore) SweepQueues(context.Context, string, []string) error    { return nil }

const benchCluster = "11111111-1111-4111-8111-111111111111"

// requestReader is the gateway's reading of one produce body.
type requestReader struct {
	parse     func([]byte) (limits.ProduceBatch, error)
	admission *limits.Admission
	lim       limits.Effective
	items     int
}

func newRequestReader(parse func([]byte) (limits.ProduceBatch, error), items int) *requestReader {
	lim := limits.AllUnlimited()
	lim.MaxPayloadBytes, lim.MaxBatchItems = 65536, 10000
	lim.MaxQueues, lim.MaxPartitionsPerQueue = 100, 1000
	return &requestReader{parse: parse, admission: limits.NewAdmission(memAdmissionStore{}), lim: lim, items: items}
}

func (r *requestReader) read(body []byte) error {
	// readProduce: the produce reader checks the text as bufferBody does,
	// so only a body it refuses is swept for the text refusal; the
	// reserved-name search follows.
	batch, err := r.parse(body)
	if err != nil {
		batch.Release()
		if textErr := wire.TextError(body); textErr != nil {
			return textErr
		}
		if tenancy.BodyNamesReserved(body) {
			return fmt.Errorf("reserved")
		}
		return err
	}
	defer batch.Release()
	if tenancy.BodyNamesReserved(body) {
		return fmt.Errorf("reserved")
	}
	if batch.Items != r.items {
		return fmt.Errorf("read %d items, want %d", batch.Items, r.items)
	}
	if refusal := limits.CheckProduce(batch, r.lim, 0); refusal != nil {
		return fmt.Errorf("%s", refusal.Message)
	}
	if res, _, err := r.admission.Admit(context.Background(), benchCluster, batch.Pairs, r.lim); res != limits.Admitted {
		return fmt.Errorf("admission %v: %v", res, err)
	}
	return nil
}

// BenchmarkRequestReading measures, in one run, encoding/json.Valid and
// the gateway's whole request-side reading of the same body, in
// alternating rounds of about 64 KB each, and reports both throughputs and
// their ratio (x-vs-json.Valid, the reading's speed over json.Valid's).
func BenchmarkRequestReading(b *testing.B) {
	for _, kind := range []struct {
		name  string
		body  func(int, bool) []byte
		parse func([]byte) (limits.ProduceBatch, error)
	}{{"push", sdkPush, limits.ParsePush}, {"transaction", sdkTransaction, limits.ParseTransaction}} {
		for _, n := range []int{1, 100, 1000} {
			for _, large := range []bool{false, true} {
				size := "100B"
				if large {
					size = "1KB"
				}
				body := kind.body(n, large)
				b.Run(kind.name+"/"+strconv.Itoa(n)+"x"+size, func(b *testing.B) {
					benchAgainstValid(b, body, newRequestReader(kind.parse, n).read)
				})
			}
		}
	}
}

// benchAgainstValid times json.Valid and read on body in interleaved
// rounds of about 64 KB each (the two take turns going first, so neither
// is always the one that finds the body in the cache, or the collector the
// other's allocations started) and reports both speeds (over all rounds)
// and the median of the rounds' ratios, which a burst of load on a shared
// machine moves least. The rounds are timed in the CPU time of the
// benchmark's thread, which a neighbour taking the core does not inflate;
// x-wall is the same median in wall time.
func benchAgainstValid(b *testing.B, body []byte, read func([]byte) error) {
	if !json.Valid(body) {
		b.Fatal("the body is not JSON")
	}
	if err := read(body); err != nil {
		b.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	reps := max(1, 64<<10/len(body))
	var p threadcpu.Paired
	runValid := func() {
		for range reps {
			if !json.Valid(body) {
				b.Fatal("not valid")
			}
		}
	}
	runOurs := func() {
		for range reps {
			if err := read(body); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Block(runValid, runOurs)
	}
	bytesRead := float64(b.N) * float64(reps) * float64(len(body))
	b.ReportMetric(bytesRead/p.Base.Seconds()/1e6, "MB/s-json.Valid")
	b.ReportMetric(bytesRead/p.Subject.Seconds()/1e6, "MB/s-reading")
	b.ReportMetric(p.Ratio(), "x-vs-json.Valid")
	b.ReportMetric(p.WallRatio(), "x-wall")
	b.ReportMetric(float64(len(body)), "body-bytes")
}

// BenchmarkReadingParts is each step of the reading of a 100-item push
// against json.Valid, to show where the time goes.
func BenchmarkReadingParts(b *testing.B) {
	for _, n := range []int{1, 100} {
		for _, large := range []bool{false, true} {
			body := sdkPush(n, large)
			r := newRequestReader(limits.ParsePush, n)
			pairs := []limits.QueuePartition{{Queue: "orders", Partition: "customer-0"}, {Queue: "orders", Partition: "customer-1"},
				{Queue: "orders", Partition: "customer-2"}, {Queue: "orders", Partition: "customer-3"}}[:min(n, 4)]
			for _, part := range []struct {
				name string
				read func([]byte) error
			}{
				{"utf8", func(b []byte) error { wire.InvalidUTF8(b); return nil }},
				{"reserved", func(b []byte) error { tenancy.BodyNamesReserved(b); return nil }},
				{"check", wire.CheckStored},
				{"parse", func(b []byte) error { batch, err := limits.ParsePush(b); batch.Release(); return err }},
				{"admit", func([]byte) error {
					_, _, err := r.admission.Admit(context.Background(), benchCluster, pairs, r.lim)
					return err
				}},
				{"all", r.read},
			} {
				size := "100B"
				if large {
					size = "1KB"
				}
				b.Run(strconv.Itoa(n)+"x"+size+"/"+part.name, func(b *testing.B) { benchAgainstValid(b, body, part.read) })
			}
		}
	}
}

// BenchmarkRefusedPush is the reading of 100-item pushes the gateway
// refuses: for an item the broker would refuse or could not store, or a
// name written with escapes, the one pass decides alone; for a bad byte,
// CheckStored looks for the first one again.
func BenchmarkRefusedPush(b *testing.B) {
	item := `{"queue":"orders","partition":"Default","payload":{"n":1,"s":"` + strings.Repeat("x", 64) +
		`"},"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5"}`
	items := strings.Repeat(item+",", 99)
	for _, c := range []struct{ name, body string }{
		{"lastItemBadTraceId", `{"items":[` + items + `{"queue":"orders","traceId":"nope"}]}`},
		{"lastItemNoQueue", `{"items":[` + items + `{"payload":1}]}`},
		{"escapedItemsName", `{"\u0069tems":[` + items + item + `]}`},
		{"badByteAtTheEnd", `{"items":[` + items + item + `]`},
	} {
		body := []byte(c.body)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				batch, _ := limits.ParsePush(body)
				batch.Release()
			}
		})
	}
}
