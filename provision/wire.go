package provision

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/apierror"
)

// fieldError is a refusal of one request field, answered 400 with the
// field named.
type fieldError struct {
	field string
	err   error
}

func (f *fieldError) Error() string { return f.field + ": " + f.err.Error() }
func (f *fieldError) Unwrap() error { return f.err }

// apiRefusal carries a ready refusal out of a handler.
type apiRefusal struct{ e *apierror.Error }

func (r apiRefusal) Error() string { return r.e.Message }

func invalidField(field, msg string) *apierror.Error {
	return &apierror.Error{Status: http.StatusBadRequest, Code: apierror.InvalidRequest, Message: field + ": " + msg}
}

func conflictf(format string, args ...any) error {
	return apiRefusal{&apierror.Error{Status: http.StatusConflict, Code: apierror.Conflict, Message: fmt.Sprintf(format, args...)}}
}

// toAPIError maps a handler's error to its answer: a refusal as it is, a
// control-plane error by its kind, anything else a 503 that is logged.
func (a *API) toAPIError(err error) *apierror.Error {
	var ref apiRefusal
	if errors.As(err, &ref) {
		return ref.e
	}
	var fe *fieldError
	if errors.As(err, &fe) {
		return invalidField(fe.field, fe.err.Error())
	}
	var ce *controlplane.Error
	if errors.As(err, &ce) {
		switch ce.Kind {
		case controlplane.Invalid:
			return &apierror.Error{Status: http.StatusBadRequest, Code: apierror.InvalidRequest, Message: ce.Msg}
		case controlplane.NotFound:
			return &apierror.Error{Status: http.StatusNotFound, Code: apierror.NotFound, Message: ce.Msg}
		case controlplane.Taken, controlplane.CrossTenant:
			return &apierror.Error{Status: http.StatusConflict, Code: apierror.Conflict, Message: ce.Msg}
		case controlplane.WrongState:
			return &apierror.Error{Status: http.StatusConflict, Code: apierror.InvalidState, Message: ce.Msg}
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || controlplane.KindOf(err) == controlplane.Unavailable {
		a.o.Log.Warn("provisioning call: database unavailable", zap.Error(err))
		return &apierror.Error{Status: http.StatusServiceUnavailable, Code: apierror.InternalError,
			Message: "the control-plane database did not answer", RetryAfter: 1}
	}
	a.o.Log.Error("provisioning call failed", zap.Error(err))
	return &apierror.Error{Status: http.StatusInternalServerError, Code: apierror.InternalError, Message: "the call failed; nothing was changed"}
}

func (a *API) writeError(w http.ResponseWriter, e *apierror.Error) {
	apierror.Write(w, e, w.Header().Get(HeaderRequestID))
}

func marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func writeRaw(w http.ResponseWriter, status int, raw []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(raw)))
	w.WriteHeader(status)
	_, _ = w.Write(raw)
}

// readBody reads a request body: none for GET and DELETE, at most
// MaxBodyBytes of JSON otherwise.
func readBody(w http.ResponseWriter, r *http.Request, method string) ([]byte, *apierror.Error) {
	if method == http.MethodGet || method == http.MethodDelete {
		if r.ContentLength > 0 {
			return nil, invalidField("body", "this operation takes no body")
		}
		return nil, nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &apierror.Error{Status: http.StatusRequestEntityTooLarge, Code: apierror.PayloadTooLarge,
				Message: fmt.Sprintf("body: at most %d bytes", MaxBodyBytes)}
		}
		return nil, invalidField("body", "could not be read")
	}
	return b, nil
}

// decode reads the call's JSON object into v, refusing unknown members,
// members of the wrong type, trailing data and an absent body.
func (c *call) decode(v any) error {
	body := bytes.TrimSpace(c.body)
	if len(body) == 0 {
		body = []byte("{}")
	}
	if body[0] != '{' {
		return apiRefusal{invalidField("body", "must be a JSON object")}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr) && typeErr.Field != "":
			return apiRefusal{invalidField(typeErr.Field, "must be a JSON "+jsonKind(typeErr.Type.Kind().String()))}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return apiRefusal{invalidField(name, "unknown member")}
		}
		return apiRefusal{invalidField("body", "not valid JSON")}
	}
	if dec.More() {
		return apiRefusal{invalidField("body", "one JSON object only")}
	}
	return nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "slice":
		return "array"
	case "bool":
		return "boolean"
	case "struct", "map":
		return "object"
	}
	return "number"
}

// param is a path parameter.
func (c *call) param(name string) string { return c.params[name] }

// query reads an optional query parameter, refusing one given twice.
func (c *call) query(name string) (string, error) {
	vs := c.r.URL.Query()[name]
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", apiRefusal{invalidField(name, "given more than once")}
}

// stamp is an instant as the API shows it.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
