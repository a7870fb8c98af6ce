//go:build realbroker

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// bodyCase is one body of the differential reading test and the route it
// is sent to.
type bodyCase struct {
	name string
	path string
	body []byte
}

// seedBodies reads the []byte value of every seed of a fuzz corpus
// directory ("go test fuzz v1" files); a missing directory has none.
func seedBodies(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			lit, ok := strings.CutPrefix(line, "[]byte(")
			if !ok {
				continue
			}
			s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
			if err != nil {
				t.Fatalf("seed %s: %v", f, err)
			}
			out[filepath.Base(f)] = []byte(s)
			break
		}
	}
	return out
}

// differentialBodies is every seed of the produce corpus (to push and to
// transaction), of the configure corpus (to configure) and of the JSON
// checker's corpus (to push), then n generated bodies.
func differentialBodies(t *testing.T, n int) []bodyCase {
	t.Helper()
	var cases []bodyCase
	add := func(dir, prefix string, paths ...string) {
		seeds := seedBodies(t, dir)
		names := make([]string, 0, len(seeds))
		for name := range seeds {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			for _, p := range paths {
				cases = append(cases, bodyCase{name: prefix + name + " " + p, path: p, body: seeds[name]})
			}
		}
	}
	add("../limits/testdata/fuzz/FuzzParseProduce", "produce/", "/api/v1/push", "/api/v1/transaction")
	add("../limits/testdata/fuzz/FuzzConfigure", "configure/", "/api/v1/configure")
	add("../wire/testdata/fuzz/FuzzCheck", "check/", "/api/v1/push")
	if len(cases) < 50 {
		t.Fatalf("only %d corpus bodies: the corpora moved?", len(cases))
	}
	g := bodyGenerator{rng: rand.New(rand.NewPCG(23, 2026))}
	for i := range n {
		path := "/api/v1/push"
		body := g.push()
		if i%3 == 2 {
			path, body = "/api/v1/transaction", g.transaction()
		}
		cases = append(cases, bodyCase{name: fmt.Sprintf("generated/%d %s", i, path), path: path, body: body})
	}
	return cases
}

// bodyGenerator writes produce bodies the way clients and careless clients
// do: escaped and repeated member names, partitions and transaction ids of
// every type, payloads of every kind, odd whitespace, and now and then a
// body cut short or with something after it. It never writes what poisons
// a broker (U+0000, a traceId that is no UUID, names over 255 characters):
// those are schemaPoison's.
type bodyGenerator struct {
	rng *rand.Rand
	txn int
}

func (g *bodyGenerator) pick(options ...string) string { return options[g.rng.IntN(len(options))] }

func (g *bodyGenerator) space() string { return g.pick("", "", "", " ", "\n\t", "  ") }

func (g *bodyGenerator) member(key, value string) string {
	return g.space() + key + g.space() + ":" + g.space() + value + g.space()
}

func (g *bodyGenerator) queueName() string {
	if g.rng.IntN(15) == 0 {
		return g.pick(`""`, `7`, `null`)
	}
	return g.pick(`"gen"`, `"gen"`, `"gen-b"`, `"g\u00e9n"`, `"géné"`, `"gen.sub"`, `"GEN"`, `"gen\"q"`, `"gen\\/x"`)
}

func (g *bodyGenerator) payload() string {
	return g.pick(`{"n":1}`, `{"n":1.5e3,"s":"x\u00e9\ud83d\ude00"}`, `[1,2,3]`, `"text"`, `42`, `-0`, `true`, `null`, `{}`, `[]`,
		`{"deep":{"a":[{"b":[null,false]}]}}`, `{"a":1,"a":2}`, `123456789012345678901234567890`, `{"big":1e308}`, `"\/\b\f\n\r\t"`)
}

func (g *bodyGenerator) item() string {
	var members []string
	if g.rng.IntN(30) != 0 {
		members = append(members, g.member(g.pick(`"queue"`, `"queue"`, `"queue"`, `"\u0071ueue"`), g.queueName()))
	}
	if g.rng.IntN(6) == 0 {
		members = append(members, g.member(`"queue"`, g.queueName())) // repeated: the last wins
	}
	switch g.rng.IntN(6) {
	case 0:
		members = append(members, g.member(`"partition"`, g.pick(`"p1"`, `"p2"`, `null`, `""`, `"Default"`, `"p\u00e9"`, `"p1"`, `3`)))
	case 1:
		members = append(members, g.member(`"p\u0061rtition"`, `"p3"`))
	}
	switch g.rng.IntN(5) {
	case 0:
		g.txn++
		members = append(members, g.member(`"transactionId"`, fmt.Sprintf(`"gen-%d"`, g.txn)))
	case 1:
		members = append(members, g.member(`"transactionId"`, fmt.Sprintf(`"gen-%d"`, g.rng.IntN(g.txn+1)))) // maybe a duplicate
	case 2:
		members = append(members, g.member(`"transactionId"`, g.pick(`5`, `null`, `""`)))
	}
	if g.rng.IntN(8) != 0 {
		members = append(members, g.member(g.pick(`"payload"`, `"payload"`, `"data"`), g.payload()))
	}
	if g.rng.IntN(10) == 0 {
		members = append(members, g.member(`"traceId"`, g.pick(`"6f2c8a52-2f0e-4d43-9a3b-5b6a8e1c0d11"`, `null`, `""`)))
	}
	g.rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	return "{" + strings.Join(members, ",") + "}"
}

func (g *bodyGenerator) items() string {
	var items []string
	for range g.rng.IntN(5) {
		items = append(items, g.item())
	}
	return "[" + strings.Join(items, ",") + "]"
}

