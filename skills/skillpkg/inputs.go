package skillpkg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"sort"
	"strings"
	"unicode/utf8"
)

// ValueType is the declared JSON type of an input or output.
type ValueType string

// The value types a runner may declare. TypeJSON (runx's name) and TypeAny
// (libos's, for outputs only: runx has no such input type) accept every
// JSON value, including null; the others refuse null for a required input.
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
	// line is the line of the input's name in the manifest (0 when not
	// parsed from one), for refusals made after the declaration is read.
	line int
}

// InputVariablePrefix starts the variables that carry a cli-tool's inputs
// (RUNX_INPUT_<NAME> and RUNX_INPUT_<NAME>_PATH), as the runtime contract
// names them.
const InputVariablePrefix = "RUNX_INPUT_"

// MaxInputVariableName bounds the <NAME> of an input: the cli-tool runner
// writes each input to a file input_<NAME>, and a file name has at most 255
// bytes on Linux and the BSDs.
const MaxInputVariableName = 255 - len("input_")

// NormalizeInputName turns an input name into the <NAME> of
// RUNX_INPUT_<NAME>, by the runtime contract's rule: every run of characters
// other than ASCII letters and digits becomes one '_', separators at either
// end are trimmed, and letters are uppercased. So "thread.title" becomes
// "THREAD_TITLE" and " a--b__c " becomes "A_B_C". The result is "" when the
// name holds no letter or digit. Admission refuses the cli-tool inputs whose
// names this maps to nothing or onto another's (checkInputVariables); the
// cli-tool runner delivers inputs under these names.
func NormalizeInputName(name string) string {
	var b strings.Builder
	pendingSep := false
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z':
			c -= 'a' - 'A'
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		default:
			pendingSep = true
			continue
		}
		if pendingSep && b.Len() > 0 {
			b.WriteByte('_')
		}
		pendingSep = false
		b.WriteByte(c)
	}
	return b.String()
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
	// A \u escape of a lone surrogate is valid JSON text but no Unicode
	// character: Go's decoder reads it as U+FFFD while the raw input keeps
	// the escape, so a tool's argument would differ from its inputs.json.
	// runx's decoder (serde_json) refuses it; so does this.
	lone := hasLoneSurrogate(raw)
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
		if lone && hasLoneSurrogate(compact.Bytes()) {
			return nil, fmt.Errorf("%w: input %q holds a \\u escape of a lone UTF-16 surrogate, which is no Unicode character; %s", ErrInvalidInputs, name, unicodeRule)
		}
		out[name] = compact.Bytes()
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: inputs must be a JSON object: %v", ErrInvalidInputs, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: inputs must hold exactly one JSON object, found data after it", ErrInvalidInputs)
	}
	if lone {
		// No value held it, so a member name does.
		return nil, fmt.Errorf("%w: an input name holds a \\u escape of a lone UTF-16 surrogate, which is no Unicode character; %s", ErrInvalidInputs, unicodeRule)
	}
	return out, nil
}

// unicodeRule is the rule a lone surrogate escape breaks.
const unicodeRule = "inputs must be valid Unicode text (a surrogate escape must be a high one followed by a low one)"

// hasLoneSurrogate reports whether the JSON text v holds a \u escape of a
// UTF-16 surrogate that is not the high half followed by the low half of a
// pair.
func hasLoneSurrogate(v []byte) bool {
	if !bytes.Contains(v, []byte(`\u`)) {
		return false
	}
	inString := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch {
		case c == '"':
			inString = false
		case c == '\\' && i+5 < len(v) && v[i+1] == 'u':
			u := hex4(v[i+2 : i+6])
			switch {
			case u >= 0xD800 && u < 0xDC00:
				if i+11 < len(v) && v[i+6] == '\\' && v[i+7] == 'u' {
					if low := hex4(v[i+8 : i+12]); low >= 0xDC00 && low < 0xE000 {
						i += 11
						continue
					}
				}
				return true
			case u >= 0xDC00 && u < 0xE000:
				return true
			}
			i += 5
		case c == '\\':
			i++ // the escaped character
		}
	}
	return false
}

// hex4 decodes four hexadecimal digits, or returns -1.
func hex4(h []byte) int {
	n := 0
	for _, c := range h {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int(c-'A'+10)
		default:
			return -1
		}
	}
	return n
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
