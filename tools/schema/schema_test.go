package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func testSchema() *Schema {
	return Object(map[string]*Schema{
		"timezone": {Type: "string", Default: "UTC", MinLength: Ptr(1), MaxLength: Ptr(8)},
		"seconds":  {Type: "number", Minimum: Ptr(0.0), Maximum: Ptr(60.0)},
		"limit":    {Type: "integer", Minimum: Ptr(0.0), Maximum: Ptr(1000.0), Default: 50},
		"ack":      {Type: "boolean", Default: true},
		"kind":     {Type: "string", Enum: []any{"normal", "interrupt"}},
		"ids":      {Type: "array", MaxItems: Ptr(2), Items: &Schema{Type: "string"}},
		"payload":  {},
		"nested":   Object(map[string]*Schema{"x": {Type: "integer"}}, "x"),
	}, "seconds")
}

func TestNormalize(t *testing.T) {
	cases := []struct {
		in, want, field, rule string
	}{
		{in: `{"seconds": 1.5}`, want: `{"ack":true,"limit":50,"seconds":1.5,"timezone":"UTC"}`},
		{in: `{"seconds": 0, "payload": [1, {"a": null}]}`, want: `{"ack":true,"limit":50,"payload":[1,{"a":null}],"seconds":0,"timezone":"UTC"}`},
		{in: `{"seconds": 2, "limit": 3.0}`, want: `{"ack":true,"limit":3,"seconds":2,"timezone":"UTC"}`},
		{in: `{}`, field: "seconds", rule: "required"},
		{in: ``, field: "seconds", rule: "required"},
		{in: `{"seconds": 61}`, field: "seconds", rule: "must be <= 60"},
		{in: `{"seconds": -1}`, field: "seconds", rule: "must be >= 0"},
		{in: `{"seconds": "5"}`, field: "seconds", rule: "must be a number, got string"},
		{in: `{"seconds": 1, "bogus": 1}`, field: "bogus", rule: "unknown field"},
		{in: `{"seconds": 1, "limit": 1.5}`, field: "limit", rule: "must be an integer"},
		{in: `{"seconds": 1, "ack": "yes"}`, field: "ack", rule: "must be a boolean"},
		{in: `{"seconds": 1, "kind": "loud"}`, field: "kind", rule: "must be one of"},
		{in: `{"seconds": 1, "ids": ["a","b","c"]}`, field: "ids", rule: "at most 2 items"},
		{in: `{"seconds": 1, "ids": ["a", 1]}`, field: "ids[1]", rule: "must be a string"},
		{in: `{"seconds": 1, "timezone": ""}`, field: "timezone", rule: "at least 1 characters"},
		{in: `{"seconds": 1, "timezone": "ABCDEFGHI"}`, field: "timezone", rule: "at most 8 characters"},
		{in: `{"seconds": 1, "nested": {}}`, field: "nested.x", rule: "required"},
		{in: `{"seconds": 1, "nested": {"x": 1, "y": 2}}`, field: "nested.y", rule: "unknown field"},
		{in: `[1]`, field: "", rule: "must be an object"},
		{in: `{"seconds": 1} {}`, rule: "trailing data"},
		{in: `{"seconds": 1} }`, rule: "trailing data"},
		{in: `{"seconds": 1e400}`, field: "seconds", rule: "must be"},
		{in: `{"seconds":`, rule: "not valid JSON"},
	}
	for _, c := range cases {
		got, err := testSchema().Normalize(json.RawMessage(c.in))
		if c.rule == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", c.in, err)
			} else if string(got) != c.want {
				t.Errorf("%s: got %s want %s", c.in, got, c.want)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: want a FieldError, got %v", c.in, err)
			continue
		}
		if fe.Field != c.field || !strings.Contains(fe.Rule, c.rule) {
			t.Errorf("%s: got field %q rule %q; want field %q rule containing %q", c.in, fe.Field, fe.Rule, c.field, c.rule)
		}
	}
}

