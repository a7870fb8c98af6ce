package fakebroker

import "testing"

func TestBrokerParam(t *testing.T) {
	for q, want := range map[string]bool{
		"wait=true": true, "wait=1": true, "await=true": true, "x=wait=true": true,
		"await=false&wait=true": false, "w%61it=true": false, "wait=%74rue": true, "wait=": false,
	} {
		if got := brokerParamBool(q, "wait", false); got != want {
			t.Errorf("wait in %q = %v, want %v", q, got, want)
		}
	}
	for q, want := range map[string]int{
		"timeout=1500": 1500, "timeout=1500ms": 1500, "timeout=+1500": 1500, "timeout=%2D7": -7,
		"timeout=abc": 30000, "timeout=2147483648": 30000, "": 30000,
	} {
		if got := brokerParamInt(q, "timeout", 30000); got != want {
			t.Errorf("timeout in %q = %d, want %d", q, got, want)
		}
	}
	if got := brokerURLDecode("a%zz%7gb%4"); got != "a%zz\x07b%4" {
		t.Errorf("malformed escapes decode to %q", got)
	}
}
