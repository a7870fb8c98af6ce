package tenancy

import (
	"net/url"
	"strconv"
	"strings"
)

// DefaultLongPollTimeoutMs is the broker's wait when a long-poll pop names
// no timeout.
const DefaultLongPollTimeoutMs = 30000

// LongPoll reports whether a request is a long-poll pop (a pop route with
// wait=true) and the wait in milliseconds it asks the broker for. The query
// is decoded the way the broker decodes it, so "wait=%74rue" is a long poll
// too; the first occurrence of a key counts. A timeout that is absent or
// not a non-negative integer means DefaultLongPollTimeoutMs.
func LongPoll(path, rawQuery string) (wait bool, timeoutMs int64) {
	if !strings.HasPrefix(path, "/api/v1/pop/queue/") && path != "/api/v1/ephemeral/pop" {
		return false, 0
	}
	var sawWait, sawTimeout bool
	timeoutMs = DefaultLongPollTimeoutMs
	for rawQuery != "" && !(sawWait && sawTimeout) {
		var part string
		part, rawQuery, _ = strings.Cut(rawQuery, "&")
		k, v, _ := strings.Cut(part, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			continue
		}
		switch key {
		case "wait":
			if sawWait {
				continue
			}
			sawWait = true
			if val, err := url.QueryUnescape(v); err == nil && val == "true" {
				wait = true
			}
		case "timeout":
			if sawTimeout {
				continue
			}
			sawTimeout = true
			if val, err := url.QueryUnescape(v); err == nil {
				if n, err := strconv.ParseInt(val, 10, 64); err == nil && n >= 0 {
					timeoutMs = n
				}
			}
		}
	}
	if !wait {
		return false, 0
	}
	return true, timeoutMs
}
