package skillpkg

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRunxRefusesWhatAdmissionRefuses mirrors runx-parser rules libos used
// to admit: module paths (source.rs validate_javascript_module), export
// names (validate_javascript_export), a javascript wall that is not a whole
// number (optional_u64, validate_source_timeout), page input names
// (validate_page_input_name, the runx_page reservation) and input types
// (governance.rs validate_inputs). Each refusal names X.yaml, the line and
// the field.
func TestRunxRefusesWhatAdmissionRefuses(t *testing.T) {
	js := "runners:\n  a:\n    type: javascript\n"
	paged := js + "    module: m.mjs\n    inputs:\n      runx_page: string\n      f: string\n      a.b: string\n    pages:\n      media_type: application/json\n      framing: json_array\n"
	cases := []struct {
		name, doc string
		line      int
		want      string
		module    bool
	}{
		{"module with a . segment", js + "    module: ./mod.mjs\n", 4, `runners.a.module: must be a portable relative .mjs or .js path without '.', '..', empty or backslash segments; "./mod.mjs" has a "." segment`, true},
		{"module with a .. segment", js + "    module: sub/../mod.mjs\n", 4, `"sub/../mod.mjs" has a ".." segment`, true},
		{"module with an empty segment", js + "    module: sub//../mod.mjs\n", 4, `"sub//../mod.mjs" has an empty segment`, true},
		{"module in a nested source", "runners:\n  a:\n    source:\n      type: javascript\n      module: ./mod.mjs\n", 5, `runners.a.source.module: must be a portable relative`, true},
		{"export not an identifier", js + "    module: m.mjs\n    export: a-b\n", 5, `runners.a.export: must be a JavaScript identifier (ASCII letters, digits, '_' and '$', not starting with a digit), got "a-b"`, false},
		{"export starting with a digit", js + "    module: m.mjs\n    export: 1x\n", 5, `runners.a.export: must be a JavaScript identifier`, false},
		{"javascript wall with a fraction", js + "    module: m.mjs\n    timeout_seconds: 1.5\n", 5, "runners.a.timeout_seconds: must be a whole number of seconds from 1 through 30 for a javascript runner, got 1.5", false},
		{"path_from with a dot", paged + "      path_from: a.b\n", 12, `runners.a.pages.path_from: must name one declared input using letters, digits, '_' or '-', got "a.b"`, false},
		{"path_from runx_page", paged + "      path_from: runx_page\n", 12, "runners.a.pages.path_from: must not name runx_page", false},
		{"path_scope_from runx_page", paged + "      path_from: f\n      path_scope_from: runx_page\n", 13, "runners.a.pages.path_scope_from: must not name runx_page", false},
		{"input of type any", "runners:\n  a:\n    type: cli-tool\n    command: x\n    inputs:\n      v: {type: any}\n", 6, `runners.a.inputs.v.type: must be one of array, boolean, integer, json, number, object, string (json takes any JSON value), got "any"`, false},
		{"input of type any, shorthand", "runners:\n  a:\n    type: cli-tool\n    command: x\n    inputs:\n      v: any\n", 6, `runners.a.inputs.v: must be one of array, boolean, integer, json, number, object, string`, false},
		{"shared input of type any", "input_definitions:\n  v: {type: any}\nrunners:\n  a: {type: cli-tool, command: x}\n", 2, `input_definitions.v.type: must be one of`, false},
		// null is absent for a field's value, not for which types may
		// declare it: runx refuses export on a cli-tool and cwd on a
		// javascript runner by the key alone.
		{"null export on a cli-tool", "runners:\n  a:\n    type: cli-tool\n    command: x\n    export: null\n", 5, "runners.a.export: applies only to javascript runners, not cli-tool", false},
		{"null cwd on javascript", js + "    module: m.mjs\n    cwd: null\n", 5, "runners.a.cwd: applies only to cli-tool runners, not javascript", false},
		{"null module", js + "    module: null\n", 4, "runners.a.module: must be a string, got null", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest(XManifestFile, []byte(tc.doc))
			checkRefusal(t, err, tc.line, tc.want)
			if err != nil && errors.Is(err, ErrModuleRefused) != tc.module {
				t.Errorf("error %q: matches ErrModuleRefused = %v, want %v", err, !tc.module, tc.module)
			}
		})
	}
}

