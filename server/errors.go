package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/tools"
)

// apiError is an error answer: {"error": {"code", "message"}} with Status.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errInvalid(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: "invalid_argument", Message: fmt.Sprintf(format, args...)}
}

func errNotFound(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf(format, args...)}
}

func errConflict(format string, args ...any) *apiError {
	return &apiError{Status: http.StatusConflict, Code: "conflict", Message: fmt.Sprintf(format, args...)}
}

func errInternal(err error) *apiError {
	return &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: err.Error()}
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.Status, map[string]*apiError{"error": e})
}

// writeRaw writes an encoded JSON answer.
func writeRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b)
	w.Write([]byte{'\n'})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(map[string]*apiError{"error": {Code: "internal", Message: "encode the answer: " + err.Error()}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// kernelError maps an error of the runtime to its answer.
func kernelError(err error) *apiError {
	var te *tools.Error
	switch {
	case errors.Is(err, kernel.ErrNoProcess), errors.Is(err, kernel.ErrNoCheckpoint), errors.Is(err, objects.ErrNotFound):
		return &apiError{Status: http.StatusNotFound, Code: "not_found", Message: err.Error()}
	case errors.Is(err, kernel.ErrInvalidSpawn), errors.Is(err, kernel.ErrBadSignal), errors.Is(err, mailbox.ErrInvalid),
		errors.Is(err, objects.ErrInvalid):
		return &apiError{Status: http.StatusBadRequest, Code: "invalid_argument", Message: err.Error()}
	case errors.Is(err, mailbox.ErrTooLarge):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Message: err.Error()}
	case errors.Is(err, kernel.ErrNoApproval), errors.Is(err, kernel.ErrNotQuiescent), errors.Is(err, objects.ErrConflict):
		return &apiError{Status: http.StatusConflict, Code: "conflict", Message: err.Error()}
	case errors.Is(err, kernel.ErrReadOnly):
		return &apiError{Status: http.StatusConflict, Code: "read_only", Message: err.Error()}
	case errors.Is(err, objects.ErrDiskFull):
		return &apiError{Status: http.StatusInsufficientStorage, Code: "disk_full", Message: err.Error()}
	case errors.Is(err, kernel.ErrClosed), errors.Is(err, objects.ErrClosed):
		return &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: err.Error()}
	case errors.As(err, &te):
		switch te.Code {
		case tools.CodeNotFound:
			return &apiError{Status: http.StatusNotFound, Code: "not_found", Message: te.Message}
		case tools.CodeInvalidArguments:
			return &apiError{Status: http.StatusBadRequest, Code: "invalid_argument", Message: te.Message}
		case tools.CodeConflict, tools.CodeFailed:
			return &apiError{Status: http.StatusConflict, Code: "conflict", Message: te.Message}
		}
	}
	return errInternal(err)
}

// decodeBody reads r's JSON body into v: a JSON object, with no field v does
// not know, nothing after it, and at most the server's bound of bytes.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) *apiError {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
			Message: fmt.Sprintf("Content-Type %q: must be application/json", r.Header.Get("Content-Type"))}
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err, s.opts.MaxBodyBytes)
	}
	if _, err := dec.Token(); err != io.EOF {
		if e := tooLarge(err, s.opts.MaxBodyBytes); e != nil {
			return e
		}
		return &apiError{Status: http.StatusBadRequest, Code: "malformed_json", Message: "body: unexpected data after the JSON object"}
	}
	return nil
}

func tooLarge(err error, limit int64) *apiError {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
			Message: fmt.Sprintf("body: larger than the bound of %d bytes", limit)}
	}
	return nil
}

func bodyError(err error, limit int64) *apiError {
	if e := tooLarge(err, limit); e != nil {
		return e
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return &apiError{Status: http.StatusBadRequest, Code: "malformed_json", Message: "body: required: a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &apiError{Status: http.StatusBadRequest, Code: "malformed_json", Message: "body: malformed JSON: it ends early"}
	case errors.As(err, &syn):
		return &apiError{Status: http.StatusBadRequest, Code: "malformed_json", Message: fmt.Sprintf("body: malformed JSON at byte %d: %v", syn.Offset, syn)}
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return &apiError{Status: http.StatusBadRequest, Code: "malformed_json", Message: fmt.Sprintf("body: must be a JSON object, got %s", typ.Value)}
		}
		return &apiError{Status: http.StatusBadRequest, Code: "invalid_argument", Message: fmt.Sprintf("%s: must be %s, got %s", field, jsonKind(typ.Type.String()), typ.Value)}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return &apiError{Status: http.StatusBadRequest, Code: "unknown_field",
			Message: fmt.Sprintf("body: %s is not a known field", strings.TrimPrefix(err.Error(), "json: unknown field "))}
	}
	return &apiError{Status: http.StatusBadRequest, Code: "malformed_json", Message: "body: " + err.Error()}
}

// jsonKind names a Go type as JSON calls it.
func jsonKind(goType string) string {
	switch {
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "uint"), strings.HasPrefix(goType, "float"):
		return "a number"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	}
	return "an object"
}
