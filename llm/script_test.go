package llm

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLoadScriptFixture(t *testing.T) {
	s, err := LoadScript(filepath.Join("..", "testdata", "replay", "llm_basic.yaml"))
	if err != nil {
		t.Fatalf("LoadScript: %v", err)
	}
	if s.Name != "llm-basic" || !strings.Contains(s.Description, "Fixture for the llm package") {
		t.Fatalf("name/description = %q / %q", s.Name, s.Description)
	}
	if len(s.Processes) != 3 {
		t.Fatalf("processes = %d, want 3", len(s.Processes))
	}
	p0 := s.Processes[0]
	if p0.Image != "base:v0" || len(p0.Turns) != 3 {
		t.Fatalf("processes[0] = %+v", p0)
	}
	if got := string(p0.Turns[0].ToolCalls[0].Arguments); got != `{"timezone":"UTC"}` {
		t.Fatalf("turn 0 arguments = %s", got)
	}
	// Arguments are canonical JSON: compact, keys sorted, references kept as written.
	want := `{"at":"${last.now}","literal":"$${not.a.reference}","owner":"${process.pid}","title":"note for ${process.goal_oid}"}`
	if got := string(p0.Turns[1].ToolCalls[0].Arguments); got != want {
		t.Fatalf("turn 1 arguments = %s, want %s", got, want)
	}
	if got := string(s.Processes[2].Turns[0].ToolCalls[0].Arguments); got != `{"args":[1,2.5,"three",null,true],"image":"worker:v1"}` {
		t.Fatalf("worker arguments = %s", got)
	}
}

func TestLoadScriptErrorsNameTheFile(t *testing.T) {
	_, err := LoadScript(filepath.Join(t.TempDir(), "missing.yaml"))
	if err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing file error = %v", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	writeFile(t, path, "processes:\n  - turns: []\n")
	_, err = LoadScript(path)
	var se *ScriptError
	if !errors.As(err, &se) || se.Source != path || !errors.Is(err, ErrScriptInvalid) {
		t.Fatalf("error = %v, want ScriptError from %s", err, path)
	}
	if !strings.Contains(err.Error(), path+":2:5: processes[0].image: required") {
		t.Fatalf("error text = %q", err.Error())
	}
}

