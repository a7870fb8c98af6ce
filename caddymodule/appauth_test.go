package caddymodule

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func writeEd25519Key(t *testing.T) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestProvisionSessions(t *testing.T) {
	a := &App{}
	if err := a.provisionSessions(zap.NewNop()); err != nil || a.sessionKeys != nil || a.cookieNames.Fleet != "queen_session" {
		t.Fatalf("no sessions: err %v keys %v cookie %q", err, a.sessionKeys, a.cookieNames.Fleet)
	}

	a = &App{Sessions: &SessionConfig{Ed25519KeyFile: writeEd25519Key(t), CookieName: "qs"}}
	if err := a.provisionSessions(zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if a.sessionKeys == nil || string(a.sessionKeys.Algorithm()) != "EdDSA" || !a.sessionKeys.CanMint() || a.cookieNames.Fleet != "qs" {
		t.Fatalf("ed25519 sessions: %+v", a.sessionKeys)
	}

	t.Setenv("QG_TEST_SECRET", "0123456789abcdef0123456789abcdef")
	a = &App{Sessions: &SessionConfig{HS256Secret: "{env.QG_TEST_SECRET}"}}
	if err := a.provisionSessions(zap.NewNop()); err != nil || string(a.sessionKeys.Algorithm()) != "HS256" {
		t.Fatalf("hs256 from the environment: %v", err)
	}

	// A rotation: the old secret, from the environment, still verifies.
	t.Setenv("QG_TEST_OLD_SECRET", "fedcba9876543210fedcba9876543210")
	old := &App{Sessions: &SessionConfig{HS256Secret: "{env.QG_TEST_OLD_SECRET}"}}
	if err := old.provisionSessions(zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	tok, _, err := old.sessionKeys.Mint("user-1", "", "viewer", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a = &App{Sessions: &SessionConfig{HS256Secret: "{env.QG_TEST_SECRET}", PreviousHS256Secrets: []string{"{env.QG_TEST_OLD_SECRET}"}}}
	if err := a.provisionSessions(zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.sessionKeys.Verify(tok); err != nil {
		t.Fatalf("a session of the previous secret: %v", err)
	}

	for name, s := range map[string]*SessionConfig{
		"short secret":  {HS256Secret: "short"},
		"missing file":  {Ed25519KeyFile: filepath.Join(t.TempDir(), "absent.pem")},
		"not a key":     {Ed25519KeyFile: writeFile(t, "garbage")},
		"nothing given": {},
		"missing previous key file": {HS256Secret: "0123456789abcdef0123456789abcdef",
			PreviousEd25519PublicKeyFiles: []string{filepath.Join(t.TempDir(), "absent.pub")}},
		"previous secret of the other algorithm": {Ed25519KeyFile: writeEd25519Key(t),
			PreviousHS256Secrets: []string{"0123456789abcdef0123456789abcdef"}},
	} {
		a := &App{Sessions: s}
		if err := a.provisionSessions(zap.NewNop()); err == nil || !strings.HasPrefix(err.Error(), "sessions: ") {
			t.Errorf("%s: err = %v, want a sessions error", name, err)
		}
	}
}

func TestProvisionCellTokens(t *testing.T) {
	a := &App{CellTokens: map[string]*CellTokenConfig{
		"cell-1": {Algorithm: "HS256", Secret: "broker-secret-broker-secret-0123"},
		"*":      {Algorithm: "EdDSA", KeyFile: writeEd25519Key(t)},
	}}
	if err := a.Validate(); err == nil {
		t.Fatal("Validate passed without a database URL")
	}
	if err := a.provisionCellTokens(); err != nil {
		t.Fatal(err)
	}
	if a.cellTokensFor("cell-1") == nil || a.cellTokensFor("cell-9") != a.cellTokens["*"] || a.cellTokensFor("cell-1") == a.cellTokens["*"] {
		t.Fatal("cell token lookup does not prefer the cell's own entry over *")
	}
	bad := &App{CellTokens: map[string]*CellTokenConfig{"c": {Algorithm: "EdDSA", KeyFile: writeFile(t, "nope")}}}
	if err := bad.provisionCellTokens(); err == nil || !strings.Contains(err.Error(), "cell_token c") {
		t.Fatalf("bad key file: %v", err)
	}
	a = &App{DatabaseURL: "postgres://x", PoolMaxConns: 1, CellTokens: map[string]*CellTokenConfig{"c": {Algorithm: "RS256"}}}
	if err := a.Validate(); err == nil || !strings.Contains(err.Error(), "HS256 or EdDSA") {
		t.Fatalf("Validate with RS256: %v", err)
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
