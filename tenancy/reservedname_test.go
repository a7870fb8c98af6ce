package tenancy

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// A probe name as the probe makes them.
const sampleProbeName = ProbeQueuePrefix + "0123456789abcdef0123456789abcdef"

func TestBodyNamesReservedCatchesEverySpelling(t *testing.T) {
	refused := map[string]string{
		"plain queue":           `{"items":[{"queue":"` + sampleProbeName + `","payload":{}}]}`,
		"upper case":            `{"queue":"` + strings.ToUpper(sampleProbeName) + `"}`,
		"mixed case":            `{"queue":"QueenGate-Isolation-Probe-ab"}`,
		"json escape first":     `{"queue":"\u0071ueengate-isolation-probe-ab"}`,
		"json escape upper hex": `{"queue":"\u0051UEENGATE\u002DISOLATION\u002dPROBE\u002D"}`,
		"every letter escaped":  `{"queue":"` + jsonEscapeAll(sampleProbeName) + `"}`,
		"escaped dash only":     `{"queue":"queengate\u002disolation\u002dprobe\u002d1"}`,
		"in a payload":          `{"items":[{"queue":"q","payload":{"note":"queengate-isolation-probe-x"}}]}`,
		"as a key":              `{"queengate-isolation-probe-":1}`,
		"double backslash":      `{"queue":"\\u0071ueengate-isolation-probe-"}`, // over-read on purpose
		"namespace":             `{"queue":"q","namespace":"queengate-isolation-probe-ns-1"}`,
		"after many qs":         strings.Repeat(`{"queue":"qq"},`, 50) + `"qqqueengate-isolation-probe-"`,
	}
	for name, body := range refused {
		if !BodyNamesReserved([]byte(body)) {
			t.Errorf("%s: %s not refused", name, body)
		}
	}
	allowed := map[string]string{
		"ordinary push":      `{"items":[{"queue":"orders","payload":{"n":1}}]}`,
		"prefix cut short":   `{"queue":"queengate-isolation-probe"}`,
		"other escape":       `{"queue":"queengate-isolation\u002eprobe-"}`,
		"escaped non-ascii":  `{"queue":"\u00e9queengate-isolation-prob"}`,
		"empty":              ``,
		"percent is literal": `{"queue":"%71ueengate-isolation-probe-"}`,
	}
	for name, body := range allowed {
		if BodyNamesReserved([]byte(body)) {
			t.Errorf("%s: %s refused", name, body)
		}
	}
}

func TestURLNamesReservedCatchesEverySpelling(t *testing.T) {
	refused := []string{
		"/api/v1/resources/queues/" + sampleProbeName,
		"/api/v1/resources/queues/" + strings.ToUpper(sampleProbeName),
		"/api/v1/resources/queues/%71ueengate-isolation-probe-1",
		"/api/v1/resources/queues/" + url.PathEscape(sampleProbeName),
		"/api/v1/resources/queues/" + percentEscapeAll(sampleProbeName),
		"/api/v1/pop/queue/" + ProbeQueuePrefix + "x/partition/Default",
		"queue=" + ProbeQueuePrefix + "x",
		"x=1&namespace=%51UEENGATE%2DISOLATION%2dPROBE%2D",
		"aqueue=" + percentEscapeAll(ProbeQueuePrefix),
	}
	for _, u := range refused {
		if !URLNamesReserved(u) {
			t.Errorf("%q not refused", u)
		}
	}
	allowed := []string{
		"/api/v1/resources/queues/orders",
		"/api/v1/resources/queues",
		"queue=queengate-isolation-prob&x=e-",
		"/api/v1/resources/queues/%2571ueengate-isolation-probe-", // the broker decodes once: "%71ueengate..."
		"",
	}
	for _, u := range allowed {
		if URLNamesReserved(u) {
			t.Errorf("%q refused", u)
		}
	}
}

func jsonEscapeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteString(`\u00`)
		b.WriteString("0123456789abcdef"[s[i]>>4 : s[i]>>4+1])
		b.WriteString("0123456789ABCDEF"[s[i]&15 : s[i]&15+1])
	}
	return b.String()
}

func percentEscapeAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteString("%")
		b.WriteString("0123456789abcdef"[s[i]>>4 : s[i]>>4+1])
		b.WriteString("0123456789ABCDEF"[s[i]&15 : s[i]&15+1])
	}
	return b.String()
}