func TestParseScriptAccepts(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want *Script
	}{
		{
			name: "empty process list",
			yaml: "processes: []",
			want: &Script{},
		},
		{
			name: "null fields count as absent",
			yaml: "name: ~\nprocesses:\n  - image: a:v0\n    turns:\n      - text:\n        tool_calls:\n          - name: t\n            arguments:\n",
			want: &Script{Processes: []ScriptProcess{{Image: "a:v0", Turns: []ScriptTurn{{ToolCalls: []ScriptToolCall{{Name: "t"}}}}}}},
		},
		{
			name: "scalar types map to JSON types",
			yaml: `processes: [{image: a:v0, turns: [{tool_calls: [{name: t, arguments: {i: 42, neg: -7, f: 1.5, e: 1e3, hex: 0x1F, b: false, n: null, s: "42", d: 2024-01-02, big: 18446744073709551615}}]}]}]`,
			want: &Script{Processes: []ScriptProcess{{Image: "a:v0", Turns: []ScriptTurn{{ToolCalls: []ScriptToolCall{{Name: "t",
				Arguments: json.RawMessage(`{"b":false,"big":18446744073709551615,"d":"2024-01-02","e":1000,"f":1.5,"hex":31,"i":42,"n":null,"neg":-7,"s":"42"}`)}}}}}}},
		},
		{
			name: "nested arguments and non-string keys",
			yaml: "processes:\n- image: a:v0\n  turns:\n  - tool_calls:\n    - name: t\n      arguments:\n        outer: {inner: [1, {deep: x}]}\n        1: one\n",
			want: &Script{Processes: []ScriptProcess{{Image: "a:v0", Turns: []ScriptTurn{{ToolCalls: []ScriptToolCall{{Name: "t",
				Arguments: json.RawMessage(`{"1":"one","outer":{"inner":[1,{"deep":"x"}]}}`)}}}}}}},
		},
		{
			name: "HTML characters are not escaped",
			yaml: `processes: [{image: a:v0, turns: [{tool_calls: [{name: t, arguments: {q: "a<b && c>d"}}]}]}]`,
			want: &Script{Processes: []ScriptProcess{{Image: "a:v0", Turns: []ScriptTurn{{ToolCalls: []ScriptToolCall{{Name: "t",
				Arguments: json.RawMessage(`{"q":"a<b && c>d"}`)}}}}}}},
		},
		{
			name: "text and name are literal",
			yaml: "name: n\ndescription: d\nprocesses:\n  - image: a:v0\n    turns:\n      - text: 'cost: ${last.x} and $${y}'\n",
			want: &Script{Name: "n", Description: "d", Processes: []ScriptProcess{{Image: "a:v0", Turns: []ScriptTurn{{Text: "cost: ${last.x} and $${y}"}}}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseScript([]byte(tc.yaml))
			if err != nil {
				t.Fatalf("ParseScript: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestParseScriptRejects(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // the error text must contain this
		line int    // 0: not checked
	}{
		{"empty document", "", "empty document", 0},
		{"comment only", "# nothing\n", "empty document", 0},
		{"syntax error", "processes: [\n", "YAML syntax", 0},
		{"two documents", "processes: []\n---\nprocesses: []\n", "only one YAML document", 2},
		{"top level sequence", "- image: a:v0\n", "must be a mapping, not a sequence", 1},
		{"missing processes", "name: x\n", "processes: required", 1},
		{"processes not a sequence", "processes: {image: a:v0}\n", "processes: must be a sequence, not a mapping", 1},
		{"unknown top-level field", "processes: []\nprocess: []\n", "process: unknown field (known fields: name, description, processes)", 2},
		{"name not a string", "name: [a]\nprocesses: []\n", "name: must be a string, not a sequence", 1},
		{"description not a string", "description: 3\nprocesses: []\n", "description: must be a string, not a number", 1},
		{"duplicate top-level field", "processes: []\nprocesses: []\n", "processes: duplicate field", 0},
		{"process not a mapping", "processes: [a]\n", "processes[0]: must be a mapping, not a string", 1},
		{"missing image", "processes:\n  - image: a:v0\n  - turns: []\n", "processes[1].image: required", 3},
		{"empty image", "processes:\n  - image: ''\n", "processes[0].image: required", 2},
		{"null image", "processes:\n  - image: ~\n", "processes[0].image: required", 2},
		{"image not a string", "processes:\n  - image: 5\n", "processes[0].image: must be a string, not a number", 2},
		{"unknown process field", "processes:\n  - image: a:v0\n    turn: []\n", "processes[0].turn: unknown field (known fields: image, turns)", 3},
		{"turns not a sequence", "processes:\n  - image: a:v0\n    turns: {text: x}\n", "processes[0].turns: must be a sequence", 3},
		{"unknown turn field", "processes:\n  - image: a:v0\n    turns:\n      - txt: hi\n", "processes[0].turns[0].txt: unknown field (known fields: text, tool_calls, fault)", 4},
		{"text not a string", "processes:\n  - image: a:v0\n    turns:\n      - text: {a: 1}\n", "processes[0].turns[0].text: must be a string, not a mapping", 4},
		{"tool_calls not a sequence", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: get_time\n", "processes[0].turns[0].tool_calls: must be a sequence, not a string", 4},
		{
			"tool call without name",
			"processes:\n  - image: a:v0\n  - image: b:v0\n    turns:\n      - tool_calls:\n          - name: x\n          - name: y\n          - arguments: {}\n",
			"processes[1].turns[0].tool_calls[2].name: required", 8,
		},
		{"tool call name not a string", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: 12}]\n", "processes[0].turns[0].tool_calls[0].name: must be a string, not a number", 4},
		{"unknown tool call field", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, args: {}}]\n", "processes[0].turns[0].tool_calls[0].args: unknown field (known fields: name, arguments)", 4},
		{"arguments a sequence", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: [1]}]\n", "processes[0].turns[0].tool_calls[0].arguments: must be a mapping, not a sequence", 4},
		{"arguments a string", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: '{\"a\":1}'}]\n", "processes[0].turns[0].tool_calls[0].arguments: must be a mapping, not a string", 4},
		{"duplicate argument key", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls:\n          - name: t\n            arguments:\n              a: 1\n              a: 2\n", "arguments.a: duplicate key", 8},
		{"alias in arguments", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls:\n          - name: t\n            arguments: {a: &x 1, b: *x}\n", "arguments.b: aliases are not supported", 6},
		{"alias as field value", "name: &n x\ndescription: *n\nprocesses: []\n", "description: aliases are not supported", 2},
		{"merge key", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls:\n          - name: t\n            arguments: {<<: {a: 1}}\n", "merge keys", 6},
		{"complex key", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls:\n          - name: t\n            arguments: {[a]: 1}\n", "keys must be scalars", 6},
		{"NaN", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: {x: .nan}}]\n", "arguments.x: .nan cannot be represented in JSON", 4},
		{"infinity", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: {x: [-.inf]}}]\n", "arguments.x[0]: -.inf cannot be represented in JSON", 4},
		{"binary", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: {x: !!binary aGk=}}]\n", "arguments.x: unsupported tag !!binary", 4},
		{"custom tag", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: {x: !thing y}}]\n", "arguments.x: unsupported tag !thing", 4},
		{"unterminated reference", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: {x: 'a ${last.b'}}]\n", "arguments.x: reference syntax: unterminated reference", 4},
		{"unknown reference root", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: {x: '${result.a}'}}]\n", "unknown reference ${result.a}", 4},
		{"unknown process field", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: {x: '${process.ppid}'}}]\n", "unknown process field in ${process.ppid}", 4},
		{"process reference with path", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: {x: '${process.pid.x}'}}]\n", "unknown process field in ${process.pid.x}", 4},
		{"empty reference segment", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: {x: {y: ['${last..a}']}}}]\n", `arguments.x.y[0]: reference syntax: reference ${last..a} has an empty path segment`, 4},
		{"empty reference", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: {'odd key': '${}'}}]\n", `arguments["odd key"]: reference syntax: reference ${} has an empty path segment`, 4},
		{"too deep", "processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: {x: " + strings.Repeat("[", 70) + strings.Repeat("]", 70) + "}}]\n", "nested deeper than 64 levels", 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseScript([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("accepted: %#v", s)
			}
			if !errors.Is(err, ErrScriptInvalid) {
				t.Fatalf("error %v does not wrap ErrScriptInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err.Error(), tc.want)
			}
			var se *ScriptError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *ScriptError", err)
			}
			if tc.line != 0 && se.Line != tc.line {
				t.Fatalf("error line = %d, want %d (%v)", se.Line, tc.line, err)
			}
		})
	}
}

