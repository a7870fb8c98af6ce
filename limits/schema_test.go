package limits

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/queengate/queengate/wire"
)

// schemaExamples are bodies holding each value the broker's schema cannot
// store, one rule each (the broker would fail the whole batch in its
// database after the gateway counted it); every one is a seed of
// FuzzParseProduce under testdata/fuzz/FuzzParseProduce.
func schemaExamples() map[string]string {
	long := strings.Repeat("t", MaxNameChars+1)
	longWide := strings.Repeat("é", MaxNameChars+1)
	return map[string]string{
		"i22-nul-payload":          `{"items":[{"queue":"q","payload":{"a":["x\u0000"]}}]}`,
		"i22-nul-member-name":      `{"items":[{"queue":"q","payload":{"k\u0000":1}}]}`,
		"i22-nul-queue":            `{"items":[{"queue":"q\u0000","payload":1}]}`,
		"i22-nul-ignored-member":   `{"items":[{"queue":"q","payload":1,"note":"\u0000"}]}`,
		"i22-nul-cycle-state":      `{"partition_id":"p","state_ops":[{"type":"upsert","key":"k","value":"\u0000"}]}`,
		"i22-nul-ephemeral":        `{"queue":"q","messages":[{"payload":"\u0000"}]}`,
		"i22-trace-not-uuid":       `{"items":[{"queue":"q","traceId":"bad","payload":1}]}`,
		"i22-trace-number":         `{"items":[{"queue":"q","traceId":7,"payload":1}]}`,
		"i22-trace-sink":           `{"push_items":[{"queue":"s","traceId":"x","payload":1}]}`,
		"i22-transaction-id-long":  `{"items":[{"queue":"q","transactionId":"` + long + `","payload":1}]}`,
		"i22-transaction-id-wide":  `{"items":[{"queue":"q","transactionId":"` + longWide + `","payload":1}]}`,
		"i22-partition-long":       `{"items":[{"queue":"q","partition":"` + long + `","payload":1}]}`,
		"i22-queue-long":           `{"items":[{"queue":"` + long + `","payload":1}]}`,
		"i22-queue-long-txn":       `{"operations":[{"type":"push","items":[{"queue":"` + long + `"}]}]}`,
		"i22-sink-partition-long":  `{"push_items":[{"queue":"s","partition":"` + long + `","payload":1}]}`,
		"i22-ok-trace-forms":       `{"items":[{"queue":"q","traceId":"0190B4C8-9A5E-7C3D-8F21-5B6A7C8D9E0F"},{"queue":"q","traceId":"{0190b4c89a5e7c3d8f215b6a7c8d9e0f}"},{"queue":"q","traceId":""},{"queue":"q","traceId":null}]}`,
		"i22-ok-names-at-limit":    `{"items":[{"queue":"` + strings.Repeat("é", MaxNameChars) + `","partition":"` + strings.Repeat("p", MaxNameChars) + `","transactionId":"` + strings.Repeat("\\u00e9", MaxNameChars) + `"}]}`,
		"i22-ok-escaped-backslash": `{"items":[{"queue":"q","payload":"\\u0000"}]}`,
	}
}

func TestSchemaExamplesAreSeeds(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParseProduce")
	for name, body := range schemaExamples() {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("seed %s: %v", name, err)
			continue
		}
		if string(raw) != "go test fuzz v1\n[]byte("+fmt.Sprintf("%q", body)+")\n" {
			t.Errorf("seed %s does not hold the example", name)
		}
	}
}

