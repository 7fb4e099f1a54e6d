package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/libos/libos/images"
)

// Script is a replay script: the scripted answers of a deterministic model.
//
// The YAML format is public and stable:
//
//	name: optional short name            # reported in Response.Model as "replay/<name>"
//	description: optional free text
//	processes:
//	  - image: base:v0                   # required
//	    turns:
//	      - text: optional assistant text
//	        tool_calls:
//	          - name: get_current_time   # required
//	            arguments: {timezone: UTC}   # optional mapping
//
// Entry selection is stateless: a request is answered by the entry whose image equals
// Process.Image at the process's spawn index (SpawnIndexer), and within it by turns[Turn].
//
// Every string value anywhere inside arguments may hold references, resolved per request:
// ${last} is the previous tool result of the process (the JSON content of the last role
// "tool" message), ${last.a.b.0} a field of it (object keys and decimal array indexes),
// ${process.pid}, ${process.parent_pid}, ${process.goal_oid} and ${process.image} the process's facts. A string that
// is exactly one reference takes the value with its JSON type; embedded references are
// stringified (strings raw, other values as compact JSON). "$${" writes a literal "${".
// Object keys and text are never substituted.
type Script struct {
	Name        string
	Description string
	Processes   []ScriptProcess
}

// ScriptProcess is the scripted life of one process spawned with Image.
type ScriptProcess struct {
	Image string
	Turns []ScriptTurn
}

// ScriptTurn is the answer to one provider call.
type ScriptTurn struct {
	Text      string
	ToolCalls []ScriptToolCall
	// Fault, when set, makes the first attempts of this turn fail as a
	// server would, so scripts can show and test how failures are ridden.
	Fault *ScriptFault
}

// ScriptFault is a server failure a turn answers with before its reply.
type ScriptFault struct {
	// Status is the HTTP status the server answers: 408, 409, 429, 500,
	// 502, 503 or 504 (transient), 401, 403 or 404 (settings to fix).
	Status int
	// Attempts is how many attempts of the turn fail (default 1).
	Attempts int
	// RetryAfter is the server's Retry-After in seconds (0: none).
	RetryAfter int
}

// ScriptToolCall is one scripted tool call. Arguments is a JSON object (canonical: compact,
// keys sorted) whose strings may hold references; nil means {}.
type ScriptToolCall struct {
	Name      string
	Arguments json.RawMessage
}

// ScriptError reports why a replay script was rejected. It wraps ErrScriptInvalid.
type ScriptError struct {
	Source string // file name when loaded by LoadScript
	Path   string // e.g. "processes[1].turns[0].tool_calls[2].name"; empty for the document
	Line   int    // 1-based position in the YAML source; 0 when unknown
	Column int
	Rule   string // what is wrong, e.g. "required"
}

// Error formats the error as "replay script <source>:<line>:<col>: <path>: <rule>", or
// "replay script: <path>: <rule> (line <line>, column <col>)" without a source.
func (e *ScriptError) Error() string {
	var b strings.Builder
	b.WriteString("replay script")
	if e.Source != "" {
		b.WriteString(" " + e.Source)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
		}
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Rule)
	if e.Source == "" && e.Line > 0 {
		fmt.Fprintf(&b, " (line %d, column %d)", e.Line, e.Column)
	}
	return b.String()
}

// Unwrap returns ErrScriptInvalid.
func (e *ScriptError) Unwrap() error { return ErrScriptInvalid }

// maxArgumentDepth bounds nesting inside arguments; real scripts stay far below it.
const maxArgumentDepth = 64

// LoadScript reads and parses the replay script at path; see ParseScript.
func LoadScript(path string) (*Script, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load replay script: %w", err)
	}
	s, err := ParseScript(data)
	if err != nil {
		var se *ScriptError
		if errors.As(err, &se) {
			se.Source = path
		}
		return nil, err
	}
	return s, nil
}

