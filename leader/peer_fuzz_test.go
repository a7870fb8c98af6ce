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

// FuzzPeerNonce: a peer request's query is read only when it is exactly
// one nonce of 32 lower-case hex digits, one sender, one time of at most
// 15 decimal digits and one proof of 64 lower-case hex digits, with grant
// and grant_proof once each or neither; and a query read is answered only
// when its proof is the secret's for exactly what it says.
func FuzzPeerNonce(f *testing.F) {
	nonce, proof := strings.Repeat("0f", 16), strings.Repeat("ab", 32)
	ask := "nonce=" + nonce + "&from=b&at=1800000000000&proof=" + proof
	grant := "&grant=1.5.00&grant_proof=" + proof
	for _, s := range []string{ask, ask + grant, "nonce=" + nonce, "nonce=", "nonce=zz&x=1", "nonce=%30%31", "a;b",
		ask + "&nonce=1", "nonce=" + nonce + "&from=b&grant=1.5.00" + grant, ask + "&grant=1.5.00", ask + grant + "&from=c",
		strings.Replace(ask, "at=1800000000000", "at=-1", 1), strings.Replace(ask, "at=1800000000000", "at=1e3", 1),
		strings.Replace(ask, "from=b", "from=", 1), strings.ToUpper(ask)} {
		f.Add(s)
	}
	e := New(Config{Group: "g", Name: "a", Store: newMemStore(), MemberNames: []string{"a", "b"}})
	f.Fuzz(func(t *testing.T, raw string) {
		q, ok := parsePeerQuery(raw)
		if !ok {
			return
		}
		if !lowerHex(q.nonce, nonceHex) || !lowerHex(q.proof, 64) || q.from == "" || len(q.from) > maxMemberName || q.at < 0 {
			t.Fatalf("ask %+v from %q", q, raw)
		}
		if (q.grant == "") != (q.grantProof == "") || len(q.grant) > maxToken {
			t.Fatalf("grant %+v from %q", q, raw)
		}
		if e.askAllowed(testSecret, q, time.UnixMilli(q.at)) && askProof(testSecret, "g", q.from, q.nonce, q.at) != q.proof {
			t.Fatalf("answered an ask the secret did not prove: %+v", q)
		}
	})
}

// FuzzPeerToken: a token is read back only when this elector instance made
// it under this secret, for this group and gateway.
func FuzzPeerToken(f *testing.F) {
	var instance [16]byte
	f.Add(peerToken(testSecret, instance, "g", "a", 3, 12345))
	f.Add("3.12345.00")
	f.Add("3.-1." + strings.Repeat("0", 32))
	f.Add("...")
	f.Fuzz(func(t *testing.T, token string) {
		epoch, at, ok := readPeerToken(testSecret, instance, "g", "a", token)
		if !ok {
			return
		}
		if epoch < 1 || at < 0 || token != peerToken(testSecret, instance, "g", "a", epoch, at) {
			t.Fatalf("accepted %q as epoch %d at %d", token, epoch, at)
		}
		if _, _, ok := readPeerToken(testSecret, [16]byte{1}, "g", "a", token); ok {
			t.Fatalf("another instance read %q", token)
		}
	})
}
