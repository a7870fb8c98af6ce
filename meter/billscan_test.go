package meter

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/cellerror"
	"github.com/queengate/queengate/wire"
)

var scanSeeds = []string{
	`[{"index":0,"status":"queued","queueName":"q"},{"status":"buffered"},{"status":"duplicate"}]`,
	`[{"status":"queued","status":"failed"}]`,
	`[{"Status":"queued"}]`,
	`[{"st\u0061tus":"queued"}]`,
	`[{"status":"qu\u0065ued"}]`,
	`[{"status":null},{"status":7},null,3,{}]`,
	`[]`, `[`, `{}`, ``,
	`{"consumerGroup":"g","messages":[{"id":"i1","partitionId":"p","transactionId":"t"},null,{"consumerGroup":"other","id":"i2"}]}`,
	`{"messages":[{"partitionId":"p","transactionId":"t","PartitionId":"x"}]}`,
	`{"messages":null}`, `{"messages":[1]}`, `{"error":"x","messages":[]}`,
	`{"messages":[{"transactionId":"t"}],"messages":[{"id":"late"}]}`,
	`{"consumerGroup":5,"messages":[{"id":"i"}]}`,
	`{"consumerGroup":"g","consumerGroup":null,"messages":[{"id":"a","id":null},{"partitionId":"p","transactionId":""},{"consumerGroup":"","id":"b"}]}`,
	`{"messages":[{"partitionId":"p","tranſactionId":"x","transactionId":"t"}]}`,
	`{"meſſages":[{"id":"hidden"}],"messages":[]}`,
}

// modelBillPop is BillPop by the rules of answers (doc.go), written
// independently of wire.Stream, over wire.Check and wire's walkers: the
// answer must be one well-formed object; its last member named exactly
// "messages", when an array, holds the messages, each element one; a
// message is keyed from the last of each of its members named exactly
// id, partitionId, transactionId and consumerGroup (else the answer's
// last consumerGroup), each a plain string or null (empty), and gets no
// key when one of them is anything else. repeats reports that an object
// the model read named one of those members twice.
func modelBillPop(body []byte) (messages int64, ids []string, repeats bool) {
	if wire.Check(body) != nil {
		return 0, nil, false
	}
	i := wire.SkipSpace(body, 0)
	if body[i] != '{' {
		return 0, nil, false
	}
	// field reads a keying member's value: plain string, null or bad.
	field := func(v []byte) (string, bool) {
		if string(v) == "null" {
			return "", true
		}
		if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 {
			return "", false
		}
		return string(v[1 : len(v)-1]), true
	}
	top := struct {
		text string
		ok   bool
	}{"", true}
	seenTop := false
	var list []byte
	wire.Members(body, i, func(k []byte, at int) int {
		end := wire.ValueEnd(body, at)
		switch {
		case wire.UnescapedIs(k, "messages"):
			repeats = repeats || list != nil
			list = body[at:end]
		case wire.UnescapedIs(k, "consumerGroup"):
			repeats = repeats || seenTop
			seenTop = true
			top.text, top.ok = field(body[at:end])
		}
		return end
	})
	if len(list) == 0 || list[0] != '[' {
		return 0, nil, repeats
	}
	wire.Elements(list, 0, func(at int) int {
		end := wire.ValueEnd(list, at)
		messages++
		if list[at] != '{' {
			return end
		}
		m := membersOf(list, at, &repeats, field)
		group := m[3]
		if group.text == "" && group.ok {
			group = top
		}
		if !m[0].ok || !m[1].ok || !m[2].ok || !group.ok {
			return end
		}
		switch {
		case m[1].text != "" && m[2].text != "":
			ids = append(ids, m[1].text+"/"+m[2].text+"/"+group.text)
		case m[0].text != "":
			ids = append(ids, "id/"+m[0].text+"/"+group.text)
		}
		return end
	})
	return messages, ids, repeats
}

// membersOf is modelBillPop's reading of one message object at b[at]:
// id, partitionId, transactionId, consumerGroup.
func membersOf(b []byte, at int, repeats *bool, field func([]byte) (string, bool)) [4]struct {
	text string
	ok   bool
} {
	var got [4]struct {
		text string
		ok   bool
	}
	var seen [4]bool
	for n := range got {
		got[n].ok = true
	}
	wire.Members(b, at, func(k []byte, at int) int {
		end := wire.ValueEnd(b, at)
		for n, name := range [...]string{"id", "partitionId", "transactionId", "consumerGroup"} {
			if wire.UnescapedIs(k, name) {
				*repeats = *repeats || seen[n]
				seen[n] = true
				got[n].text, got[n].ok = field(b[at:end])
			}
		}
		return end
	})
	return got
}