// TestSchemaRules: each value the broker's schema cannot store is refused
// by the parser of every body that carries it, with a message naming it;
// the same shapes within the limits are read.
func TestSchemaRules(t *testing.T) {
	ex := schemaExamples()
	parsers := map[string]func([]byte) (ProduceBatch, error){
		"push": ParsePush, "transaction": ParseTransaction, "cycle": parseCycle, "ephemeral": ParseEphemeral,
	}
	refused := []struct{ example, parser, message string }{
		{"i22-nul-payload", "push", "body holds U+0000 (\\u0000) at byte 41; the broker cannot store it"},
		{"i22-nul-member-name", "push", "body holds U+0000 (\\u0000) at byte 36; the broker cannot store it"},
		{"i22-nul-queue", "push", "body holds U+0000 (\\u0000) at byte 21; the broker cannot store it"},
		{"i22-nul-ignored-member", "push", "body holds U+0000 (\\u0000) at byte 43; the broker cannot store it"},
		{"i22-nul-cycle-state", "cycle", "body holds U+0000 (\\u0000) at byte 69; the broker cannot store it"},
		{"i22-nul-ephemeral", "ephemeral", "body holds U+0000 (\\u0000) at byte 37; the broker cannot store it"},
		{"i22-trace-not-uuid", "push", "item 0: traceId must be a UUID (or empty), as the broker stores it"},
		{"i22-trace-number", "push", "item 0: traceId must be a UUID (or empty), as the broker stores it"},
		{"i22-trace-sink", "cycle", "push_items[0]: traceId must be a UUID (or empty), as the broker stores it"},
		{"i22-transaction-id-long", "push", "item 0: transactionId is longer than 255 characters, more than the broker can store"},
		{"i22-transaction-id-wide", "push", "item 0: transactionId is longer than 255 characters, more than the broker can store"},
		{"i22-partition-long", "push", "item 0: partition is longer than 255 characters, more than the broker can store"},
		{"i22-queue-long", "push", "item 0: queue is longer than 255 characters, more than the broker can store"},
		{"i22-queue-long-txn", "transaction", "operation 0, item 0: queue is longer than 255 characters, more than the broker can store"},
		{"i22-sink-partition-long", "cycle", "push_items[0]: partition is longer than 255 characters, more than the broker can store"},
	}
	for _, c := range refused {
		_, err := parsers[c.parser]([]byte(ex[c.example]))
		if err == nil || err.Error() != c.message {
			t.Errorf("%s (%s): %v, want %q", c.example, c.parser, err, c.message)
		}
	}
	for _, name := range []string{"i22-ok-trace-forms", "i22-ok-names-at-limit", "i22-ok-escaped-backslash"} {
		if b, err := ParsePush([]byte(ex[name])); err != nil || b.Items == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, tr := range []string{"0190b4c8-9a5e-7c3d-8f21-5b6a7c8d9e0", "0190b4c8--9a5e-7c3d-8f21-5b6a7c8d9e0f", "-0190b4c89a5e7c3d8f215b6a7c8d9e0f",
		"0190b4c89a5e7c3d8f215b6a7c8d9e0f-", "{0190b4c89a5e7c3d8f215b6a7c8d9e0f", "0190b4c89a5e7c3d8f215b6a7c8d9e0g", " 0190b4c89a5e7c3d8f215b6a7c8d9e0f",
		"019-0b4c89a5e7c3d8f215b6a7c8d9e0f"} {
		if _, err := ParsePush([]byte(`{"items":[{"queue":"q","traceId":"` + tr + `"}]}`)); err == nil {
			t.Errorf("traceId %q was taken", tr)
		}
	}
	for _, tr := range []string{"0190-b4c8-9a5e-7c3d-8f21-5b6a-7c8d-9e0f", `\u0030190b4c8-9a5e-7c3d-8f21-5b6a7c8d9e0f`} {
		if _, err := ParsePush([]byte(`{"items":[{"queue":"q","traceId":"` + tr + `"}]}`)); err != nil {
			t.Errorf("traceId %q: %v", tr, err)
		}
	}
}

// TestStoredValueCaps: the per-item and batch caps apply to ephemeral
// messages, KV and timers operations and KV values, not only to queue
// pushes, since each is stored on the broker all the same.
func TestStoredValueCaps(t *testing.T) {
	lim := AllUnlimited()
	lim.MaxPayloadBytes, lim.MaxBatchItems = 10, 2
	big := `"` + strings.Repeat("v", 20) + `"`
	cases := []struct {
		name    string
		parse   func([]byte) (ProduceBatch, error)
		body    string
		refusal string // "" when within the caps
	}{
		{"ephemeral within", ParseEphemeral, `{"queue":"q","messages":[1,"abc"]}`, ""},
		{"ephemeral message too large", ParseEphemeral, `{"queue":"q","messages":[1,` + big + `]}`,
			"item 1: payload 22 bytes exceeds max_payload_bytes (10)"},
		{"ephemeral too many", ParseEphemeral, `{"queue":"q","messages":[1,2,3]}`, "batch of 3 items exceeds max_batch_items (2)"},
		{"kv within", parseOperations, `[{"op":"put","ns":"n","key":"k","value":"1234567"}]`, ""},
		{"kv value too large", parseOperations, `{"operations":[{"op":"get","ns":"n","key":"k"},{"op":"put","ns":"n","key":"k","value":` + big + `}]}`,
			"item 1: payload 22 bytes exceeds max_payload_bytes (10)"},
		{"kv too many", parseOperations, `[{"op":"get"},{"op":"get"},{"op":"get"}]`, "batch of 3 items exceeds max_batch_items (2)"},
		{"timers payload too large", parseOperations, `{"operations":[{"op":"schedule","queue":"q","payload":{"a":` + big + `}}]}`,
			"item 0: payload 28 bytes exceeds max_payload_bytes (10)"},
		{"kv value within", ParseStoredValue, `"12345678"`, ""},
		{"kv value too large", ParseStoredValue, big, "item 0: payload 22 bytes exceeds max_payload_bytes (10)"},
	}
	for _, c := range cases {
		b, err := c.parse([]byte(c.body))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		r := CheckProduce(b, lim, 0)
		got := ""
		if r != nil {
			got = r.Message
		}
		if got != c.refusal {
			t.Errorf("%s: %q, want %q", c.name, got, c.refusal)
		}
	}
	for _, body := range []string{`{"op":"put"}`, `5`, `{"operations":{"op":"put"}}`, `[{"op":"put","value":"\u0000"}]`, ``} {
		if _, err := parseOperations([]byte(body)); err == nil {
			t.Errorf("batch %q was read", body)
		}
	}
	tr, err := ParseTrace([]byte(`{"transactionId":"t","partitionId":"p","data":` + big + `}`))
	if r := CheckProduce(tr, lim, 0); err != nil || r == nil || r.Message != "item 0: payload 22 bytes exceeds max_payload_bytes (10)" {
		t.Errorf("trace: %v %+v", err, r)
	}
	for body, want := range map[string]string{
		`{"transactionId":"t","eventType":"` + strings.Repeat("é", 101) + `"}`:     "eventType is longer than 100 characters, more than the broker can store",
		`{"transactionId":"t","consumerGroup":"` + strings.Repeat("g", 256) + `"}`: "consumerGroup is longer than 255 characters, more than the broker can store",
		`{"transactionId":"` + strings.Repeat("t", 256) + `"}`:                     "transactionId is longer than 255 characters, more than the broker can store",
		`["not","an","object"]`: "a trace must be a JSON object",
	} {
		if _, err := ParseTrace([]byte(body)); err == nil || err.Error() != want {
			t.Errorf("trace %.60s: %v, want %q", body, err, want)
		}
	}
	if _, err := ParseTrace([]byte(`{"transactionId":"t","eventType":"` + strings.Repeat("é", 100) + `"}`)); err != nil {
		t.Errorf("an eventType of 100 characters: %v", err)
	}
	if _, err := ParseStoredValue([]byte("raw \x00 value")); err == nil {
		t.Error("a KV value with a NUL byte was read")
	}
	// A cycle's state values take the payload cap; its consumer group the
	// schema's length.
	cyc, err := parseCycle([]byte(`{"partition_id":"p","state_ops":[{"type":"delete","key":"k"},{"type":"upsert","key":"k","value":` + big + `}]}`))
	if r := CheckCycle(cyc, lim, 0); err != nil || r == nil || r.Message != "state_ops[1]: value 22 bytes exceeds max_payload_bytes (10)" {
		t.Errorf("cycle state: %v %+v", err, r)
	}
	if _, err := parseCycle([]byte(`{"partition_id":"p","consumer_group":"` + strings.Repeat("g", 256) + `"}`)); err == nil ||
		err.Error() != "consumer_group is longer than 255 characters, more than the broker can store" {
		t.Errorf("cycle consumer group: %v", err)
	}
	// A cycle's sink items take the batch cap too.
	cyc, err = parseCycle([]byte(`{"push_items":[{"queue":"s"},{"queue":"s"},{"queue":"s"}]}`))
	if r := CheckCycle(cyc, lim, 0); err != nil || r == nil || r.Message != "batch of 3 items exceeds max_batch_items (2)" {
		t.Errorf("cycle: %v %+v", err, r)
	}
}

func TestAckNamesError(t *testing.T) {
	long := strings.Repeat("é", MaxNameChars+1)
	for body, refused := range map[string]bool{
		`{"consumerGroup":"` + long + `","acknowledgments":[]}`:                      true,
		`{"transactionId":"t","partitionId":"p","consumerGroup":"` + long + `"}`:     true,
		`{"consumerGroup":"` + long[2:] + `","acknowledgments":[]}`:                  false,
		`{"consumerGroup":"g","acknowledgments":[{"transactionId":"` + long + `"}]}`: false,
		`{"consumerGroup":null,"error":"` + long + `"}`:                              false,
		`{"consumerGroup":"` + long + `",}`:                                          false, // not JSON: the broker refuses it
		`{"transactionId":"t","consumerGroup":"g"}`:                                  false,
	} {
		if err := AckNamesError([]byte(body)); (err != nil) != refused {
			t.Errorf("%.60s: %v, want refused=%v", body, err, refused)
		}
	}
}

// TestSchemaRulesAllocateNothingPerItem: IDs and trace ids are checked in
// place; a 100-item push with them costs what one without them does.
func TestSchemaRulesAllocateNothingPerItem(t *testing.T) {
	items := func(n int, extra string) []byte {
		var sb strings.Builder
		sb.WriteString(`{"items":[`)
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"queue":"q","partition":"p","payload":{"n":1}%s}`, extra)
		}
		sb.WriteString(`]}`)
		return []byte(sb.String())
	}
	withIDs := `,"transactionId":"` + strings.Repeat("\\u00e9", 200) + `","traceId":"\u0030190b4c8-9a5e-7c3d-8f21-5b6a7c8d9e0f"`
	one := items(1, withIDs)
	hundred := items(100, withIDs)
	// Each batch goes back to its pool, as the gateway's do: a batch kept
	// would make every run allocate the next one's lists afresh, as many
	// times as the pool's leftovers from other tests happen to need.
	parse := func(body []byte) func() {
		return func() {
			b, err := ParsePush(body)
			if err != nil {
				t.Fatal(err)
			}
			b.Release()
		}
	}
	a1 := testing.AllocsPerRun(50, parse(one))
	a100 := testing.AllocsPerRun(50, parse(hundred))
	t.Logf("1 item: %v allocations, 100 items: %v", a1, a100)
	if a100 > a1 {
		t.Fatalf("1 item: %v allocations, 100 items: %v", a1, a100)
	}
}

// The canonical-form shortcut accepts exactly the canonical uuids: every
// byte value at every position of one, against a byte-by-byte reading.
func TestCanonicalUUIDEveryByteEveryPosition(t *testing.T) {
	const good = "3f1c2b9a-5d4e-4a6b-9C8D-7e6f5a4b3c2d"
	naive := func(s []byte) bool {
		if len(s) != 36 {
			return false
		}
		for i, c := range s {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if c != '-' {
					return false
				}
			} else if !strings.ContainsRune("0123456789abcdefABCDEF", rune(c)) {
				return false
			}
		}
		return true
	}
	for pos := range len(good) {
		for c := range 256 {
			s := []byte(good)
			s[pos] = byte(c)
			if got, want := wire.CanonicalUUID(s), naive(s); got != want {
				t.Fatalf("%q: wire.CanonicalUUID %v, byte by byte %v", s, got, want)
			}
			if wire.CanonicalUUID(s) && !uuidText(s) {
				t.Fatalf("%q: the shortcut accepts what uuidText refuses", s)
			}
		}
	}
}

// parseOperations is ReadOperations for a caller that reads no members.
func parseOperations(body []byte) (ProduceBatch, error) {
	b, _, err := ReadOperations(body, nil, nil, nil)
	return b, err
}

// parseCycle is ReadCycle without its push-block verdict.
func parseCycle(body []byte) (ProduceBatch, error) {
	b, _, err := ReadCycle(body)
	return b, err
}
