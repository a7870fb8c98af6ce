package fakebroker

import (
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var jwtTestSecret = []byte("fakebroker-test-secret-0123456789abcdef")

func signJWT(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func brokerClaims(sub, role string, exp time.Time) jwt.MapClaims {
	return jwt.MapClaims{"sub": sub, "role": role, "iat": time.Now().Unix(), "exp": exp.Unix()}
}

func bearerClient(t *testing.T, url, token string) *client {
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return &client{t: t, base: url, header: h}
}

func TestJWTAuthHS256(t *testing.T) {
	b, url := startBroker(t, Options{JWTSecret: jwtTestSecret})
	_, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Add(time.Hour)
	if status, _ := bearerClient(t, url, "").call("GET", "/health", nil); status != 200 {
		t.Fatalf("/health without a token: %d", status)
	}
	refused := map[string]struct {
		token, msg string
	}{
		"no token":      {"", "Authentication required"},
		"not a jwt":     {"s3cret", "Invalid or expired token"},
		"wrong secret":  {signJWT(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), brokerClaims("a", "admin", hour)), "Invalid or expired token"},
		"expired":       {signJWT(t, jwt.SigningMethodHS256, jwtTestSecret, brokerClaims("a", "admin", time.Now().Add(-time.Minute))), "Invalid or expired token"},
		"no exp":        {signJWT(t, jwt.SigningMethodHS256, jwtTestSecret, jwt.MapClaims{"sub": "a", "role": "admin"}), "Invalid or expired token"},
		"EdDSA token":   {signJWT(t, jwt.SigningMethodEdDSA, edPriv, brokerClaims("a", "admin", hour)), "Invalid or expired token"},
		"HS384 token":   {signJWT(t, jwt.SigningMethodHS384, jwtTestSecret, brokerClaims("a", "admin", hour)), "Invalid or expired token"},
		"unsigned none": {signJWT(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, brokerClaims("a", "admin", hour)), "Invalid or expired token"},
	}
	for name, tc := range refused {
		status, v := bearerClient(t, url, tc.token).call("GET", "/api/v1/resources/queues", nil)
		if status != 401 || v.(map[string]any)["error"] != tc.msg {
			t.Errorf("%s: %d %v, want 401 %q", name, status, v, tc.msg)
		}
	}
	for _, r := range b.Requests() {
		if r.JWTSub != "" || r.JWTRole != "" {
			t.Fatalf("refused request logged an identity: %+v", r)
		}
	}

	b.ResetRequests()
	good := signJWT(t, jwt.SigningMethodHS256, jwtTestSecret, brokerClaims("apikey:k1", "read-write", hour))
	if status, v := bearerClient(t, url, good).call("GET", "/api/v1/resources/queues", nil); status != 200 {
		t.Fatalf("valid token: %d %v", status, v)
	}
	// Within the 30 s clock skew an expired token still passes.
	skewed := signJWT(t, jwt.SigningMethodHS256, jwtTestSecret, brokerClaims("a", "read-only", time.Now().Add(-10*time.Second)))
	if status, _ := bearerClient(t, url, skewed).call("GET", "/api/v1/resources/queues", nil); status != 200 {
		t.Fatalf("token within clock skew: %d", status)
	}
	reqs := b.Requests()
	if len(reqs) != 2 || reqs[0].JWTSub != "apikey:k1" || reqs[0].JWTRole != "read-write" || reqs[1].JWTRole != "read-only" {
		t.Fatalf("logged identities: %+v", reqs)
	}
}

func TestJWTAuthEdDSA(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, url := startBroker(t, Options{JWTPublicKey: pub})
	hour := time.Now().Add(time.Hour)
	good := signJWT(t, jwt.SigningMethodEdDSA, priv, brokerClaims("u", "admin", hour))
	if status, v := bearerClient(t, url, good).call("GET", "/api/v1/resources/queues", nil); status != 200 {
		t.Fatalf("EdDSA token: %d %v", status, v)
	}
	// An HS256 token keyed with the public key bytes must not pass.
	confused := signJWT(t, jwt.SigningMethodHS256, []byte(pub), brokerClaims("u", "admin", hour))
	if status, _ := bearerClient(t, url, confused).call("GET", "/api/v1/resources/queues", nil); status != 401 {
		t.Fatalf("HS256 token on an EdDSA broker: %d", status)
	}
}

func TestJWTProducerSub(t *testing.T) {
	_, url := startBroker(t, Options{JWTSecret: jwtTestSecret})
	hour := time.Now().Add(time.Hour)
	alice := bearerClient(t, url, signJWT(t, jwt.SigningMethodHS256, jwtTestSecret, brokerClaims("alice", "read-write", hour)))
	bob := bearerClient(t, url, signJWT(t, jwt.SigningMethodHS256, jwtTestSecret, brokerClaims("bob", "read-write", hour)))

	// A producerSub in the body is ignored; the verified sub is stamped.
	alice.push(map[string]any{"queue": "q", "payload": map[string]any{"n": 1}, "producerSub": "mallory", "transactionId": "t1"})
	if status, v := bob.call("POST", "/api/v1/transaction", map[string]any{
		"operations": []any{map[string]any{"type": "push", "items": []any{map[string]any{"queue": "q", "payload": 2, "transactionId": "t2"}}}},
	}); status != 200 {
		t.Fatalf("transaction push: %d %v", status, v)
	}
	popped := bob.pop("/api/v1/pop/queue/q?batch=10&wait=false")
	msgs, _ := popped["messages"].([]any)
	if len(msgs) != 2 {
		t.Fatalf("popped %v", popped)
	}
	want := map[string]string{"t1": "alice", "t2": "bob"}
	for _, m := range msgs {
		mm := m.(map[string]any)
		if mm["producerSub"] != want[mm["transactionId"].(string)] {
			t.Fatalf("message %v: producerSub %v", mm["transactionId"], mm["producerSub"])
		}
	}
	status, v := alice.call("GET", "/api/v1/messages?queue=q", nil)
	if status != 200 {
		t.Fatalf("message list: %d %v", status, v)
	}
	listed, _ := v.(map[string]any)["messages"].([]any)
	if len(listed) != 2 {
		t.Fatalf("message list %v", v)
	}
	for _, m := range listed {
		mm := m.(map[string]any)
		if mm["producerSub"] != want[mm["transactionId"].(string)] {
			t.Fatalf("listed %v: producerSub %v", mm["transactionId"], mm["producerSub"])
		}
	}
}

func TestNoJWTLeavesProducerSubNull(t *testing.T) {
	_, url := startBroker(t, Options{})
	c := &client{t: t, base: url, header: http.Header{"Authorization": {"Bearer not-checked"}}}
	c.push(map[string]any{"queue": "q", "payload": 1, "producerSub": "mallory"})
	popped := c.pop("/api/v1/pop/queue/q?batch=1&wait=false")
	msgs, _ := popped["messages"].([]any)
	if len(msgs) != 1 {
		t.Fatalf("popped %v", popped)
	}
	m := msgs[0].(map[string]any)
	if v, ok := m["producerSub"]; !ok || v != nil {
		t.Fatalf("producerSub = %v (present %v), want null", v, ok)
	}
}
