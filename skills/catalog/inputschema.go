package catalog

import (
	"encoding/json"
	"fmt"
	"math/big"
	"slices"

	"github.com/libos/libos/skills/skillpkg"
	"github.com/libos/libos/tools/schema"
)

// InputSchema is the argument schema a runner's tool is checked against
// before it runs, and the Parameters it gives the model: an object of the
// runner's declared inputs, with their required names and defaults,
// refusing unknown fields; a runner that declares no inputs accepts any
// object.
//
// An input that declares a JSON Schema (the author's schema with the
// declaration's type, description and default folded in, exactly what
// skillpkg.ResolveInputs checks it against) is checked as far as the
// keywords tools/schema carries go (type, description, properties,
// required, additionalProperties as a boolean, minimum, maximum, minLength,
// maxLength, minItems, maxItems, items, enum, default), never further than
// the declared schema allows; the tool's Invoke checks every call with the
// runner's own validator before anything runs. params is the schema the
// model is given, with each declared schema exactly as declared, or nil
// when the checked schema renders it exactly already.
func InputSchema(r *skillpkg.Runner) (checked *schema.Schema, params json.RawMessage, err error) {
	if r.Inputs == nil {
		return &schema.Schema{Type: "object"}, nil, nil
	}
	props := make(map[string]*schema.Schema, len(r.Inputs))
	exact := make(map[string]any, len(r.Inputs))
	var required []string
	inexact := false
	for _, d := range r.Inputs {
		p, doc, err := inputProperty(d)
		if err != nil {
			return nil, nil, fmt.Errorf("input %q: %w", d.Name, err)
		}
		if d.Required {
			required = append(required, d.Name)
		}
		props[d.Name] = p
		exact[d.Name] = p
		if doc != nil {
			exact[d.Name] = doc
			inexact = true
		}
	}
	checked = schema.Object(props, required...)
	if !inexact {
		return checked, nil, nil
	}
	whole := map[string]any{"type": "object", "properties": exact, "additionalProperties": false}
	if len(required) > 0 {
		whole["required"] = required
	}
	if params, err = json.Marshal(whole); err != nil {
		return nil, nil, fmt.Errorf("parameters: %w", err)
	}
	return checked, params, nil
}

// inputProperty is the checked schema of one input and, when tools/schema
// cannot render its declared schema exactly, that schema as declared.
func inputProperty(d skillpkg.InputDecl) (*schema.Schema, any, error) {
	if d.Schema == nil {
		p := &schema.Schema{Description: d.Description}
		if d.Type != skillpkg.TypeAny && d.Type != skillpkg.TypeJSON {
			p.Type = string(d.Type)
		}
		if d.Default != nil {
			v, err := decodeJSON(d.Default)
			if err != nil {
				return nil, nil, fmt.Errorf("default: %w", err)
			}
			p.Default = v
		}
		return p, nil, nil
	}
	doc, err := decodeJSON(d.Schema.Raw)
	if err != nil {
		return nil, nil, fmt.Errorf("schema: %w", err)
	}
	p := carried(doc, true)
	rendered, err := json.Marshal(p)
	if err != nil {
		return nil, nil, fmt.Errorf("schema: %w", err)
	}
	back, err := decodeJSON(rendered)
	if err != nil {
		return nil, nil, fmt.Errorf("schema: %w", err)
	}
	if sameJSON(back, doc) {
		return p, nil, nil
	}
	return p, doc, nil
}

// carried translates a decoded JSON Schema into the keywords tools/schema
// has. It drops what it cannot carry, and a keyword whose meaning depends
// on a dropped one (additionalProperties beside patternProperties, items
// beside prefixItems), so that the result never refuses a value the
// declared schema accepts.
func carried(doc any, top bool) *schema.Schema {
	m, ok := doc.(map[string]any)
	if !ok {
		return &schema.Schema{} // true or false: a boolean schema is not carried
	}
	s := &schema.Schema{}
	if t, ok := m["type"].(string); ok {
		switch t {
		case "object", "array", "string", "boolean", "number", "integer":
			s.Type = t
		}
	}
	if v, ok := m["description"].(string); ok {
		s.Description = v
	}
	if props, ok := m["properties"].(map[string]any); ok {
		s.Properties = make(map[string]*schema.Schema, len(props))
		for k, v := range props {
			s.Properties[k] = carried(v, false)
		}
	}
	if list, ok := m["required"].([]any); ok {
		for _, v := range list {
			if name, ok := v.(string); ok {
				s.Required = append(s.Required, name)
			}
		}
	}
	if b, ok := m["additionalProperties"].(bool); ok {
		if _, pattern := m["patternProperties"]; !pattern {
			s.AdditionalProperties = &b
		}
	}
	s.Minimum, s.Maximum = floatKeyword(m, "minimum"), floatKeyword(m, "maximum")
	s.MinLength, s.MaxLength = intKeyword(m, "minLength"), intKeyword(m, "maxLength")
	s.MinItems, s.MaxItems = intKeyword(m, "minItems"), intKeyword(m, "maxItems")
	if items, ok := m["items"].(map[string]any); ok {
		if _, prefix := m["prefixItems"]; !prefix {
			s.Items = carried(items, false)
		}
	}
	// tools/schema compares enum members as written, so a number (1.0 and
	// 1 are one value in JSON Schema) is left to the runner's check.
	if enum, ok := m["enum"].([]any); ok && len(enum) > 0 && !slices.ContainsFunc(enum, isNumber) {
		s.Enum = enum
	}
	// tools/schema fills a default into the arguments; below an input, one
	// breaking its own schema (legal in JSON Schema) would then fail the
	// runner's check of a call that never gave it.
	if v, ok := m["default"]; ok && top {
		s.Default = v
	}
	return s
}

func floatKeyword(m map[string]any, key string) *float64 {
	n, ok := m[key].(json.Number)
	if !ok {
		return nil
	}
	f, err := n.Float64()
	if err != nil {
		return nil
	}
	return &f
}

func intKeyword(m map[string]any, key string) *int {
	n, ok := m[key].(json.Number)
	if !ok {
		return nil
	}
	r, ok := new(big.Rat).SetString(n.String())
	if !ok || !r.IsInt() || r.Sign() < 0 || !r.Num().IsInt64() || r.Num().Int64() > 1<<31 {
		return nil
	}
	v := int(r.Num().Int64())
	return &v
}

// sameJSON reports whether two decoded JSON values are equal, comparing
// numbers by value (so 10 and 1e1 match).
func sameJSON(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !sameJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		p, ok1 := new(big.Rat).SetString(x.String())
		q, ok2 := new(big.Rat).SetString(y.String())
		return ok1 && ok2 && p.Cmp(q) == 0
	default:
		return a == b
	}
}

func isNumber(v any) bool {
	_, ok := v.(json.Number)
	return ok
}
