package console

import (
	"testing"
)

// TestRotateOAuthClientSecret follows "Rotating credentials" in
// docs/operations.md for an OAuth client secret: the provider holds the old
// and the new secret while every gateway moves to the new one; a gateway on
// either finishes a sign-in; once the provider dropped the old secret, a
// gateway still on it fails the sign-in (502 bad_gateway, no session) and
// one on the new secret signs in.
func TestRotateOAuthClientSecret(t *testing.T) {
	const newSecret = "secret-789-new"
	p := newFakeProvider(t)
	oldGateway := newEnv(t, func(o *Options) { o.GitHub = p.config() })
	w := oldGateway.world()
	uid, email := oldGateway.user(w.tenantID, "")
	oldGateway.grant(w.clusterID, email, "viewer")
	newGateway := newEnv(t, func(o *Options) {
		o.GitHub = p.config()
		o.GitHub.ClientSecret = newSecret
	})

	signIn := func(e *env, code string) resp {
		t.Helper()
		f := e.oauthStart(w.host, "github", "/console/")
		p.mu.Lock()
		p.codes[code] = grant{challenge: f.challenge, redirect: f.redirect, sub: "7001",
			githubEmails: []map[string]any{{"email": email, "primary": true, "verified": true}}}
		p.mu.Unlock()
		return e.callback(w.host, "github", code, f.state, f.cookie)
	}
	signedIn := func(e *env, r resp) {
		t.Helper()
		r.want(303, "")
		if claims, err := e.keys.Verify(sessionCookie(t, r).Value); err != nil || claims.UserID != uid {
			t.Fatalf("session %+v %v", claims, err)
		}
	}

	// Step 1: the provider holds both secrets.
	p.mu.Lock()
	p.secrets = map[string]bool{testClientSecret: true, newSecret: true}
	p.mu.Unlock()
	signedIn(oldGateway, signIn(oldGateway, "both-old"))
	signedIn(newGateway, signIn(newGateway, "both-new"))

	// Step 3: the provider dropped the old secret.
	p.mu.Lock()
	p.secrets = map[string]bool{newSecret: true}
	p.mu.Unlock()
	r := signIn(oldGateway, "dropped-old").want(502, "bad_gateway")
	for _, c := range r.Result().Cookies() {
		if c.Name == "queen_session" && c.Value != "" {
			t.Fatalf("a failed exchange set a session cookie: %+v", c)
		}
	}
	signedIn(newGateway, signIn(newGateway, "dropped-new"))
}