// TestManifestSkillMustMatchSkillName mirrors runx's package identity rule
// (package/validate/contract.rs, validate_package_identity).
func TestManifestSkillMustMatchSkillName(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"SKILL.md": "---\nname: x\n---\nx",
		"X.yaml":   "version: \"1\"\nskill: other\nrunners:\n  a: {type: cli-tool, command: echo}\n",
	})
	_, err := Load(dir)
	checkRefusal(t, err, 2, `skill: manifest skill "other" does not match SKILL.md name "x"`)

	writeTree(t, dir, map[string]string{"X.yaml": "skill: x\nrunners:\n  a: {type: cli-tool, command: echo}\n"})
	if _, err := Load(dir); err != nil {
		t.Fatalf("matching skill refused: %v", err)
	}
}

// TestRunxNullsAreAbsent admits what runx admits: an explicit null on an
// optional field is absent (json_fields.rs: None | Some(Null) => Ok(None)),
// a whole number may be written as a float (optional_u64), and a cli-tool
// wall has no upper bound.
func TestRunxNullsAreAbsent(t *testing.T) {
	m, err := ParseManifest(XManifestFile, []byte(`skill: nulls
version: null
runners:
  js:
    type: javascript
    module: m.mjs
    export: null
    timeout_seconds: null
    outputs: null
    environment:
      required: null
      optional: [REGION]
    inputs:
      archive: {type: string, required: null, description: null, schema: null}
    pages:
      path_from: archive
      path_scope_from: null
      media_type: application/json
      framing: json_array
      page_bytes: null
  js2:
    type: javascript
    module: m.mjs
    default: null
    retry: {max_attempts: 2.0}
    pages: {path_from: archive, media_type: application/json, framing: json_array, page_bytes: 1024.0}
    inputs:
      archive: {type: null}
  cli:
    default: true
    type: cli-tool
    command: echo
    cwd: null
    args: null
    input_mode: null
    timeout_seconds: 100000
    scopes: null
    risk: null
    mutating: null
`))
	if err != nil {
		t.Fatal(err)
	}
	js, js2, cli := m.Runners[0], m.Runners[1], m.Runners[2]
	switch {
	case js.Export != "" || js.Timeout != DefaultJavaScriptTimeout || js.Outputs != nil:
		t.Errorf("js = export %q, timeout %v, outputs %v", js.Export, js.Timeout, js.Outputs)
	case js.Environment.Required != nil || len(js.Environment.Optional) != 1:
		t.Errorf("js environment = %+v", js.Environment)
	case js.Inputs[0].Required || js.Inputs[0].Schema != nil:
		t.Errorf("js inputs = %+v", js.Inputs)
	case js.Pages.PageBytes != DefaultPageBytes || js.Pages.PathScopeFrom != "":
		t.Errorf("js pages = %+v", js.Pages)
	case js2.Pages.PageBytes != 1024 || js2.Retry.MaxAttempts != 2 || js2.Inputs[0].Type != TypeString:
		t.Errorf("js2 = pages %+v, retry %+v, inputs %+v", js2.Pages, js2.Retry, js2.Inputs)
	case cli.Cwd != "" || cli.Args != nil || cli.InputMode != InputModeArgs || cli.Timeout != 100000*time.Second:
		t.Errorf("cli = cwd %q, args %q, mode %q, timeout %v", cli.Cwd, cli.Args, cli.InputMode, cli.Timeout)
	}

	// runx bounds no cli-tool wall; libos holds an enormous one to MaxTimeout.
	m, err = ParseManifest(XManifestFile, []byte("runners:\n  a: {type: cli-tool, command: x, timeout_seconds: 1e19}\n"))
	if err != nil || m.Runners[0].Timeout != MaxTimeout {
		t.Fatalf("huge wall: %v, %+v", err, m)
	}
}

