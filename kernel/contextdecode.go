package kernel

import (
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/libos/libos/llm"
)

// A context is decoded whole each time a process takes it up again after
// the cache let it go (a wake from a long wait, the first quantum after a
// reopen), in time that grows with its history: with encoding/json that was
// two fifths of the CPU of two processes exchanging messages. decodeEntries
// reads, in one pass and without reflection, the payload encode writes (a
// field order, encoding/json's output for each entry) and gives up on
// anything else (another field order, an unknown or repeated field, a
// number that is not an integer), which decodeContext then hands to
// encoding/json. What it returns is what encoding/json returns for the same
// bytes (TestContextDecoderMatchesEncodingJSON).

// decodeEntries returns the entries of a context payload and true, or false
// when the payload is not in the shape encode writes.
func decodeEntries(payload []byte) ([]Entry, bool) {
	d := entryDecoder{b: payload}
	if !d.literal(contextPayloadStart) {
		return nil, false
	}
	var entries []Entry
	if d.peek() == ']' {
		d.i++
		entries = []Entry{}
	} else {
		// Entries are about as long as their text; the count only sizes the
		// array once.
		entries = make([]Entry, 0, 8)
		for {
			var e Entry
			if !d.entry(&e) {
				return nil, false
			}
			entries = append(entries, e)
			if d.peek() == ',' {
				d.i++
				continue
			}
			if !d.literal("]") {
				return nil, false
			}
			break
		}
	}
	if !d.literal("}") || d.i != len(d.b) {
		return nil, false
	}
	return entries, true
}

// entryDecoder reads the encoding of a context from b at i. Its readers
// return false, leaving i anywhere, on what they do not expect.
type entryDecoder struct {
	b []byte
	i int
}

func (d *entryDecoder) peek() byte {
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *entryDecoder) literal(s string) bool {
	if len(d.b)-d.i < len(s) || string(d.b[d.i:d.i+len(s)]) != s {
		return false
	}
	d.i += len(s)
	return true
}

// entry reads an Entry as json.Marshal writes it: its fields in their
// order, those with omitempty only when set.
func (d *entryDecoder) entry(e *Entry) bool {
	var role string
	if !d.literal(`{"role":`) || !d.stringInto(&role) {
		return false
	}
	e.Role = llm.Role(role)
	if !d.optional(`,"kind":`, &e.Kind) || !d.optional(`,"content":`, &e.Content) {
		return false
	}
	if d.literal(`,"tool_calls":`) {
		var ok bool
		if e.ToolCalls, ok = d.toolCalls(); !ok {
			return false
		}
	}
	if !d.optional(`,"tool_call_id":`, &e.ToolCallID) || !d.optional(`,"name":`, &e.Name) {
		return false
	}
	var ok bool
	if !d.literal(`,"tokens":`) {
		return false
	}
	if e.Tokens, ok = d.int(); !ok {
		return false
	}
	return d.literal("}")
}

// optional reads into dst the string of the member whose key and colon are
// field, when it comes next.
func (d *entryDecoder) optional(field string, dst *string) bool {
	return !d.literal(field) || d.stringInto(dst)
}

func (d *entryDecoder) stringInto(dst *string) bool {
	s, ok := d.string()
	*dst = s
	return ok
}

func (d *entryDecoder) toolCalls() ([]llm.ToolCall, bool) {
	if d.literal("null") {
		return nil, true
	}
	if !d.literal("[") {
		return nil, false
	}
	calls := []llm.ToolCall{}
	if d.literal("]") {
		return calls, true
	}
	for {
		var c llm.ToolCall
		var ok bool
		if !d.literal(`{"id":`) {
			return nil, false
		}
		if c.ID, ok = d.string(); !ok || !d.literal(`,"name":`) {
			return nil, false
		}
		if c.Name, ok = d.string(); !ok || !d.literal(`,"arguments":`) {
			return nil, false
		}
		d.space()
		start := d.i
		if !d.skipValue(0) {
			return nil, false
		}
		c.Arguments = append([]byte(nil), d.b[start:d.i]...)
		d.space()
		if !d.literal("}") {
			return nil, false
		}
		calls = append(calls, c)
		if d.literal(",") {
			continue
		}
		return calls, d.literal("]")
	}
}

// int reads an integer in int's range, as encoding/json takes it into an
// int field.
func (d *entryDecoder) int() (int, bool) {
	start := d.i
	if d.peek() == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	if d.i == digits || (d.b[digits] == '0' && d.i-digits > 1) {
		return 0, false
	}
	if c := d.peek(); c == '.' || c == 'e' || c == 'E' {
		return 0, false
	}
	n, err := strconv.Atoi(string(d.b[start:d.i]))
	return n, err == nil
}

// string reads a JSON string. Text of printable ASCII without escapes is
// copied as it is; anything else is unquoted as encoding/json does it,
// invalid UTF-8 and lone surrogates becoming U+FFFD.
func (d *entryDecoder) string() (string, bool) {
	if d.peek() != '"' {
		return "", false
	}
	d.i++
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			s := string(d.b[start:d.i])
			d.i++
			return s, true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return d.unquote(start)
		}
		d.i++
	}
	return "", false
}

