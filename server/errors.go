package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

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
	case errors.Is(err, kernel.ErrInvalidSpawn), errors.Is(err, kernel.ErrBadSignal), errors.Is(err, kernel.ErrInvalidDecision), errors.Is(err, mailbox.ErrInvalid),
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

// decodeBody reads r's JSON body, at most the server's bound of bytes, into
// v. checkBody goes first: encoding/json alone reads some malformed bodies
// leniently.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any) *apiError {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
			Message: fmt.Sprintf("Content-Type %q: must be application/json", r.Header.Get("Content-Type"))}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		if e := tooLarge(err, s.opts.MaxBodyBytes); e != nil {
			return e
		}
		return &apiError{Status: http.StatusBadRequest, Code: "malformed_json", Message: "body: " + err.Error()}
	}
	if e := checkBody(body, reflect.TypeOf(v).Elem()); e != nil {
		return e
	}
	if err := json.Unmarshal(body, v); err != nil {
		return bodyError(err, s.opts.MaxBodyBytes)
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

// bodyError answers an error of reading the body's JSON.
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
		if typ.Field == "" {
			return &apiError{Status: http.StatusBadRequest, Code: "malformed_json", Message: fmt.Sprintf("body: must be a JSON object, got %s", typ.Value)}
		}
		return &apiError{Status: http.StatusBadRequest, Code: "invalid_argument", Message: fmt.Sprintf("%s: must be %s, got %s", typ.Field, kindName(typ.Type), typ.Value)}
	}
	return &apiError{Status: http.StatusBadRequest, Code: "malformed_json", Message: "body: " + err.Error()}
}

// checkBody walks body's JSON beside t, the type it decodes into, and
// refuses what encoding/json would let through: a key that is not exactly a
// field's name (it matches case-insensitively), a key named twice (the last
// would win), a string that is not UTF-8 (it would become U+FFFD), and
// anything after the object. It names a value of the wrong type by its
// whole path (budget.tool_calls, grants[0]).
func checkBody(body []byte, t reflect.Type) *apiError {
	w := &bodyWalker{dec: json.NewDecoder(bytes.NewReader(body)), body: body}
	w.dec.UseNumber()
	tok, e := w.next("body")
	if e != nil {
		return e
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return &apiError{Status: http.StatusBadRequest, Code: "malformed_json", Message: "body: must be a JSON object, got " + tokenKind(tok)}
	}
	if e := w.object("", t); e != nil {
		return e
	}
	if _, err := w.dec.Token(); err != io.EOF {
		return &apiError{Status: http.StatusBadRequest, Code: "malformed_json", Message: "body: unexpected data after the JSON object"}
	}
	return nil
}

// bodyWalker reads a body's tokens, keeping the offsets that locate each
// token's bytes.
type bodyWalker struct {
	dec  *json.Decoder
	body []byte
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// next reads the next token; a string must be UTF-8 as it is written.
func (w *bodyWalker) next(path string) (json.Token, *apiError) {
	start := w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err == io.EOF && start > 0 {
		err = io.ErrUnexpectedEOF // the body ends inside the object
	}
	if err != nil {
		return nil, bodyError(err, 0)
	}
	if _, ok := tok.(string); ok {
		// Between the offsets lie the separators before the string (ASCII)
		// and the string as written.
		if raw := w.body[start:w.dec.InputOffset()]; !utf8.Valid(raw) || loneSurrogate(raw) {
			return nil, &apiError{Status: http.StatusBadRequest, Code: "malformed_json",
				Message: path + ": must be valid UTF-8 (a byte that is not UTF-8, or a lone surrogate escape, would be read as U+FFFD)"}
		}
	}
	return tok, nil
}

// loneSurrogate reports whether a JSON string as written has a \u escape of
// half a surrogate pair without its other half.
func loneSurrogate(raw []byte) bool {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		return rune(n), err == nil
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		if !ok {
			i++ // another escape: skip the escaped byte
			continue
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		case r >= 0xD800 && r <= 0xDBFF:
			if low, ok := hex4(i + 6); !ok || low < 0xDC00 || low > 0xDFFF {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}

// value checks the value at path against t (nil: any JSON).
func (w *bodyWalker) value(path string, t reflect.Type) *apiError {
	tok, e := w.next(path)
	if e != nil {
		return e
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshalerType)) {
		t = nil // decoded by its own rules: only well-formed JSON is checked
	}
	wrong := func() *apiError {
		return errInvalid("%s: must be %s, got %s", path, kindName(t), tokenKind(tok))
	}
	switch tok := tok.(type) {
	case nil:
		// null leaves the field as it is, as encoding/json does.
	case json.Delim:
		if tok == '[' {
			if t != nil && t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
				return wrong()
			}
			return w.array(path, t)
		}
		if t != nil && t.Kind() != reflect.Struct && t.Kind() != reflect.Map {
			return wrong()
		}
		return w.object(path, t)
	case string:
		if t != nil && t.Kind() != reflect.String {
			return wrong()
		}
	case bool:
		if t != nil && t.Kind() != reflect.Bool {
			return wrong()
		}
	case json.Number:
		if t == nil {
			return nil
		}
		var err error
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			_, err = strconv.ParseInt(tok.String(), 10, t.Bits())
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			_, err = strconv.ParseUint(tok.String(), 10, t.Bits())
		case reflect.Float32, reflect.Float64:
			_, err = strconv.ParseFloat(tok.String(), t.Bits())
		default:
			return wrong()
		}
		if errors.Is(err, strconv.ErrRange) {
			return errInvalid("%s: %s is out of range", path, tok)
		}
		if err != nil {
			return errInvalid("%s: must be %s, got %s", path, kindName(t), tok)
		}
	}
	return nil
}

