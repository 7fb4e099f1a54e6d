package skillpkg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
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
// error tree: the one rule an author needs to see first. It names where in
// the value the leaf is, the keyword and the rule, never the rejected value
// itself: as runx, a diagnostic does not echo the document it refused, which
// may hold a secret and may be of any size.
func firstViolation(ve *jsonschema.ValidationError) string {
	leaf := ve
	for len(leaf.Causes) > 0 {
		causes := append([]*jsonschema.ValidationError(nil), leaf.Causes...)
		sort.SliceStable(causes, func(i, j int) bool {
			return strings.Join(causes[i].InstanceLocation, "/") < strings.Join(causes[j].InstanceLocation, "/")
		})
		leaf = causes[0]
	}
	msg := "at '" + instancePointer(leaf.InstanceLocation) + "': "
	if rule := strings.Join(leaf.ErrorKind.KeywordPath(), "/"); rule != "" {
		msg += rule + ": "
	}
	return msg + ruleOf(leaf.ErrorKind)
}

// maxPointer bounds the instance location shown: its keys come from the
// rejected value.
const maxPointer = 200

// instancePointer renders a JSON Pointer ("/a/0/b"), cut short when long.
func instancePointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(t))
	}
	p := b.String()
	if len(p) > maxPointer {
		cut := maxPointer
		for cut > 0 && !utf8.RuneStart(p[cut]) {
			cut--
		}
		p = p[:cut] + "..."
	}
	return p
}

// ruleOf states the rule a leaf broke from the schema's side. The library's
// own messages quote the value for several kinds (pattern, format, the
// numeric bounds), so each kind is restated here: counts, type names and the
// schema's own words (enum, const, required) only.
func ruleOf(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("must be of type %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Enum:
		return "must be one of " + schemaValues(k.Want)
	case *kind.Const:
		return "must be " + schemaValues([]any{k.Want})
	case *kind.Pattern:
		return fmt.Sprintf("must match the pattern %q", k.Want)
	case *kind.Format:
		return fmt.Sprintf("must be a valid %s", k.Want)
	case *kind.Minimum:
		return "must be at least " + ratText(k.Want)
	case *kind.Maximum:
		return "must be at most " + ratText(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be more than " + ratText(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be less than " + ratText(k.Want)
	case *kind.MultipleOf:
		return "must be a multiple of " + ratText(k.Want)
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters long, got %d", k.Want, k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long, got %d", k.Want, k.Got)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items, got %d", k.Want, k.Got)
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items, got %d", k.Want, k.Got)
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d properties, got %d", k.Want, k.Got)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d properties, got %d", k.Want, k.Got)
	case *kind.Required:
		return "missing required " + quoteAll(k.Missing)
	case *kind.Dependency:
		return fmt.Sprintf("%s required when %q is present", quoteAll(k.Missing), k.Prop)
	case *kind.DependentRequired:
		return fmt.Sprintf("%s required when %q is present", quoteAll(k.Missing), k.Prop)
	case *kind.AdditionalProperties:
		// The names are the value's keys, which may be of any size.
		return fmt.Sprintf("%d property name(s) the schema does not allow", len(k.Properties))
	case *kind.PropertyNames:
		return "a property name breaks the propertyNames schema"
	case *kind.AdditionalItems:
		return fmt.Sprintf("the last %d item(s) are not allowed", k.Count)
	case *kind.UniqueItems:
		return fmt.Sprintf("items %d and %d are equal", k.Duplicates[0], k.Duplicates[1])
	case *kind.Contains:
		return "no item matches the contains schema"
	case *kind.MinContains:
		return fmt.Sprintf("at least %d items must match the contains schema, %d do", k.Want, len(k.Got))
	case *kind.MaxContains:
		return fmt.Sprintf("at most %d items may match the contains schema, %d do", k.Want, len(k.Got))
	case *kind.ContentEncoding:
		return fmt.Sprintf("must be %s encoded", k.Want)
	case *kind.ContentMediaType:
		return fmt.Sprintf("must be of media type %s", k.Want)
	case *kind.OneOf:
		if len(k.Subschemas) == 0 {
			return "must match exactly one subschema, matches none"
		}
		return "must match exactly one subschema, matches several"
	case *kind.AnyOf:
		return "must match at least one subschema"
	case *kind.Not:
		return "must not match the not schema"
	case *kind.FalseSchema:
		return "no value is allowed here (false schema)"
	}
	return "breaks the schema"
}

// ratText renders a schema's numeric bound as written: 25, or 0.1 rather
// than 1/10.
func ratText(r *big.Rat) string {
	if r.IsInt() {
		return r.RatString()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// schemaValues renders values written in the schema (enum, const) as JSON.
func schemaValues(vs []any) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		b, err := json.Marshal(v)
		if err != nil {
			b = []byte(fmt.Sprint(v))
		}
		parts[i] = string(b)
	}
	return strings.Join(parts, ", ")
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	what := "property "
	if len(names) > 1 {
		what = "properties "
	}
	return what + strings.Join(q, ", ")
}
