package limits

import (
	"reflect"
	"testing"
)

// sdkItem takes the items the SDKs send, and reads them as fastFields
// does; anything else it leaves to fastFields.
func TestSDKItemReadsAsFastFields(t *testing.T) {
	const txn = `"transactionId":"01a22ac0-cdf8-75d8-a2e3-6df0297938b5"`
	const trace = `"traceId":"3f1c2b9a-5d4e-4a6b-9c8d-7e6f5a4b3c2d"`
	taken := []string{
		`{"queue":"orders","partition":"customer-1","payload":{"orderId":1,"note":"Zürich"},` + txn + `,` + trace + `}`,
		`{"queue":"orders","partition":"Default","payload":"text",` + txn + `}`,
		`{"queue":"","partition":"p","payload":null,` + txn + `}`,
	}
	left := []string{
		`{"queue":"orders","payload":1,` + txn + `}`,
		`{"partition":"p","queue":"orders","payload":1,` + txn + `}`,
		`{"queue":"orders","partition":"p","payload":1,` + txn + `,` + trace + `,"queue":"other"}`,
		`{"queue":"orders","partition":"p","payload":1,"transactionId":"short"}`,
		`{"queue":"orders","partition":"p","payload":1,` + txn + `,"traceId":"not a uuid, not one at all, no......"}`,
		`{"queue":"a-queue-name-over-sixteen-bytes","partition":"p","payload":1,` + txn + `}`,
		`{"queue":"orders","partition":"p","payload":[1,],` + txn + `}`,
		`{ "queue":"orders","partition":"p","payload":1,` + txn + `}`,
		`{"queue":0","partition":"p","payload":1,` + txn + `}`,
		`{"queue":"q","partition":7","payload":1,` + txn + `}`,
		`{"queue":"q","partition":"p","payload":1,` + txn + `,"traceId":x3f1c2b9a-5d4e-4a6b-9c8d-7e6f5a4b3c2d"}`,
	}
	for _, item := range append(append([]string{}, taken...), left...) {
		body := []byte(item + `]}`)
		var sv, fv pushFields
		var sp, fp uint8
		se := sdkItem(body, 0, pushValueDepth, &sv, &sp)
		fe := fastFields(body, 0, pushValueDepth, &fv, &fp)
		isTaken := false
		for _, x := range taken {
			isTaken = isTaken || x == item
		}
		switch {
		case isTaken && se < 0:
			t.Errorf("%s: not taken", item)
		case !isTaken && se >= 0:
			t.Errorf("%s: taken", item)
		case se >= 0 && (se != fe || !reflect.DeepEqual(sv, fv) || sp != fp):
			t.Errorf("%s: read %d %q %b, fastFields %d %q %b", item, se, sv, sp, fe, fv, fp)
		}
	}
}