// ParseScript parses a replay script strictly: unknown fields, duplicate keys, a missing
// image, a tool call without a name, arguments that are not a mapping, values JSON cannot
// represent, YAML aliases and malformed ${...} references are rejected with a *ScriptError
// naming the field and its position.
func ParseScript(data []byte) (*Script, error) {
	doc, err := decodeSingleDocument(data)
	if err != nil {
		return nil, err
	}
	return parseScriptNode(doc)
}

// decodeSingleDocument decodes exactly one YAML document into a node tree.
func decodeSingleDocument(data []byte) (doc *yaml.Node, err error) {
	// The YAML library has panicked on hostile input in the past; a script is outside input,
	// so a panic becomes a syntax error rather than taking the process down.
	defer func() {
		if r := recover(); r != nil {
			doc, err = nil, &ScriptError{Rule: fmt.Sprintf("YAML syntax: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var n yaml.Node
	if err := dec.Decode(&n); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &ScriptError{Rule: "empty document: a mapping with processes is required"}
		}
		return nil, &ScriptError{Rule: "YAML syntax: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, &ScriptError{Rule: "YAML syntax: " + strings.TrimPrefix(err.Error(), "yaml: ")}
		}
		return nil, &ScriptError{Line: extra.Line, Column: extra.Column, Rule: "only one YAML document is allowed"}
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) != 1 {
			return nil, &ScriptError{Rule: "empty document: a mapping with processes is required"}
		}
		return n.Content[0], nil
	}
	return &n, nil
}

// scriptFail builds a ScriptError positioned at n.
func scriptFail(n *yaml.Node, path, rule string, args ...any) *ScriptError {
	e := &ScriptError{Path: path, Rule: fmt.Sprintf(rule, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	return e
}

// isNull reports whether n is an explicit or empty null.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// kindName names a node kind for error messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return "a string"
		case "!!int", "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		case "!!null":
			return "null"
		}
		return "a scalar tagged " + n.ShortTag()
	}
	return "a document"
}

