package tenancy

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// brokerQueryExamples are query values the gateway once read differently
// from the broker (a key found inside a longer one, the first of repeated
// keys, escaped and malformed escapes) and their
// neighbours: every one is a seed of the fuzz targets below.
var brokerQueryExamples = []struct {
	query, key string
	value      string
	found      bool
	ambiguous  bool
}{
	{"wait=true", "wait", "true", true, false},
	{"wait=1", "wait", "1", true, false},
	{"await=true", "wait", "true", true, false},
	{"x=wait=true", "wait", "true", true, false},
	{"await=false&wait=true", "wait", "false", true, false},
	{"wait=false&wait=true", "wait", "false", true, false},
	{"wait=&wait=true", "wait", "", false, false},
	{"wait", "wait", "", false, false},
	{"w%61it=true", "wait", "", false, false},
	{"wait=%74rue", "wait", "true", true, false},
	{"wait=tru%65&timeout=5", "wait", "true", true, false},
	{"wait=a+b", "wait", "a b", true, false},
	{"wait=%2B", "wait", "+", true, false},
	{"wait=%26x", "wait", "&x", true, false},
	{"wait=%zz&wait=true", "wait", "", false, true},
	{"wait=%7", "wait", "", false, true},
	{"wait=true%", "wait", "", false, true},
	{"wait=%+1", "wait", "", false, true},
	{"timeout=30000abc", "timeout", "30000abc", true, false},
	{"timeout=+5000", "timeout", " 5000", true, false},
	{"timeout=%2B5000", "timeout", "+5000", true, false},
	{"xtimeout=7&timeout=9", "timeout", "7", true, false},
	{"autoAck=1", "autoAck", "1", true, false},
	{"noautoAck=true", "autoAck", "true", true, false},
	{"batch=10&wait=true&timeout=30000", "batch", "10", true, false},
	{"a=1&&=&wait", "wait", "", false, false},
}

func TestBrokerQueryValue(t *testing.T) {
	for _, tc := range brokerQueryExamples {
		v, found, err := BrokerQueryValue(tc.query, tc.key)
		if tc.ambiguous {
			if !errors.Is(err, ErrAmbiguousQuery) || !strings.Contains(err.Error(), tc.key) {
				t.Errorf("BrokerQueryValue(%q, %q) error %v, want ErrAmbiguousQuery naming the key", tc.query, tc.key, err)
			}
			continue
		}
		if err != nil || v != tc.value || found != tc.found {
			t.Errorf("BrokerQueryValue(%q, %q) = %q, %v, %v; want %q, %v", tc.query, tc.key, v, found, err, tc.value, tc.found)
		}
	}
}

func TestBrokerQueryInt(t *testing.T) {
	cases := []struct {
		query string
		want  int
	}{
		{"timeout=1000", 1000},
		{"timeout=1000ms", 1000},
		{"timeout=+1000", 1000},   // "+" decodes to a space, which stoi skips
		{"timeout=%2B1000", 1000}, // a real plus sign
		{"timeout=%09-20", -20},   // a tab, then a sign
		{"timeout=abc", 30000},    // no digits: the default
		{"timeout=", 30000},       // empty: the default
		{"timeout=-", 30000},      // a sign alone
		{"timeout=2147483647", 2147483647},
		{"timeout=2147483648", 30000}, // out of int range: std::stoi throws
		{"timeout=-2147483648", -2147483648},
		{"timeout=-2147483649", 30000},
		{"timeout=99999999999999999999999", 30000},
		{"timeout=0x10", 0}, // base 10: the number is the 0
	}
	for _, tc := range cases {
		got, err := BrokerQueryInt(tc.query, "timeout", 30000)
		if err != nil || got != tc.want {
			t.Errorf("BrokerQueryInt(%q) = %d, %v; want %d", tc.query, got, err, tc.want)
		}
	}
}

