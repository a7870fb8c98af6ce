package tenancy

import "testing"

func TestParseFeatures(t *testing.T) {
	f := ParseFeatures([]byte(`{"kv":true,"timers":true,"ephemeral":true,"streams":"true","traces":1}`))
	if !f.KV || !f.Timers || !f.Ephemeral || f.Streams || f.Traces {
		t.Errorf("ParseFeatures = %+v", f)
	}
	if (ParseFeatures([]byte(`not json`)) != Features{}) {
		t.Error("unparsable features must all be off")
	}
	if (ParseFeatures([]byte(`{}`)) != Features{}) {
		t.Error("missing keys must be off")
	}
}
