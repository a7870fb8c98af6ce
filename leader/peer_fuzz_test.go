package leader

import (
	"strings"
	"testing"
	"time"
)

// FuzzPeerAnswer feeds any bytes a peer address may send to the answer
// reader: it never panics, and accepts only what a holder of the secret
// proved for this nonce, holder and group.
func FuzzPeerAnswer(f *testing.F) {
	nonce := strings.Repeat("5a", 16)
	f.Add(encodePeerAnswer(testSecret, nonce, PeerAnswer{Group: "g", Gateway: "a", Leading: true, Epoch: 3, LeadingFor: time.Second}))
	f.Add(encodePeerAnswer(testSecret, nonce, PeerAnswer{Group: "g", Gateway: "a"}))
	f.Add([]byte(`{"group":"g","gateway":"a","leading":true,"epoch":3,"leading_for_ms":1000,"proof":"00"}`))
	f.Add([]byte(`{"leading":true,"leading_for_ms":-5}`))
	f.Add([]byte(`<html>not a peer</html>`))
	f.Fuzz(func(t *testing.T, body []byte) {
		a, err := decodePeerAnswer(testSecret, nonce, "g", "a", body)
		if err != nil {
			return
		}
		if a.Group != "g" || a.Gateway != "a" || a.LeadingFor < 0 || (a.Leading && a.LeadingFor == 0) {
			t.Fatalf("accepted %+v", a)
		}
		// Whatever was accepted, the proof is one the secret makes.
		if _, err := decodePeerAnswer([]byte("another secret of thirty-two byt"), nonce, "g", "a", body); err == nil {
			t.Fatalf("accepted under two secrets: %q", body)
		}
	})
}

// FuzzPeerNonce: a peer request's query yields a nonce only when it is
// exactly one nonce of 32 lower-case hex digits.
func FuzzPeerNonce(f *testing.F) {
	for _, s := range []string{"nonce=" + strings.Repeat("0f", 16), "nonce=", "nonce=zz&x=1", "nonce=%30%31", "a;b", "nonce=" + strings.Repeat("0f", 16) + "&nonce=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		n, ok := peerNonce(q)
		if !ok {
			return
		}
		if len(n) != nonceHex || strings.Trim(n, "0123456789abcdef") != "" {
			t.Fatalf("nonce %q from %q", n, q)
		}
	})
}
