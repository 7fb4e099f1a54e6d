package skillpkg

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestResolveInputsWithoutDeclarations(t *testing.T) {
	tests := []struct {
		raw     string
		want    map[string]string
		wantErr string
	}{
		{raw: "", want: map[string]string{}},
		{raw: "  \n", want: map[string]string{}},
		{raw: "{}", want: map[string]string{}},
		{raw: `{"a": 1, "b": {"c": [1, 2 ]}, "d": null}`, want: map[string]string{"a": "1", "b": `{"c":[1,2]}`, "d": "null"}},
		{raw: `[1]`, wantErr: "inputs must be a JSON object, got an array"},
		{raw: `null`, wantErr: "inputs must be a JSON object, got null"},
		{raw: `"x"`, wantErr: "got a string"},
		{raw: `{"a": 1} {}`, wantErr: "found data after it"},
		{raw: `{"a": 1, "a": 2}`, wantErr: `input "a" is given more than once`},
		{raw: `{"a": }`, wantErr: "invalid character"},
		{raw: `{"a": 1`, wantErr: "inputs must be a JSON object"},
		{raw: "{\"a\": \"\xff\"}", wantErr: "inputs must be UTF-8 JSON"},
	}
	for _, tc := range tests {
		got, err := ResolveInputs(nil, json.RawMessage(tc.raw))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalidInputs) {
				t.Errorf("ResolveInputs(%q) error = %v, want %q", tc.raw, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ResolveInputs(%q): %v", tc.raw, err)
			continue
		}
		if !reflect.DeepEqual(asStrings(got), tc.want) {
			t.Errorf("ResolveInputs(%q) = %v, want %v", tc.raw, asStrings(got), tc.want)
		}
	}
}

func asStrings(m map[string]json.RawMessage) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

func TestResolveInputsWithDeclarations(t *testing.T) {
	decls := []InputDecl{
		{Name: "title", Type: TypeString, Required: true},
		{Name: "count", Type: TypeInteger, Default: json.RawMessage("3")},
		{Name: "ratio", Type: TypeNumber},
		{Name: "flag", Type: TypeBoolean},
		{Name: "opts", Type: TypeObject},
		{Name: "list", Type: TypeArray},
		{Name: "blob", Type: TypeAny},
	}
	tests := []struct {
		raw     string
		want    map[string]string
		wantErr string
	}{
		{raw: `{"title": "t"}`, want: map[string]string{"title": `"t"`, "count": "3"}},
		{raw: `{"title": "t", "count": 2.0, "ratio": -1.5e3, "flag": false, "opts": {}, "list": [], "blob": null}`,
			want: map[string]string{"title": `"t"`, "count": "2.0", "ratio": "-1.5e3", "flag": "false", "opts": "{}", "list": "[]", "blob": "null"}},
		{raw: `{"title": "t", "count": 1e2}`, want: map[string]string{"title": `"t"`, "count": "1e2"}},
		{raw: `{}`, wantErr: `input "title" is required`},
		{raw: `{"title": "t", "extra": 1}`, wantErr: `input "extra" is not declared by the runner`},
		{raw: `{"title": 5}`, wantErr: `input "title" must be a string, got number`},
		{raw: `{"title": null}`, wantErr: `input "title" must be a string, got null`},
		{raw: `{"title": "t", "count": 2.5}`, wantErr: `input "count" must be an integer, got a fractional number`},
		{raw: `{"title": "t", "count": "2"}`, wantErr: `input "count" must be an integer, got string`},
		{raw: `{"title": "t", "ratio": true}`, wantErr: `input "ratio" must be a number, got boolean`},
		{raw: `{"title": "t", "flag": 1}`, wantErr: `input "flag" must be a boolean, got number`},
		{raw: `{"title": "t", "opts": []}`, wantErr: `input "opts" must be an object, got array`},
		{raw: `{"title": "t", "list": {}}`, wantErr: `input "list" must be an array, got object`},
	}
	for _, tc := range tests {
		got, err := ResolveInputs(decls, json.RawMessage(tc.raw))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalidInputs) {
				t.Errorf("ResolveInputs(%s) error = %v, want %q", tc.raw, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ResolveInputs(%s): %v", tc.raw, err)
			continue
		}
		if !reflect.DeepEqual(asStrings(got), tc.want) {
			t.Errorf("ResolveInputs(%s) = %v, want %v", tc.raw, asStrings(got), tc.want)
		}
	}
}