func TestScriptValidateRejectsBadGoScripts(t *testing.T) {
	tests := []struct {
		name   string
		script *Script
		want   string
	}{
		{"nil", nil, "no script"},
		{"empty image", &Script{Processes: []ScriptProcess{{}}}, "processes[0].image: required"},
		{"empty tool name", &Script{Processes: []ScriptProcess{{Image: "a:v0", Turns: []ScriptTurn{{}, {ToolCalls: []ScriptToolCall{{}}}}}}}, "processes[0].turns[1].tool_calls[0].name: required"},
		{"arguments not an object", &Script{Processes: []ScriptProcess{{Image: "a:v0", Turns: []ScriptTurn{{ToolCalls: []ScriptToolCall{{Name: "t", Arguments: json.RawMessage(`[1]`)}}}}}}}, "processes[0].turns[0].tool_calls[0].arguments: must be a mapping, not an array"},
		{"arguments not JSON", &Script{Processes: []ScriptProcess{{Image: "a:v0", Turns: []ScriptTurn{{ToolCalls: []ScriptToolCall{{Name: "t", Arguments: json.RawMessage(`{`)}}}}}}}, "arguments: must be a JSON object"},
		{"bad reference", &Script{Processes: []ScriptProcess{{Image: "a:v0", Turns: []ScriptTurn{{ToolCalls: []ScriptToolCall{{Name: "t", Arguments: json.RawMessage(`{"a":["${x}"]}`)}}}}}}}, "arguments.a[0]: reference syntax: unknown reference ${x}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.script.Validate()
			if err == nil || !errors.Is(err, ErrScriptInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want error containing %q", err, tc.want)
			}
			if _, err := NewReplay(tc.script, firstSpawns); err == nil {
				t.Fatal("NewReplay accepted an invalid script")
			}
			if _, err := MarshalScript(tc.script); err == nil {
				t.Fatal("MarshalScript accepted an invalid script")
			}
		})
	}
}