// object checks an object's members, its '{' read; t is a struct, a map or nil.
func (w *bodyWalker) object(path string, t reflect.Type) *apiError {
	var fields map[string]reflect.Type
	if t != nil && t.Kind() == reflect.Struct {
		fields = fieldTypes(t, map[string]reflect.Type{})
	}
	seen := map[string]bool{}
	for w.dec.More() {
		at := path
		if at == "" {
			at = "body"
		}
		tok, e := w.next(at)
		if e != nil {
			return e
		}
		key, _ := tok.(string)
		field := key
		if path != "" {
			field = path + "." + key
		}
		if seen[key] {
			return &apiError{Status: http.StatusBadRequest, Code: "malformed_json",
				Message: field + ": named more than once (an object names each key once)"}
		}
		seen[key] = true
		var ft reflect.Type
		switch {
		case fields != nil:
			var ok bool
			if ft, ok = fields[key]; !ok {
				return unknownField(field, key, fields)
			}
		case t != nil && t.Kind() == reflect.Map:
			ft = t.Elem()
		case t != nil:
			return unknownField(field, key, nil)
		}
		if e := w.value(field, ft); e != nil {
			return e
		}
	}
	_, e := w.next(path)
	return e
}

// array checks an array's elements, its '[' read; t is a slice, an array or nil.
func (w *bodyWalker) array(path string, t reflect.Type) *apiError {
	var et reflect.Type
	if t != nil {
		et = t.Elem()
	}
	for i := 0; w.dec.More(); i++ {
		if e := w.value(fmt.Sprintf("%s[%d]", path, i), et); e != nil {
			return e
		}
	}
	_, e := w.next(path)
	return e
}

func unknownField(field, key string, fields map[string]reflect.Type) *apiError {
	known := make([]string, 0, len(fields))
	hint := ""
	for name := range fields {
		known = append(known, name)
		if strings.EqualFold(name, key) {
			hint = fmt.Sprintf("; names are case-sensitive: %s is one", name)
		}
	}
	slices.Sort(known)
	list := "none"
	if len(known) > 0 {
		list = strings.Join(known, ", ")
	}
	return &apiError{Status: http.StatusBadRequest, Code: "unknown_field",
		Message: fmt.Sprintf("%s: not a known field (known: %s%s)", field, list, hint)}
}

// fieldTypes adds to out the JSON names of a struct's fields, with their
// types, embedded structs' included.
func fieldTypes(t reflect.Type, out map[string]reflect.Type) map[string]reflect.Type {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			fieldTypes(f.Type, out)
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// kindName names a Go type as JSON calls it.
func kindName(t reflect.Type) string {
	if t == nil {
		return "a JSON value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// tokenKind names what a JSON token starts, as encoding/json's errors do.
func tokenKind(tok json.Token) string {
	switch tok := tok.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	case json.Number:
		return "number"
	case json.Delim:
		if tok == '[' {
			return "array"
		}
	}
	return "object"
}
