package skillpkg

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestXManifestRejections mirrors runx-parser's rejection tests
// (tests/parser_rejections.rs and the unknown-field rules of src/runner.rs,
// src/skill/runner_definition.rs and src/skill/governance.rs): each case is
// refused with the file, the line and the key named.
func TestXManifestRejections(t *testing.T) {
	cases := []struct {
		name, doc string
		line      int
		want      string
	}{
		{"unknown top-level key", "skill: s\nrunnerz: {}\nrunners:\n  a: {type: cli-tool, command: x}\n", 2, "runnerz: is not a known field"},
		{"unknown runner key", "runners:\n  a:\n    type: cli-tool\n    command: x\n    comand: y\n", 5, "runners.a.comand: is not a known runner field"},
		{"instructions belong in SKILL.md", "skill: misplaced-instructions\nrunners:\n  decide:\n    type: agent-task\n    agent: builder\n    task: decide\n    instructions: Put this in SKILL.md.\n", 7, "runners.decide.instructions: is not supported; put agent operating instructions in the owning SKILL.md"},
		{"unknown input key", "runners:\n  a:\n    type: cli-tool\n    command: x\n    inputs:\n      m: {type: string, requird: true}\n", 6, "runners.a.inputs.m.requird: is not a known field"},
		{"unknown input type", "runners:\n  a:\n    type: cli-tool\n    command: x\n    inputs:\n      m: {type: mystery}\n", 6, "runners.a.inputs.m.type: must be one of"},
		{"default not matching its type", "runners:\n  a:\n    type: cli-tool\n    command: x\n    inputs:\n      m: {type: integer, default: not-an-integer}\n", 6, "runners.a.inputs.m.default: must match declared type integer"},
		{"definition with overrides", "input_definitions:\n  selector: {type: object, required: true, schema: {additionalProperties: true}}\nrunners:\n  inspect:\n    type: agent-task\n    inputs:\n      resources: { definition: selector, required: false }\n", 7, "runners.inspect.inputs.resources.definition: is not supported together with other fields"},
		{"example breaking the input contract", "input_definitions:\n  selector:\n    type: object\n    required: true\n    schema:\n      required: [filters]\n      properties:\n        filters:\n          type: object\n          required: [limit]\n          properties:\n            limit: { type: integer, maximum: 25 }\nrunners:\n  inspect:\n    type: agent-task\n    inputs:\n      resources: { definition: selector }\n    examples:\n      - resources: { filters: { limit: 26 } }\n", 19, "runners.inspect.examples[0]: does not match the runner's input contract"},
		{"graph runner artifacts", "runners:\n  execute:\n    type: graph\n    graph: {name: g, steps: []}\n    artifacts:\n      wrap_as: result_packet\n", 6, "runners.execute.artifacts: is ambiguous for a graph source"},
		{"packets without named_emits", "runners:\n  a:\n    type: cli-tool\n    command: x\n    artifacts:\n      packets: {result: runx.test.result.v1}\n", 6, "runners.a.artifacts.packets: requires runners.a.artifacts.named_emits"},
		{"packet without wrap_as", "runners:\n  a:\n    type: cli-tool\n    command: x\n    artifacts:\n      packet: runx.test.v1\n", 6, "runners.a.artifacts.packet: requires runners.a.artifacts.wrap_as"},
		{"retry max_attempts zero", "runners:\n  a:\n    type: cli-tool\n    command: x\n    retry: {max_attempts: 0}\n", 5, "runners.a.retry.max_attempts: must be a positive integer"},
		{"retry unknown key", "runners:\n  a:\n    type: cli-tool\n    command: x\n    retry: {max_attempt: 2}\n", 5, "runners.a.retry.max_attempt: is not a known field"},
		{"risk.mutating not a boolean", "runners:\n  a:\n    type: cli-tool\n    command: x\n    risk: {mutating: sometimes}\n", 5, "runners.a.risk.mutating: must be a boolean"},
		{"retired http source", "runners:\n  a:\n    type: http\n", 3, "runners.a.type: http was removed"},
		{"unknown runner type", "runners:\n  a:\n    type: rpc\n", 3, "runners.a.type: must be one of javascript, cli-tool, agent-task"},
		{"credential on javascript", "runners:\n  a:\n    type: javascript\n    module: m.mjs\n    credential: github\n", 5, "runners.a.credential: is not valid for a pure javascript source"},
		{"harness case runner not declared", "harness:\n  cases:\n    - name: c\n      runner: nope\n      expect: {status: sealed}\nrunners:\n  a: {type: cli-tool, command: x}\n", 3, `harness.cases[0].runner: names runner "nope"`},
		{"harness case unknown key", "harness:\n  cases:\n    - name: c\n      expects: {status: sealed}\nrunners:\n  a: {type: cli-tool, command: x}\n", 4, "harness.cases[0].expects: is not a known field"},
		{"harness env owned by the runtime", "harness:\n  cases:\n    - name: c\n      env: {RUNX_CWD: /}\n      expect: {status: sealed}\nrunners:\n  a: {type: cli-tool, command: x}\n", 4, "harness.cases[0].env.RUNX_CWD: is owned by the harness runtime"},
		{"harness output expectation empty", "harness:\n  cases:\n    - name: c\n      expect: {output: {}}\nrunners:\n  a: {type: cli-tool, command: x}\n", 4, "harness.cases[0].expect.output: must hold exact or subset"},
		{"source field unknown", "runners:\n  a:\n    source: {type: cli-tool, command: x, comand: y}\n", 3, "runners.a.source.comand: is not a known source field"},
		{"two defaults", "runners:\n  a: {type: cli-tool, command: x, default: true}\n  b: {type: cli-tool, command: x, default: true}\n", 2, "runners: at most one runner may be marked default: true"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest(XManifestFile, []byte(tc.doc))
			checkRefusal(t, err, tc.line, tc.want)
		})
	}
}

