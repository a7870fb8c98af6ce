package webhook

import (
	"strings"
	"testing"
	"time"
)

// The example of the Standard Webhooks specification: its secret, id,
// timestamp and body, and the signature it publishes for them.
func TestSignatureMatchesTheSpecificationsExample(t *testing.T) {
	key, err := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := Signature([][]byte{key}, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %q, want %q", got, want)
	}
}

func TestSignatureCarriesOnePerKey(t *testing.T) {
	a, b := []byte(strings.Repeat("a", 32)), []byte(strings.Repeat("b", 32))
	two := Signature([][]byte{a, b}, "id", time.Unix(1, 0), []byte("{}"))
	parts := strings.Split(two, " ")
	if len(parts) != 2 || parts[0] != Signature([][]byte{a}, "id", time.Unix(1, 0), []byte("{}")) ||
		parts[1] != Signature([][]byte{b}, "id", time.Unix(1, 0), []byte("{}")) || parts[0] == parts[1] {
		t.Fatalf("two keys signed %q", two)
	}
}

func TestSecrets(t *testing.T) {
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	if k, err := ParseSecret(s); err != nil || len(k) != secretBytes {
		t.Fatalf("ParseSecret(NewSecret()) = %d bytes, %v", len(k), err)
	}
	for _, bad := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_!!!!", "whsec_YWJj",
		"whsec_" + strings.Repeat("QUFB", 30), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS"} {
		if _, err := ParseSecret(bad); err == nil {
			t.Errorf("ParseSecret(%q) took it", bad)
		}
	}
}

func TestCheckURL(t *testing.T) {
	for _, ok := range []string{"https://hooks.example.com/queen", "http://192.0.2.5:8080/x?y=1"} {
		if err := CheckURL(ok); err != nil {
			t.Errorf("CheckURL(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "ftp://example.com", "https://", "https://user:pw@example.com/", "https://example.com/#x",
		"example.com/hook", "https://exa mple.com/"} {
		if err := CheckURL(bad); err == nil {
			t.Errorf("CheckURL(%q) took it", bad)
		}
	}
}

func TestBackoffDoublesUpToTheCap(t *testing.T) {
	d := New(Config{RetryBase: 5 * time.Second, RetryMax: time.Minute})
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, d.Backoff(n))
	}
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute, time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoff %v, want %v", got, want)
		}
	}
	// The defaults: hours of retries before an endpoint is disabled.
	def := New(Config{})
	var total time.Duration
	n := 0
	for total < DefaultDisableAfter {
		n++
		total += def.Backoff(n)
	}
	t.Logf("default schedule: %d attempts over %s before an always-failing endpoint is disabled (first waits %s, %s, %s …, capped at %s)",
		n+1, DefaultDisableAfter, def.Backoff(1), def.Backoff(2), def.Backoff(3), DefaultRetryMax)
}
