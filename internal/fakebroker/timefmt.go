package fakebroker

import "time"

// Timestamp layouts used by the recorded broker.
const (
	layoutMicro  = "2006-01-02T15:04:05.000000Z"      // popped messages' createdAt
	layoutMilli  = "2006-01-02T15:04:05.000Z"         // listings, leases, DLQ
	layoutOffset = "2006-01-02T15:04:05.000000-07:00" // stream state rows
	layoutBucket = "2006-01-02T15:04:05Z"             // analytics buckets
)

func fmtMicro(t time.Time) string { return t.UTC().Format(layoutMicro) }
func fmtMilli(t time.Time) string { return t.UTC().Format(layoutMilli) }

// fmtMilliOrNil formats t, or returns nil (JSON null) for the zero time.
func fmtMilliOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return fmtMilli(t)
}