func TestBrokerQueryBool(t *testing.T) {
	for q, want := range map[string]bool{
		"wait=true": true, "wait=1": true, "wait=%31": true, "x=wait=1": true,
		"wait=TRUE": false, "wait=yes": false, "wait=0": false, "wait=": false, "": false,
		"wait=true+": false, // "true " is not "true"
	} {
		got, err := BrokerQueryBool(q, "wait", false)
		if err != nil || got != want {
			t.Errorf("BrokerQueryBool(%q) = %v, %v; want %v", q, got, err, want)
		}
	}
	if got, _ := BrokerQueryBool("other=1", "wait", true); !got {
		t.Error("an absent parameter must read as the default")
	}
}

func TestReadPopQuery(t *testing.T) {
	q, err := ReadPopQuery("/api/v1/pop/queue/q", "x=wait=1&autoAck=1&timeout=1500")
	if err != nil || q != (PopQuery{Wait: true, TimeoutMs: 1500, AutoAck: true}) {
		t.Fatalf("ReadPopQuery = %+v, %v", q, err)
	}
	q, err = ReadPopQuery("/api/v1/pop/queue/q", "autoAck=true&timeout=1500")
	if err != nil || q != (PopQuery{AutoAck: true}) {
		t.Fatalf("a pop that does not wait has no wait: %+v, %v", q, err)
	}
	for _, query := range []string{"wait=%zz", "autoAck=tr%u", "wait=true&timeout=1%"} {
		if _, err := ReadPopQuery("/api/v1/ephemeral/pop", query); !errors.Is(err, ErrAmbiguousQuery) {
			t.Errorf("ReadPopQuery(%q) error %v, want ErrAmbiguousQuery", query, err)
		}
	}
	if q, err := ReadPopQuery("/api/v1/ack", "wait=%zz&autoAck=1"); err != nil || q != (PopQuery{}) {
		t.Fatalf("a route that is no pop reads nothing: %+v, %v", q, err)
	}
}

// modelBrokerParam is the broker's get_query_param and url_decode written
// out as plainly as possible, from the broker's documented behaviour,
// independently of BrokerQueryValue. defined is false where the broker's
// decoding depends on its C++ stream parsing of a malformed escape.
func modelBrokerParam(q, key string) (raw, decoded string, present, defined bool) {
	pos := strings.Index(q, key+"=")
	if pos < 0 {
		return "", "", false, true
	}
	raw = q[pos+len(key)+1:]
	if end := strings.Index(raw, "&"); end >= 0 {
		raw = raw[:end]
	}
	out := []byte{}
	for i := 0; i < len(raw); i++ {
		switch {
		case raw[i] == '%' && i+2 < len(raw):
			n, err := strconv.ParseUint(raw[i+1:i+3], 16, 8)
			if err != nil || strings.ContainsAny(raw[i+1:i+3], "+-") {
				return raw, "", true, false
			}
			out = append(out, byte(n))
			i += 2
		case raw[i] == '+':
			out = append(out, ' ')
		default:
			out = append(out, raw[i])
		}
	}
	return raw, string(out), true, true
}

// hasMalformedEscape reports a "%" not followed by two hex digits.
var hasMalformedEscape = regexp.MustCompile(`%([^0-9A-Fa-f]|.[^0-9A-Fa-f]|.?$)`).MatchString

var stoiPrefix = regexp.MustCompile(`^[ \t\n\v\f\r]*([+-]?[0-9]+)`)

// modelStoi is std::stoi, via a regular expression and strconv.
func modelStoi(s string, def int) int {
	m := stoiPrefix.FindStringSubmatch(s)
	if m == nil {
		return def
	}
	n, err := strconv.ParseInt(m[1], 10, 32)
	if err != nil {
		return def
	}
	return int(n)
}

