package harden

import (
	"fmt"
	"net/http"
)

// HeadLimits bound the request line and headers. Zero fields take the
// defaults noted on each.
type HeadLimits struct {
	MaxURIBytes         int // path and query; default 8 KiB, answered 414
	MaxHeaders          int // header lines, each repeated line counted; default 100, answered 431
	MaxHeaderValueBytes int // any single value; default 16 KiB, answered 431
	MaxHeaderBytes      int // sum of names and values; default 64 KiB, answered 431
}

// WithDefaults returns l with zero fields set to their defaults.
func (l HeadLimits) WithDefaults() HeadLimits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxURIBytes, 8<<10)
	def(&l.MaxHeaders, 100)
	def(&l.MaxHeaderValueBytes, 16<<10)
	def(&l.MaxHeaderBytes, 64<<10)
	return l
}

// HeadError is a request head over a limit: the status to answer with
// (414 or 431) and why.
type HeadError struct {
	Status  int
	Message string
}

func (e *HeadError) Error() string { return fmt.Sprintf("%d %s", e.Status, e.Message) }

// CheckHead measures r's head against l (which must have its defaults
// applied) and returns the first limit it breaks, or nil.
func CheckHead(r *http.Request, l HeadLimits) *HeadError {
	if len(r.RequestURI) > l.MaxURIBytes {
		return &HeadError{Status: http.StatusRequestURITooLong, Message: "request URI too long"}
	}
	// Go moves Host out of the header map; it still counts.
	count, total := 1, len("Host")+len(r.Host)
	if len(r.Host) > l.MaxHeaderValueBytes {
		return &HeadError{Status: http.StatusRequestHeaderFieldsTooLarge, Message: "request header too large"}
	}
	for name, values := range r.Header {
		for _, v := range values {
			count++
			if len(v) > l.MaxHeaderValueBytes {
				return &HeadError{Status: http.StatusRequestHeaderFieldsTooLarge, Message: "request header too large"}
			}
			total += len(name) + len(v)
		}
	}
	if count > l.MaxHeaders {
		return &HeadError{Status: http.StatusRequestHeaderFieldsTooLarge, Message: "too many request headers"}
	}
	if total > l.MaxHeaderBytes {
		return &HeadError{Status: http.StatusRequestHeaderFieldsTooLarge, Message: "request headers too large"}
	}
	return nil
}
