// Package mailer sends the gateway's own e-mail (invitations, password
// resets, address verification) through an SMTP relay: STARTTLS or
// implicit TLS, PLAIN or LOGIN authentication over TLS only, bounded
// timeouts, and multipart/alternative messages (plain text and HTML)
// rendered from templates the operator may replace.
package mailer
