package skillpkg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sort"
	"unicode/utf8"
)

// ValueType is the declared JSON type of an input or output.
type ValueType string

// The value types a runner may declare. TypeJSON (runx's name) and TypeAny
// (libos's) accept every JSON value, including null; the others refuse null
// for a required input.
const (
	TypeString  ValueType = "string"
	TypeNumber  ValueType = "number"
	TypeInteger ValueType = "integer"
	TypeBoolean ValueType = "boolean"
	TypeObject  ValueType = "object"
	TypeArray   ValueType = "array"
	TypeAny     ValueType = "any"
	TypeJSON    ValueType = "json"
)

var valueTypes = []ValueType{TypeString, TypeNumber, TypeInteger, TypeBoolean, TypeObject, TypeArray, TypeJSON, TypeAny}

func validValueType(t ValueType) bool {
	for _, v := range valueTypes {
		if v == t {
			return true
		}
	}
	return false
}

// InputDecl declares one named input of a runner.
type InputDecl struct {
	Name     string
	Type     ValueType
	Required bool
	// Default is the compact JSON value used when the input is absent; nil
	// when the input has no default. A required input never has one.
	Default     json.RawMessage
	Description string
	// Schema, when declared, is checked after the type (nil otherwise).
	Schema *Schema
	// Packet names a runx packet schema this json input carries; libos
	// records it and checks only the JSON type.
	Packet string
	// Artifact is runx's artifact flag, recorded as metadata.
	Artifact bool
}

// ResolveInputs checks raw, which must be a JSON object, against decls and
// returns each input's compact JSON value by name. Absent inputs take their
// declared default; absent optional inputs without a default are omitted.
// When decls is empty every JSON object is accepted as it is. An empty or
// all-whitespace raw is the empty object. Errors match ErrInvalidInputs and
// name the offending input. ResolveInputs is pure.
func ResolveInputs(decls []InputDecl, raw json.RawMessage) (map[string]json.RawMessage, error) {
	given, err := decodeObject(raw)
	if err != nil {
		return nil, err
	}
	if len(decls) == 0 {
		return given, nil
	}
	declared := make(map[string]bool, len(decls))
	for _, d := range decls {
		declared[d.Name] = true
	}
	var unknown []string
	for name := range given {
		if !declared[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("%w: input %q is not declared by the runner", ErrInvalidInputs, unknown[0])
	}
	out := make(map[string]json.RawMessage, len(decls))
	for _, d := range decls {
		v, ok := given[d.Name]
		if !ok {
			switch {
			case d.Required:
				return nil, fmt.Errorf("%w: input %q is required", ErrInvalidInputs, d.Name)
			case d.Default != nil:
				out[d.Name] = d.Default
			}
			continue
		}
		// runx renders a null optional input as an empty value, so null is
		// accepted wherever the input may be left out.
		if !d.Required && string(v) == "null" {
			out[d.Name] = v
			continue
		}
		if err := CheckType(d.Type, v); err != nil {
			return nil, fmt.Errorf("%w: input %q %v", ErrInvalidInputs, d.Name, err)
		}
		if d.Schema != nil {
			if err := d.Schema.Validate(v); err != nil {
				return nil, fmt.Errorf("%w: input %q breaks its schema: %v", ErrInvalidInputs, d.Name, err)
			}
		}
		out[d.Name] = v
	}
	return out, nil
}

// decodeObject decodes a JSON object into compact member values, refusing
// duplicate names, trailing data and invalid UTF-8.
func decodeObject(raw json.RawMessage) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return map[string]json.RawMessage{}, nil
	}
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("%w: inputs must be UTF-8 JSON", ErrInvalidInputs)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%w: inputs must be a JSON object: %v", ErrInvalidInputs, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%w: inputs must be a JSON object, got %s", ErrInvalidInputs, describeToken(tok))
	}
	out := make(map[string]json.RawMessage)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: inputs must be a JSON object: %v", ErrInvalidInputs, err)
		}
		name, _ := tok.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, fmt.Errorf("%w: input %q: %v", ErrInvalidInputs, name, err)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%w: input %q is given more than once", ErrInvalidInputs, name)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, value); err != nil {
			return nil, fmt.Errorf("%w: input %q: %v", ErrInvalidInputs, name, err)
		}
		out[name] = compact.Bytes()
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: inputs must be a JSON object: %v", ErrInvalidInputs, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: inputs must hold exactly one JSON object, found data after it", ErrInvalidInputs)
	}
	return out, nil
}

func describeToken(tok json.Token) string {
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			return "an array"
		}
		return string(t)
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", tok)
}

// CheckType reports whether the JSON value v is of type t. The error, when
// not nil, reads as a predicate ("must be a string, got number").
func CheckType(t ValueType, v json.RawMessage) error {
	got := jsonKind(v)
	if got == "" {
		return errors.New("must be a valid JSON value")
	}
	switch t {
	case TypeAny, TypeJSON:
		return nil
	case TypeInteger:
		if got == "number" && isIntegral(v) {
			return nil
		}
		if got == "number" {
			return errors.New("must be an integer, got a fractional number")
		}
	default:
		if string(t) == got {
			return nil
		}
	}
	return fmt.Errorf("must be %s %s, got %s", article(t), t, got)
}

func article(t ValueType) string {
	if t == TypeInteger || t == TypeObject || t == TypeArray || t == TypeAny {
		return "an"
	}
	return "a"
}

// jsonKind names the JSON type of a value by its first byte, or "" when v is
// not valid JSON.
func jsonKind(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 || !json.Valid(v) {
		return ""
	}
	switch v[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// isIntegral reports whether a JSON number has no fractional part (so 2.0 and
// 1e3 count as integers, as in JSON Schema).
func isIntegral(v json.RawMessage) bool {
	f, _, err := big.ParseFloat(string(bytes.TrimSpace(v)), 10, 256, big.ToNearestEven)
	return err == nil && f.IsInt()
}

// EncodeInputs renders resolved inputs as one compact JSON object with its
// members sorted by name.
func EncodeInputs(inputs map[string]json.RawMessage) (json.RawMessage, error) {
	if inputs == nil {
		return json.RawMessage("{}"), nil
	}
	raw, err := json.Marshal(inputs)
	if err != nil {
		return nil, fmt.Errorf("%w: encoding inputs: %v", ErrInvalidInputs, err)
	}
	return raw, nil
}

// decodeNumbers decodes one JSON value keeping numbers exact (json.Number).
func decodeNumbers(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
