// Package webhook delivers the control plane's events (the rows of
// queen_proxy.outbox) to operator-configured HTTP endpoints, signed as the
// Standard Webhooks specification says: headers webhook-id (the event's
// id, the same on every retry and replay), webhook-timestamp (Unix
// seconds of the attempt) and webhook-signature ("v1,<base64 HMAC-SHA256
// of id.timestamp.body>" per valid secret, space-separated).
//
// Delivery is at least once, in order per endpoint, retried with
// exponential backoff, and done by one gateway at a time per endpoint: a
// gateway holds a transaction-scoped advisory lock on the endpoint for the
// length of one attempt, so that a gateway that dies mid-attempt lets go
// of it the moment PostgreSQL sees its connection close, and another
// gateway sends the same event again with the same webhook-id.
//
// It does not import Caddy.
package webhook
