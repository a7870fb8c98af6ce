package caddymodule

import "net/url"

// redactURL hides the password of a database URL for logs and errors.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable database url)"
	}
	return u.Redacted()
}