// fields checks that n is a mapping with only the known keys, each at most once, and returns
// the value node of each key present.
func fields(n *yaml.Node, path string, known ...string) (map[string]*yaml.Node, error) {
	if n.Kind == yaml.AliasNode {
		return nil, scriptFail(n, path, "aliases are not supported")
	}
	if n.Kind != yaml.MappingNode {
		return nil, scriptFail(n, path, "must be a mapping, not %s", kindName(n))
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			return nil, scriptFail(k, path, "keys must be plain field names (merge keys and aliases are not supported)")
		}
		field := joinPath(path, k.Value)
		if !contains(known, k.Value) {
			return nil, scriptFail(k, field, "unknown field (known fields: %s)", strings.Join(known, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, scriptFail(k, field, "duplicate field")
		}
		if v.Kind == yaml.AliasNode {
			return nil, scriptFail(v, field, "aliases are not supported")
		}
		out[k.Value] = v
	}
	return out, nil
}

func joinPath(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// stringField reads an optional string field; null counts as absent.
func stringField(f map[string]*yaml.Node, key, path string) (string, bool, error) {
	n, ok := f[key]
	if !ok || isNull(n) {
		return "", false, nil
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		return "", false, scriptFail(n, joinPath(path, key), "must be a string, not %s", kindName(n))
	}
	return n.Value, true, nil
}

// sequenceField reads an optional sequence field; null counts as empty.
func sequenceField(f map[string]*yaml.Node, key, path string) ([]*yaml.Node, bool, error) {
	n, ok := f[key]
	if !ok || isNull(n) {
		return nil, ok, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, true, scriptFail(n, joinPath(path, key), "must be a sequence, not %s", kindName(n))
	}
	return n.Content, true, nil
}

func parseScriptNode(root *yaml.Node) (*Script, error) {
	top, err := fields(root, "", "name", "description", "processes")
	if err != nil {
		return nil, err
	}
	s := &Script{}
	if s.Name, _, err = stringField(top, "name", ""); err != nil {
		return nil, err
	}
	if s.Description, _, err = stringField(top, "description", ""); err != nil {
		return nil, err
	}
	procs, present, err := sequenceField(top, "processes", "")
	if err != nil {
		return nil, err
	}
	if !present {
		return nil, scriptFail(root, "processes", "required")
	}
	for i, pn := range procs {
		p, err := parseProcess(pn, fmt.Sprintf("processes[%d]", i))
		if err != nil {
			return nil, err
		}
		s.Processes = append(s.Processes, p)
	}
	return s, nil
}

func parseProcess(n *yaml.Node, path string) (ScriptProcess, error) {
	var p ScriptProcess
	f, err := fields(n, path, "image", "turns")
	if err != nil {
		return p, err
	}
	image, ok, err := stringField(f, "image", path)
	if err != nil {
		return p, err
	}
	if !ok || strings.TrimSpace(image) == "" {
		at := n
		if v, present := f["image"]; present {
			at = v
		}
		return p, scriptFail(at, joinPath(path, "image"), "required")
	}
	if _, _, err := images.ParseRef(image); err != nil {
		// A process's image is always a valid reference, so no other
		// entry could ever be taken.
		return p, scriptFail(f["image"], joinPath(path, "image"), "%v", err)
	}
	p.Image = image
	turns, _, err := sequenceField(f, "turns", path)
	if err != nil {
		return p, err
	}
	for i, tn := range turns {
		t, err := parseTurn(tn, fmt.Sprintf("%s.turns[%d]", path, i))
		if err != nil {
			return p, err
		}
		p.Turns = append(p.Turns, t)
	}
	return p, nil
}

func parseTurn(n *yaml.Node, path string) (ScriptTurn, error) {
	var t ScriptTurn
	f, err := fields(n, path, "text", "tool_calls", "fault")
	if err != nil {
		return t, err
	}
	if t.Text, _, err = stringField(f, "text", path); err != nil {
		return t, err
	}
	if fn, ok := f["fault"]; ok {
		if t.Fault, err = parseFault(fn, joinPath(path, "fault")); err != nil {
			return t, err
		}
	}
	calls, _, err := sequenceField(f, "tool_calls", path)
	if err != nil {
		return t, err
	}
	for i, cn := range calls {
		c, err := parseToolCall(cn, fmt.Sprintf("%s.tool_calls[%d]", path, i))
		if err != nil {
			return t, err
		}
		t.ToolCalls = append(t.ToolCalls, c)
	}
	return t, nil
}

func parseFault(n *yaml.Node, path string) (*ScriptFault, error) {
	f, err := fields(n, path, "status", "attempts", "retry_after")
	if err != nil {
		return nil, err
	}
	fault := &ScriptFault{Attempts: 1}
	for _, field := range []struct {
		key string
		dst *int
	}{{"status", &fault.Status}, {"attempts", &fault.Attempts}, {"retry_after", &fault.RetryAfter}} {
		v, ok := f[field.key]
		if !ok {
			continue
		}
		// Only an integer tag: Decode would truncate 503.9 to 503.
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(field.dst) != nil {
			return nil, scriptFail(v, joinPath(path, field.key), "%s must be a whole number", v.Value)
		}
	}
	if _, ok := f["status"]; !ok {
		return nil, scriptFail(n, joinPath(path, "status"), "required")
	}
	if !transientStatus(fault.Status) && fault.Status != 401 && fault.Status != 403 && fault.Status != 404 {
		return nil, scriptFail(f["status"], joinPath(path, "status"), "%d must be 408, 409, 429, 500, 502, 503, 504, 401, 403 or 404", fault.Status)
	}
	if fault.Attempts < 1 || fault.Attempts > 100 {
		return nil, scriptFail(n, joinPath(path, "attempts"), "%d must be 1..100", fault.Attempts)
	}
	if fault.RetryAfter < 0 || fault.RetryAfter > 3600 {
		return nil, scriptFail(n, joinPath(path, "retry_after"), "%d must be 0..3600 seconds", fault.RetryAfter)
	}
	return fault, nil
}

// err is the failure a fault answers with.
func (f *ScriptFault) err(req *Request) *CallError {
	ce := &CallError{Settlement: SettlementRejected, StatusCode: f.Status, Transient: transientStatus(f.Status),
		RetryAfter: time.Duration(f.RetryAfter) * time.Second,
		Err:        fmt.Errorf("replay: scripted fault: server answered %d %s (attempt %d of turn %d)", f.Status, http.StatusText(f.Status), max(req.Attempt, 1), req.Turn)}
	ce.Permanent = !ce.Transient
	switch f.Status {
	case 401, 403:
		ce.NeedsHost, ce.Hint = true, "authentication failed: check "+EnvOpenAIAPIKey
	case 404:
		ce.NeedsHost, ce.Hint = true, "model not found: check "+EnvModel+" / --model"
	}
	return ce
}

func parseToolCall(n *yaml.Node, path string) (ScriptToolCall, error) {
	var c ScriptToolCall
	f, err := fields(n, path, "name", "arguments")
	if err != nil {
		return c, err
	}
	name, ok, err := stringField(f, "name", path)
	if err != nil {
		return c, err
	}
	if !ok || strings.TrimSpace(name) == "" {
		at := n
		if v, present := f["name"]; present {
			at = v
		}
		return c, scriptFail(at, joinPath(path, "name"), "required")
	}
	c.Name = name
	an, present := f["arguments"]
	if !present || isNull(an) {
		return c, nil
	}
	argPath := joinPath(path, "arguments")
	if an.Kind != yaml.MappingNode {
		return c, scriptFail(an, argPath, "must be a mapping, not %s", kindName(an))
	}
	v, err := yamlToJSONValue(an, argPath, 0)
	if err != nil {
		return c, err
	}
	raw, err := appendJSONValue(nil, v)
	if err != nil {
		return c, scriptFail(an, argPath, "cannot be encoded as JSON: %v", err)
	}
	c.Arguments = raw
	return c, nil
}

// yamlToJSONValue converts an arguments node to the value JSON will carry, checking the
// syntax of every reference on the way so errors point at the string that holds it.
func yamlToJSONValue(n *yaml.Node, path string, depth int) (any, error) {
	if depth > maxArgumentDepth {
		return nil, scriptFail(n, path, "nested deeper than %d levels", maxArgumentDepth)
	}
	switch n.Kind {
	case yaml.AliasNode:
		return nil, scriptFail(n, path, "aliases are not supported")
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				return nil, scriptFail(k, path, "keys must be scalars (merge keys, aliases and complex keys are not supported)")
			}
			if _, dup := m[k.Value]; dup {
				return nil, scriptFail(k, path+pathKey(k.Value), "duplicate key")
			}
			val, err := yamlToJSONValue(v, path+pathKey(k.Value), depth+1)
			if err != nil {
				return nil, err
			}
			m[k.Value] = val
		}
		return m, nil
	case yaml.SequenceNode:
		a := make([]any, 0, len(n.Content))
		for i, e := range n.Content {
			val, err := yamlToJSONValue(e, fmt.Sprintf("%s[%d]", path, i), depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, val)
		}
		return a, nil
	case yaml.ScalarNode:
		return yamlScalar(n, path)
	}
	return nil, scriptFail(n, path, "unsupported YAML node")
}

