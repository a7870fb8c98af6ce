package limits

import "testing"

func TestCheckCarveOut(t *testing.T) {
	lim := AllUnlimited()
	if r := CheckCarveOut(MaxCarveOutBodyBytes, DefaultMaxBatchItems, 0, 1<<19, lim, 0); r != nil {
		t.Fatalf("at every bound: %s", r.Message)
	}
	if r := CheckCarveOut(MaxCarveOutBodyBytes+1, 1, 0, 1, lim, 0); r == nil {
		t.Fatal("a body over the carve-out cap passed")
	}
	if r := CheckCarveOut(100, DefaultMaxBatchItems+1, 0, 1, lim, 0); r == nil {
		t.Fatal("more operations than the default batch cap passed")
	}
	if r := CheckCarveOut(100, 51, 0, 1, lim, 50); r == nil || r.Message != "batch of 51 operations exceeds max_batch_items (50)" {
		t.Fatalf("the gateway's batch cap: %v", r)
	}
	lim.MaxBatchItems, lim.MaxPayloadBytes = 5, 10
	if r := CheckCarveOut(100, 6, 0, 1, lim, 50); r == nil || r.Message != "batch of 6 operations exceeds max_batch_items (5)" {
		t.Fatalf("the plan's batch cap: %v", r)
	}
	if r := CheckCarveOut(100, 2, 1, 11, lim, 50); r == nil || r.Message != "operation 1: value 11 bytes exceeds max_payload_bytes (10)" {
		t.Fatalf("the plan's payload cap: %v", r)
	}
	if r := CheckCarveOut(100, 5, 1, 10, lim, 50); r != nil {
		t.Fatalf("within the plan: %s", r.Message)
	}
}
