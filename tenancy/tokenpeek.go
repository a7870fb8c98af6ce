package tenancy

import (
	"encoding/base64"
	"encoding/json"
	"strings"
)

// maxPeekPayloadBytes bounds the payload PeekTokenIssuer decodes; a
// token that large is no provider's.
const maxPeekPayloadBytes = 8 << 10

// PeekTokenIssuer reads the "iss" claim of a compact JWS without
// verifying anything, to choose which configured issuer's keys verify
// it. It answers false for whatever is not three base64url segments
// with a JSON object payload whose "iss" is a string. What it says is
// never trusted: the chosen issuer verifies the signature and checks
// "iss" itself.
func PeekTokenIssuer(token string) (string, bool) {
	head, rest, ok := strings.Cut(token, ".")
	if !ok || head == "" {
		return "", false
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok || payload == "" || sig == "" || strings.IndexByte(sig, '.') >= 0 {
		return "", false
	}
	if base64.RawURLEncoding.DecodedLen(len(payload)) > maxPeekPayloadBytes {
		return "", false
	}
	for _, part := range [...]string{head, payload, sig} {
		for i := 0; i < len(part); i++ {
			if !isBase64URL(part[i]) {
				return "", false
			}
		}
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return "", false
	}
	// A map, not a struct: encoding/json matches struct fields without
	// regard to case, and the claim is "iss" exactly.
	var claims map[string]json.RawMessage
	if json.Unmarshal(raw, &claims) != nil {
		return "", false
	}
	var iss string
	if json.Unmarshal(claims["iss"], &iss) != nil || iss == "" {
		return "", false
	}
	return iss, true
}
