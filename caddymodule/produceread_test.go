package caddymodule

import (
	"encoding/json"
	"testing"

	"github.com/queengate/queengate/tenancy"
)

// A produce body is read in one pass (readProduce) and swept for its text
// only when the reader refuses it; the refusals a client sees keep their
// order: the text, then the reserved names, then the reader's own. None
// reaches the cell.
func TestProduceRefusalsKeepTheirOrder(t *testing.T) {
	env := newTestEnv(t)
	withFullProKey(env)
	g := env.g
	const probe = tenancy.ProbeQueuePrefix + "x"
	for _, tc := range []struct {
		name, target, body, message string
	}{
		{"push, not UTF-8 and a reserved name", "/api/v1/push",
			"{\"items\":[{\"queue\":\"" + probe + "\",\"payload\":\"\xff\"}]}", "body is not valid UTF-8 at byte 60"},
		{"transaction, not UTF-8 past the JSON", "/api/v1/transaction",
			"{\"operations\":[{\"type\":\"push\",\"items\":[{\"queue\":\"q\"}]}]}\xc3", "body is not valid UTF-8 at byte 56"},
		{"push, byte-order mark and a reserved name", "/api/v1/push",
			"\xef\xbb\xbf{\"items\":[{\"queue\":\"" + probe + "\"}]}", "body starts with a UTF-8 byte-order mark; send the JSON without it"},
		{"push, reserved name in a body the reader refuses", "/api/v1/push",
			`{"items":[{"queue":"` + probe + `"},7]}`, tenancy.ReservedNameMessage},
		{"transaction, reserved name in a body it accepts", "/api/v1/transaction",
			`{"operations":[{"type":"push","items":[{"queue":"` + probe + `"}]}]}`, tenancy.ReservedNameMessage},
		{"push, refused by the reader alone", "/api/v1/push",
			`{"items":[{"queue":"q"},7]}`, "item 1 is not an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, seen := g.do(t, proCall("POST", tc.target, tc.body), nil)
			expect(t, w, seen, 400, "bad_request")
			var body map[string]string
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body["error"] != tc.message {
				t.Fatalf("message %q, want %q", body["error"], tc.message)
			}
		})
	}
}
