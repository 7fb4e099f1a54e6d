package runner

import (
	"fmt"
	"slices"
)

// jsImport is one module specifier a JavaScript file names statically.
type jsImport struct {
	// kind is "import" (an import or export-from declaration, or import()
	// with a string) or "require" (require with a string).
	kind string
	spec string
	line int
	// escaped marks a specifier written with a string escape, which the
	// scan does not decode.
	escaped bool
}

// jsToken is a token of the scan: an identifier or number ('i'), a string
// literal ('s'), a template literal ('t') or one punctuation byte ('p').
type jsToken struct {
	kind    byte
	text    string
	line    int
	escaped bool
}

// scanImports lists the specifiers a JavaScript source names statically:
// import declarations, export ... from, and import() and require() called
// with one string literal. Comments, strings, template literals and regular
// expressions are skipped, so words inside them are not mistaken for
// imports. A computed specifier names nothing the scan can follow and is
// left out.
func scanImports(src []byte) ([]jsImport, error) {
	toks, err := tokenizeJS(src)
	if err != nil {
		return nil, err
	}
	var out []jsImport
	at := func(i int) jsToken {
		if i < 0 || i >= len(toks) {
			return jsToken{}
		}
		return toks[i]
	}
	isPunct := func(t jsToken, p string) bool { return t.kind == 'p' && t.text == p }
	isIdent := func(t jsToken, w string) bool { return t.kind == 'i' && t.text == w }
	add := func(kind string, t jsToken) {
		out = append(out, jsImport{kind: kind, spec: t.text, line: t.line, escaped: t.escaped})
	}
	// fromClause finds `from "x"` after an import or export clause that
	// starts at j, stepping over braces; it stops at the end of the
	// statement.
	fromClause := func(j int) {
		for limit := j + 256; j < len(toks) && j < limit; j++ {
			t := toks[j]
			switch {
			case isPunct(t, "{"):
				depth := 0
				for ; j < len(toks); j++ {
					if isPunct(toks[j], "{") {
						depth++
					} else if isPunct(toks[j], "}") {
						if depth--; depth == 0 {
							break
						}
					}
				}
			case isIdent(t, "from") && at(j+1).kind == 's':
				add("import", at(j+1))
				return
			case isPunct(t, ";"), isPunct(t, "("), isPunct(t, "="), isIdent(t, "import"), isIdent(t, "export"):
				return
			}
		}
	}
	for i, t := range toks {
		if t.kind != 'i' || isPunct(at(i-1), ".") {
			continue // a member such as x.import or x.require
		}
		next := at(i + 1)
		switch t.text {
		case "import":
			switch {
			case isPunct(next, "("):
				if at(i+2).kind == 's' && (isPunct(at(i+3), ")") || isPunct(at(i+3), ",")) {
					add("import", at(i+2))
				}
			case next.kind == 's':
				add("import", next)
			case isPunct(next, "."), isPunct(next, ":"):
				// import.meta, or a property named import.
			default:
				fromClause(i + 1)
			}
		case "export":
			if isPunct(next, "{") || isPunct(next, "*") {
				fromClause(i + 1)
			}
		case "require":
			if isPunct(next, "(") && at(i+2).kind == 's' && isPunct(at(i+3), ")") {
				add("require", at(i+2))
			}
		}
	}
	return out, nil
}

// regexKeywords are the words after which a '/' starts a regular
// expression rather than a division.
var regexKeywords = []string{"await", "case", "delete", "do", "else", "in", "instanceof", "new", "of", "return", "throw", "typeof", "void", "yield"}

