// Package schema is the JSON Schema subset that libos tool arguments use. A
// Schema is both what the model is shown and what arguments are validated
// against before a tool runs, so the two can never disagree.
package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Schema is a JSON Schema node. Only the keywords below exist; a tool that
// needs another keyword adds it here with its validation.
type Schema struct {
	Type                 string             `json:"type,omitempty"` // "" accepts any JSON value
	Description          string             `json:"description,omitempty"`
	Properties           map[string]*Schema `json:"properties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	AdditionalProperties *bool              `json:"additionalProperties,omitempty"`
	Minimum              *float64           `json:"minimum,omitempty"`
	Maximum              *float64           `json:"maximum,omitempty"`
	MinLength            *int               `json:"minLength,omitempty"`
	MaxLength            *int               `json:"maxLength,omitempty"`
	MinItems             *int               `json:"minItems,omitempty"`
	MaxItems             *int               `json:"maxItems,omitempty"`
	Items                *Schema            `json:"items,omitempty"`
	Enum                 []any              `json:"enum,omitempty"`
	Default              any                `json:"default,omitempty"`
}

// ErrInvalid is wrapped by every validation failure.
var ErrInvalid = errors.New("invalid arguments")

// FieldError names the field (a JSON path such as "capabilities[0].rights")
// and the rule it broke.
type FieldError struct {
	Field string
	Rule  string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return "arguments: " + e.Rule
	}
	return e.Field + ": " + e.Rule
}

// Unwrap lets callers match ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// Object builds an object schema that refuses unknown properties.
func Object(props map[string]*Schema, required ...string) *Schema {
	f := false
	return &Schema{Type: "object", Properties: props, Required: required, AdditionalProperties: &f}
}

// Ptr returns a pointer to v, for the optional numeric keywords.
func Ptr[T any](v T) *T { return &v }

// Normalize decodes raw arguments, validates them against s and fills in
// defaults. It returns the canonical JSON of the validated arguments. Empty
// input means an empty object.
func (s *Schema) Normalize(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &FieldError{Rule: "not valid JSON: " + err.Error()}
	}
	// More misses a stray '}' or ']' after the value, so the rest is
	// checked byte by byte.
	if len(bytes.TrimSpace(raw[dec.InputOffset():])) > 0 {
		return nil, &FieldError{Rule: "trailing data after the JSON value"}
	}
	if err := checkDuplicateKeys(raw); err != nil {
		return nil, err
	}
	v, err := s.validate(v, "")
	if err != nil {
		return nil, err
	}
	out, err := Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("schema: encode arguments: %w", err)
	}
	return out, nil
}

// Marshal is the canonical JSON of v: json.Marshal's (map keys sorted, no
// space) without its HTML escaping. Escaped, each <, > or & is six bytes,
// so a value the caller sent within a bound in bytes would be measured,
// stored and hashed as up to six times its size, and as text the caller
// never wrote. A string written with such escapes or without them encodes
// alike, so canonical arguments still have one form.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	// Encode ends the value with a newline, which json.Marshal does not.
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// keyFrame is an object or an array open at some point of a scan.
type keyFrame struct {
	object bool
	first  int                 // keys[first:] are the keys of this object and of the ones open inside it
	index  int                 // the array element being read
	set    map[string]struct{} // an object's keys, once it has more than linearKeys
}

// linearKeys is how many keys an object's duplicate check compares one by
// one before it builds a set: tool arguments rarely have more.
const linearKeys = 32

// checkDuplicateKeys refuses an object anywhere in raw that names a key
// twice: decoding into a map keeps only the last value, so a tool would act
// on one the caller may not have meant. raw is one JSON value encoding/json
// has accepted, so the scan checks no syntax. The keys of the open objects
// share one slice and are compared as written, unless they hold an escape.
func checkDuplicateKeys(raw []byte) error {
	var frameBuf [16]keyFrame
	var keyBuf [64][]byte
	stack, keys := frameBuf[:0], keyBuf[:0]
	expectKey := false
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '{':
			stack = append(stack, keyFrame{object: true, first: len(keys)})
			expectKey = true
		case '[':
			stack = append(stack, keyFrame{first: len(keys)})
		case '}', ']':
			keys = keys[:stack[len(stack)-1].first]
			stack = stack[:len(stack)-1]
			expectKey = false
		case ',':
			if top := &stack[len(stack)-1]; top.object {
				expectKey = true
			} else {
				top.index++
			}
		case '"':
			end := stringEnd(raw, i)
			if expectKey {
				expectKey = false
				key := raw[i+1 : end]
				if bytes.IndexByte(key, '\\') >= 0 {
					var s string
					if err := json.Unmarshal(raw[i:end+1], &s); err != nil {
						return &FieldError{Rule: "not valid JSON: " + err.Error()}
					}
					key = []byte(s)
				}
				top := &stack[len(stack)-1]
				if top.hasKey(keys, key) {
					return &FieldError{Field: keyPath(stack, keys), Rule: fmt.Sprintf("duplicate key %q: an object may name each key once", key)}
				}
				keys = append(keys, key)
			}
			i = end
		}
	}
	return nil
}

// hasKey reports whether the object f already has key, and notes key in
// its set when it keeps one.
func (f *keyFrame) hasKey(keys [][]byte, key []byte) bool {
	if f.set == nil && len(keys)-f.first < linearKeys {
		for _, k := range keys[f.first:] {
			if bytes.Equal(k, key) {
				return true
			}
		}
		return false
	}
	if f.set == nil {
		f.set = make(map[string]struct{}, 2*linearKeys)
		for _, k := range keys[f.first:] {
			f.set[string(k)] = struct{}{}
		}
	}
	if _, dup := f.set[string(key)]; dup {
		return true
	}
	f.set[string(key)] = struct{}{}
	return false
}

// keyPath is the path of the innermost open object, in FieldError's form.
func keyPath(stack []keyFrame, keys [][]byte) string {
	path := ""
	for j, f := range stack[:len(stack)-1] {
		if f.object {
			// Its member being read is the last key it had when the next
			// frame opened.
			path = join(path, string(keys[stack[j+1].first-1]))
		} else {
			path = fmt.Sprintf("%s[%d]", path, f.index)
		}
	}
	return path
}

// stringEnd returns the index of the quote that closes the JSON string
// opening at raw[open].
func stringEnd(raw []byte, open int) int {
	from := open + 1
	for {
		q := from + bytes.IndexByte(raw[from:], '"')
		escapes := 0
		for p := q - 1; p > open && raw[p] == '\\'; p-- {
			escapes++
		}
		if escapes%2 == 0 {
			return q
		}
		from = q + 1
	}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number, float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func (s *Schema) validate(v any, path string) (any, error) {
	fail := func(format string, a ...any) (any, error) {
		return nil, &FieldError{Field: path, Rule: fmt.Sprintf(format, a...)}
	}
	switch s.Type {
	case "":
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return fail("must be an object, got %s", typeName(v))
		}
		return s.validateObject(m, path)
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return fail("must be an array, got %s", typeName(v))
		}
		if s.MinItems != nil && len(arr) < *s.MinItems {
			return fail("must have at least %d items, got %d", *s.MinItems, len(arr))
		}
		if s.MaxItems != nil && len(arr) > *s.MaxItems {
			return fail("must have at most %d items, got %d", *s.MaxItems, len(arr))
		}
		if s.Items != nil {
			for i, item := range arr {
				nv, err := s.Items.validate(item, fmt.Sprintf("%s[%d]", path, i))
				if err != nil {
					return nil, err
				}
				arr[i] = nv
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return fail("must be a string, got %s", typeName(v))
		}
		n := utf8.RuneCountInString(str)
		if s.MinLength != nil && n < *s.MinLength {
			return fail("must be at least %d characters, got %d", *s.MinLength, n)
		}
		if s.MaxLength != nil && n > *s.MaxLength {
			return fail("must be at most %d characters, got %d", *s.MaxLength, n)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fail("must be a boolean, got %s", typeName(v))
		}
	case "number", "integer":
		f, err := number(v)
		if err != nil {
			return fail("must be %s %s, got %s", article(s.Type), s.Type, typeName(v))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fail("must be finite")
		}
		if s.Type == "integer" {
			if f != math.Trunc(f) {
				return fail("must be an integer, got %v", v)
			}
			if math.Abs(f) > 1<<53 {
				return fail("integer out of range")
			}
		}
		if s.Minimum != nil && f < *s.Minimum {
			return fail("must be >= %s, got %v", fmtNum(*s.Minimum), v)
		}
		if s.Maximum != nil && f > *s.Maximum {
			return fail("must be <= %s, got %v", fmtNum(*s.Maximum), v)
		}
		if s.Type == "integer" {
			v = json.Number(strconv.FormatInt(int64(f), 10))
		}
	default:
		return fail("schema has unsupported type %q", s.Type)
	}
	if len(s.Enum) > 0 && !inEnum(v, s.Enum) {
		opts := make([]string, len(s.Enum))
		for i, e := range s.Enum {
			b, _ := Marshal(e)
			opts[i] = string(b)
		}
		return fail("must be one of %s", strings.Join(opts, ", "))
	}
	return v, nil
}

func (s *Schema) validateObject(m map[string]any, path string) (any, error) {
	if s.AdditionalProperties != nil && !*s.AdditionalProperties {
		var unknown []string
		for k := range m {
			if _, ok := s.Properties[k]; !ok {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return nil, &FieldError{Field: join(path, unknown[0]), Rule: "unknown field (additionalProperties is false)"}
		}
	}
	for _, r := range s.Required {
		if _, ok := m[r]; !ok {
			return nil, &FieldError{Field: join(path, r), Rule: "required"}
		}
	}
	names := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		ps := s.Properties[k]
		val, ok := m[k]
		if !ok {
			if ps.Default != nil {
				m[k] = ps.Default
			}
			continue
		}
		nv, err := ps.validate(val, join(path, k))
		if err != nil {
			return nil, err
		}
		m[k] = nv
	}
	return m, nil
}

func number(v any) (float64, error) {
	switch n := v.(type) {
	case json.Number:
		return n.Float64()
	case float64:
		return n, nil
	case int:
		return float64(n), nil
	case int64:
		return float64(n), nil
	}
	return 0, errors.New("not a number")
}

func inEnum(v any, enum []any) bool {
	vb, _ := Marshal(v)
	for _, e := range enum {
		eb, _ := Marshal(e)
		if bytes.Equal(vb, eb) {
			return true
		}
	}
	return false
}

func article(t string) string {
	if t == "integer" {
		return "an"
	}
	return "a"
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