// TestXManifestSchemaRejections refuses bad schemas at admission, naming
// the runner, the input or output, the line and the rule.
func TestXManifestSchemaRejections(t *testing.T) {
	cases := []struct {
		name, doc string
		line      int
		want      string
	}{
		{"schema that is not JSON Schema", "runners:\n  triage:\n    type: cli-tool\n    command: x\n    inputs:\n      request:\n        type: json\n        schema: {minLength: -1}\n", 8, "runners.triage.inputs.request.schema: is invalid JSON Schema"},
		{"schema with a bad type name", "runners:\n  triage:\n    type: cli-tool\n    command: x\n    inputs:\n      request:\n        type: json\n        schema: {properties: {a: {type: strng}}}\n", 8, "runners.triage.inputs.request.schema: is invalid JSON Schema"},
		{"schema with an external reference", "runners:\n  triage:\n    type: cli-tool\n    command: x\n    inputs:\n      request:\n        type: json\n        schema: {$ref: 'file:///etc/passwd'}\n", 8, "runners.triage.inputs.request.schema: is invalid JSON Schema"},
		{"output schema that is not JSON Schema", "runners:\n  triage:\n    type: javascript\n    module: m.mjs\n    outputs:\n      evidence:\n        type: object\n        schema: {required: yes}\n", 8, "runners.triage.outputs.evidence.schema: is invalid JSON Schema"},
		{"schema repeating the declared type", "runners:\n  a:\n    type: cli-tool\n    command: x\n    inputs:\n      v:\n        type: object\n        schema: {type: object, additionalProperties: false}\n", 8, "runners.a.inputs.v.schema.type: duplicates runners.a.inputs.v.type"},
		{"object schema without a shape", "runners:\n  a:\n    type: cli-tool\n    command: x\n    inputs:\n      v:\n        type: json\n        schema:\n          properties:\n            payload: {type: object}\n", 9, "runners.a.inputs.v.schema.properties.payload: declares an object without a shape"},
		{"default breaking its schema", "runners:\n  a:\n    type: cli-tool\n    command: x\n    inputs:\n      v:\n        type: string\n        default: ''\n        schema: {minLength: 1}\n", 8, "runners.a.inputs.v.default: must match the declared input schema"},
		{"packet with a schema", "runners:\n  a:\n    type: cli-tool\n    command: x\n    inputs:\n      v:\n        type: json\n        packet: runx.p.v1\n        schema: {additionalProperties: true}\n", 9, "runners.a.inputs.v.schema: and runners.a.inputs.v.packet are mutually exclusive"},
		{"packet not json", "runners:\n  a:\n    type: cli-tool\n    command: x\n    inputs:\n      v:\n        type: object\n        packet: runx.p.v1\n", 8, "runners.a.inputs.v.packet: requires runners.a.inputs.v.type to be json"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseManifest(XManifestFile, []byte(tc.doc))
			checkRefusal(t, err, tc.line, tc.want)
		})
	}
}