// FuzzReservedName checks the reserved-name check against independent
// readers: every string a JSON decoder finds in a body (keys and values),
// and the broker's own percent decoding of a URL, must be caught whenever
// they contain the prefix in any case, and the fast and slow paths agree.
// The seed corpus lives in testdata/fuzz/FuzzReservedName.
func FuzzReservedName(f *testing.F) {
	f.Fuzz(func(t *testing.T, in []byte) {
		body := BodyNamesReserved(in)
		lower := strings.ToLower(string(in))
		if strings.Contains(lower, ProbeQueuePrefix) && !body {
			t.Fatalf("body %q holds the prefix literally but is not refused", in)
		}
		var v any
		if json.Unmarshal(in, &v) == nil && anyStringHasPrefixName(v) && !body {
			t.Fatalf("body %q decodes to a reserved name but is not refused", in)
		}
		if !strings.Contains(string(in), `\`) && !strings.Contains(string(in), "%") {
			if fast, slow := bytesMentionPrefix(in), mentionsReservedDecoded(in); fast != slow {
				t.Fatalf("fast path says %v, slow path %v, on %q", fast, slow, in)
			}
			if sampled, slow := sampledMentionsPrefix(in), mentionsReservedDecoded(in); sampled != slow {
				t.Fatalf("sampling path says %v, slow path %v, on %q", sampled, slow, in)
			}
		}
		raw := string(in)
		u := URLNamesReserved(raw)
		if dec, ok := decodeBrokerValue(raw); ok && strings.Contains(strings.ToLower(dec), ProbeQueuePrefix) && !u {
			t.Fatalf("url %q decodes to a reserved name but is not refused", raw)
		}
		if dec, err := url.PathUnescape(raw); err == nil && strings.Contains(strings.ToLower(dec), ProbeQueuePrefix) && !u {
			t.Fatalf("path %q decodes to a reserved name but is not refused", raw)
		}
	})
}

func anyStringHasPrefixName(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.Contains(strings.ToLower(x), ProbeQueuePrefix)
	case []any:
		for _, e := range x {
			if anyStringHasPrefixName(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if anyStringHasPrefixName(k) || anyStringHasPrefixName(e) {
				return true
			}
		}
	}
	return false
}

// pushBody is a push of n items shaped like a client's, optionally with a
// \u escape in every payload (which sends the check down its slow path).
func pushBody(n int, escaped bool) []byte {
	var b strings.Builder
	b.WriteString(`{"items":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		note := "quarterly report for queue-owner acme"
		if escaped {
			note = `caf\u00e9 quarterly report for queue-owner acme`
		}
		b.WriteString(`{"queue":"orders","partition":"Default","transactionId":"6f0e2c1a-9b7d-4e3f-8a21-0c5d4b3a2f1e","payload":{"order":42,"sku":"A-1001","qty":3,"note":"` + note + `"}}`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkBodyNamesReserved is the check's cost on every push body
// (go test -run X -bench BodyNamesReserved -benchmem ./tenancy/).
func BenchmarkBodyNamesReserved(b *testing.B) {
	for _, n := range []int{100, 1000} {
		for _, escaped := range []bool{false, true} {
			body := pushBody(n, escaped)
			name := fmt.Sprintf("items=%d/escapes=%v", n, escaped)
			b.Run(name, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					if BodyNamesReserved(body) {
						b.Fatal("refused an ordinary push")
					}
				}
			})
		}
	}
}

// TestAnchorIsThePrefixLetter keeps the fast path's anchor in step with
// the prefix.
func TestAnchorIsThePrefixLetter(t *testing.T) {
	if ProbeQueuePrefix[anchorAt] != 'g' || strings.Count(ProbeQueuePrefix, "g") != 1 {
		t.Fatalf("anchor %d is %q in %q", anchorAt, ProbeQueuePrefix[anchorAt], ProbeQueuePrefix)
	}
	for _, s := range []string{ProbeQueuePrefix, "x" + ProbeQueuePrefix, ProbeQueuePrefix[:25], "gggggGGGGGbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" + strings.ToUpper(ProbeQueuePrefix) + "gGg"} {
		if got, want := bytesMentionPrefix([]byte(s)), strings.Contains(strings.ToLower(s), ProbeQueuePrefix); got != want || stringMentionsPrefix(s) != want {
			t.Fatalf("%q: fast path says %v, want %v", s, got, want)
		}
	}
}

// Both literal searches (the anchored one, and the sampling one it turns
// to when its anchor is frequent) find the prefix at every offset from a
// word boundary, at both ends of a body, in every letter case, and find
// nothing when any one byte of it is changed or cut.
func TestBodyPrefixSearchEveryOffset(t *testing.T) {
	for _, search := range []func([]byte) bool{bytesMentionPrefix, sampledMentionsPrefix} {
		prefixSearchEveryOffset(t, search)
	}
	// An anchor in every other byte sends the anchored search to the
	// sampling one, which must still find what follows.
	noisy := strings.Repeat("gG", 4000)
	for _, body := range []string{noisy + ProbeQueuePrefix, noisy + strings.ToUpper(ProbeQueuePrefix) + noisy, ProbeQueuePrefix + noisy} {
		if !bytesMentionPrefix([]byte(body)) {
			t.Fatalf("prefix after %d anchors not found", strings.Count(body, "gG"))
		}
	}
	if bytesMentionPrefix([]byte(noisy + ProbeQueuePrefix[:25])) {
		t.Fatal("found in a body of anchors and the prefix cut short")
	}
}

func prefixSearchEveryOffset(t *testing.T, bytesMentionPrefix func([]byte) bool) {
	t.Helper()
	cases := []string{ProbeQueuePrefix, strings.ToUpper(ProbeQueuePrefix), "QueenGate-ISOLATION-probe-"}
	for _, p := range cases {
		for lead := 0; lead < 3*strideWords; lead++ {
			for _, trail := range []int{0, 1, 7, 8, 19, 40} {
				body := []byte(strings.Repeat("x", lead) + p + strings.Repeat("y", trail))
				if !bytesMentionPrefix(body) {
					t.Fatalf("%q: not found", body)
				}
				for k := range len(p) {
					cut := append([]byte(nil), body...)
					cut[lead+k] ^= 0x01 // another byte, in any case
					if bytesMentionPrefix(cut) != strings.Contains(strings.ToLower(string(cut)), ProbeQueuePrefix) {
						t.Fatalf("%q: fast path disagrees with a plain search", cut)
					}
				}
				if bytesMentionPrefix(body[:lead+len(p)-1]) {
					t.Fatalf("%q: found in the body cut short", body[:lead+len(p)-1])
				}
			}
		}
	}
	// Bytes whose case bit alone differs from a prefix letter are not it.
	for _, c := range []byte{'\r', '\x0d', '@', 0x41 - 0x20} {
		body := []byte("xx" + ProbeQueuePrefix[:9] + string(c) + ProbeQueuePrefix[10:] + "yy")
		if bytesMentionPrefix(body) {
			t.Fatalf("%q: found", body)
		}
	}
}
