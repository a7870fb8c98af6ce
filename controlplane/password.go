package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/base64"

	"golang.org/x/crypto/bcrypt"
)

// passwordCost is the bcrypt cost of passwords set from the CLI: the cost
// create_user's pgcrypto hashes have, which the console verifies.
const passwordCost = 10

// GeneratePassword returns a fresh random password for an operator to
// hand to a user: 18 random bytes in base64url, 24 characters.
func GeneratePassword() (string, error) {
	var b [18]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", &Error{Kind: Failed, Msg: "no randomness for a new password: " + err.Error(), Err: err}
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// SetPassword sets a user's password through set_user_password. The
// password is hashed here (bcrypt), so only the hash reaches the database.
// It must be 12 to 128 characters and at most 72 bytes (bcrypt reads no
// further, and the console refuses longer ones against a bcrypt hash).
func SetPassword(ctx context.Context, db DB, email, password string) (User, error) {
	if err := CheckPassword(password); err != nil {
		return User{}, err
	}
	if len(password) > 72 {
		return User{}, errorf(Invalid, "password is longer than 72 bytes, more than bcrypt reads")
	}
	e, err := checkEmail(email)
	if err != nil {
		return User{}, err
	}
	u, err := lookupUser(ctx, db, e)
	if err != nil {
		return User{}, err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), passwordCost)
	if err != nil {
		return User{}, errorf(Failed, "hash the password: %v", err)
	}
	if _, err := db.Exec(ctx, `SELECT queen_proxy.set_user_password($1::uuid, $2)`, u.ID, string(hash)); err != nil {
		return User{}, dbError("set password", err)
	}
	return getUser(ctx, db, u.ID)
}

// ClearPassword removes a user's password through set_user_password: the
// user then signs in only through an identity provider.
func ClearPassword(ctx context.Context, db DB, email string) (User, error) {
	e, err := checkEmail(email)
	if err != nil {
		return User{}, err
	}
	u, err := lookupUser(ctx, db, e)
	if err != nil {
		return User{}, err
	}
	if _, err := db.Exec(ctx, `SELECT queen_proxy.set_user_password($1::uuid, NULL)`, u.ID); err != nil {
		return User{}, dbError("clear password", err)
	}
	return getUser(ctx, db, u.ID)
}
