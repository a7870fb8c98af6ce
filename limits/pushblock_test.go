package limits

import "testing"

type flag map[string]PushBlock

func (f flag) PushBlock(id string) PushBlock { return f[id] }

func TestDecidePushBlock(t *testing.T) {
	storage := flag{"a": PushBlockedStorage}
	monthly := flag{"a": PushBlockedMonthly, "b": PushBlockedMonthly}
	cases := []struct {
		cluster string
		billing bool
		sources []PushBlockSource
		want    PushBlock
	}{
		{"a", false, nil, PushOpen},
		{"a", true, nil, PushBlockedBilling},
		{"a", true, []PushBlockSource{monthly, storage}, PushBlockedStorage}, // storage wins over monthly, in any source order
		{"b", true, []PushBlockSource{storage, monthly}, PushBlockedMonthly},
		{"c", false, []PushBlockSource{storage, monthly}, PushOpen},
		{"c", true, []PushBlockSource{storage, monthly}, PushBlockedBilling},
	}
	for _, c := range cases {
		if got := DecidePushBlock(c.cluster, c.billing, c.sources); got != c.want {
			t.Errorf("DecidePushBlock(%s, billing=%v) = %d, want %d", c.cluster, c.billing, got, c.want)
		}
	}
}
