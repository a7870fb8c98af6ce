package meter

import (
	"testing"
	"time"
)

func TestUnflushedShowsWhatIsNotWrittenYet(t *testing.T) {
	clk := newClock(t0.Add(5 * time.Second))
	m := newMeter(t, Config{Now: clk.Now})
	a, b := "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
	m.Record(Sample{ClusterID: a, Op: OpPush, Reqs: 1, Msgs: 3, BytesIn: 10})
	m.Record(Sample{ClusterID: b, Op: OpPush, Reqs: 1, Msgs: 7})
	clk.Add(time.Minute)
	m.Record(Sample{ClusterID: a, Op: OpPush, Reqs: 1, Msgs: 2})
	got := map[time.Time]Unflushed{}
	for _, u := range m.Unflushed(a) {
		got[u.Minute] = u
	}
	if len(got) != 2 || got[t0].Msgs != 3 || got[t0].BytesIn != 10 || got[t0.Add(time.Minute)].Msgs != 2 || got[t0].Op != OpPush {
		t.Fatalf("unflushed %+v", got)
	}
	m.take(minuteOf(clk.Now()), false) // the closed minute is written
	if u := m.Unflushed(a); len(u) != 1 || u[0].Minute != t0.Add(time.Minute) {
		t.Fatalf("after the flush: %+v", u)
	}
	if u := m.Unflushed("33333333-3333-3333-3333-333333333333"); len(u) != 0 {
		t.Fatalf("unknown cluster: %+v", u)
	}
}
