package main

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// What the CLI prints comes largely from models and from whoever talks to
// the runtime: a model's text, its tool names, call ids and arguments, a
// reason, a message's body. Printed raw, a control character in it reaches
// the operator's terminal as a command: an escape sequence can erase the
// line of a dangerous call in logs -f, move the cursor over a table or
// retitle the window. Every printer of such text passes it through
// termText (one line), termLines (text printed over lines on purpose) or,
// for JSON, termJSON.

// termText is s for one line of a terminal: every C0 control character
// (newline and tab included), DEL, C1 control character and byte that is
// not UTF-8 is written as a visible escape.
func termText(s string) string { return escapeControls(s, false) }

// termLines is s for text printed over lines on purpose (a context, a
// goal): as termText, but newlines and tabs stay.
func termLines(s string) string { return escapeControls(s, true) }

// escapeControls writes the control characters of s as escapes: \n, \r and
// \t by name, other C0 characters, DEL and bytes that are not UTF-8 as \xNN,
// C1 characters (which some terminals obey as ESC sequences) as \u00NN.
// keepLines keeps \n and \t as they are.
func escapeControls(s string, keepLines bool) string {
	clean := func(r rune, size int) bool {
		switch {
		case r == utf8.RuneError && size == 1:
			return false
		case r == '\n' || r == '\t':
			return keepLines
		case r < 0x20 || r == 0x7f:
			return false
		case r >= 0x80 && r <= 0x9f:
			return false
		}
		return true
	}
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !clean(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case clean(r, size):
			b.WriteString(s[i : i+size])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r >= 0x80 && r <= 0x9f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		}
		i += size
	}
	return b.String()
}

// termJSON is JSON text b for a terminal. encoding/json escapes C0
// characters in strings but writes DEL and C1 characters as they are: those
// (which JSON allows only inside strings) become \u escapes of the same
// characters, so the document decodes to the same value. A byte that is not
// UTF-8 (invalid JSON) becomes \ufffd, as a decoder would read it.
func termJSON(b []byte) []byte {
	i := 0
	for i < len(b) {
		c := b[i]
		if c < utf8.RuneSelf {
			if c == 0x7f || (c < 0x20 && c != '\n' && c != '\t' && c != '\r') {
				break
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if (r == utf8.RuneError && size == 1) || (r >= 0x80 && r <= 0x9f) {
			break
		}
		i += size
	}
	if i == len(b) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	out = append(out, b[:i]...)
	for i < len(b) {
		c := b[i]
		if c < utf8.RuneSelf {
			if c == 0x7f || (c < 0x20 && c != '\n' && c != '\t' && c != '\r') {
				out = fmt.Appendf(out, `\u%04x`, c)
			} else {
				out = append(out, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			out = append(out, `\ufffd`...)
		case r >= 0x80 && r <= 0x9f:
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return out
}
