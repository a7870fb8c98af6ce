// Package harden holds the request checks that apply before any tenant is
// known: limits on the request head, and the per-address guard against
// credential guessing; and the guard of the gateway's own outgoing calls
// to operator-configured URLs (outbound.go). Nothing here reads the
// database.
package harden
