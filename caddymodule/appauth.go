package caddymodule

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/queengate/queengate/tenancy"
)

// SessionConfig configures human sessions: the JWTs the gateway mints at
// login and verifies on every request that carries one. Without it the
// gateway accepts API keys only.
type SessionConfig struct {
	// Issuer is the iss claim minted and required. Default "queen-proxy".
	Issuer string `json:"issuer,omitempty"`

	// Audience, when set, must be among a token's aud claims if the token
	// names any; a token naming none is accepted.
	Audience string `json:"audience,omitempty"`

	// Ed25519KeyFile is a PEM file holding the PKCS#8 Ed25519 private key
	// sessions are signed with (EdDSA, the production choice). The public
	// key is derived from it.
	Ed25519KeyFile string `json:"ed25519_key_file,omitempty"`

	// Ed25519PublicKeyFile is a PEM file holding an SPKI Ed25519 public
	// key, for gateways that verify sessions minted elsewhere but mint none.
	Ed25519PublicKeyFile string `json:"ed25519_public_key_file,omitempty"`

	// HS256Secret signs sessions with HMAC-SHA256 instead, for development
	// (at least 32 bytes). Placeholders such as {env.X} are expanded. An
	// Ed25519 key wins when both are given.
	HS256Secret string `json:"hs256_secret,omitempty"`

	// PreviousEd25519PublicKeyFiles are PEM files of more Ed25519 public
	// keys whose sessions still verify (picked by the token's kid), for a
	// rotation: the previous signing key, so that no session it signed is
	// cut short, or the next one before any gateway signs with it. Drop a
	// key once every session it signed has expired (ttl). EdDSA only.
	PreviousEd25519PublicKeyFiles []string `json:"previous_ed25519_public_key_files,omitempty"`

	// PreviousHS256Secrets are more HS256 secrets whose sessions still
	// verify, for the same purpose. Placeholders are expanded. HS256 only.
	PreviousHS256Secrets []string `json:"previous_hs256_secrets,omitempty"`

	// CookieName is the session cookie. Default "queen_session"; the
	// per-host cookie is "<name>_cell" ("__Host-<name>_cell" over HTTPS).
	CookieName string `json:"cookie_name,omitempty"`

	// TTL is the life of a session minted at login. Default 24h.
	TTL caddy.Duration `json:"ttl,omitempty"`

	// RevocationStrict refuses sessions while the token deny-list cannot be
	// read. By default it fails open (signature and expiry still checked).
	RevocationStrict bool `json:"revocation_strict,omitempty"`
}

// CellTokenConfig makes the gateway present a short-lived JWT it mints to
// a cell that runs its own JWT authentication, instead of the cell's
// static secret, so the broker verifies every request and records who
// produced each message (sub = the API key id or the user id).
type CellTokenConfig struct {
	// Algorithm is "HS256" (with Secret) or "EdDSA" (with KeyFile).
	Algorithm string `json:"algorithm,omitempty"`

	// Secret is the HS256 secret the broker was given (JWT_SECRET).
	// Placeholders are expanded.
	Secret string `json:"secret,omitempty"`

	// KeyFile is a PEM file with the PKCS#8 Ed25519 private key for EdDSA.
	KeyFile string `json:"key_file,omitempty"`

	// Issuer and Audience, when set, are put in every token.
	Issuer   string `json:"issuer,omitempty"`
	Audience string `json:"audience,omitempty"`

	// RoleClaim names the claim the broker reads the role from. Default
	// "role".
	RoleClaim string `json:"role_claim,omitempty"`

	// TTL is each token's life; tokens are reused until a third of it is
	// left. Default 5m.
	TTL caddy.Duration `json:"ttl,omitempty"`
}

const defaultCookieName = "queen_session"

// provisionSessions loads the session keys, if sessions are configured.
func (a *App) provisionSessions(log *zap.Logger) error {
	a.cookieNames = tenancy.CookieNames{Fleet: defaultCookieName}
	s := a.Sessions
	if s == nil {
		log.Info("no session keys configured: the gateway accepts API keys only")
		return nil
	}
	if s.CookieName != "" {
		a.cookieNames.Fleet = s.CookieName
	}
	setDuration(&s.TTL, 24*time.Hour)
	repl := caddy.NewReplacer()
	cfg := tenancy.SessionKeysConfig{
		Issuer:      s.Issuer,
		Audience:    s.Audience,
		HS256Secret: []byte(repl.ReplaceAll(s.HS256Secret, "")),
	}
	var err error
	if cfg.Ed25519PrivateKeyPEM, err = readOptionalFile(s.Ed25519KeyFile); err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	if cfg.Ed25519PublicKeyPEM, err = readOptionalFile(s.Ed25519PublicKeyFile); err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	for _, path := range s.PreviousEd25519PublicKeyFiles {
		pem, err := readOptionalFile(path)
		if err != nil {
			return fmt.Errorf("sessions: previous key %s: %w", path, err)
		}
		cfg.PreviousEd25519PublicKeysPEM = append(cfg.PreviousEd25519PublicKeysPEM, pem)
	}
	for _, secret := range s.PreviousHS256Secrets {
		cfg.PreviousHS256Secrets = append(cfg.PreviousHS256Secrets, []byte(repl.ReplaceAll(secret, "")))
	}
	keys, err := tenancy.NewSessionKeys(cfg)
	if err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	a.sessionKeys = keys
	for _, w := range keys.Warnings() {
		log.Warn("session key material ignored", zap.String("reason", w))
	}
	log.Info("session keys loaded",
		zap.String("algorithm", string(keys.Algorithm())), zap.Bool("can_mint", keys.CanMint()),
		zap.String("kid", keys.KeyID()), zap.Int("previous_keys", len(s.PreviousEd25519PublicKeyFiles)+len(s.PreviousHS256Secrets)))
	return nil
}

// provisionCellTokens builds a token minter per configured cell.
func (a *App) provisionCellTokens() error {
	a.cellTokens = map[string]*tenancy.CellTokens{}
	repl := caddy.NewReplacer()
	for cell, c := range a.CellTokens {
		if c == nil {
			return fmt.Errorf("cell_token %s: empty configuration", cell)
		}
		key, err := readOptionalFile(c.KeyFile)
		if err != nil {
			return fmt.Errorf("cell_token %s: %w", cell, err)
		}
		tokens, err := tenancy.NewCellTokens(tenancy.CellTokenConfig{
			Algorithm:            strings.TrimSpace(c.Algorithm),
			HS256Secret:          []byte(repl.ReplaceAll(c.Secret, "")),
			Ed25519PrivateKeyPEM: key,
			Issuer:               c.Issuer,
			Audience:             c.Audience,
			RoleClaim:            c.RoleClaim,
			TTL:                  time.Duration(c.TTL),
		})
		if err != nil {
			return fmt.Errorf("cell_token %s: %w", cell, err)
		}
		a.cellTokens[cell] = tokens
	}
	return nil
}

// cellTokensFor returns the minter for a cell: its own, else the "*" one,
// else nil (the cell's static secret is presented, if it has one).
func (a *App) cellTokensFor(cellSlug string) *tenancy.CellTokens {
	if t, ok := a.cellTokens[cellSlug]; ok {
		return t
	}
	return a.cellTokens["*"]
}

func readOptionalFile(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	return b, nil
}
