package meter

import (
	"reflect"
	"testing"
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
}

// FuzzScannersMatchDecoding: whenever the fast pop scanner answers, it
// answers exactly what encoding/json would.
func FuzzScannersMatchDecoding(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast, slow popAnswer
		if scanPopAnswer(body, &fast) {
			if !decodeLenient(body, &slow) {
				t.Fatalf("pop %q: scanned, but encoding/json refuses it", body)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("pop %q: scanned %+v, decoded %+v", body, fast, slow)
			}
		}
	})
}

func TestScannersTakeTheCommonAnswers(t *testing.T) {
	var r popAnswer
	if !scanPopAnswer([]byte(scanSeeds[10]), &r) || len(r.Messages) != 3 || r.Messages[2].ConsumerGroup != "other" {
		t.Fatalf("the pop scanner on an ordinary answer: %+v", r)
	}
}