// mangle sometimes breaks a well-formed body.
func (g *bodyGenerator) mangle(body string) []byte {
	switch g.rng.IntN(30) {
	case 0:
		return []byte(body[:g.rng.IntN(len(body))])
	case 1:
		return []byte(body + g.pick(" x", ",", "}", " /* c */", "\n"))
	case 2:
		return []byte(strings.Replace(body, "}", ",}", 1))
	case 3:
		return []byte(g.space() + body + g.space())
	}
	return []byte(body)
}

func (g *bodyGenerator) push() []byte {
	members := []string{g.member(`"items"`, g.items())}
	if g.rng.IntN(8) == 0 {
		members = append(members, g.member(`"items"`, g.items()))
	}
	if g.rng.IntN(8) == 0 {
		members = append(members, g.member(`"extra"`, g.payload()))
	}
	return g.mangle("{" + strings.Join(members, ",") + "}")
}

func (g *bodyGenerator) transaction() []byte {
	var ops []string
	for range 1 + g.rng.IntN(3) {
		switch g.rng.IntN(4) {
		case 0: // the flat form: the operation is the item
			ops = append(ops, strings.Replace(g.item(), "{", `{"type":"push",`, 1))
		default:
			ops = append(ops, "{"+g.member(`"type"`, g.pick(`"push"`, `"push"`, `"push"`, `"ack"`))+","+g.member(`"items"`, g.items())+"}")
		}
	}
	return g.mangle(`{"operations":[` + strings.Join(ops, ",") + "]}")
}

// poisonBodies are bodies the broker's schema cannot store, one per rule,
// so that the poison path runs whatever the corpora hold.
func poisonBodies() []bodyCase {
	long := strings.Repeat("q", 256)
	return []bodyCase{
		{name: "poison/nul-payload", path: "/api/v1/push", body: []byte(`{"items":[{"queue":"poison","payload":{"a":"x\u0000y"}}]}`)},
		{name: "poison/trace-not-uuid", path: "/api/v1/push", body: []byte(`{"items":[{"queue":"poison","payload":1,"traceId":"bad"}]}`)},
		{name: "poison/queue-long", path: "/api/v1/push", body: []byte(`{"items":[{"queue":"` + long + `","payload":1}]}`)},
		{name: "poison/txn-id-long", path: "/api/v1/transaction",
			body: []byte(`{"operations":[{"type":"push","items":[{"queue":"poison","payload":1,"transactionId":"` + long + `"}]}]}`)},
	}
}

// schemaPoison says why the broker's schema cannot store a well-formed
// body's values (docs/enforcement.md on branch schema-caps: U+0000
// anywhere, a queue, partition or transactionId over 255 characters, a
// traceId that is no UUID), or "" when it can. Such a push is answered
// "buffered" and retried by the broker for ever: it poisons it.
func schemaPoison(body []byte) string {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	if holdsNUL(v) {
		return "U+0000"
	}
	top, _ := v.(map[string]any)
	for _, it := range decodedItems(top) {
		im, _ := it.(map[string]any)
		for _, key := range []string{"queue", "partition", "transactionId"} {
			if s, ok := im[key].(string); ok && utf8.RuneCountInString(s) > 255 {
				return key + " over 255 characters"
			}
		}
		switch tr := im["traceId"].(type) {
		case nil:
		case string:
			if tr != "" && !uuidInput.MatchString(tr) {
				return "traceId not a UUID"
			}
		default:
			return "traceId not a UUID"
		}
	}
	return ""
}

// decodedItems are the items of a decoded push or transaction body: a
// push's items, and each operation's items, or the operation itself where
// it has none (the broker reads such an operation as one item).
func decodedItems(top map[string]any) []any {
	var items []any
	if arr, ok := top["items"].([]any); ok {
		items = append(items, arr...)
	}
	if ops, ok := top["operations"].([]any); ok {
		for _, op := range ops {
			om, _ := op.(map[string]any)
			if arr, ok := om["items"].([]any); ok {
				items = append(items, arr...)
			} else if om != nil {
				items = append(items, om)
			}
		}
	}
	return items
}

// uuidInput is what PostgreSQL's uuid input reads: 32 hex digits, a
// hyphen allowed after any group of four but the last, optionally in
// braces.
var uuidInput = regexp.MustCompile(`^(\{[0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7}\}|[0-9a-fA-F]{4}(-?[0-9a-fA-F]{4}){7})$`)

func holdsNUL(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.ContainsRune(x, 0)
	case []any:
		for _, e := range x {
			if holdsNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if strings.ContainsRune(k, 0) || holdsNUL(e) {
				return true
			}
		}
	}
	return false
}

// gatewayRefused reports whether an answer is the gateway's own refusal
// (its envelope), not a broker answer it relayed.
func gatewayRefused(r response) (code, message string, refused bool) {
	var env struct {
		Error     string `json:"error"`
		Code      string `json:"code"`
		RequestID string `json:"request_id"`
	}
	if json.Unmarshal(r.body, &env) != nil || env.Code == "" || env.RequestID == "" || env.Code == "internal_error" {
		return "", "", false
	}
	return env.Code, env.Error, true
}

// brokerAnswerRefuses reports whether a broker answer refuses the body: an
// error status, or an error in the answer.
func brokerAnswerRefuses(r response) bool {
	if r.status >= 400 {
		return true
	}
	var m map[string]any
	if json.Unmarshal(r.body, &m) == nil {
		if _, isErr := m["error"]; isErr || m["success"] == false {
			return true
		}
	}
	return bytes.Contains(r.body, []byte(`"status":"failed"`)) || bytes.Contains(r.body, []byte(`"status":"error"`))
}