// TestFixtureWithoutExpect admits a fixture file with no expect:, which
// runx defaults (harness_fixture.rs: #[serde(default)] expect); a harness
// case in the manifest still needs one.
func TestFixtureWithoutExpect(t *testing.T) {
	c, kind, target, err := ParseFixture("fixtures/plain.yaml", []byte("name: plain\nkind: skill\ntarget: ..\ninputs: {message: hi}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "plain" || kind != "skill" || target != ".." || c.Expect.Status != "" || c.Expect.OutputExact != nil {
		t.Fatalf("case %+v, kind %q, target %q", c, kind, target)
	}
	_, err = ParseManifest(XManifestFile, []byte("harness:\n  cases:\n    - name: c\nrunners:\n  a: {type: cli-tool, command: x}\n"))
	checkRefusal(t, err, 3, "harness.cases[0].expect: is required")
}

// TestCLIToolInputNamesMustStayApart refuses at admission the cli-tool
// inputs that the runtime contract's RUNX_INPUT_<NAME> normalisation maps to
// nothing or onto another input's variables, which used to fail every run
// with no file or field named.
func TestCLIToolInputNamesMustStayApart(t *testing.T) {
	head := "runners:\n  a:\n    type: cli-tool\n    command: x\n    inputs:\n"
	cases := []struct {
		name, inputs string
		line         int
		want         string
	}{
		{"dot and underscore", "      a.b: string\n      a_b: string\n", 7, `runners.a.inputs.a_b: maps to RUNX_INPUT_A_B, as input "a.b" (line 8) does; rename one of them`},
		{"case only", "      title: string\n      TITLE: string\n", 7, `runners.a.inputs.TITLE: maps to RUNX_INPUT_TITLE, as input "title" (line 8) does`},
		{"path variable of another", "      s: string\n      s.path: string\n", 7, `runners.a.inputs["s.path"]: maps to RUNX_INPUT_S_PATH, as input "s" (line 8) does`},
		{"no letter or digit", "      \"...\": string\n", 6, `runners.a.inputs["..."]: has no ASCII letter or digit, so it names no variable; a cli-tool gets each input as RUNX_INPUT_<NAME>`},
		{"shared declaration", "      a.b: string\n      a_b: {definition: d}\n", 7, `runners.a.inputs.a_b: maps to RUNX_INPUT_A_B`},
		{"too long", "      " + strings.Repeat("n", 250) + ": string\n", 6, "normalises to a <NAME> of 250 bytes, more than the 249"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest(XManifestFile, []byte("input_definitions:\n  d: string\n"+head+tc.inputs))
			checkRefusal(t, err, tc.line+2, tc.want)
		})
	}
	// The same names on a javascript runner travel in one object: admitted.
	if _, err := ParseManifest(XManifestFile, []byte("runners:\n  a:\n    type: javascript\n    module: m.mjs\n    inputs:\n      a.b: string\n      a_b: string\n")); err != nil {
		t.Fatal(err)
	}
}