func checkRefusal(t *testing.T, err error, line int, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted; want %q", want)
	}
	var ae *AdmissionError
	if !errors.As(err, &ae) || !errors.Is(err, ErrAdmission) {
		t.Fatalf("error %v is not an admission error", err)
	}
	if ae.File != XManifestFile || ae.Line != line {
		t.Errorf("error %q: at %s:%d, want %s:%d", err, ae.File, ae.Line, XManifestFile, line)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
}

// TestRunnerSchemasValidate checks inputs before a run and names the input
// and the rule; outputs are checked by skills/runner with the same schemas.
func TestRunnerSchemasValidate(t *testing.T) {
	m, err := ParseManifest(XManifestFile, []byte(`skill: typed
input_definitions:
  selector:
    type: object
    required: true
    schema:
      required: [kind]
      additionalProperties: false
      properties:
        kind: { type: string, enum: [issues] }
        limit: { type: integer, minimum: 1, maximum: 25 }
runners:
  inspect:
    type: cli-tool
    command: x
    inputs:
      resources: { definition: selector }
      note: {type: string, required: false}
      level: {type: integer, default: 2}
    examples:
      - resources: { kind: issues, limit: 25 }
    outputs:
      report:
        type: object
        schema:
          required: [ok]
          properties: {ok: {const: true}}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := m.Runners[0]
	if !r.Default || r.Inputs[0].Schema == nil || r.OutputDecls[0].Schema == nil || string(r.Metadata["examples"]) != `[{"resources":{"kind":"issues","limit":25}}]` {
		t.Fatalf("runner %+v", r)
	}
	got, err := ResolveInputs(r.Inputs, json.RawMessage(`{"resources":{"kind":"issues"},"note":null}`))
	if err != nil || string(got["level"]) != "2" || string(got["note"]) != "null" {
		t.Fatalf("resolve = %v, %v", got, err)
	}
	for in, want := range map[string]string{
		`{"resources":{"kind":"pulls"}}`:             `input "resources" breaks its schema: schema violation: at '/kind': enum:`,
		`{"resources":{"kind":"issues","limit":26}}`: `input "resources" breaks its schema: schema violation: at '/limit': maximum:`,
		`{"resources":{"kind":"issues","x":1}}`:      `input "resources" breaks its schema: schema violation: at '': additionalProperties:`,
		`{"resources":"issues"}`:                     `input "resources" must be an object, got string`,
		`{}`:                                         `input "resources" is required`,
	} {
		_, err := ResolveInputs(r.Inputs, json.RawMessage(in))
		if err == nil || !errors.Is(err, ErrInvalidInputs) || !strings.Contains(err.Error(), want) {
			t.Errorf("inputs %s: error %v, want %q", in, err, want)
		}
	}
	if err := r.OutputDecls[0].Schema.Validate(json.RawMessage(`{"ok":false}`)); err == nil || !strings.Contains(err.Error(), "const") {
		t.Errorf("output check: %v", err)
	}
}

// TestRetryRules follows runx: a mutating runner is not retried without an
// idempotency key.
func TestRetryRules(t *testing.T) {
	for doc, want := range map[string]int{
		"retry: {max_attempts: 3, backoff_ms: 0}":                                         3,
		"retry: {max_attempts: 2}\n    risk: {mutating: true}":                            1,
		"retry: {max_attempts: 2}\n    risk: {mutating: true}\n    idempotency: {key: k}": 2,
		"retry: {max_attempts: 2}\n    mutating: false\n    risk: {mutating: true}":       2,
		"risk: {mutating: true}": 1,
	} {
		m, err := ParseManifest(XManifestFile, []byte("runners:\n  a:\n    type: cli-tool\n    command: x\n    "+doc+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if n, _ := m.Runners[0].Attempts(); n != want {
			t.Errorf("%s: %d attempts, want %d", doc, n, want)
		}
	}
}

// TestRunxSampleAdmitted admits every package of the runx sample unchanged.
func TestRunxSampleAdmitted(t *testing.T) {
	root := filepath.Join("..", "..", "testdata", "runx")
	if _, err := os.Stat(filepath.Join(root, "LICENSE")); err != nil {
		t.Fatalf("the runx sample is missing: %v", err)
	}
	var n int
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != SkillFile {
			return err
		}
		n++
		pkg, err := Load(filepath.Dir(p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return nil
		}
		if pkg.Manifest == nil || pkg.Manifest.File != XManifestFile || len(pkg.Runners) == 0 {
			t.Errorf("%s: no X.yaml runners", p)
		}
		return nil
	})
	if err != nil || n != 9 {
		t.Fatalf("walked %d packages: %v", n, err)
	}
}

// TestBothManifestsRefused refuses a package with X.yaml and skill.yaml.
func TestBothManifestsRefused(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"SKILL.md":   "---\nname: both\nregistry_owner: acme\nlinks: {source: x}\n---\n",
		"X.yaml":     "runners:\n  a: {type: cli-tool, command: x}\n",
		"skill.yaml": "run: {type: cli-tool, command: x}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Load(dir)
	if err == nil || !strings.Contains(err.Error(), "holds both X.yaml") {
		t.Fatalf("error %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "skill.yaml")); err != nil {
		t.Fatal(err)
	}
	pkg, err := Load(dir)
	if err != nil || string(pkg.Skill.Metadata["registry_owner"]) != `"acme"` || string(pkg.Skill.Metadata["links"]) != `{"source":"x"}` {
		t.Fatalf("load: %v %+v", err, pkg)
	}
}

// FuzzParseManifest: any input is admitted or refused with an
// AdmissionError, never a panic.
func FuzzParseManifest(f *testing.F) {
	for _, seed := range []string{
		"skill: s\nversion: \"1\"\nrunners:\n  a: {type: cli-tool, command: x, default: true}\n",
		"runners:\n  a:\n    type: javascript\n    module: m.mjs\n    inputs:\n      v: {type: json, schema: {properties: {a: {type: string}}, additionalProperties: false}}\n",
		"input_definitions: {s: {type: object, schema: {additionalProperties: true}}}\nrunners:\n  a: {type: agent-task, agent: b, task: t, inputs: {r: {definition: s}}}\n",
		"harness:\n  cases:\n    - {name: c, inputs: {m: 1}, expect: {status: sealed, output: {subset: {a: 1}}}}\nrunners:\n  a: {type: graph, graph: {steps: []}}\n",
		"runners: {a: {type: cli-tool, command: x, retry: {max_attempts: 2}, risk: {mutating: true}}}\n",
		"x: &a [1]\ny: *a\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(XManifestFile, data)
		if err != nil {
			var ae *AdmissionError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v is not an AdmissionError", err)
			}
			return
		}
		if len(m.Runners) == 0 {
			t.Fatal("admitted without runners")
		}
	})
}

// FuzzSchemaValidation: a schema either fails to compile or validates any
// value without panicking, and the verdict is stable.
func FuzzSchemaValidation(f *testing.F) {
	f.Add(`{"type":"object","required":["a"],"properties":{"a":{"type":"string","minLength":1}}}`, `{"a":""}`)
	f.Add(`{"type":["string","null"],"enum":["x",null]}`, `null`)
	f.Add(`{"items":{"type":"integer","maximum":3},"uniqueItems":true}`, `[1,1,4]`)
	f.Add(`{"pattern":"^(a+)+$"}`, `"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"`)
	f.Add(`{"$ref":"#/$defs/x","$defs":{"x":{"const":1}}}`, `1`)
	f.Fuzz(func(t *testing.T, schema, value string) {
		doc, err := decodeNumbers(json.RawMessage(schema))
		if err != nil {
			return
		}
		s, err := CompileSchema(doc)
		if err != nil {
			return
		}
		if !json.Valid([]byte(value)) {
			return
		}
		first := s.Validate(json.RawMessage(value))
		second := s.Validate(json.RawMessage(value))
		if (first == nil) != (second == nil) {
			t.Fatalf("unstable verdict: %v then %v", first, second)
		}
		if first != nil && !errors.Is(first, ErrSchemaViolation) {
			t.Fatalf("violation %v does not match ErrSchemaViolation", first)
		}
	})
}
