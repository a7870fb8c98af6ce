package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
)

// The purposes of e-mailed links, as email_tokens.purpose stores them.
const (
	purposeInvitation   = "invitation"
	purposeReset        = "password_reset"
	purposeVerification = "email_verification"
)

// linkTokenBytes is the randomness of a link token (256 bits), written as
// linkTokenLen characters of unpadded base64url.
const (
	linkTokenBytes = 32
	linkTokenLen   = 43
)

// newLinkToken returns a fresh link token and its hash for purpose.
func newLinkToken(purpose string) (string, []byte, error) {
	var b [linkTokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, fmt.Errorf("link token: %w", err)
	}
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	return tok, linkHash(purpose, tok), nil
}

// linkHash is what email_tokens stores of a token: SHA-256 over the
// purpose and the token, so a token is worth nothing for another purpose
// even if a row were read.
func linkHash(purpose, token string) []byte {
	h := sha256.New()
	h.Write([]byte("queengate-link\x00" + purpose + "\x00"))
	h.Write([]byte(token))
	return h.Sum(nil)
}

// parseLinkToken checks a token a client sent back: exactly the shape
// newLinkToken makes (43 characters of base64url, no padding, that decode
// to 32 bytes and encode back to themselves). Anything else is refused
// before the database is asked.
func parseLinkToken(raw string) (string, bool) {
	if len(raw) != linkTokenLen {
		return "", false
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(raw)
	if err != nil || len(b) != linkTokenBytes {
		return "", false
	}
	return raw, true
}
