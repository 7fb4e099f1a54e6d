package jsrunner

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dop251/goja"
)

// maxInputDepth bounds the nesting of inputs, like encoding/json's scanner
// does on the host.
const maxInputDepth = 10000

// jsonDecoder builds engine values straight from JSON bytes. It produces what
// JSON.parse produces (own data properties in document order, the last of
// duplicate keys winning, "__proto__" as an ordinary key) in one pass, which
// is several times faster than the engine's token-based JSON.parse on page
// inputs; unpaired surrogate escapes keep their code unit.
type jsonDecoder struct {
	eng   *engine
	data  []byte
	pos   int
	depth int
	// scratch is reused for array elements, one segment per nesting level.
	scratch []any
}

var errJSONSyntax = errors.New("invalid JSON")

func decodeJSON(e *engine, data []byte) (goja.Value, error) {
	d := &jsonDecoder{eng: e, data: data}
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	d.space()
	if d.pos != len(d.data) {
		return nil, d.fail("unexpected data after the value")
	}
	return v, nil
}

func (d *jsonDecoder) fail(what string) error {
	return fmt.Errorf("%w at byte %d: %s", errJSONSyntax, d.pos, what)
}

func (d *jsonDecoder) space() {
	for d.pos < len(d.data) && isJSONSpace(d.data[d.pos]) {
		d.pos++
	}
}

func (d *jsonDecoder) value() (goja.Value, error) {
	d.space()
	if d.pos >= len(d.data) {
		return nil, d.fail("unexpected end of input")
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		return d.object()
	case c == '[':
		return d.array()
	case c == '"':
		return d.str()
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	case d.literal("true"):
		return d.eng.vm.ToValue(true), nil
	case d.literal("false"):
		return d.eng.vm.ToValue(false), nil
	case d.literal("null"):
		return goja.Null(), nil
	default:
		return nil, d.fail(fmt.Sprintf("unexpected character %q", c))
	}
}

func (d *jsonDecoder) literal(word string) bool {
	if len(d.data)-d.pos >= len(word) && string(d.data[d.pos:d.pos+len(word)]) == word {
		d.pos += len(word)
		return true
	}
	return false
}

func (d *jsonDecoder) enter() error {
	d.depth++
	if d.depth > maxInputDepth {
		return d.fail(fmt.Sprintf("nesting deeper than %d levels", maxInputDepth))
	}
	return nil
}

func (d *jsonDecoder) object() (goja.Value, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer func() { d.depth-- }()
	d.pos++ // '{'
	obj := d.eng.vm.NewObject()
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return obj, nil
	}
	for {
		d.space()
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return nil, d.fail("expected a string key")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		key := k.String()
		d.space()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return nil, d.fail("expected ':'")
		}
		d.pos++
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		// Defined, as JSON.parse does, never assigned: an assignment would
		// run a setter of Object.prototype (__proto__'s, or one the module
		// installed while it evaluated, which may be before the inputs are
		// decoded).
		if strings.ContainsRune(key, utf8.RuneError) && loneSurrogateIn(k) {
			// As Go text the key would be another (U+FFFD): defined
			// with the engine's string, through Object.defineProperty
			// and a descriptor without a prototype.
			if err := d.defineUTF16(obj, k, v); err != nil {
				return nil, err
			}
		} else if err := obj.DefineDataProperty(key, v, goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE); err != nil {
			return nil, err
		}
		d.space()
		if d.pos >= len(d.data) {
			return nil, d.fail("unterminated object")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return obj, nil
		default:
			return nil, d.fail("expected ',' or '}'")
		}
	}
}

func (d *jsonDecoder) array() (goja.Value, error) {
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer func() { d.depth-- }()
	d.pos++ // '['
	base := len(d.scratch)
	defer func() {
		clear(d.scratch[base:])
		d.scratch = d.scratch[:base]
	}()
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		return d.eng.vm.NewArray(), nil
	}
	for {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		d.scratch = append(d.scratch, v)
		d.space()
		if d.pos >= len(d.data) {
			return nil, d.fail("unterminated array")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return d.eng.vm.NewArray(d.scratch[base:]...), nil
		default:
			return nil, d.fail("expected ',' or ']'")
		}
	}
}

func (d *jsonDecoder) digits() int {
	start := d.pos
	for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
		d.pos++
	}
	return d.pos - start
}

