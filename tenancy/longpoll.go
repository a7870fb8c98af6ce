package tenancy

import "strings"

// DefaultLongPollTimeoutMs is the broker's wait when a long-poll pop names
// no timeout.
const DefaultLongPollTimeoutMs = 30000

// PopQuery is what the gateway acts on in a pop's query, read exactly as
// the broker reads it (see BrokerQueryValue).
type PopQuery struct {
	// Wait: the broker parks the pop until a message comes or TimeoutMs
	// passes, so the gateway holds a parked slot and a longer deadline.
	Wait bool
	// TimeoutMs is the wait the broker will use (never negative here: the
	// broker treats a negative wait as one that is already over). Zero
	// unless Wait.
	TimeoutMs int64
	// AutoAck: the broker acknowledges what it delivers, so the pop
	// consumes messages and is a write for the cross-site check.
	AutoAck bool
}

// IsPopPath reports the routes the broker reads wait, timeout and autoAck
// on: the queue pops and the ephemeral pop. rawPath is the escaped path.
func IsPopPath(rawPath string) bool {
	return strings.HasPrefix(rawPath, "/api/v1/pop/queue/") || rawPath == "/api/v1/ephemeral/pop"
}

// ReadPopQuery reads a pop's wait, timeout and autoAck the broker's way.
// Other routes read nothing. An error wrapping ErrAmbiguousQuery means one
// of these values cannot be read with certainty; the request is refused.
func ReadPopQuery(rawPath, rawQuery string) (PopQuery, error) {
	if !IsPopPath(rawPath) || rawQuery == "" {
		return PopQuery{}, nil
	}
	var q PopQuery
	var err error
	if q.Wait, err = BrokerQueryBool(rawQuery, "wait", false); err != nil {
		return PopQuery{}, err
	}
	if q.AutoAck, err = BrokerQueryBool(rawQuery, "autoAck", false); err != nil {
		return PopQuery{}, err
	}
	timeout, err := BrokerQueryInt(rawQuery, "timeout", DefaultLongPollTimeoutMs)
	if err != nil {
		return PopQuery{}, err
	}
	if q.Wait {
		q.TimeoutMs = int64(max(timeout, 0))
	}
	return q, nil
}

// LongPoll reports whether a request is a long-poll pop and the wait in
// milliseconds it asks the broker for, read as the broker reads them. A
// query that cannot be read with certainty counts as a long poll with the
// default wait, the reading that holds a parked slot; the pipeline refuses
// such a request before it gets that far (ReadPopQuery).
func LongPoll(rawPath, rawQuery string) (wait bool, timeoutMs int64) {
	q, err := ReadPopQuery(rawPath, rawQuery)
	if err != nil {
		return true, DefaultLongPollTimeoutMs
	}
	return q.Wait, q.TimeoutMs
}
