package meter

import "testing"

// TestBillableClasses: what is billed is the messages of pushes and
// transactions, nothing else (docs/metering.md).
func TestBillableClasses(t *testing.T) {
	for op, want := range map[Op]bool{OpPush: true, OpTxn: true, OpDelivery: false, OpConfigure: false, OpRead: false, "other": false} {
		if op.Billable() != want {
			t.Errorf("%s billable = %v, want %v", op, op.Billable(), want)
		}
	}
}
