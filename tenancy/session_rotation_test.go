package tenancy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestSessionKeyRotationEd25519 is the rotation of docs/operations.md: the
// new key signs, the previous key's sessions still verify until it is
// dropped from the configuration, and then they are refused.
func TestSessionKeyRotationEd25519(t *testing.T) {
	_, oldPriv, oldPub := newTestEd25519(t)
	_, newPriv, newPub := newTestEd25519(t)
	before := mustSessionKeys(t, SessionKeysConfig{Ed25519PrivateKeyPEM: oldPriv})
	oldTok, _, err := before.Mint("user-1", "", "viewer", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	// Staged: still signing with the old key, the new one verifies too.
	staged := mustSessionKeys(t, SessionKeysConfig{Ed25519PrivateKeyPEM: oldPriv, PreviousEd25519PublicKeysPEM: [][]byte{newPub}})
	during := mustSessionKeys(t, SessionKeysConfig{Ed25519PrivateKeyPEM: newPriv, PreviousEd25519PublicKeysPEM: [][]byte{oldPub}})
	newTok, _, err := during.Mint("user-2", "", "viewer", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]*SessionKeys{"staged": staged, "during": during} {
		for _, tok := range []string{oldTok, newTok} {
			if _, err := k.Verify(tok); err != nil {
				t.Fatalf("%s: a token of the old or new key was refused: %v", name, err)
			}
		}
	}
	if staged.KeyID() == during.KeyID() {
		t.Fatal("the new key signs with the old kid")
	}
	var set struct {
		Keys []struct {
			Kid string `json:"kid"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(during.JWKS(), &set); err != nil || len(set.Keys) != 2 ||
		set.Keys[0].Kid != during.KeyID() || set.Keys[1].Kid != staged.KeyID() {
		t.Fatalf("JWKS during the rotation: %s, want the current key then the previous one", during.JWKS())
	}

	// A third key's token naming the previous key's kid verifies with
	// nothing: the kid only picks the key.
	strangerPriv, _, _ := newTestEd25519(t)
	forged := forgeJWT(t, jwt.SigningMethodEdDSA, strangerPriv, goodSessionClaims(time.Now()))
	forgedWithKid := jwt.NewWithClaims(jwt.SigningMethodEdDSA, goodSessionClaims(time.Now()))
	forgedWithKid.Header["kid"] = staged.KeyID()
	signed, err := forgedWithKid.SignedString(strangerPriv)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{forged, signed} {
		if _, err := during.Verify(tok); !errors.Is(err, ErrInvalidSession) {
			t.Fatalf("a third key's token: %v, want refused", err)
		}
	}

	after := mustSessionKeys(t, SessionKeysConfig{Ed25519PrivateKeyPEM: newPriv})
	if _, err := after.Verify(newTok); err != nil {
		t.Fatalf("the new key's token: %v", err)
	}
	if _, err := after.Verify(oldTok); !errors.Is(err, ErrInvalidSession) {
		t.Fatalf("the dropped key's token: %v, want refused", err)
	}
	// A verify-only host takes previous keys as well.
	verifier := mustSessionKeys(t, SessionKeysConfig{Ed25519PublicKeyPEM: newPub, PreviousEd25519PublicKeysPEM: [][]byte{oldPub}})
	if _, err := verifier.Verify(oldTok); err != nil {
		t.Fatalf("verify-only host, previous key: %v", err)
	}
}

func TestSessionKeyRotationHS256(t *testing.T) {
	oldSecret := []byte(strings.Repeat("o", 32))
	newSecret := []byte(strings.Repeat("n", 32))
	oldTok, _, err := mustSessionKeys(t, SessionKeysConfig{HS256Secret: oldSecret}).Mint("user-1", "", "viewer", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	during := mustSessionKeys(t, SessionKeysConfig{HS256Secret: newSecret, PreviousHS256Secrets: [][]byte{oldSecret}})
	newTok, _, err := during.Mint("user-2", "", "viewer", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{oldTok, newTok} {
		if _, err := during.Verify(tok); err != nil {
			t.Fatalf("during the rotation: %v", err)
		}
	}
	if string(during.JWKS()) != `{"keys":[]}` {
		t.Fatalf("a shared secret was published: %s", during.JWKS())
	}
	after := mustSessionKeys(t, SessionKeysConfig{HS256Secret: newSecret})
	if _, err := after.Verify(oldTok); !errors.Is(err, ErrInvalidSession) {
		t.Fatalf("the dropped secret's token: %v, want refused", err)
	}
	stranger, _, err := mustSessionKeys(t, SessionKeysConfig{HS256Secret: []byte(strings.Repeat("x", 32))}).Mint("user-3", "", "viewer", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := during.Verify(stranger); !errors.Is(err, ErrInvalidSession) {
		t.Fatalf("a token of a third secret: %v, want refused", err)
	}
}

func TestSessionPreviousKeysRefusedWhenUnusable(t *testing.T) {
	_, priv, pub := newTestEd25519(t)
	secret := []byte(strings.Repeat("s", 32))
	for name, c := range map[string]struct {
		cfg  SessionKeysConfig
		want string
	}{
		"hs secret beside EdDSA": {SessionKeysConfig{Ed25519PrivateKeyPEM: priv, PreviousHS256Secrets: [][]byte{secret}},
			"previous HS256 secrets are configured, but sessions are signed with EdDSA"},
		"ed key beside HS256": {SessionKeysConfig{HS256Secret: secret, PreviousEd25519PublicKeysPEM: [][]byte{pub}},
			"previous Ed25519 public keys are configured, but sessions are signed with HS256"},
		"current as previous": {SessionKeysConfig{Ed25519PrivateKeyPEM: priv, PreviousEd25519PublicKeysPEM: [][]byte{pub}},
			"previous key 1 is the current key"},
		"current secret as previous": {SessionKeysConfig{HS256Secret: secret, PreviousHS256Secrets: [][]byte{secret}},
			"previous HS256 secret 1 is the current secret"},
		"short secret": {SessionKeysConfig{HS256Secret: secret, PreviousHS256Secrets: [][]byte{[]byte("short")}},
			"previous HS256 secret 1 is 5 bytes"},
		"not a key": {SessionKeysConfig{Ed25519PrivateKeyPEM: priv, PreviousEd25519PublicKeysPEM: [][]byte{[]byte("x")}},
			"previous key 1: ed25519 public key: no PEM block found"},
	} {
		_, err := NewSessionKeys(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", name, err, c.want)
		}
	}
}
