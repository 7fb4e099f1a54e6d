package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// refRoot is what a ${...} reference starts from.
type refRoot uint8

const (
	refLast      refRoot = iota // the previous tool result of the process
	refPID                      // process.pid
	refGoalOID                  // process.goal_oid
	refImage                    // process.image
	refParentPID                // process.parent_pid
)

// reference is one parsed ${...} occurrence.
type reference struct {
	text string   // as written, e.g. "${last.items.0.id}"
	root refRoot  // what it starts from
	path []string // for refLast: object keys or decimal array indexes
}

// segment is a piece of a templated string: literal text or one reference.
type segment struct {
	literal string
	ref     *reference
}

// errTemplateSyntax is wrapped by reference syntax errors; script loading reports them with
// the position of the string that holds them.
var errTemplateSyntax = errors.New("reference syntax")

// referenceHelp lists the forms a reference may take; it ends every syntax error.
const referenceHelp = "use ${last}, ${last.<key or index>...}, ${process.pid}, ${process.parent_pid}, ${process.goal_oid} or ${process.image}; write $${ for a literal ${"

// parseTemplate splits s into literal text and references. "$${" stands for a literal "${".
// hasRef reports whether any reference occurs; when it is false the single returned segment
// (if any) is the unescaped literal.
func parseTemplate(s string) (segs []segment, hasRef bool, err error) {
	if !strings.Contains(s, "${") {
		return []segment{{literal: s}}, false, nil
	}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			segs = append(segs, segment{literal: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); {
		if s[i] != '$' {
			lit.WriteByte(s[i])
			i++
			continue
		}
		if strings.HasPrefix(s[i:], "$${") {
			lit.WriteString("${")
			i += 3
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			lit.WriteByte('$')
			i++
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			return nil, false, fmt.Errorf("%w: unterminated reference %q (%s)", errTemplateSyntax, s[i:], referenceHelp)
		}
		text := s[i : i+2+end+1]
		ref, err := parseReference(text, s[i+2:i+2+end])
		if err != nil {
			return nil, false, err
		}
		flush()
		segs = append(segs, segment{ref: ref})
		hasRef = true
		i += 2 + end + 1
	}
	flush()
	if !hasRef && len(segs) == 0 {
		segs = []segment{{literal: ""}}
	}
	return segs, hasRef, nil
}

// parseReference parses the inside of ${...}.
func parseReference(text, inner string) (*reference, error) {
	parts := strings.Split(inner, ".")
	for _, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("%w: reference %s has an empty path segment (%s)", errTemplateSyntax, text, referenceHelp)
		}
	}
	switch parts[0] {
	case "last":
		return &reference{text: text, root: refLast, path: parts[1:]}, nil
	case "process":
		if len(parts) == 2 {
			switch parts[1] {
			case "pid":
				return &reference{text: text, root: refPID}, nil
			case "goal_oid":
				return &reference{text: text, root: refGoalOID}, nil
			case "image":
				return &reference{text: text, root: refImage}, nil
			case "parent_pid":
				return &reference{text: text, root: refParentPID}, nil
			}
		}
		return nil, fmt.Errorf("%w: unknown process field in %s (%s)", errTemplateSyntax, text, referenceHelp)
	}
	return nil, fmt.Errorf("%w: unknown reference %s (%s)", errTemplateSyntax, text, referenceHelp)
}

// argNode renders one JSON value of a tool call's arguments for a request.
type argNode interface {
	appendJSON(dst []byte, env *refEnv) ([]byte, error)
}

// litNode is a value without references, encoded once when the script is compiled.
type litNode []byte

func (n litNode) appendJSON(dst []byte, _ *refEnv) ([]byte, error) { return append(dst, n...), nil }

// objNode is an object with at least one templated member; keys are literal and sorted.
type objNode struct {
	keys [][]byte // each key encoded as a JSON string followed by ':'
	vals []argNode
}

func (n *objNode) appendJSON(dst []byte, env *refEnv) ([]byte, error) {
	dst = append(dst, '{')
	var err error
	for i, k := range n.keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, k...)
		if dst, err = n.vals[i].appendJSON(dst, env); err != nil {
			return nil, err
		}
	}
	return append(dst, '}'), nil
}