// regexAfter reports whether a '/' after the tokens toks starts a regular
// expression.
func regexAfter(toks []jsToken) bool {
	if len(toks) == 0 {
		return true
	}
	prev := &toks[len(toks)-1]
	switch {
	case prev.kind == 'p' && (prev.text == "+" || prev.text == "-") && len(toks) > 1 && toks[len(toks)-2].kind == 'p' && toks[len(toks)-2].text == prev.text:
		return false // i++ / n: a postfix increment is followed by a division
	case prev.kind == 'p':
		// After '}' a statement, and so a regular expression, is far more
		// likely than a division; after ')' and ']' the reverse.
		return slices.Contains([]string{"(", "[", "{", "}", ",", ";", ":", "=", "!", "?", "&", "|", "+", "-", "*", "%", "^", "~", "<", ">"}, prev.text)
	case prev.kind == 'i':
		return slices.Contains(regexKeywords, prev.text)
	}
	return false
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// tokenizeJS splits a JavaScript source into the tokens scanImports reads.
// Template literals are followed through their ${} substitutions, whose
// code is tokenized like any other.
func tokenizeJS(src []byte) ([]jsToken, error) {
	var (
		toks []jsToken
		line = 1
		i    = 0
		// templates holds, for each open ${ of a template literal, the
		// brace depth its closing } returns to.
		templates []int
		depth     int
	)
	// template scans the rest of a template literal from i (just after its
	// opening ` or the } closing a substitution) to its end or its next ${.
	template := func(start int) error {
		for i < len(src) {
			switch src[i] {
			case '\\':
				if i+1 < len(src) && src[i+1] == '\n' {
					line++
				}
				i += 2
			case '\n':
				line++
				i++
			case '`':
				i++
				toks = append(toks, jsToken{kind: 't', line: line})
				return nil
			case '$':
				if i+1 < len(src) && src[i+1] == '{' {
					i += 2
					templates = append(templates, depth)
					depth++
					// The substitution reads as an expression: a '/' at its
					// start is a regular expression.
					toks = append(toks, jsToken{kind: 'p', text: "{", line: line})
					return nil
				}
				i++
			default:
				i++
			}
		}
		return fmt.Errorf("unterminated template literal at line %d", start)
	}
	if len(src) >= 2 && src[0] == '#' && src[1] == '!' {
		for i < len(src) && src[i] != '\n' {
			i++
		}
	}
	for i < len(src) {
		c := src[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '/' && i+1 < len(src) && src[i+1] == '/':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(src) && src[i+1] == '*':
			start := line
			i += 2
			for ; i+1 < len(src) && !(src[i] == '*' && src[i+1] == '/'); i++ {
				if src[i] == '\n' {
					line++
				}
			}
			if i+1 >= len(src) {
				return nil, fmt.Errorf("unterminated block comment at line %d", start)
			}
			i += 2
		case c == '/' && regexAfter(toks):
			start := line
			i++
			class := false
			for ; ; i++ {
				if i >= len(src) || src[i] == '\n' {
					return nil, fmt.Errorf("unterminated regular expression at line %d", start)
				}
				if src[i] == '\\' {
					i++
					continue
				}
				if src[i] == '[' {
					class = true
				} else if src[i] == ']' {
					class = false
				} else if src[i] == '/' && !class {
					break
				}
			}
			i++
			for i < len(src) && isIdentByte(src[i]) {
				i++
			}
			toks = append(toks, jsToken{kind: 't', line: start})
		case c == '\'' || c == '"':
			start, at := line, i
			escaped := false
			for i++; ; i++ {
				if i >= len(src) || src[i] == '\n' {
					return nil, fmt.Errorf("unterminated string at line %d", start)
				}
				if src[i] == '\\' {
					escaped = true
					if i+1 < len(src) && src[i+1] == '\n' {
						line++
					}
					i++
					continue
				}
				if src[i] == c {
					break
				}
			}
			i++
			toks = append(toks, jsToken{kind: 's', text: string(src[at+1 : i-1]), line: start, escaped: escaped})
		case c == '`':
			i++
			if err := template(line); err != nil {
				return nil, err
			}
		case isIdentByte(c):
			at := i
			for i < len(src) && isIdentByte(src[i]) {
				i++
			}
			toks = append(toks, jsToken{kind: 'i', text: string(src[at:i]), line: line})
		case c == '{':
			depth++
			i++
			toks = append(toks, jsToken{kind: 'p', text: "{", line: line})
		case c == '}':
			i++
			if n := len(templates); n > 0 && templates[n-1] == depth-1 {
				templates = templates[:n-1]
				depth--
				if err := template(line); err != nil {
					return nil, err
				}
				continue
			}
			depth--
			toks = append(toks, jsToken{kind: 'p', text: "}", line: line})
		default:
			i++
			toks = append(toks, jsToken{kind: 'p', text: string(c), line: line})
		}
	}
	if len(templates) > 0 {
		return nil, fmt.Errorf("unterminated template literal substitution")
	}
	return toks, nil
}