// A key named twice in one object is refused wherever the object sits,
// naming the object's path and the key; the same key in different objects
// is fine.
func TestNormalizeRefusesDuplicateKeys(t *testing.T) {
	var many strings.Builder
	many.WriteString(`{"seconds": 1, "payload": {`)
	for i := range 40 {
		fmt.Fprintf(&many, `"k%d": %d, `, i, i)
	}
	many.WriteString(`"k39": 0}}`)
	cases := []struct{ in, field, key string }{
		{`{"seconds": 1, "seconds": 2}`, "", "seconds"},
		{`{"seconds": 1, "payload": {"amount": 1, "amount": 1000000}}`, "payload", "amount"},
		{`{"seconds": 1, "payload": [1, {"a": {"b": 1, "\u0062": 2}}]}`, "payload[1].a", "b"},
		{`{"seconds": 1, "nested": {"x": 1, "x": 1}}`, "nested", "x"},
		{`{"payload": {"s": "}\"{", "t": [{}, []], "s": 0}, "seconds": 1}`, "payload", "s"},
		{many.String(), "payload", "k39"},
	}
	for _, c := range cases {
		_, err := testSchema().Normalize(json.RawMessage(c.in))
		var fe *FieldError
		if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: want a FieldError, got %v", c.in, err)
			continue
		}
		if fe.Field != c.field || !strings.Contains(fe.Rule, fmt.Sprintf("duplicate key %q", c.key)) {
			t.Errorf("%s: got %v; want field %q, duplicate key %q", c.in, err, c.field, c.key)
		}
	}
	for _, ok := range []string{
		`{"seconds": 1, "payload": [{"a": 1}, {"a": 2}], "nested": {"x": 1}}`,
		`{"seconds": 1, "payload": {"a": {"a": {"a": 1}}, "b": {"a": 2}}}`,
		`{"seconds": 1, "payload": {"a\"b": 1, "a\"c": 2, "a\\": 3, "a": 4}}`,
	} {
		if _, err := testSchema().Normalize(json.RawMessage(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

func TestSchemaJSONShape(t *testing.T) {
	b, err := json.Marshal(testSchema())
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"additionalProperties":false`, `"required":["seconds"]`, `"default":"UTC"`, `"maximum":60`} {
		if !strings.Contains(s, want) {
			t.Errorf("schema JSON lacks %s: %s", want, s)
		}
	}
}

func FuzzNormalize(f *testing.F) {
	for _, seed := range []string{`{"seconds":1}`, `{"seconds":1,"payload":{"a":[{"b":1}],"\u0061":2}}`, `{"seconds":1,"ids":["a"]}`, `{"nested":{"x":1}}`, `[]`, `null`, `{"seconds":1e308}`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out, err := testSchema().Normalize(json.RawMessage(in))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		if hasDuplicateKey(in) {
			t.Fatalf("%s has a duplicate key, yet was accepted as %s", in, out)
		}
		// Accepted arguments are canonical: normalizing them again is a no-op.
		again, err := testSchema().Normalize(out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not idempotent: %s -> %s (%v)", out, again, err)
		}
	})
}

// hasDuplicateKey is the reference the fuzz test checks the scan against:
// encoding/json's tokens, with a set per object.
func hasDuplicateKey(in string) bool {
	dup, _ := duplicateIn(json.NewDecoder(strings.NewReader(in)))
	return dup
}

func duplicateIn(dec *json.Decoder) (bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return false, err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return false, nil
	}
	seen := map[string]bool{}
	for dec.More() {
		if d == '{' {
			k, err := dec.Token()
			if err != nil {
				return false, err
			}
			key, _ := k.(string)
			if seen[key] {
				return true, nil
			}
			seen[key] = true
		}
		if dup, err := duplicateIn(dec); dup || err != nil {
			return dup, err
		}
	}
	_, err = dec.Token()
	return false, err
}

// Canonical arguments keep <, > and & as written: escaped as \u003c they
// would be six bytes each against a bound in bytes, and stored and hashed as
// text the caller never wrote. Written escaped or not, a value has one
// canonical form.
func TestNormalizeDoesNotEscapeHTML(t *testing.T) {
	s := Object(map[string]*Schema{"payload": {}, "kind": {Type: "string", Enum: []any{"<a&b>"}}})
	for _, in := range []string{`{"payload":"a&b<c>","kind":"<a&b>"}`, `{"payload":"a\u0026b\u003cc\u003e","kind":"\u003ca\u0026b\u003e"}`} {
		got, err := s.Normalize(json.RawMessage(in))
		if err != nil || string(got) != `{"kind":"<a&b>","payload":"a&b<c>"}` {
			t.Errorf("%s: got %s, %v", in, got, err)
		}
	}
	big := `{"payload":"` + strings.Repeat("<", 200000) + `"}`
	if got, err := s.Normalize(json.RawMessage(big)); err != nil || len(got) != len(big) {
		t.Fatalf("200,000 '<': %d bytes, %v; want %d", len(got), err, len(big))
	}
	// json.Marshal's other rules stay: sorted keys, no space, no newline.
	if got, err := Marshal(map[string]any{"b": 1, "a": []any{"&"}}); err != nil || string(got) != `{"a":["&"],"b":1}` {
		t.Fatalf("Marshal: %s %v", got, err)
	}
}