// FuzzBrokerQueryValue holds BrokerQueryValue, BrokerQueryBool and
// BrokerQueryInt against the model of the broker: wherever the gateway
// reads a value it is the broker's, and it refuses only values with a
// malformed escape.
func FuzzBrokerQueryValue(f *testing.F) {
	for _, tc := range brokerQueryExamples {
		f.Add(tc.query, tc.key)
	}
	f.Add("consumerGroup=a%00b&batch=1", "consumerGroup")
	f.Add("batch=1&consumerGroup="+strings.Repeat("%C3%A9", 255), "consumerGroup")
	f.Add("consumerGroup="+strings.Repeat("g", 256), "consumerGroup")
	f.Fuzz(func(t *testing.T, query, key string) {
		if key == "" {
			key = "wait"
		}
		raw, decoded, present, defined := modelBrokerParam(query, key)
		v, found, err := BrokerQueryValue(query, key)
		switch {
		case !present:
			if found || err != nil {
				t.Fatalf("%q has no %s= but the gateway read %q, %v", query, key, v, err)
			}
			return
		case err != nil:
			if !errors.Is(err, ErrAmbiguousQuery) || !hasMalformedEscape(raw) {
				t.Fatalf("%q: refused %q without a malformed escape: %v", query, raw, err)
			}
			return
		case !defined:
			t.Fatalf("%q: the broker's reading of %q is not defined, yet the gateway read %q", query, raw, v)
		case v != decoded || found != (decoded != ""):
			t.Fatalf("%q: the gateway read %q (found %v), the broker %q", query, v, found, decoded)
		}
		if strings.ContainsRune(decoded, 0) && !QueryHoldsNUL(query) {
			t.Fatalf("%q: the broker decodes U+0000 from %s but the query passes", query, key)
		}
		if key == "consumerGroup" && ConsumerGroupTooLong(query) != (utf8.RuneCountInString(decoded) > MaxQueryNameChars) {
			t.Fatalf("%q: consumerGroup of %d characters, too long: %v", query, utf8.RuneCountInString(decoded), ConsumerGroupTooLong(query))
		}
		b, err := BrokerQueryBool(query, key, false)
		if err != nil || b != (decoded == "true" || decoded == "1") {
			t.Fatalf("%q: bool %v, %v; broker %q", query, b, err, decoded)
		}
		n, err := BrokerQueryInt(query, key, -7)
		want := -7
		if decoded != "" {
			want = modelStoi(decoded, -7)
		}
		if err != nil || n != want {
			t.Fatalf("%q: int %d, %v; broker %d", query, n, err, want)
		}
	})
}

// FuzzReadPopQuery: a pop's wait, timeout and autoAck are the broker's,
// or the query is refused.
func FuzzReadPopQuery(f *testing.F) {
	for _, tc := range brokerQueryExamples {
		f.Add(tc.query)
	}
	f.Add("wait=1&timeout=-5&autoAck=1")
	f.Fuzz(func(t *testing.T, query string) {
		q, err := ReadPopQuery("/api/v1/pop/queue/q", query)
		if err != nil {
			if !errors.Is(err, ErrAmbiguousQuery) {
				t.Fatalf("%q: %v", query, err)
			}
			return
		}
		_, wait, _, _ := modelBrokerParam(query, "wait")
		_, ack, _, _ := modelBrokerParam(query, "autoAck")
		_, timeout, _, _ := modelBrokerParam(query, "timeout")
		wantWait := wait == "true" || wait == "1"
		if q.Wait != wantWait || q.AutoAck != (ack == "true" || ack == "1") {
			t.Fatalf("%q: %+v; broker wait %q autoAck %q", query, q, wait, ack)
		}
		wantTimeout := int64(0)
		if wantWait {
			wantTimeout = int64(max(modelStoi(timeout, DefaultLongPollTimeoutMs), 0))
		}
		if q.TimeoutMs != wantTimeout {
			t.Fatalf("%q: timeout %d, broker %d", query, q.TimeoutMs, wantTimeout)
		}
	})
}
