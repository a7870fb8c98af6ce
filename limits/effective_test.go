package limits

import "testing"

func TestApplyOverrides(t *testing.T) {
	plan := AllUnlimited()
	plan.MaxQueues = 20
	plan.ReqBurst = 25
	plan.MaxPayloadBytes = 262144

	cases := []struct {
		name      string
		overrides string
		check     func(Effective) bool
	}{
		{"empty keeps plan", ``, func(e Effective) bool { return e == plan }},
		{"empty object keeps plan", `{}`, func(e Effective) bool { return e == plan }},
		{"number replaces", `{"max_queues": 50}`, func(e Effective) bool { return e.MaxQueues == 50 && e.ReqBurst == 25 }},
		{"null is unlimited", `{"max_queues": null}`, func(e Effective) bool { return e.MaxQueues.IsUnlimited() }},
		{"string falls back to plan", `{"max_queues": "9"}`, func(e Effective) bool { return e.MaxQueues == 20 }},
		{"negative falls back to plan", `{"max_queues": -3}`, func(e Effective) bool { return e.MaxQueues == 20 }},
		{"fraction falls back to plan", `{"max_queues": 2.5}`, func(e Effective) bool { return e.MaxQueues == 20 }},
		{"zero is a real cap", `{"req_burst": 0}`, func(e Effective) bool { return e.ReqBurst == 0 && !e.ReqBurst.IsUnlimited() }},
		{"sets an unlimited plan field", `{"max_parked_pops": 7}`, func(e Effective) bool { return e.MaxParkedPops == 7 }},
		{"unknown key ignored", `{"monthly_msgs_quota": 5, "nope": 1}`, func(e Effective) bool { return e == plan }},
		{"not an object keeps plan", `[1,2]`, func(e Effective) bool { return e == plan }},
		{"invalid json keeps plan", `{"max_queues":`, func(e Effective) bool { return e == plan }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ApplyOverrides(plan, []byte(tc.overrides))
			if !tc.check(got) {
				t.Fatalf("ApplyOverrides(%s) = %+v", tc.overrides, got)
			}
		})
	}
}

func TestAllUnlimited(t *testing.T) {
	e := AllUnlimited()
	for key, f := range e.fields() {
		if !f.IsUnlimited() {
			t.Errorf("%s = %d, want unlimited", key, *f)
		}
	}
}
