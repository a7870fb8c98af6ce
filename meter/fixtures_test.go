package meter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// exchange is one recorded broker exchange (testdata/broker/README.md at the repository root).
type exchange struct {
	Seq          int             `json:"seq"`
	Name         string          `json:"name"`
	Method       string          `json:"method"`
	Path         string          `json:"path"`
	RequestBody  json.RawMessage `json:"request_body"`
	Status       *int            `json:"status"`
	ResponseBody json.RawMessage `json:"response_body"`
	Truncated    bool            `json:"response_body_truncated"`
	ref          string          // "C14", "S30"
}

// body returns the response bytes as the broker sent them: a JSON body as
// recorded, a non-JSON (or truncated) body from its string, nil for none.
func (e exchange) body(t *testing.T) []byte {
	t.Helper()
	raw := bytes.TrimSpace(e.ResponseBody)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("seq %d: response body: %v", e.Seq, err)
		}
		return []byte(s)
	}
	return raw
}

func (e exchange) status(t *testing.T) int {
	t.Helper()
	if e.Status == nil {
		t.Fatalf("seq %d has no response", e.Seq)
	}
	return *e.Status
}

// brokerFixtures is the recorded traffic of the public Queen 0.15.1 broker.
const brokerFixtures = "../testdata/broker"

var (
	fixturesOnce sync.Once
	fixtures     map[string]map[int]exchange // file letter ("C", "S") -> seq -> exchange
	fixturesErr  string
)

func loadFixtures(t *testing.T) {
	t.Helper()
	fixturesOnce.Do(func() {
		fixtures = map[string]map[int]exchange{}
		for letter, file := range map[string]string{"C": "curl-catalogue.jsonl", "S": "sdk-js-session.jsonl"} {
			path := filepath.Join(brokerFixtures, file)
			f, err := os.Open(path)
			if err != nil {
				fixturesErr = "broker fixture " + path + " is unreadable: " + err.Error()
				return
			}
			byseq := map[int]exchange{}
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
			for sc.Scan() {
				line := bytes.TrimSpace(sc.Bytes())
				if len(line) == 0 {
					continue
				}
				var ex exchange
				if err := json.Unmarshal(line, &ex); err != nil {
					fixturesErr = path + ": " + err.Error()
					f.Close()
					return
				}
				ex.ref = letter + strconv.Itoa(ex.Seq)
				byseq[ex.Seq] = ex
			}
			f.Close()
			if err := sc.Err(); err != nil {
				fixturesErr = path + ": " + err.Error()
				return
			}
			fixtures[letter] = byseq
		}
	})
	if fixturesErr != "" {
		t.Fatal(fixturesErr)
	}
}

// fx returns exchange ref ("C14", "S30").
func fx(t *testing.T, ref string) exchange {
	t.Helper()
	loadFixtures(t)
	var seq int
	for _, c := range ref[1:] {
		seq = seq*10 + int(c-'0')
	}
	ex, ok := fixtures[ref[:1]][seq]
	if !ok {
		t.Fatalf("no fixture exchange %s", ref)
	}
	return ex
}

// all returns the exchanges matching method and path, across both files.
func allFixtures(t *testing.T, method string, match func(path string) bool) []exchange {
	t.Helper()
	loadFixtures(t)
	var out []exchange
	for _, byseq := range fixtures {
		for _, ex := range byseq {
			if ex.Method == method && match(ex.Path) {
				out = append(out, ex)
			}
		}
	}
	return out
}

// countTxnPushItems counts a transaction request's push items as the
// gateway does (gateway-pipeline §3.1): nested items, or one flat item with
// queue and payload; acks skipped.
func countTxnPushItems(t *testing.T, req json.RawMessage) int {
	t.Helper()
	var body struct {
		Operations []map[string]json.RawMessage `json:"operations"`
	}
	if err := json.Unmarshal(req, &body); err != nil {
		return 0
	}
	n := 0
	for _, op := range body.Operations {
		if string(op["type"]) == `"ack"` {
			continue
		}
		if items, ok := op["items"]; ok {
			var arr []json.RawMessage
			if json.Unmarshal(items, &arr) == nil {
				n += len(arr)
			}
			continue
		}
		_, q := op["queue"]
		_, p := op["payload"]
		if q && p {
			n++
		}
	}
	return n
}

// cycleGroups groups a streams cycle request's push_items by (queue,
// partition) as the gateway does (gateway-pipeline §3.5).
func cycleGroups(t *testing.T, req json.RawMessage) []CycleGroup {
	t.Helper()
	var body struct {
		PushItems []json.RawMessage `json:"push_items"`
	}
	if err := json.Unmarshal(req, &body); err != nil {
		return nil
	}
	var out []CycleGroup
	index := map[[2]string]int{}
	for _, raw := range body.PushItems {
		var it struct {
			Queue     string `json:"queue"`
			Partition string `json:"partition"`
		}
		if json.Unmarshal(raw, &it) != nil || it.Queue == "" {
			continue
		}
		if it.Partition == "" {
			it.Partition = "Default"
		}
		k := [2]string{it.Queue, it.Partition}
		if i, ok := index[k]; ok {
			out[i].Items++
			continue
		}
		index[k] = len(out)
		out = append(out, CycleGroup{Queue: it.Queue, Partition: it.Partition, Items: 1})
	}
	return out
}