func TestEncodeInputsSortsAndCompacts(t *testing.T) {
	raw, err := EncodeInputs(map[string]json.RawMessage{"b": json.RawMessage(`[1,2]`), "a": json.RawMessage(`"x"`)})
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != `{"a":"x","b":[1,2]}` {
		t.Fatalf("EncodeInputs = %s", raw)
	}
	if _, err := EncodeInputs(map[string]json.RawMessage{"a": json.RawMessage(`{`)}); !errors.Is(err, ErrInvalidInputs) {
		t.Fatalf("want ErrInvalidInputs for an invalid value, got %v", err)
	}
	raw, err = EncodeInputs(nil)
	if err != nil || string(raw) != "{}" {
		t.Fatalf("EncodeInputs(nil) = %s, %v", raw, err)
	}
}

func TestParseTemplate(t *testing.T) {
	tests := []struct {
		in      string
		want    []TemplatePart
		wantErr string
	}{
		{in: "", want: []TemplatePart{{Literal: ""}}},
		{in: "plain", want: []TemplatePart{{Literal: "plain"}}},
		{in: "{{a}}", want: []TemplatePart{{Input: "a", Raw: "{{a}}"}}},
		{in: "--x={{ thread.title }}!", want: []TemplatePart{{Literal: "--x="}, {Input: "thread.title", Raw: "{{ thread.title }}"}, {Literal: "!"}}},
		{in: "{{env.REGION}}{{n}}", want: []TemplatePart{{Env: "REGION"}, {Input: "n", Raw: "{{n}}"}}},
		{in: "a }} b", want: []TemplatePart{{Literal: "a }} b"}}},
		{in: "{{env.1X}}", wantErr: "must name a variable"},
		{in: "{{env.}}", wantErr: "must name a variable"},
		{in: "x{{}}", wantErr: "placeholder at byte 1 is empty"},
		{in: "x {{a", want: []TemplatePart{{Literal: "x "}, {Literal: "{{a"}}},
		{in: "{{a {{b}}", wantErr: "nested"},
	}
	for _, tc := range tests {
		got, err := ParseTemplate(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseTemplate(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseTemplate(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestResolveEnvironment(t *testing.T) {
	host := map[string]string{"REGION": "eu", "EMPTY": "", "LABEL": "l"}
	var asked []string
	lookup := func(k string) (string, bool) {
		asked = append(asked, k)
		v, ok := host[k]
		return v, ok
	}
	got, err := ResolveEnvironment(Environment{Required: []string{"REGION", "EMPTY"}, Optional: []string{"TRACE", "LABEL"}}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, map[string]string{"REGION": "eu", "EMPTY": "", "LABEL": "l"}) {
		t.Fatalf("ResolveEnvironment = %v", got)
	}
	if !reflect.DeepEqual(asked, []string{"REGION", "EMPTY", "TRACE", "LABEL"}) {
		t.Fatalf("looked up %v", asked)
	}
	_, err = ResolveEnvironment(Environment{Required: []string{"REGION", "MISSING"}}, lookup)
	if !errors.Is(err, ErrMissingEnvironment) || !strings.Contains(err.Error(), "MISSING is declared in environment.required") {
		t.Fatalf("missing required: %v", err)
	}
	got, err = ResolveEnvironment(Environment{}, lookup)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty declaration = %v, %v", got, err)
	}
}
