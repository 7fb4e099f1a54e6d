package mailbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// canonicalJSON rewrites one JSON value in canonical form: object keys sorted
// by their UTF-8 bytes, no insignificant whitespace, strings escaped as in
// writeJSONString, numbers kept exactly as written. It refuses invalid JSON,
// trailing data, duplicate object keys and nesting deeper than
// maxPayloadDepth.
func canonicalJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out bytes.Buffer
	if err := canonicalValue(dec, &out, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("must hold exactly one JSON value")
	}
	return out.Bytes(), nil
}

func canonicalValue(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("must be valid JSON (%v)", err)
	}
	return canonicalToken(dec, tok, out, depth)
}

func canonicalToken(dec *json.Decoder, tok json.Token, out *bytes.Buffer, depth int) error {
	switch v := tok.(type) {
	case json.Delim:
		if depth >= maxPayloadDepth {
			return fmt.Errorf("nesting deeper than %d levels", maxPayloadDepth)
		}
		switch v {
		case '[':
			return canonicalArray(dec, out, depth+1)
		case '{':
			return canonicalObject(dec, out, depth+1)
		default:
			return fmt.Errorf("must be valid JSON (unexpected %q)", v)
		}
	case string:
		writeJSONString(out, v)
	case json.Number:
		out.WriteString(v.String())
	case bool:
		if v {
			out.WriteString("true")
		} else {
			out.WriteString("false")
		}
	case nil:
		out.WriteString("null")
	default:
		return fmt.Errorf("must be valid JSON (unexpected token %v)", v)
	}
	return nil
}

func canonicalArray(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	out.WriteByte('[')
	for i := 0; ; i++ {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("must be valid JSON (%v)", err)
		}
		if d, ok := tok.(json.Delim); ok && d == ']' {
			out.WriteByte(']')
			return nil
		}
		if i > 0 {
			out.WriteByte(',')
		}
		if err := canonicalToken(dec, tok, out, depth); err != nil {
			return err
		}
	}
}

func canonicalObject(dec *json.Decoder, out *bytes.Buffer, depth int) error {
	type member struct {
		key   string
		value []byte
	}
	var members []member
	seen := map[string]bool{}
	for {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("must be valid JSON (%v)", err)
		}
		if d, ok := tok.(json.Delim); ok && d == '}' {
			break
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("must be valid JSON (object key %v is not a string)", tok)
		}
		if seen[key] {
			return fmt.Errorf("duplicate object key %q", key)
		}
		seen[key] = true
		var value bytes.Buffer
		if err := canonicalValue(dec, &value, depth); err != nil {
			return err
		}
		members = append(members, member{key, value.Bytes()})
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		writeJSONString(out, m.key)
		out.WriteByte(':')
		out.Write(m.value)
	}
	out.WriteByte('}')
	return nil
}

// writeJSONString writes s as a JSON string with the minimal escaping of
// RFC 8785: quote, backslash and control characters below U+0020 are escaped
// (the usual short forms where JSON has one), everything else is literal
// UTF-8. Invalid UTF-8 never reaches here from a stored message.
func writeJSONString(out *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	out.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			out.WriteString(`\"`)
		case '\\':
			out.WriteString(`\\`)
		case '\b':
			out.WriteString(`\b`)
		case '\f':
			out.WriteString(`\f`)
		case '\n':
			out.WriteString(`\n`)
		case '\r':
			out.WriteString(`\r`)
		case '\t':
			out.WriteString(`\t`)
		default:
			if c < 0x20 {
				out.WriteString(`\u00`)
				out.WriteByte(hexDigits[c>>4])
				out.WriteByte(hexDigits[c&0xf])
			} else {
				out.WriteByte(c)
			}
		}
	}
	out.WriteByte('"')
}