// unquote finishes a string begun at start whose plain prefix ends at i.
// Its text is no longer than the quoted one, which sizes the result once.
func (d *entryDecoder) unquote(start int) (string, bool) {
	end := d.quotedEnd()
	if end < 0 {
		return "", false
	}
	var out strings.Builder
	out.Grow(end - start)
	out.Write(d.b[start:d.i])
	for d.i < end {
		// A run of plain ASCII is copied at once.
		run := d.i
		for run < end && jsonPlainText[d.b[run]] {
			run++
		}
		out.Write(d.b[d.i:run])
		d.i = run
		if d.i == end {
			break
		}
		switch c := d.b[d.i]; {
		case c < 0x20:
			return "", false
		case c == '\\':
			d.i++
			switch e := d.b[d.i]; e {
			case '"', '\\', '/':
				out.WriteByte(e)
			case 'b':
				out.WriteByte('\b')
			case 'f':
				out.WriteByte('\f')
			case 'n':
				out.WriteByte('\n')
			case 'r':
				out.WriteByte('\r')
			case 't':
				out.WriteByte('\t')
			case 'u':
				r, ok := d.hex4(d.i + 1)
				if !ok {
					return "", false
				}
				d.i += 4
				if utf16.IsSurrogate(r) {
					// A pair only if a low half follows; otherwise this
					// half alone, as U+FFFD.
					if d.i+6 < end && d.b[d.i+1] == '\\' && d.b[d.i+2] == 'u' {
						if r2, ok := d.hex4(d.i + 3); ok {
							if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
								d.i += 6
								out.WriteRune(pair)
								break
							}
						}
					}
					r = utf8.RuneError
				}
				out.WriteRune(r)
			default:
				return "", false
			}
			d.i++
		default:
			r, size := utf8.DecodeRune(d.b[d.i:end])
			if r == utf8.RuneError && size == 1 {
				out.WriteRune(utf8.RuneError)
			} else {
				out.Write(d.b[d.i : d.i+size])
			}
			d.i += size
		}
	}
	d.i = end + 1
	return out.String(), true
}

// quotedEnd returns the index of the quote that ends the string i is in,
// or -1: escapes are stepped over, not checked.
func (d *entryDecoder) quotedEnd() int {
	for j := d.i; j < len(d.b); j++ {
		switch d.b[j] {
		case '"':
			return j
		case '\\':
			j++
		}
	}
	return -1
}

// jsonPlainText marks the bytes a JSON string holds as they are: printable
// ASCII but the quote and the backslash.
var jsonPlainText = func() (plain [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		plain[c] = c != '"' && c != '\\'
	}
	return plain
}()

// hex4 reads the four hex digits at j.
func (d *entryDecoder) hex4(j int) (rune, bool) {
	if j+4 > len(d.b) {
		return 0, false
	}
	var r rune
	for _, c := range d.b[j : j+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// skipValue moves past one JSON value, checking it as encoding/json would,
// but for the text of strings (arguments are kept as they are, so only
// their shape matters) and for numbers, whose grammar it checks.
func (d *entryDecoder) skipValue(depth int) bool {
	if depth > maxArgumentDepth {
		return false
	}
	d.space()
	switch c := d.peek(); {
	case c == '{':
		return d.list("}", func() bool {
			d.space()
			if !d.skipString() {
				return false
			}
			d.space()
			return d.literal(":") && d.skipValue(depth+1)
		})
	case c == '[':
		return d.list("]", func() bool { return d.skipValue(depth + 1) })
	case c == '"':
		return d.skipString()
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	default:
		return d.number()
	}
}

// list moves past an object's members or an array's elements, from its
// opening bracket up to close, each read by one.
func (d *entryDecoder) list(close string, one func() bool) bool {
	d.i++
	d.space()
	if d.literal(close) {
		return true
	}
	for {
		if !one() {
			return false
		}
		d.space()
		if d.literal(close) {
			return true
		}
		if !d.literal(",") {
			return false
		}
	}
}

// skipString moves past a JSON string, checking its escapes and that it
// holds no control character, as encoding/json's scanner does.
func (d *entryDecoder) skipString() bool {
	if !d.literal(`"`) {
		return false
	}
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			d.i++
			switch d.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				d.i++
			case 'u':
				if _, ok := d.hex4(d.i + 1); !ok {
					return false
				}
				d.i += 5
			default:
				return false
			}
		default:
			d.i++
		}
	}
	return false
}

// maxArgumentDepth bounds the nesting skipValue follows; deeper arguments
// go to encoding/json.
const maxArgumentDepth = 64

func (d *entryDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// number moves past a JSON number.
func (d *entryDecoder) number() bool {
	if d.peek() == '-' {
		d.i++
	}
	switch c := d.peek(); {
	case c == '0':
		d.i++
	case c >= '1' && c <= '9':
		d.digits()
	default:
		return false
	}
	if d.peek() == '.' {
		d.i++
		if !d.digits() {
			return false
		}
	}
	if c := d.peek(); c == 'e' || c == 'E' {
		d.i++
		if c := d.peek(); c == '+' || c == '-' {
			d.i++
		}
		if !d.digits() {
			return false
		}
	}
	return true
}

// digits moves past one or more digits.
func (d *entryDecoder) digits() bool {
	start := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}