// TestModuleErrorsNameTheFieldAsWritten names the manifest line and the
// field the module was declared in, recorded when it was parsed: a runner
// called default under runners: is not run:, and a module in runx's nested
// source: block is source.module.
func TestModuleErrorsNameTheFieldAsWritten(t *testing.T) {
	cases := []struct{ name, manifest, want string }{
		{"runner named default", "runners:\n  default:\n    default: true\n    type: javascript\n    module: missing.mjs\n", "X.yaml:5: runners.default.module: names missing.mjs, which does not exist"},
		{"second runner", "runners:\n  first: {type: cli-tool, command: x, default: true}\n  second:\n    type: javascript\n    module: missing.mjs\n", "X.yaml:5: runners.second.module: names missing.mjs, which does not exist"},
		{"run block", "run:\n  type: javascript\n  module: missing.mjs\n", "X.yaml:3: run.module: names missing.mjs, which does not exist"},
		{"nested source", "runners:\n  a:\n    source:\n      type: javascript\n      module: missing.mjs\n", "X.yaml:5: runners.a.source.module: names missing.mjs, which does not exist"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, map[string]string{"SKILL.md": "---\nname: x\n---\nx", "X.yaml": tc.manifest})
			_, err := Load(dir)
			if err == nil || err.Error() != tc.want || !errors.Is(err, ErrModuleRefused) {
				t.Fatalf("Load error = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestResolveInputsRefusesLoneSurrogates refuses a \u escape of a lone
// UTF-16 surrogate, which Go would decode to U+FFFD while the raw inputs
// keep the escape; runx's decoder refuses it too.
func TestResolveInputsRefusesLoneSurrogates(t *testing.T) {
	decls := []InputDecl{{Name: "text", Type: TypeString}, {Name: "doc", Type: TypeJSON}}
	for _, raw := range []string{
		`{"text": "\ud800"}`,
		`{"text": "a\udc00b"}`,
		`{"text": "\ud800\u0041"}`,
		`{"doc": {"k": ["\uDBFF"]}}`,
	} {
		for _, d := range [][]InputDecl{decls, nil} {
			_, err := ResolveInputs(d, json.RawMessage(raw))
			if !errors.Is(err, ErrInvalidInputs) || !strings.Contains(err.Error(), "holds a \\u escape of a lone UTF-16 surrogate") || !strings.Contains(err.Error(), "must be valid Unicode") {
				t.Errorf("ResolveInputs(%s) error = %v", raw, err)
			}
		}
	}
	if _, err := ResolveInputs(nil, json.RawMessage(`{"\udfff": 1}`)); err == nil || !strings.Contains(err.Error(), "an input name holds") {
		t.Errorf("lone surrogate in a name: %v", err)
	}
	for _, raw := range []string{`{"text": "\ud83d\ude00"}`, `{"text": "\\ud800"}`, `{"text": "\u00e9\"\\"}`} {
		if _, err := ResolveInputs(decls, json.RawMessage(raw)); err != nil {
			t.Errorf("ResolveInputs(%s): %v", raw, err)
		}
	}
}

// TestSchemaErrorsDoNotEchoTheValue names the input, the keyword and the
// rule, never the rejected value: "Runx does not echo a rejected document
// in its diagnostic" (docs/reference.md).
func TestSchemaErrorsDoNotEchoTheValue(t *testing.T) {
	m, err := ParseManifest(XManifestFile, []byte(`runners:
  a:
    type: cli-tool
    command: x
    inputs:
      code: {type: string, schema: {pattern: "^x$"}}
      n: {type: number, schema: {minimum: 10, multipleOf: 0.5}}
      when: {type: string, schema: {format: date}}
      obj: {type: object, schema: {additionalProperties: false, properties: {a: {type: string}}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	decls := m.Runners[0].Inputs
	long := strings.Repeat("SECRET", 500)
	cases := []struct{ raw, secret, want string }{
		{`{"code": "SECRET-VALUE-2"}`, "SECRET-VALUE-2", `input "code" breaks its schema: schema violation: at '': pattern: must match the pattern "^x$"`},
		{`{"code": "` + long + `"}`, long[:20], `input "code" breaks its schema`},
		{`{"n": 7.25}`, "7.25", `input "n" breaks its schema: schema violation: at '': minimum: must be at least 10`},
		{`{"n": 12.25}`, "12.25", "multipleOf: must be a multiple of 0.5"},
		{`{"obj": {"a": "ok", "SECRET-KEY": 1}}`, "SECRET-KEY", "additionalProperties: 1 property name(s) the schema does not allow"},
		{`{"obj": {"a": 99}}`, "99", "at '/a': type: must be of type string, got number"},
	}
	for _, tc := range cases {
		_, err := ResolveInputs(decls, json.RawMessage(tc.raw))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ResolveInputs(%.60s) error = %v, want %q", tc.raw, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), tc.secret) || len(err.Error()) > 300 {
			t.Errorf("error echoes the value or runs long (%d bytes): %.300s", len(err.Error()), err)
		}
	}
}