// yamlScalar converts a scalar by its resolved tag.
func yamlScalar(n *yaml.Node, path string) (any, error) {
	switch tag := n.ShortTag(); tag {
	case "!!null":
		return nil, nil
	case "!!str", "!!timestamp":
		// Timestamps stay the text that was written: JSON has no time type.
		if _, _, err := parseTemplate(n.Value); err != nil {
			return nil, scriptFail(n, path, "%v", err)
		}
		return n.Value, nil
	case "!!bool", "!!int", "!!float":
		// A decimal integer keeps its literal: decoded, one past int64
		// becomes a float64 and loses its last digits.
		if (tag == "!!int" || tag == "!!float") && decimalInteger(n.Value) {
			return json.Number(n.Value), nil
		}
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, scriptFail(n, path, "invalid %s value %q: %v", tag, n.Value, err)
		}
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return nil, scriptFail(n, path, "%s cannot be represented in JSON", n.Value)
		}
		return v, nil
	default:
		return nil, scriptFail(n, path, "unsupported tag %s", tag)
	}
}

// decimalInteger reports whether s is an integer as JSON writes it.
func decimalInteger(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Validate checks a Script built in Go against the rules ParseScript enforces on YAML.
func (s *Script) Validate() error {
	_, err := compileScript(s)
	return err
}

// MarshalScript encodes s in the YAML format ParseScript reads; parsing the result gives a
// Script equal to s when s is valid.
func MarshalScript(s *Script) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	root := &yaml.Node{Kind: yaml.MappingNode}
	add := func(m *yaml.Node, key string, v *yaml.Node) {
		m.Content = append(m.Content, strNode(key), v)
	}
	if s.Name != "" {
		add(root, "name", strNode(s.Name))
	}
	if s.Description != "" {
		add(root, "description", strNode(s.Description))
	}
	procs := &yaml.Node{Kind: yaml.SequenceNode}
	for _, p := range s.Processes {
		pn := &yaml.Node{Kind: yaml.MappingNode}
		add(pn, "image", strNode(p.Image))
		if len(p.Turns) > 0 {
			turns := &yaml.Node{Kind: yaml.SequenceNode}
			for _, t := range p.Turns {
				tn := &yaml.Node{Kind: yaml.MappingNode}
				if t.Text != "" {
					add(tn, "text", strNode(t.Text))
				}
				if t.Fault != nil {
					fn := &yaml.Node{Kind: yaml.MappingNode}
					add(fn, "status", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(t.Fault.Status)})
					add(fn, "attempts", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(t.Fault.Attempts)})
					if t.Fault.RetryAfter > 0 {
						add(fn, "retry_after", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: fmt.Sprint(t.Fault.RetryAfter)})
					}
					add(tn, "fault", fn)
				}
				if len(t.ToolCalls) > 0 {
					calls := &yaml.Node{Kind: yaml.SequenceNode}
					for _, c := range t.ToolCalls {
						cn := &yaml.Node{Kind: yaml.MappingNode}
						add(cn, "name", strNode(c.Name))
						if len(bytes.TrimSpace(c.Arguments)) > 0 {
							v, err := decodeJSON(c.Arguments)
							if err != nil {
								return nil, fmt.Errorf("marshal replay script: %w", err)
							}
							add(cn, "arguments", jsonToYAMLNode(v))
						}
						calls.Content = append(calls.Content, cn)
					}
					add(tn, "tool_calls", calls)
				}
				turns.Content = append(turns.Content, tn)
			}
			add(pn, "turns", turns)
		}
		procs.Content = append(procs.Content, pn)
	}
	add(root, "processes", procs)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("marshal replay script: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("marshal replay script: %w", err)
	}
	return buf.Bytes(), nil
}

func strNode(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

// jsonToYAMLNode converts a decoded JSON value (numbers as json.Number) to a YAML node whose
// scalars resolve back to the same JSON types.
func jsonToYAMLNode(v any) *yaml.Node {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		n := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
		for _, k := range keys {
			n.Content = append(n.Content, strNode(k), jsonToYAMLNode(x[k]))
		}
		return n
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, e := range x {
			n.Content = append(n.Content, jsonToYAMLNode(e))
		}
		return n
	case string:
		return strNode(x)
	case json.Number:
		if _, err := strconv.ParseInt(x.String(), 10, 64); err == nil {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: x.String()}
		}
		if _, err := strconv.ParseUint(x.String(), 10, 64); err == nil {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: x.String()}
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: x.String()}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(x)}
	default:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	}
}
