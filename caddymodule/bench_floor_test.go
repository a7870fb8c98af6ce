package caddymodule

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"testing"
	"unicode/utf8"

	"github.com/queengate/queengate/limits"
	"github.com/queengate/queengate/meter"
	"github.com/queengate/queengate/wire"
)

// The floor of the push of 1,000 × 1 KiB (docs/benchmarks.md, "The
// floor"): what a pass over its body costs at the least on this machine,
// beside what the readers and the answer tally cost, each in the process's
// CPU time per op (cpu-ns/op), for the planners to set the CPU goal from.
//
//	go test -run '^$' -bench Floor ./caddymodule

var floorSink int

// swarScan looks at every byte of b, eight at a time, for the bytes a
// JSON string reader must stop at (quote, backslash, control, non-ASCII):
// the least a reader that validates every byte does.
func swarScan(b []byte) int {
	const lo = 0x0101010101010101
	const hi = 0x8080808080808080
	n := 0
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		q := w ^ (lo * '"')
		s := w ^ (lo * '\\')
		m := ((q - lo) &^ q) | ((s - lo) &^ s) | ((w - lo*0x20) &^ w) | w
		if m&hi != 0 {
			n++
		}
	}
	return n
}

// skimStrings is a lower bound of a validating reader on a body whose
// bytes are mostly string contents: it finds each string's end with the
// standard library's vector search, checks the span for escapes the same
// way, for control bytes eight at a time, and for UTF-8, and steps over
// everything between strings byte by byte. A real reader does more (the
// structure, numbers, escapes), never less.
func skimStrings(b []byte) int {
	n := 0
	for i := 0; i < len(b); {
		if b[i] != '"' {
			i++
			continue
		}
		end := bytes.IndexByte(b[i+1:], '"')
		if end < 0 {
			return -1
		}
		span := b[i+1 : i+1+end]
		if bytes.IndexByte(span, '\\') >= 0 || hasControl(span) || !utf8.Valid(span) {
			return -1
		}
		n++
		i += end + 2
	}
	return n
}

// hasControl reports a byte under 0x20 in b, eight bytes at a time.
func hasControl(b []byte) bool {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		if (w-lo*0x20)&^w&hi != 0 {
			return true
		}
	}
	for ; i < len(b); i++ {
		if b[i] < 0x20 {
			return true
		}
	}
	return false
}

// floorBench runs f over the body of the batch benchmark's push of 1,000
// items of 1 KiB.
func floorBench(b *testing.B, f func([]byte)) {
	body := []byte(batchPushBody(1000, 1024))
	b.SetBytes(int64(len(body)))
	loopReportingCPU(b, func() { f(body) })
}

// BenchmarkFloorMemmove is one copy of the body, as the proxy's transport
// makes from the held body.
func BenchmarkFloorMemmove(b *testing.B) {
	dst := make([]byte, 2<<20)
	floorBench(b, func(x []byte) { floorSink += copy(dst, x) })
}

// BenchmarkFloorSWAR is swarScan: every byte looked at, nothing decided.
func BenchmarkFloorSWAR(b *testing.B) { floorBench(b, func(x []byte) { floorSink += swarScan(x) }) }

// BenchmarkFloorSkim is skimStrings: the least a reader that validates
// every string byte can cost, with vector searches where the standard
// library has them.
func BenchmarkFloorSkim(b *testing.B) {
	floorBench(b, func(x []byte) {
		if skimStrings(x) < 0 {
			b.Fatal("the body did not skim")
		}
		floorSink++
	})
}

// BenchmarkFloorUTF8 is the standard library's UTF-8 check (ASCII eight
// bytes at a time): one property of every byte.
func BenchmarkFloorUTF8(b *testing.B) {
	floorBench(b, func(x []byte) {
		if utf8.Valid(x) {
			floorSink++
		}
	})
}

// BenchmarkFloorJSONValid is encoding/json.Valid, the yardstick the
// readers' speed is measured against (docs/benchmarks.md).
func BenchmarkFloorJSONValid(b *testing.B) {
	floorBench(b, func(x []byte) {
		if json.Valid(x) {
			floorSink++
		}
	})
}

// BenchmarkFloorJsonscanCheck is the strict checker alone.
func BenchmarkFloorJsonscanCheck(b *testing.B) {
	floorBench(b, func(x []byte) {
		if wire.CheckStored(x) == nil {
			floorSink++
		}
	})
}

// BenchmarkFloorParsePush is the produce reader: checked and walked for
// its items.
func BenchmarkFloorParsePush(b *testing.B) {
	floorBench(b, func(x []byte) {
		p, err := limits.ParsePush(x)
		if err != nil {
			b.Fatal(err)
		}
		floorSink += p.Items
	})
}

// BenchmarkFloorPushTally is the tally of the push's answer (1,000
// results, about 230 KB).
func BenchmarkFloorPushTally(b *testing.B) {
	answer := []byte(batchPushAnswer(1000))
	b.SetBytes(int64(len(answer)))
	var t meter.PushTally
	loopReportingCPU(b, func() {
		t.Reset()
		_, _ = t.Write(answer)
		floorSink += int(t.Outcome(http.StatusOK).Accepted)
	})
}
