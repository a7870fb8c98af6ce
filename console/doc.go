// Package console is the gateway's own web surface: human sign-in
// (/auth/*: password and OAuth logins, logout, the session document, short
// bearer tokens, the JWKS), the cluster console API (/api/console/*), the
// operator API (/api/operator/*) and the embedded console web app
// (/console). It answers before the data plane and never forwards to a
// cell.
//
// It does not import Caddy: New takes every dependency explicitly (the
// control-plane pool, the session keys, the identity cache, how to resolve
// a cluster from a Host, the live push-block and storage state, the web
// app's files) and returns a plain http.Handler.
package console
