package skillpkg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// nodeReader walks a parsed YAML (or JSON) document with strict typing so that
// every refusal names the file, the field path and the line. Decoding into
// structs with yaml's KnownFields would catch unknown keys but reports Go type
// names instead of the field path a skill author wrote.
type nodeReader struct {
	file string
}

// keyValue is one entry of a mapping node, in document order.
type keyValue struct {
	key   string
	keyAt *yaml.Node
	value *yaml.Node
}

func (r nodeReader) fail(n *yaml.Node, field, format string, args ...any) *AdmissionError {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &AdmissionError{File: r.file, Line: line, Field: field, Rule: fmt.Sprintf(format, args...)}
}

// parseDocument parses exactly one YAML document. An empty document yields a
// nil node.
func (r nodeReader) parseDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, &AdmissionError{File: r.file, Rule: "must be well-formed YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &AdmissionError{File: r.file, Rule: "must hold exactly one YAML document"}
	}
	if doc.Kind == yaml.DocumentNode {
		if len(doc.Content) == 0 {
			return nil, nil
		}
		return doc.Content[0], nil
	}
	return &doc, nil
}

// plain rejects aliases and anchors: they make a document's meaning depend on
// distant nodes and let a small file expand into a huge one.
func (r nodeReader) plain(n *yaml.Node, field string) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return r.fail(n, field, "YAML anchors and aliases are not allowed")
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
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
		return "a scalar " + n.ShortTag()
	case yaml.AliasNode:
		return "an alias"
	}
	return "an unsupported node"
}

// mapping returns the entries of a mapping node in document order, refusing
// non-string keys and duplicate keys.
func (r nodeReader) mapping(n *yaml.Node, field string) ([]keyValue, error) {
	if err := r.plain(n, field); err != nil {
		return nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, r.fail(n, field, "must be a mapping, got %s", kindName(n))
	}
	seen := make(map[string]bool, len(n.Content)/2)
	entries := make([]keyValue, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := r.plain(k, field); err != nil {
			return nil, err
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			return nil, r.fail(k, field, "keys must be strings, got %s", kindName(k))
		}
		if seen[k.Value] {
			return nil, r.fail(k, join(field, k.Value), "is given more than once")
		}
		seen[k.Value] = true
		entries = append(entries, keyValue{key: k.Value, keyAt: k, value: v})
	}
	return entries, nil
}

func (r nodeReader) scalar(n *yaml.Node, field, tag, want string) error {
	if err := r.plain(n, field); err != nil {
		return err
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tag {
		return r.fail(n, field, "must be %s, got %s", want, kindName(n))
	}
	return nil
}

func (r nodeReader) str(n *yaml.Node, field string) (string, error) {
	if err := r.scalar(n, field, "!!str", "a string"); err != nil {
		return "", err
	}
	return n.Value, nil
}

func (r nodeReader) nonEmptyStr(n *yaml.Node, field string) (string, error) {
	s, err := r.str(n, field)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(s) == "" {
		return "", r.fail(n, field, "must not be empty")
	}
	return s, nil
}

func (r nodeReader) boolean(n *yaml.Node, field string) (bool, error) {
	if err := r.scalar(n, field, "!!bool", "a boolean"); err != nil {
		return false, err
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		return false, r.fail(n, field, "must be a boolean: %v", err)
	}
	return b, nil
}

func (r nodeReader) number(n *yaml.Node, field string) (float64, error) {
	if err := r.plain(n, field); err != nil {
		return 0, err
	}
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
		return 0, r.fail(n, field, "must be a number, got %s", kindName(n))
	}
	var f float64
	if err := n.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, r.fail(n, field, "must be a finite number")
	}
	return f, nil
}

// wholeNumber reads a number of 0 or more with no fraction, written as an
// integer or a float (1024.0): runx reads its unsigned fields
// (timeout_seconds, page_bytes, max_attempts) from a JSON number that way.
func (r nodeReader) wholeNumber(n *yaml.Node, field string) (float64, error) {
	f, err := r.number(n, field)
	if err != nil {
		return 0, err
	}
	if f < 0 || f != math.Trunc(f) {
		return 0, r.fail(n, field, "must be a whole number of 0 or more, got %g", f)
	}
	return f, nil
}