func TestMarshalScriptRoundTrip(t *testing.T) {
	s, err := LoadScript(filepath.Join("..", "testdata", "replay", "llm_basic.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Values that YAML would read as another type unless quoted.
	s.Processes = append(s.Processes, ScriptProcess{Image: "quoting:v0", Turns: []ScriptTurn{{
		Text: "true",
		ToolCalls: []ScriptToolCall{{Name: "null", Arguments: json.RawMessage(
			`{"a":"123","b":"2024-01-02","c":"~","d":"- x","e":"multi\nline\n","f":1e+21,"g":-0.5,"h":"${last.x} $${y}","i":{},"j":[]}`)}},
	}}})
	out, err := MarshalScript(s)
	if err != nil {
		t.Fatalf("MarshalScript: %v", err)
	}
	back, err := ParseScript(out)
	if err != nil {
		t.Fatalf("ParseScript of marshalled script: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(s, back) {
		t.Fatalf("round trip changed the script\nbefore %#v\nafter  %#v\nyaml:\n%s", s, back, out)
	}
}

// FuzzParseScript checks that parsing never panics and that every accepted script survives
// MarshalScript and a second parse unchanged.
func FuzzParseScript(f *testing.F) {
	f.Add([]byte("processes: []"))
	f.Add([]byte("name: x\ndescription: y\nprocesses:\n  - image: base:v0\n    turns:\n      - text: hi\n        tool_calls:\n          - name: t\n            arguments: {a: '${last.b.0}', c: [1, 2.5, null, true], d: 'x ${process.pid} $${e}'}\n"))
	f.Add([]byte("processes: [{image: a:v0, turns: [{tool_calls: [{name: t, arguments: {x: 0x10, y: 1e400, z: 2024-01-01}}]}]}]"))
	f.Add([]byte("processes:\n  - image: a:v0\n    turns:\n      - tool_calls: [{name: t, arguments: {a: &x [1], b: *x}}]\n"))
	f.Add([]byte("processes: [{image: \"\\u0000\", turns: [{text: \"\\t\\n \"}]}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseScript(data)
		if err != nil {
			if !errors.Is(err, ErrScriptInvalid) {
				t.Fatalf("error %v does not wrap ErrScriptInvalid", err)
			}
			return
		}
		if _, err := NewReplay(s, firstSpawns); err != nil {
			t.Fatalf("parsed script not accepted by NewReplay: %v", err)
		}
		out, err := MarshalScript(s)
		if err != nil {
			t.Fatalf("MarshalScript of an accepted script: %v", err)
		}
		back, err := ParseScript(out)
		if err != nil {
			t.Fatalf("re-parse: %v\nyaml:\n%s", err, out)
		}
		if !reflect.DeepEqual(s, back) {
			t.Fatalf("round trip changed the script\nbefore %#v\nafter  %#v\nyaml:\n%s", s, back, out)
		}
	})
}

// Fault numbers are whole numbers: a fraction is refused at its line rather
// than truncated into another status or count.
func TestParseScriptRefusesFractionalFaultNumbers(t *testing.T) {
	head := "processes:\n  - image: a:v0\n    turns:\n      - fault:\n"
	tests := []struct{ yaml, want string }{
		{head + "          status: 503.9\n", "processes[0].turns[0].fault.status: 503.9 must be a whole number"},
		{head + "          status: 503\n          attempts: 2.7\n", "processes[0].turns[0].fault.attempts: 2.7 must be a whole number"},
		{head + "          status: 503\n          retry_after: 0.5\n", "processes[0].turns[0].fault.retry_after: 0.5 must be a whole number"},
		{head + "          status: '503'\n", "processes[0].turns[0].fault.status: 503 must be a whole number"},
	}
	for _, tc := range tests {
		_, err := ParseScript([]byte(tc.yaml))
		var se *ScriptError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.want) || se.Line != strings.Count(tc.yaml, "\n") {
			t.Errorf("%q: error %v; want %q at the last line", tc.yaml, err, tc.want)
		}
	}
	s, err := ParseScript([]byte(head + "          status: 503\n          attempts: 2\n          retry_after: 1\n"))
	if err != nil || *s.Processes[0].Turns[0].Fault != (ScriptFault{Status: 503, Attempts: 2, RetryAfter: 1}) {
		t.Fatalf("whole numbers: %v %v", s, err)
	}
}

// An integer argument reaches the model as written, however large.
func TestParseScriptKeepsIntegersExact(t *testing.T) {
	r := replayFrom(t, "processes: [{image: a:v0, turns: [{tool_calls: [{name: t, arguments: {n: 123456789012345678901, m: -98765432109876543210, i: 7, f: 1.5}}]}]}]")
	resp, err := r.Complete(context.Background(), Request{Process: ProcessInfo{PID: 1, Image: "a:v0"}, Messages: conversation("")})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"f":1.5,"i":7,"m":-98765432109876543210,"n":123456789012345678901}`
	if got := string(resp.ToolCalls[0].Arguments); got != want {
		t.Fatalf("arguments = %s, want %s", got, want)
	}
}

// A script entry's image must be a reference a process can have, or the
// entry could never be taken.
func TestParseScriptRefusesInvalidImageRef(t *testing.T) {
	for _, ref := range []string{"'base:v0 '", "Base:V0", "base", "base:v0:x"} {
		_, err := ParseScript([]byte("processes:\n  - image: " + ref + "\n"))
		var se *ScriptError
		if !errors.As(err, &se) || se.Line != 2 || !strings.Contains(err.Error(), "processes[0].image: image reference") ||
			!strings.Contains(err.Error(), "must be name:version") {
			t.Errorf("image %s: error %v; want processes[0].image refused at line 2", ref, err)
		}
	}
	err := (&Script{Processes: []ScriptProcess{{Image: "Base:V0"}}}).Validate()
	if err == nil || !strings.Contains(err.Error(), `processes[0].image: image reference "Base:V0": must be name:version`) {
		t.Fatalf("Validate: %v", err)
	}
}