// arrNode is an array with at least one templated element.
type arrNode []argNode

func (n arrNode) appendJSON(dst []byte, env *refEnv) ([]byte, error) {
	dst = append(dst, '[')
	var err error
	for i, v := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		if dst, err = v.appendJSON(dst, env); err != nil {
			return nil, err
		}
	}
	return append(dst, ']'), nil
}

// refNode is a string that is exactly one reference: it takes the value with its JSON type.
type refNode struct {
	ref   *reference
	where string // argument path, for errors
}

func (n *refNode) appendJSON(dst []byte, env *refEnv) ([]byte, error) {
	v, err := env.resolve(n.ref, n.where)
	if err != nil {
		return nil, err
	}
	return appendJSONValue(dst, v)
}

// interpNode is a string with embedded references; each is stringified.
type interpNode struct {
	segs  []segment
	where string
}

func (n *interpNode) appendJSON(dst []byte, env *refEnv) ([]byte, error) {
	var sb strings.Builder
	for _, s := range n.segs {
		if s.ref == nil {
			sb.WriteString(s.literal)
			continue
		}
		v, err := env.resolve(s.ref, n.where)
		if err != nil {
			return nil, err
		}
		if err := writeStringified(&sb, v); err != nil {
			return nil, err
		}
	}
	return appendJSONValue(dst, sb.String())
}

// compileArguments turns a tool call's JSON object into a renderable template. where is the
// argument's path for error messages (e.g. "processes[0].turns[1].tool_calls[0].arguments");
// errors are *ScriptError.
// usesLast reports whether rendering needs the previous tool result.
func compileArguments(raw json.RawMessage, where string) (node argNode, usesLast bool, err error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return litNode("{}"), false, nil
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, false, &ScriptError{Path: where, Rule: fmt.Sprintf("must be a JSON object: %v", err)}
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, false, &ScriptError{Path: where, Rule: "must be a mapping, not " + withArticle(jsonKind(v))}
	}
	return compileValue(v, where)
}

func compileValue(v any, where string) (argNode, bool, error) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		obj := &objNode{}
		templated, usesLast := false, false
		for _, k := range keys {
			child, last, err := compileValue(x[k], where+pathKey(k))
			if err != nil {
				return nil, false, err
			}
			if _, lit := child.(litNode); !lit {
				templated = true
			}
			usesLast = usesLast || last
			key, err := appendJSONValue(nil, k)
			if err != nil {
				return nil, false, err
			}
			obj.keys = append(obj.keys, append(key, ':'))
			obj.vals = append(obj.vals, child)
		}
		if !templated {
			return foldLiteral(obj)
		}
		return obj, usesLast, nil
	case []any:
		arr := make(arrNode, 0, len(x))
		templated, usesLast := false, false
		for i, e := range x {
			child, last, err := compileValue(e, fmt.Sprintf("%s[%d]", where, i))
			if err != nil {
				return nil, false, err
			}
			if _, lit := child.(litNode); !lit {
				templated = true
			}
			usesLast = usesLast || last
			arr = append(arr, child)
		}
		if !templated {
			return foldLiteral(arr)
		}
		return arr, usesLast, nil
	case string:
		segs, hasRef, err := parseTemplate(x)
		if err != nil {
			return nil, false, &ScriptError{Path: where, Rule: err.Error()}
		}
		if !hasRef {
			lit, err := appendJSONValue(nil, segs[0].literal)
			return litNode(lit), false, err
		}
		usesLast := false
		for _, s := range segs {
			if s.ref != nil && s.ref.root == refLast {
				usesLast = true
			}
		}
		if len(segs) == 1 {
			return &refNode{ref: segs[0].ref, where: where}, usesLast, nil
		}
		return &interpNode{segs: segs, where: where}, usesLast, nil
	default:
		lit, err := appendJSONValue(nil, x)
		return litNode(lit), false, err
	}
}

// foldLiteral renders a reference-free container once.
func foldLiteral(n argNode) (argNode, bool, error) {
	b, err := n.appendJSON(nil, nil)
	if err != nil {
		return nil, false, err
	}
	return litNode(b), false, nil
}