// isNull reports whether n is a plain YAML null (null, ~, or no value).
// runx reads an optional field given as null as absent; an anchored null is
// left to the field's own reader, which refuses the anchor.
func isNull(n *yaml.Node) bool {
	return n != nil && n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" && n.Anchor == ""
}

// withoutNulls drops the entries of the known keys whose value is a plain
// null: the fields runx reads with its optional_* readers, which take null
// as absent (json_fields.rs: None | Some(Null) => Ok(None)). An unknown key
// stays, for the caller to refuse.
func withoutNulls(entries []keyValue, known ...string) []keyValue {
	out := entries[:0:0]
	for _, e := range entries {
		if !isNull(e.value) || !slices.Contains(known, e.key) {
			out = append(out, e)
		}
	}
	return out
}

// strList reads a list of non-empty strings.
func (r nodeReader) strList(n *yaml.Node, field string) ([]string, error) {
	if err := r.plain(n, field); err != nil {
		return nil, err
	}
	if n.Kind != yaml.SequenceNode {
		return nil, r.fail(n, field, "must be a list of strings, got %s", kindName(n))
	}
	out := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		s, err := r.nonEmptyStr(item, fmt.Sprintf("%s[%d]", field, i))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// words reads either a whitespace-separated string or a list of strings, as
// allowed-tools may be written either way.
func (r nodeReader) words(n *yaml.Node, field string) ([]string, error) {
	if err := r.plain(n, field); err != nil {
		return nil, err
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		return strings.Fields(n.Value), nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, r.fail(n, field, "must be a space-separated string or a list of strings, got %s", kindName(n))
	}
	list, err := r.strList(n, field)
	if err != nil {
		return nil, err
	}
	for i, s := range list {
		if strings.ContainsAny(s, " \t\r\n") {
			return nil, r.fail(n.Content[i], fmt.Sprintf("%s[%d]", field, i), "must not contain whitespace")
		}
	}
	return list, nil
}

// jsonValue converts a node to its JSON encoding, refusing values JSON cannot
// represent (non-finite floats, non-string keys, binary and timestamps).
func (r nodeReader) jsonValue(n *yaml.Node, field string) (json.RawMessage, error) {
	v, err := r.toJSONValue(n, field)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, r.fail(n, field, "must be representable as JSON: %v", err)
	}
	return raw, nil
}

func (r nodeReader) toJSONValue(n *yaml.Node, field string) (any, error) {
	if err := r.plain(n, field); err != nil {
		return nil, err
	}
	switch n.Kind {
	case yaml.MappingNode:
		entries, err := r.mapping(n, field)
		if err != nil {
			return nil, err
		}
		obj := make(map[string]any, len(entries))
		for _, e := range entries {
			v, err := r.toJSONValue(e.value, join(field, e.key))
			if err != nil {
				return nil, err
			}
			obj[e.key] = v
		}
		return obj, nil
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			v, err := r.toJSONValue(item, fmt.Sprintf("%s[%d]", field, i))
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		return list, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return n.Value, nil
		case "!!bool":
			return r.boolean(n, field)
		case "!!null":
			return nil, nil
		case "!!int":
			var i int64
			if err := n.Decode(&i); err == nil {
				return i, nil
			}
			return r.number(n, field)
		case "!!float":
			return r.number(n, field)
		case "!!timestamp", "!!binary":
			// JSON has no such types; runx reads them as the text written.
			return n.Value, nil
		}
	}
	return nil, r.fail(n, field, "must be a JSON-compatible value, got %s", kindName(n))
}

// join appends a key to a dotted field path, quoting keys that are not plain
// identifiers so that a key such as "thread.title" stays recognisable.
func join(field, key string) string {
	if !plainKey(key) {
		return fmt.Sprintf("%s[%q]", field, key)
	}
	if field == "" {
		return key
	}
	return field + "." + key
}

func plainKey(key string) bool {
	if key == "" {
		return false
	}
	for _, c := range key {
		if !(c == '_' || c == '-' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
