package skillpkg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Schema is a compiled JSON Schema (draft 2020-12, as runx uses) of a runner
// input or output. It is compiled once at admission and is safe for
// concurrent use.
type Schema struct {
	// Raw is the effective schema as compact JSON: the author's schema with
	// the declaration's type, description and default folded in.
	Raw      json.RawMessage
	compiled *jsonschema.Schema
}

// ErrSchemaViolation is matched by every error Schema.Validate returns.
var ErrSchemaViolation = errors.New("schema violation")

// noLoader refuses every external reference: a package's schema must be
// self-contained, and resolving "$ref": "file:///..." or an URL would let a
// manifest read the host's files or reach the network at admission.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema references are not allowed (%s)", url)
}

// CompileSchema compiles doc, a decoded JSON value (json.Number for
// numbers), as a draft 2020-12 schema. The error explains what is invalid.
func CompileSchema(doc any) (*Schema, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("encoding the schema: %w", err)
	}
	// The library wants its own decoding of the document (numbers as
	// json.Number), so decode the canonical bytes once more.
	val, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("decoding the schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	const loc = "mem:///schema.json"
	if err := c.AddResource(loc, val); err != nil {
		return nil, fmt.Errorf("adding the schema: %w", err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, errors.New(schemaCompileMessage(err))
	}
	return &Schema{Raw: raw, compiled: sch}, nil
}

// schemaCompileMessage shortens the library's compile errors, which repeat
// the in-memory location, to what an author can act on.
func schemaCompileMessage(err error) string {
	msg := err.Error()
	msg = strings.ReplaceAll(msg, "mem:///schema.json#", "#")
	msg = strings.ReplaceAll(msg, "mem:///schema.json", "the schema")
	return msg
}

// Validate checks one JSON value. A violation matches ErrSchemaViolation and
// names where in the value it is and the keyword it broke, e.g.
// `at /evidence/source: minLength: length must be >= 1, but got 0`.
func (s *Schema) Validate(value json.RawMessage) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(value))
	if err != nil {
		return fmt.Errorf("%w: the value is not JSON: %v", ErrSchemaViolation, err)
	}
	return s.ValidateDecoded(v)
}

// ValidateDecoded checks a value decoded with json.Number numbers (or
// jsonschema.UnmarshalJSON).
func (s *Schema) ValidateDecoded(v any) error {
	err := s.compiled.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("%w: %v", ErrSchemaViolation, err)
	}
	return fmt.Errorf("%w: %s", ErrSchemaViolation, firstViolation(ve))
}

// firstViolation picks the deepest, first-reported leaf of a validation
// error tree: the one rule an author needs to see first.
func firstViolation(ve *jsonschema.ValidationError) string {
	leaf := ve
	for len(leaf.Causes) > 0 {
		causes := append([]*jsonschema.ValidationError(nil), leaf.Causes...)
		sort.SliceStable(causes, func(i, j int) bool {
			return strings.Join(causes[i].InstanceLocation, "/") < strings.Join(causes[j].InstanceLocation, "/")
		})
		leaf = causes[0]
	}
	// Error renders "at '<pointer>': <message>" for a leaf.
	msg := leaf.Error()
	rule := strings.Join(leaf.ErrorKind.KeywordPath(), "/")
	if rule == "" {
		return msg
	}
	if i := strings.Index(msg, "': "); i >= 0 {
		return msg[:i+3] + rule + ": " + msg[i+3:]
	}
	return rule + ": " + msg
}
