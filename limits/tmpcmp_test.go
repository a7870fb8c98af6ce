package limits

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func tmpBody(n, size int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"items":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"queue":"orders","partition":"customer-` + strconv.Itoa(i%4) + `","payload":{"text":"` + strings.Repeat("x", size) + `"},"transactionId":"0190b3a2-7c1e-7d3f-9a4b-` + strings.Repeat("0", 12-len(strconv.Itoa(i))) + strconv.Itoa(i) + `"}`)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

func BenchmarkTmpPushPaths(b *testing.B) {
	for _, c := range []struct{ n, size int }{{1, 100}, {100, 100}, {1000, 1000}} {
		body := tmpBody(c.n, c.size)
		if !json.Valid(body) {
			b.Fatal("bad")
		}
		name := strconv.Itoa(c.n) + "x" + strconv.Itoa(c.size)
		b.Run(name+"/fast", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				bt, err := ParsePush(body)
				if err != nil || bt.Items != c.n {
					b.Fatal(err)
				}
				bt.Release()
			}
		})
		b.Run(name+"/reference", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				bt, err := parsePushReference(body)
				if err != nil || bt.Items != c.n {
					b.Fatal(err)
				}
				bt.Release()
			}
		})
		b.Run(name+"/valid", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				json.Valid(body)
			}
		})
	}
}
