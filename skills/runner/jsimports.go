package runner

import (
	"fmt"
	"slices"
)

// jsImport is one module specifier a JavaScript file names statically, or
// one call of import() or require that names none.
type jsImport struct {
	// kind is "import" (an import or export-from declaration, or import())
	// or "require".
	kind string
	spec string
	line int
	// escaped marks a specifier written with a string escape, which the
	// scan does not decode.
	escaped bool
	// computed marks an import() or require call whose argument is not one
	// plain string literal: spec is empty, since no file can be read off it.
	computed bool
}

// jsToken is a token of the scan: an identifier or number ('i'), a string
// literal ('s'), a template literal ('t') or one punctuation byte ('p'; "${"
// opens a template literal's substitution).
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
// imports. A call of import() or require with any other argument is listed
// as computed, for the caller to refuse: the file it loads cannot be known
// before it runs. A member (x.require), a declaration (function require)
// or a method definition (require(id) { ... }) is no such call.
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
	// defines reports whether the name at i, followed by the '(' at open,
	// defines a function rather than calling one: a declaration (function
	// require(id)), or a method (require(id) { in a class or an object
	// literal), whose name follows one of the tokens that can precede a
	// method's and whose ')' meets its '{' on the same line. A call there
	// would be a syntax error, since no line break lets a semicolon be
	// inserted; "extends require(x) {" is a call and is not matched.
	defines := func(i, open int) bool {
		prev := at(i - 1)
		if isIdent(prev, "function") || isPunct(prev, "*") && isIdent(at(i-2), "function") {
			return true
		}
		switch {
		case prev.kind == 'p' && slices.Contains([]string{"{", "}", ";", ",", "*"}, prev.text):
		case prev.kind == 'i' && slices.Contains([]string{"get", "set", "static", "async"}, prev.text):
		default:
			return false
		}
		depth := 0
		for j := open; j < len(toks) && j < open+maxParamTokens; j++ {
			switch {
			case isPunct(toks[j], "("):
				depth++
			case isPunct(toks[j], ")"):
				if depth--; depth == 0 {
					brace := at(j + 1)
					return isPunct(brace, "{") && brace.line == toks[j].line
				}
			}
		}
		return false
	}
	computed := func(kind string, i, open int) {
		if !defines(i, open) {
			out = append(out, jsImport{kind: kind, line: toks[i].line, computed: true})
		}
	}
	for i, t := range toks {
		// A member such as x.import or x.require, but not a spread
		// (...require(x)), whose call loads a module like any other.
		if t.kind != 'i' || isPunct(at(i-1), ".") && !(isPunct(at(i-2), ".") && isPunct(at(i-3), ".")) {
			continue
		}
		next := at(i + 1)
		switch t.text {
		case "import":
			switch {
			case isPunct(next, "("):
				if at(i+2).kind == 's' && (isPunct(at(i+3), ")") || isPunct(at(i+3), ",")) {
					add("import", at(i+2))
				} else {
					computed("import", i, i+1)
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
			open := i + 1
			if isPunct(next, "?") && isPunct(at(i+2), ".") && isPunct(at(i+3), "(") {
				open = i + 3 // require?.(x), an optional call
			}
			switch {
			case !isPunct(at(open), "("):
				// Not a call: typeof require, require.resolve, { require }.
			case at(open+1).kind == 's' && isPunct(at(open+2), ")"):
				add("require", at(open+1))
			default:
				computed("require", i, open)
			}
		}
	}
	return out, nil
}

// maxParamTokens bounds the search for the ')' closing a method's
// parameters; past it the name is taken for a call, which is refused.
const maxParamTokens = 4096

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
		return slices.Contains([]string{"(", "[", "{", "${", "}", ",", ";", ":", "=", "!", "?", "&", "|", "+", "-", "*", "%", "^", "~", "<", ">"}, prev.text)
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
					// start is a regular expression. It is no '{' of the
					// code, which a method's body would be.
					toks = append(toks, jsToken{kind: 'p', text: "${", line: line})
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