// FuzzScannersMatchDecoding: BillPop bills and keys every answer as the
// model of the rules of answers does (modelBillPop).
func FuzzScannersMatchDecoding(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n, ids := BillPop(http.StatusOK, body)
		wantN, wantIDs, _ := modelBillPop(body)
		if n != wantN || !slices.Equal(ids, wantIDs) {
			t.Fatalf("pop %q: BillPop %d %q, the model %d %q", body, n, ids, wantN, wantIDs)
		}
	})
}

func TestScannersTakeTheCommonAnswers(t *testing.T) {
	n, ids, ok := scanPopBilling([]byte(scanSeeds[10]))
	if !ok || n != 3 || !slices.Equal(ids, []string{"p/t/g", "id/i2/other"}) {
		t.Fatalf("the pop scanner on an ordinary answer: %v %d %q", ok, n, ids)
	}
	// The last member wins, null too: it empties what an earlier one set.
	n, ids, ok = scanPopBilling([]byte(`{"consumerGroup":"g","consumerGroup":null,"messages":[{"id":"a","id":null},{"id":"b"}]}`))
	if !ok || n != 2 || !slices.Equal(ids, []string{"id/b/"}) {
		t.Fatalf("null members: %v %d %q", ok, n, ids)
	}
	// Names are the broker's, exactly: no other spelling is read.
	n, ids, ok = scanPopBilling([]byte(`{"consumerGroup":"g","Messages":[{"id":"a"}],"messages":[{"ID":"a","id":"b"}]}`))
	if !ok || n != 1 || !slices.Equal(ids, []string{"id/b/g"}) {
		t.Fatalf("names in another case: %v %d %q", ok, n, ids)
	}
	// A keying member that is not read exactly leaves its message unkeyed.
	n, ids, ok = scanPopBilling([]byte(`{"consumerGroup":"g","messages":[{"id":"\u0061"},{"id":7},{"id":"c","consumerGroup":{}},{"id":"d"}]}`))
	if !ok || n != 4 || !slices.Equal(ids, []string{"id/d/g"}) {
		t.Fatalf("unreadable keys: %v %d %q", ok, n, ids)
	}
}

// The fast path allocates the keys and their list, nothing per message.
func TestScanPopBillingAllocations(t *testing.T) {
	body := []byte(`{"consumerGroup":"g","messages":[` + strings.Repeat(`{"id":"i","partitionId":"p","transactionId":"t","data":{"x":[1,2]}},`, 20) + `{"id":"last"}]}`)
	allocs := testing.AllocsPerRun(100, func() {
		if n, ids, ok := scanPopBilling(body); !ok || n != 21 || len(ids) != 21 {
			t.Fatalf("%v %d %d", ok, n, len(ids))
		}
	})
	// The checker's stack, the messages beyond the first eight, the key string, its ends and the key list.
	if allocs > 8 {
		t.Fatalf("%v allocations for a 21-message pop", allocs)
	}
}

// scanPopBilling is BillPop's reading alone: ok false where the answer is
// not one well-formed object (it bills nothing).
func scanPopBilling(body []byte) (messages int64, ids []string, ok bool) {
	a := ReadPopAnswer(http.StatusOK, body)
	defer a.Release()
	w := &a.biller.watch
	return a.Messages(), popKeys(a.body, w.msgs, w.group, w.groupBad), w.isObject && a.biller.scan.OK()
}

// checkPopAnswer: the reading the gateway bills from spells BillPop's
// keys one by one, and an answer it calls the broker's envelope has no
// top-level "error" member for the gateway's error scrub to judge.
func checkPopAnswer(t *testing.T, body []byte) {
	t.Helper()
	for _, status := range []int{http.StatusOK, http.StatusNoContent, http.StatusBadRequest} {
		n, ids := BillPop(status, body)
		a := ReadPopAnswer(status, body)
		if a.Messages() != n || a.Keys() != len(ids) {
			t.Fatalf("%q (%d): read %d messages, %d keys; BillPop %d, %d", body, status, a.Messages(), a.Keys(), n, len(ids))
		}
		var key []byte
		for i, id := range ids {
			if key = a.AppendKey(key[:0], i); string(key) != id {
				t.Fatalf("%q (%d): key %d spelled %q, BillPop's %q", body, status, i, key, id)
			}
		}
		if a.BrokerShaped() {
			var top map[string]json.RawMessage
			if err := json.Unmarshal(body, &top); err != nil {
				t.Fatalf("%q: read as the broker's envelope, but encoding/json refuses it: %v", body, err)
			}
			if _, has := top["error"]; has {
				t.Fatalf("%q: read as the broker's envelope, but it has an error member", body)
			}
			if _, exposes := cellerror.InternalDetail(body); exposes {
				t.Fatalf("%q: read as the broker's envelope, but the scrub withholds it", body)
			}
		}
		a.Release()
	}
}