// pathKey formats an object key as a path step: .key for plain names, ["..."] otherwise.
func pathKey(k string) string {
	plain := k != ""
	for _, r := range k {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			plain = false
			break
		}
	}
	if plain {
		return "." + k
	}
	return "[" + strconv.Quote(k) + "]"
}

// refEnv resolves references for one request. The previous tool result is parsed at most
// once, and only when a reference needs it.
type refEnv struct {
	req        *Request
	lastLoaded bool
	last       any
	lastErr    string
}

func (e *refEnv) resolve(r *reference, where string) (any, error) {
	fail := func(why string, args ...any) error {
		return fmt.Errorf("%w: %s in %s: %s", ErrScriptReference, r.text, where, fmt.Sprintf(why, args...))
	}
	switch r.root {
	case refPID:
		return e.req.Process.PID, nil
	case refGoalOID:
		if e.req.Process.GoalOID == "" {
			return nil, fail("the process has no goal object")
		}
		return e.req.Process.GoalOID, nil
	case refImage:
		return e.req.Process.Image, nil
	case refParentPID:
		if e.req.Process.ParentPID == 0 {
			return nil, fail("the process is a root: it has no parent")
		}
		return e.req.Process.ParentPID, nil
	}
	if !e.lastLoaded {
		e.loadLast()
	}
	if e.lastErr != "" {
		return nil, fail("%s", e.lastErr)
	}
	at := func(i int) string { return strings.Join(append([]string{"last"}, r.path[:i]...), ".") }
	cur := e.last
	for i, seg := range r.path {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[seg]
			if !ok {
				return nil, fail("field %q not found in the object at %s", seg, at(i))
			}
			cur = v
		case []any:
			idx, ok := decimalIndex(seg)
			if !ok {
				return nil, fail("%q is not a decimal index into the array at %s", seg, at(i))
			}
			if idx >= len(c) {
				return nil, fail("index %d is out of range: the array at %s has %d elements", idx, at(i), len(c))
			}
			cur = c[idx]
		default:
			return nil, fail("cannot take %q of the %s at %s", seg, jsonKind(cur), at(i))
		}
	}
	return cur, nil
}

// decimalIndex parses an array index written with decimal digits only.
func decimalIndex(seg string) (int, bool) {
	for i := 0; i < len(seg); i++ {
		if seg[i] < '0' || seg[i] > '9' {
			return 0, false
		}
	}
	idx, err := strconv.Atoi(seg)
	return idx, err == nil
}

// loadLast parses the content of the last role "tool" message.
func (e *refEnv) loadLast() {
	e.lastLoaded = true
	for i := len(e.req.Messages) - 1; i >= 0; i-- {
		m := &e.req.Messages[i]
		if m.Role != RoleTool {
			continue
		}
		v, err := decodeJSON([]byte(m.Content))
		if err != nil {
			e.lastErr = fmt.Sprintf("the last tool result (messages[%d]) is not JSON: %v", i, err)
			return
		}
		e.last = v
		return
	}
	e.lastErr = "there is no tool result yet"
}

// decodeJSON parses exactly one JSON value, keeping numbers exact.
func decodeJSON(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if len(bytes.TrimLeft(raw[dec.InputOffset():], " \t\r\n")) > 0 {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// appendJSONValue appends the compact JSON encoding of v without HTML escaping, so that
// arguments read the way they were written.
func appendJSONValue(dst []byte, v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return append(dst, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...), nil
}

// writeStringified writes v as embedded text: strings raw, everything else as compact JSON.
func writeStringified(sb *strings.Builder, v any) error {
	switch x := v.(type) {
	case string:
		sb.WriteString(x)
		return nil
	case json.Number:
		sb.WriteString(x.String())
		return nil
	case int64:
		sb.WriteString(strconv.FormatInt(x, 10))
		return nil
	}
	b, err := appendJSONValue(nil, v)
	if err != nil {
		return err
	}
	sb.Write(b)
	return nil
}

// withArticle prefixes a JSON kind name with "a" or "an" ("null" stays bare).
func withArticle(kind string) string {
	switch kind {
	case "null":
		return kind
	case "array", "object":
		return "an " + kind
	}
	return "a " + kind
}

// jsonKind names the JSON type of a decoded value for error messages.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number, float64, int64, int:
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
