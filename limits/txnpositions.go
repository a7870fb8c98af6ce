package limits

import (
	"strconv"

	"github.com/queengate/queengate/wire"
)

// The raft-storage brokers take a transaction's cursor writes as a
// "positions" array beside "operations" (one object per write: queue,
// partition, consumerGroup, offset, metadata, subscriptionMode). A position
// stores no message, so it is never counted as a pushed item. What the
// broker's receiver refuses, the gateway refuses too, so that it never
// forwards a rider it read differently; a client that writes a position as
// an operation instead is refused, because the gateway would otherwise
// read it as a flat push of its queue and bill it.

// MaxTxnPositions is the most positions one transaction may carry, the
// broker's own ceiling.
const MaxTxnPositions = 16384

// maxPositionMetadata is the longest metadata string of one position, in
// bytes, the broker's own ceiling.
const maxPositionMetadata = 4096

// positionFields are the members of a position the gateway checks.
var positionFields = []string{"queue", "consumerGroup", "offset", "metadata"}

// checkPositions checks the raw value of a transaction's "positions"
// member as the broker's receiver does: an array of at most
// MaxTxnPositions objects, each with a non-empty string queue and
// consumerGroup, an offset that is null (forget the position) or a
// non-negative integer up to 2^63-1, and a metadata that is absent, null
// or a string of at most maxPositionMetadata bytes. Partition and
// subscriptionMode take any value (a non-string is the default).
func (n *nameBuf) checkPositions(raw []byte) error {
	if len(raw) == 0 || raw[0] != '[' {
		return &BodyError{"positions must be an array"}
	}
	count := 0
	var err error
	wire.Elements(raw, 0, func(at int) int {
		count++
		if err != nil {
			return wire.ValueEnd(raw, at)
		}
		if raw[at] != '{' {
			err = positionError(count-1, "a position is an object")
			return wire.ValueEnd(raw, at)
		}
		var v [4][]byte
		end := wire.MemberValues(raw, at, positionFields, v[:])
		err = n.checkPosition(count-1, v)
		return end
	})
	if err != nil {
		return err
	}
	if count > MaxTxnPositions {
		return &BodyError{"more than " + strconv.Itoa(MaxTxnPositions) + " positions in one transaction"}
	}
	return nil
}

// checkPosition checks one position's members (in positionFields' order).
func (n *nameBuf) checkPosition(i int, v [4][]byte) error {
	queue, group, offset, metadata := v[0], v[1], v[2], v[3]
	if t, isString := n.text(0, queue); !isString || len(t) == 0 {
		return positionError(i, "queue is required")
	}
	if t, isString := n.text(0, group); !isString || len(t) == 0 {
		return positionError(i, "consumerGroup is required")
	}
	switch {
	case offset == nil:
		return positionError(i, "offset is required (null forgets the position)")
	case string(offset) == "null":
	default:
		// Digits only: a sign, a fraction or an exponent makes the
		// broker's number no unsigned integer.
		for _, c := range offset {
			if c < '0' || c > '9' {
				return positionError(i, "offset is a non-negative integer or null")
			}
		}
		if u, err := strconv.ParseUint(string(offset), 10, 64); err != nil || u > 1<<63-1 {
			return positionError(i, "offset is a non-negative integer or null")
		}
	}
	if metadata != nil && string(metadata) != "null" {
		t, isString := n.text(0, metadata)
		if !isString {
			return positionError(i, "metadata is a string")
		}
		if len(t) > maxPositionMetadata {
			return positionError(i, "metadata exceeds "+strconv.Itoa(maxPositionMetadata)+" bytes")
		}
	}
	return nil
}

func positionError(i int, detail string) error {
	return &BodyError{"positions[" + strconv.Itoa(i) + "]: " + detail}
}

// isPositionsType reports whether the raw type of a transaction operation
// names a position: such an operation is refused (see above).
func (n *nameBuf) isPositionsType(typ []byte) bool {
	t, isString := n.text(0, typ)
	return isString && (string(t) == "positions" || string(t) == "position")
}

// positionsOperationError is the refusal of an operation typed as a position.
func positionsOperationError(op int) error {
	return &BodyError{"operation " + strconv.Itoa(op) + ": a position is not an operation; send it in the transaction's positions array"}
}
