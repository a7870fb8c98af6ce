package meter

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/queengate/queengate/internal/cellerror"
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

// FuzzScannersMatchDecoding: whenever the fast pop scanner answers, it
// answers exactly what decoding with encoding/json gives.
func FuzzScannersMatchDecoding(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		n, ids, ok := scanPopBilling(body)
		if !ok {
			return
		}
		var r popAnswer
		if !decodeLenient(body, &r) {
			t.Fatalf("pop %q: scanned, but encoding/json refuses it", body)
		}
		wantN, wantIDs := billDecodedPop(body)
		if n != wantN || !slices.Equal(ids, wantIDs) {
			t.Fatalf("pop %q: scanned %d %q, decoded %d %q", body, n, ids, wantN, wantIDs)
		}
	})
}

func TestScannersTakeTheCommonAnswers(t *testing.T) {
	n, ids, ok := scanPopBilling([]byte(scanSeeds[10]))
	if !ok || n != 3 || !slices.Equal(ids, []string{"p/t/g", "id/i2/other"}) {
		t.Fatalf("the pop scanner on an ordinary answer: %v %d %q", ok, n, ids)
	}
	// A null member leaves the field as an earlier member set it.
	n, ids, ok = scanPopBilling([]byte(`{"consumerGroup":"g","consumerGroup":null,"messages":[{"id":"a","id":null}]}`))
	if !ok || n != 1 || !slices.Equal(ids, []string{"id/a/g"}) {
		t.Fatalf("null members: %v %d %q", ok, n, ids)
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

// scanPopBilling is BillPop's fast path alone: ok false where it declines
// the answer (BillPop then decodes it).
func scanPopBilling(body []byte) (messages int64, ids []string, ok bool) {
	a := ReadPopAnswer(http.StatusOK, body)
	defer a.Release()
	if a.decoded {
		return 0, nil, false
	}
	return a.Messages(), popKeys(a.body, a.biller.watch.msgs, a.biller.watch.group), true
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
