package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/apierror"
)

// The argon2id parameters of new password hashes (19 MiB, 2 passes, one
// lane: the OWASP minimum, affordable on a small gateway).
const (
	argonMemoryKiB = 19 * 1024
	argonTime      = 2
	argonThreads   = 1
	argonKeyLen    = 32
	argonSaltLen   = 16
)

// Bounds on the parameters a stored argon2id hash may ask for, so a
// tampered row cannot make one login cost gigabytes or minutes.
const (
	maxArgonMemoryKiB = 256 * 1024
	maxArgonTime      = 10
	maxArgonThreads   = 16
)

// MinPasswordLen and MaxPasswordLen bound passwords set through the
// gateway (in characters).
const (
	MinPasswordLen = controlplane.MinPasswordLen
	MaxPasswordLen = controlplane.MaxPasswordLen
)

// passwordRule is the rule a password set through the gateway must meet,
// as the refusal to answer; nil when it does.
func passwordRule(password string) *apierror.Error {
	if err := controlplane.CheckPassword(password); err != nil {
		return argInvalid("password", err)
	}
	return nil
}

// HashPassword returns the argon2id hash of a new password, encoded as
// "$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<hash>" (unpadded
// standard base64).
func HashPassword(password string) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("hash password: %w", err)
	}
	sum := argon2.IDKey([]byte(password), salt, argonTime, argonMemoryKiB, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemoryKiB, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(sum)), nil
}

// errUnknownHash is a stored hash in no format the gateway verifies.
var errUnknownHash = errors.New("unsupported password hash format")

// VerifyPassword reports whether password matches a stored hash: bcrypt
// ("$2a$", "$2b$", "$2y$", as pgcrypto and queen_proxy write them) or
// argon2id. The comparison is constant-time. An unknown format is an error
// (and no match).
func VerifyPassword(stored, password string) (bool, error) {
	switch {
	case strings.HasPrefix(stored, "$2a$"), strings.HasPrefix(stored, "$2b$"), strings.HasPrefix(stored, "$2y$"):
		// bcrypt only looks at the first 72 bytes; refuse longer
		// passwords outright rather than accept a prefix.
		if len(password) > 72 {
			return false, nil
		}
		err := bcrypt.CompareHashAndPassword([]byte(stored), []byte(password))
		if errors.Is(err, bcrypt.ErrMismatchedHashAndPassword) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("bcrypt hash: %w", err)
		}
		return true, nil
	case strings.HasPrefix(stored, "$argon2id$"):
		return verifyArgon2id(stored, password)
	}
	return false, errUnknownHash
}

func verifyArgon2id(stored, password string) (bool, error) {
	// "", "argon2id", "v=19", "m=..,t=..,p=..", salt, hash
	parts := strings.Split(stored, "$")
	if len(parts) != 6 || parts[2] != "v="+strconv.Itoa(argon2.Version) {
		return false, errors.New("argon2id hash: malformed")
	}
	var m, t, p uint64
	for _, kv := range strings.Split(parts[3], ",") {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(v, 10, 32)
		if !ok || err != nil {
			return false, errors.New("argon2id hash: malformed parameters")
		}
		switch k {
		case "m":
			m = n
		case "t":
			t = n
		case "p":
			p = n
		default:
			return false, errors.New("argon2id hash: unknown parameter")
		}
	}
	if m < 8 || m > maxArgonMemoryKiB || t < 1 || t > maxArgonTime || p < 1 || p > maxArgonThreads {
		return false, errors.New("argon2id hash: parameters out of bounds")
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil || len(salt) < 8 {
		return false, errors.New("argon2id hash: bad salt")
	}
	want, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(want) < 16 || len(want) > 128 {
		return false, errors.New("argon2id hash: bad digest")
	}
	got := argon2.IDKey([]byte(password), salt, uint32(t), uint32(m), uint8(p), uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// dummyHash is verified against when the account does not exist or has
// no password, so that such attempts take as long as a real one.
// It is made on first use, not at start.
var dummyHash = sync.OnceValue(func() string {
	h, err := bcrypt.GenerateFromPassword([]byte("queengate-no-such-account"), 10)
	if err != nil {
		return "$2a$10$" + strings.Repeat("x", 53)
	}
	return string(h)
})
