package caddymodule

import (
	"net/http"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/wire"
)

// Every request body bound for a cell is checked before it goes there, so
// that no body reaches the broker that it reads otherwise than the gateway
// does, or that takes it down. Three checks, for three reasons:
//
//   - every body, on every route: it must be valid UTF-8 and must not start
//     with a byte-order mark. The broker 0.15.1 crashes on a body that is
//     not UTF-8, taking the cell down for every tenant on it; a byte-order
//     mark is skipped by the broker's JSON library but not by every reader
//     the gateway has, so it is refused rather than agreed on;
//   - the bodies the gateway acts on (produce, configure, replay, the
//     streams cycle, ephemeral pushes, KV and timers batches): they must be
//     JSON the gateway reads exactly as the broker does (wire.Check), or
//     they are refused rather than forwarded unenforced;
//   - every body, walked or not, must not carry U+0000, which the broker's
//     database cannot store (wire.CheckStored in the walk, else
//     limits.StoredTextError; docs/enforcement.md lists the schema's rules).
//
// Both refusals are 400 bad_request, are never forwarded and are not
// billed.

// bodyTextRefusal is the refusal of a body that is not valid UTF-8 or
// starts with a byte-order mark, or nil.
func bodyTextRefusal(body []byte) *apierror.Error {
	if err := wire.TextError(body); err != nil {
		return badBody(err)
	}
	return nil
}

// badBody is the 400 for a body the gateway will not read; the message is
// the reader's, which names what is wrong and where.
func badBody(err error) *apierror.Error {
	return &apierror.Error{Status: http.StatusBadRequest, Code: apierror.BadRequest, Message: err.Error()}
}
