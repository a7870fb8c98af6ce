package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SecretPrefix starts every endpoint secret; the rest is the key in
// standard base64.
const SecretPrefix = "whsec_"

// secretBytes is the length of the keys NewSecret makes (the
// specification asks for 24 to 64 bytes).
const secretBytes = 32

// NewSecret returns a fresh random secret, whsec_<base64 of 32 bytes>.
func NewSecret() (string, error) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("webhook: random secret: %w", err)
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// ErrSecret is a secret that is not whsec_<base64 of 24 to 64 bytes>.
var ErrSecret = errors.New("webhook secret must be whsec_ followed by the standard base64 of 24 to 64 bytes")

// ParseSecret returns the key of a whsec_ secret.
func ParseSecret(s string) ([]byte, error) {
	rest, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, ErrSecret
	}
	key, err := base64.StdEncoding.Strict().DecodeString(rest)
	if err != nil || len(key) < 24 || len(key) > 64 {
		return nil, ErrSecret
	}
	return key, nil
}

// Signature is the webhook-signature header value for one message: one
// "v1,<signature>" per key, in the order given, separated by spaces.
func Signature(keys [][]byte, id string, at time.Time, body []byte) string {
	ts := strconv.FormatInt(at.Unix(), 10)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		m := hmac.New(sha256.New, k)
		m.Write([]byte(id))
		m.Write([]byte{'.'})
		m.Write([]byte(ts))
		m.Write([]byte{'.'})
		m.Write(body)
		parts = append(parts, "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	}
	return strings.Join(parts, " ")
}