// number follows the JSON grammar: -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?
func (d *jsonDecoder) number() (goja.Value, error) {
	start := d.pos
	if d.data[d.pos] == '-' {
		d.pos++
	}
	intStart := d.pos
	n := d.digits()
	if n == 0 || n > 1 && d.data[intStart] == '0' {
		return nil, d.fail("invalid number")
	}
	integer := true
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		if d.digits() == 0 {
			return nil, d.fail("invalid number: no digits after '.'")
		}
		integer = false
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if d.digits() == 0 {
			return nil, d.fail("invalid number: no digits in the exponent")
		}
		integer = false
	}
	text := string(d.data[start:d.pos])
	if integer && n <= 15 {
		if v, err := strconv.ParseInt(text, 10, 64); err == nil && !(v == 0 && text[0] == '-') {
			return d.eng.vm.ToValue(v), nil
		}
	}
	// Out-of-range values round to ±Inf or 0 as in JavaScript; the grammar
	// was checked above, so only a range error can occur.
	f, _ := strconv.ParseFloat(text, 64)
	return d.eng.vm.ToValue(f), nil
}

func (d *jsonDecoder) str() (goja.Value, error) {
	start := d.pos + 1
	// Fast path: no escapes.
	for i := start; i < len(d.data); i++ {
		switch c := d.data[i]; {
		case c == '"':
			d.pos = i + 1
			return d.eng.vm.ToValue(string(d.data[start:i])), nil
		case c == '\\':
			return d.escapedString()
		case c < 0x20:
			d.pos = i
			return nil, d.fail("control character in a string")
		}
	}
	return nil, d.fail("unterminated string")
}

// defineUTF16 defines key, an engine string Go text cannot hold, on obj as
// an ordinary data property.
func (d *jsonDecoder) defineUTF16(obj *goja.Object, key, v goja.Value) error {
	desc := d.eng.vm.NewObject()
	if err := desc.SetPrototype(nil); err != nil {
		return err
	}
	if err := desc.DefineDataProperty("value", v, goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE); err != nil {
		return err
	}
	for _, flag := range []string{"writable", "enumerable", "configurable"} {
		if err := desc.DefineDataProperty(flag, d.eng.vm.ToValue(true), goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE); err != nil {
			return err
		}
	}
	defineProperty, err := d.eng.builtin("Object", "defineProperty")
	if err != nil {
		return err
	}
	_, err = defineProperty(goja.Undefined(), obj, key, desc)
	return err
}

// loneSurrogateIn reports whether v, a string, holds an unpaired surrogate.
func loneSurrogateIn(v goja.Value) bool {
	s, ok := v.(goja.String)
	if !ok {
		return false
	}
	units := make([]uint16, s.Length())
	for i := range units {
		units[i] = s.CharAt(i)
	}
	return hasLoneSurrogate(units)
}

// escapedString decodes a string with escapes as UTF-16 so that an unpaired
// surrogate escape survives as the code unit it names.
func (d *jsonDecoder) escapedString() (goja.Value, error) {
	d.pos++ // opening quote
	var units []uint16
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			if hasLoneSurrogate(units) {
				return goja.StringFromUTF16(units), nil
			}
			return d.eng.vm.ToValue(string(utf16.Decode(units))), nil
		case c < 0x20:
			return nil, d.fail("control character in a string")
		case c == '\\':
			if d.pos+1 >= len(d.data) {
				return nil, d.fail("unterminated escape")
			}
			e := d.data[d.pos+1]
			d.pos += 2
			switch e {
			case '"', '\\', '/':
				units = append(units, uint16(e))
			case 'b':
				units = append(units, '\b')
			case 'f':
				units = append(units, '\f')
			case 'n':
				units = append(units, '\n')
			case 'r':
				units = append(units, '\r')
			case 't':
				units = append(units, '\t')
			case 'u':
				if d.pos+4 > len(d.data) {
					return nil, d.fail("short \\u escape")
				}
				n, err := strconv.ParseUint(string(d.data[d.pos:d.pos+4]), 16, 16)
				if err != nil {
					return nil, d.fail("invalid \\u escape")
				}
				d.pos += 4
				units = append(units, uint16(n))
			default:
				return nil, d.fail(fmt.Sprintf("invalid escape \\%c", e))
			}
		case c < utf8.RuneSelf:
			units = append(units, uint16(c))
			d.pos++
		default:
			r, size := utf8.DecodeRune(d.data[d.pos:])
			if r == utf8.RuneError && size <= 1 {
				return nil, d.fail("invalid UTF-8 in a string")
			}
			units = utf16.AppendRune(units, r)
			d.pos += size
		}
	}
	return nil, d.fail("unterminated string")
}

func hasLoneSurrogate(units []uint16) bool {
	for i := 0; i < len(units); i++ {
		u := units[i]
		switch {
		case u >= 0xd800 && u < 0xdc00:
			if i+1 < len(units) && units[i+1] >= 0xdc00 && units[i+1] <= 0xdfff {
				i++
				continue
			}
			return true
		case u >= 0xdc00 && u <= 0xdfff:
			return true
		}
	}
	return false
}
