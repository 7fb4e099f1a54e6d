package skillpkg

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseRunnerManifestAccepts(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []*Runner
	}{
		{
			name: "single javascript runner with defaults",
			doc:  "run:\n  type: javascript\n  module: lib/risk-model.mjs\n  export: assessRisk\n  outputs:\n    assessment: object\n",
			want: []*Runner{{
				Name: DefaultRunnerName, Default: true, Type: TypeJavaScript, Module: "lib/risk-model.mjs",
				Export: "assessRisk", Outputs: map[string]ValueType{"assessment": TypeObject},
				OutputDecls: []OutputDecl{{Name: "assessment", Type: TypeObject}},
				Timeout:     DefaultJavaScriptTimeout,
			}},
		},
		{
			name: "javascript timeout bounds and environment",
			doc: "run:\n  type: javascript\n  module: m.js\n  timeout_seconds: 30\n" +
				"  environment:\n    required: [REGION]\n    optional: [TRACE_LABEL]\n  scopes: [\"repo:read\", \"net:none\"]\n",
			want: []*Runner{{
				Name: DefaultRunnerName, Default: true, Type: TypeJavaScript, Module: "m.js",
				Timeout:     30 * time.Second,
				Environment: Environment{Required: []string{"REGION"}, Optional: []string{"TRACE_LABEL"}},
				Scopes:      []string{"repo:read", "net:none"},
			}},
		},
		{
			name: "paged javascript runner",
			doc: "run:\n  type: javascript\n  module: a.mjs\n  inputs:\n    archive_file: string\n    archive_base: {type: string, required: false}\n" +
				"  pages:\n    path_from: archive_file\n    path_scope_from: archive_base\n    media_type: application/json\n    framing: json_array\n    page_bytes: 524288\n",
			want: []*Runner{{
				Name: DefaultRunnerName, Default: true, Type: TypeJavaScript, Module: "a.mjs", Timeout: DefaultJavaScriptTimeout,
				Inputs: []InputDecl{{Name: "archive_file", Type: TypeString}, {Name: "archive_base", Type: TypeString}},
				Pages:  &Pages{PathFrom: "archive_file", PathScopeFrom: "archive_base", MediaType: "application/json", Framing: "json_array", PageBytes: 524288},
			}},
		},
		{
			name: "named runners, cli-tool with every field, inputMode spelling",
			doc: `runners:
  build:
    type: cli-tool
    command: ./bin/build
    args: ["--title={{thread.title}}", "{{ env.REGION }}", "", "literal }} text"]
    cwd: "{{env.RUNX_CWD}}"
    inputMode: stdin
    timeout_seconds: 0.25
    environment:
      required: [REGION]
    inputs:
      thread.title:
        type: string
        required: true
        description: The title.
      count:
        type: integer
        default: 3
  review:
    default: true
    type: agent-task
    allowed_tools: fs.read fs.write
    scopes: [review]
`,
			want: []*Runner{
				{
					Name: "build", Type: TypeCLITool, Command: "./bin/build",
					Args: []string{"--title={{thread.title}}", "{{ env.REGION }}", "", "literal }} text"},
					Cwd:  WorkspaceToken, InputMode: InputModeStdin, Timeout: 250 * time.Millisecond,
					Environment: Environment{Required: []string{"REGION"}},
					Inputs: []InputDecl{
						{Name: "thread.title", Type: TypeString, Required: true, Description: "The title."},
						{Name: "count", Type: TypeInteger, Default: json.RawMessage("3")},
					},
				},
				{Name: "review", Default: true, Type: TypeAgentTask, AllowedTools: []string{"fs.read", "fs.write"}, Scopes: []string{"review"}},
			},
		},
		{
			name: "cli-tool defaults",
			doc:  "run:\n  type: cli-tool\n  command: echo\n  cwd: ../elsewhere\n",
			want: []*Runner{{Name: DefaultRunnerName, Default: true, Type: TypeCLITool, Command: "echo", Cwd: "../elsewhere", InputMode: InputModeArgs, Timeout: DefaultCLIToolTimeout}},
		},
		{
			name: "object default from YAML",
			doc:  "run:\n  type: cli-tool\n  command: x\n  input_mode: none\n  inputs:\n    opts:\n      type: object\n      default: {depth: 2, tags: [a, b], on: true, none: null}\n",
			want: []*Runner{{
				Name: DefaultRunnerName, Default: true, Type: TypeCLITool, Command: "x", InputMode: InputModeNone, Timeout: DefaultCLIToolTimeout,
				Inputs: []InputDecl{{Name: "opts", Type: TypeObject, Default: json.RawMessage(`{"depth":2,"none":null,"on":true,"tags":["a","b"]}`)}},
			}},
		},
		{
			name: "empty inputs mapping declares no inputs",
			doc:  "run:\n  type: cli-tool\n  command: x\n  inputs: {}\n",
			want: []*Runner{{Name: DefaultRunnerName, Default: true, Type: TypeCLITool, Command: "x", InputMode: InputModeArgs, Timeout: DefaultCLIToolTimeout}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRunnerManifest([]byte(tc.doc))
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(withoutLocations(got), tc.want) {
				gj, _ := json.MarshalIndent(got, "", " ")
				wj, _ := json.MarshalIndent(tc.want, "", " ")
				t.Fatalf("runners:\n%s\nwant:\n%s", gj, wj)
			}
		})
	}
}

func TestParseRunnerManifestRefuses(t *testing.T) {
	tests := []struct {
		name     string
		doc      string
		wantErr  string
		wantLine int
		module   bool
	}{
		{name: "empty file", doc: "", wantErr: "must hold run: or runners:"},
		{name: "neither run nor runners", doc: "{}", wantErr: "must hold run: or runners:"},
		{name: "both run and runners", doc: "run: {type: cli-tool, command: x}\nrunners: {}\n", wantErr: "runners: must not be given together with run"},
		{name: "unknown top-level field", doc: "verison: \"1\"\nrun: {type: cli-tool, command: x}\n", wantErr: "verison: is not a known field", wantLine: 1},
		{name: "two documents", doc: "run: {type: cli-tool, command: x}\n---\nrun: {}\n", wantErr: "exactly one YAML document"},
		{name: "two default runners", doc: "runners:\n  a: {type: cli-tool, command: x, default: true}\n  b: {type: cli-tool, command: x, default: true}\n", wantErr: "at most one runner may be marked default: true, found 2 (a, b)"},
		{name: "two default runners", doc: "runners:\n  a: {type: cli-tool, command: x, default: true}\n  b: {type: cli-tool, command: y, default: true}\n", wantErr: "found 2 (a, b)"},
		{name: "empty runners", doc: "runners: {}\n", wantErr: "must declare at least one runner"},
		{name: "bad runner name", doc: "runners:\n  \"a b\": {type: cli-tool, command: x, default: true}\n", wantErr: "runner names must be"},
		{name: "default under run", doc: "run: {type: cli-tool, command: x, default: true}\n", wantErr: "run.default: applies only to a runner under runners:"},
		{name: "default not a boolean", doc: "runners:\n  a: {type: cli-tool, command: x, default: \"yes\"}\n", wantErr: "runners.a.default: must be a boolean, got a string"},
		{name: "missing type", doc: "run: {command: x}\n", wantErr: "run.type: is required"},
		{name: "unknown type", doc: "run: {type: grpah}\n", wantErr: "run.type: must be one of javascript, cli-tool, agent-task"},
		{name: "unknown runner field", doc: "run:\n  type: cli-tool\n  command: x\n  shell: true\n", wantErr: "run.shell: is not a known runner field", wantLine: 4},
		{name: "field of another type", doc: "run: {type: javascript, module: m.mjs, command: x}\n", wantErr: "run.command: applies only to cli-tool runners, not javascript"},
		{name: "allowed_tools on cli-tool", doc: "run: {type: cli-tool, command: x, allowed_tools: [a]}\n", wantErr: "run.allowed_tools: applies only to agent-task runners"},
		{name: "both input mode spellings", doc: "run: {type: cli-tool, command: x, input_mode: args, inputMode: stdin}\n", wantErr: "run.inputMode: is the same field as input_mode"},
		{name: "bad input mode", doc: "run: {type: cli-tool, command: x, input_mode: file}\n", wantErr: "run.input_mode: must be one of args, stdin, none"},
		{name: "missing command", doc: "run: {type: cli-tool}\n", wantErr: "run.command: is required for a cli-tool runner"},
		{name: "command not a string", doc: "run: {type: cli-tool, command: [a]}\n", wantErr: "run.command: must be a string, got a list"},
		{name: "arg not a string", doc: "run: {type: cli-tool, command: x, args: [exit, 7]}\n", wantErr: "run.args[1]: must be a string, got a number"},
		{name: "args not a list", doc: "run: {type: cli-tool, command: x, args: \"a b\"}\n", wantErr: "run.args: must be a list of strings"},
		{name: "undeclared env placeholder", doc: "run: {type: cli-tool, command: x, args: [\"{{env.HOME}}\"]}\n", wantErr: "names a variable the runner does not declare"},
		{name: "RUNX_CWD is not declarable in args", doc: "run: {type: cli-tool, command: x, args: [\"{{env.RUNX_CWD}}\"]}\n", wantErr: "names a variable the runner does not declare"},
		{name: "input placeholder with mode none", doc: "run: {type: cli-tool, command: x, input_mode: none, args: [\"{{a}}\"]}\n", wantErr: "input_mode is none"},
		{name: "cwd with another placeholder", doc: "run: {type: cli-tool, command: x, cwd: \"{{env.HOME}}\"}\n", wantErr: "run.cwd: may hold a placeholder only as the exact value {{env.RUNX_CWD}}"},
		{name: "cwd token with a suffix", doc: "run: {type: cli-tool, command: x, cwd: \"{{env.RUNX_CWD}}/sub\"}\n", wantErr: "run.cwd: may hold a placeholder only"},
		{name: "cli timeout negative", doc: "run: {type: cli-tool, command: x, timeout_seconds: -1}\n", wantErr: "run.timeout_seconds: must be 0 or more seconds, got -1"},
		{name: "cli timeout as string", doc: "run: {type: cli-tool, command: x, timeout_seconds: \"5\"}\n", wantErr: "run.timeout_seconds: must be a number, got a string"},
		{name: "javascript timeout below 1", doc: "run: {type: javascript, module: m.mjs, timeout_seconds: 0.5}\n", wantErr: "must be a whole number of seconds from 1 through 30 for a javascript runner, got 0.5"},
		{name: "javascript timeout above 30", doc: "run: {type: javascript, module: m.mjs, timeout_seconds: 31}\n", wantErr: "must be a whole number of seconds from 1 through 30 for a javascript runner, got 31"},
		{name: "javascript without module", doc: "run: {type: javascript}\n", wantErr: "run.module: is required", module: false},
		{name: "module escaping", doc: "run: {type: javascript, module: ../outside.mjs}\n", wantErr: `run.module: must be a portable relative .mjs or .js path without '.', '..', empty or backslash segments; "../outside.mjs" has a ".." segment`, module: true},
		{name: "module escaping after a descent", doc: "run: {type: javascript, module: a/../../outside.mjs}\n", wantErr: `has a ".." segment`, module: true},
		{name: "absolute module", doc: "run: {type: javascript, module: /etc/m.mjs}\n", wantErr: `"/etc/m.mjs" is absolute`, module: true},
		{name: "backslash module", doc: "run: {type: javascript, module: 'lib\\m.mjs'}\n", wantErr: "holds a backslash", module: true},
		{name: "typescript module", doc: "run: {type: javascript, module: m.ts}\n", wantErr: `"m.ts" does not name a .mjs or .js file`, module: true},
		{name: "env name invalid", doc: "run: {type: cli-tool, command: x, environment: {required: [1BAD]}}\n", wantErr: "run.environment.required[0]: must be a variable name"},
		{name: "env name reserved", doc: "run: {type: cli-tool, command: x, environment: {optional: [RUNX_CWD]}}\n", wantErr: "must not use the RUNX_ prefix"},
		{name: "env name twice", doc: "run: {type: cli-tool, command: x, environment: {required: [A], optional: [A]}}\n", wantErr: "run.environment.optional[0]: declares \"A\" more than once"},
		{name: "env unknown field", doc: "run: {type: cli-tool, command: x, environment: {secret: [A]}}\n", wantErr: "run.environment.secret: is not a known field"},
		{name: "scopes as one string", doc: "run: {type: cli-tool, command: x, scopes: \"a b\"}\n", wantErr: `run.scopes: must be a list of strings, got a string: scopes are opaque exact strings, so one string is not split into several; write ["a b"] for one scope`},
		{name: "blank scope", doc: "run: {type: cli-tool, command: x, scopes: [a, \"  \"]}\n", wantErr: "run.scopes[1]: must not be empty"},
		{name: "scope not a string", doc: "run: {type: cli-tool, command: x, scopes: [1]}\n", wantErr: "run.scopes[0]: must be a string, got a number"},
		{name: "input type unknown", doc: "run: {type: cli-tool, command: x, inputs: {a: text}}\n", wantErr: `run.inputs.a: must be one of array, boolean, integer, json, number, object, string, got "text"`},
		{name: "input definition with overrides", doc: "input_definitions: {s: {type: string}}\nrun: {type: cli-tool, command: x, inputs: {a: {definition: s, required: true}}}\n", wantErr: "run.inputs.a.definition: is not supported together with other fields"},
		{name: "input unknown field", doc: "run: {type: cli-tool, command: x, inputs: {a: {type: string, enum: [x]}}}\n", wantErr: "run.inputs.a.enum: is not a known field"},
		{name: "input default of wrong type", doc: "run: {type: cli-tool, command: x, inputs: {a: {type: integer, default: 2.5}}}\n", wantErr: "run.inputs.a.default: must match declared type integer: must be an integer, got a fractional number"},
		{name: "unknown input definition", doc: "run: {type: cli-tool, command: x, inputs: {a: {definition: s}}}\n", wantErr: "run.inputs.a.definition: references unknown input_definitions.s"},
		{name: "dotted input name quoted in path", doc: "run: {type: cli-tool, command: x, inputs: {thread.title: {type: bogus}}}\n", wantErr: `run.inputs["thread.title"].type: must be one of`},
		{name: "output type unknown", doc: "run: {type: javascript, module: m.mjs, outputs: {a: blob}}\n", wantErr: "run.outputs.a: must be one of"},
		{name: "pages on cli-tool", doc: "run: {type: cli-tool, command: x, pages: {}}\n", wantErr: "run.pages: applies only to javascript runners"},
		{name: "pages missing path_from", doc: "run: {type: javascript, module: m.mjs, pages: {media_type: application/json, framing: json_array}}\n", wantErr: "run.pages.path_from: is required"},
		{name: "pages bad framing", doc: "run: {type: javascript, module: m.mjs, pages: {path_from: f, media_type: application/json, framing: ndjson}}\n", wantErr: "run.pages.framing: must be json_array"},
		{name: "pages too large", doc: "run: {type: javascript, module: m.mjs, pages: {path_from: f, media_type: application/json, framing: json_array, page_bytes: 4194305}}\n", wantErr: "run.pages.page_bytes: must be from 1 through 4194304"},
		{name: "pages path_from undeclared", doc: "run: {type: javascript, module: m.mjs, inputs: {g: string}, pages: {path_from: f, media_type: application/json, framing: json_array}}\n", wantErr: "names input \"f\", which the runner does not declare"},
		{name: "pages path_from not a string", doc: "run: {type: javascript, module: m.mjs, inputs: {f: integer}, pages: {path_from: f, media_type: application/json, framing: json_array}}\n", wantErr: "a path input must be a string"},
		{name: "pages same scope", doc: "run: {type: javascript, module: m.mjs, pages: {path_from: f, path_scope_from: f, media_type: application/json, framing: json_array}}\n", wantErr: "must name a different input"},
		{name: "alias", doc: "x: &a {type: cli-tool, command: x}\nrun: *a\n", wantErr: "x: is not a known field"},
		{name: "alias in runner", doc: "run: {type: cli-tool, command: &c x, args: [*c]}\n", wantErr: "anchors and aliases are not allowed"},
		{name: "duplicate runner field", doc: "run:\n  type: cli-tool\n  command: x\n  command: y\n", wantErr: "run.command: is given more than once", wantLine: 4},
		{name: "malformed YAML", doc: "run: {type: cli-tool\n", wantErr: "must be well-formed YAML"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRunnerManifest([]byte(tc.doc))
			if err == nil {
				t.Fatalf("want error containing %q, got %+v", tc.wantErr, got)
			}
			if !strings.HasPrefix(err.Error(), RunnerFile) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q: want %s and %q", err, RunnerFile, tc.wantErr)
			}
			if !errors.Is(err, ErrAdmission) {
				t.Fatalf("error %q does not match ErrAdmission", err)
			}
			if errors.Is(err, ErrModuleRefused) != tc.module {
				t.Fatalf("error %q: matches ErrModuleRefused = %v, want %v", err, !tc.module, tc.module)
			}
			var ae *AdmissionError
			if tc.wantLine != 0 && (!errors.As(err, &ae) || ae.Line != tc.wantLine) {
				t.Fatalf("error %q: want line %d", err, tc.wantLine)
			}
		})
	}
}

func TestParseToolManifest(t *testing.T) {
	good := `{"name": "git.log", "description": "Shows history.", "runner": {"type": "javascript", "module": "index.mjs", "inputs": {"n": "integer"}}}`
	tool, err := ParseToolManifest("git", "log", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if tool.Name != "git.log" || tool.Dir != "tools/git/log" || tool.Runner.Module != "tools/git/log/index.mjs" ||
		tool.Runner.Base != "tools/git/log" || tool.Runner.Name != "git.log" || tool.Description != "Shows history." {
		t.Fatalf("tool = %+v runner = %+v", tool, tool.Runner)
	}

	runx := `{"schema": "runx.tool.manifest.v1", "name": "git.log", "version": "2.0.0", "description": "d",
		"source": {"type": "cli-tool", "command": "git", "args": ["log"]}, "scopes": ["repo read", "repo read"], "mutating": true}`
	tool, err = ParseToolManifest("git", "log", []byte(runx))
	if err != nil {
		t.Fatal(err)
	}
	if tool.Version != "2.0.0" || tool.RunnerField != "source" || tool.Runner.Command != "git" || tool.Runner.Base != "tools/git/log" ||
		!slices.Equal(tool.Runner.Scopes, []string{"repo read", "repo read"}) || tool.Runner.Mutating == nil || !*tool.Runner.Mutating {
		t.Fatalf("runx form: tool = %+v runner = %+v", tool, tool.Runner)
	}

	refusals := []struct {
		name, ns, tool, doc, wantErr string
	}{
		{"name mismatch", "git", "log", `{"name": "git.diff", "runner": {"type": "cli-tool", "command": "git"}}`, `name: must be "git.log" to match the path tools/git/log, got "git.diff"`},
		{"name missing", "git", "log", `{"runner": {"type": "cli-tool", "command": "git"}}`, "name: is required"},
		{"runner missing", "git", "log", `{"name": "git.log"}`, "runner: is required"},
		{"agent-task refused", "git", "log", `{"name": "git.log", "runner": {"type": "agent-task"}}`, "runner.type: must be one of javascript, cli-tool"},
		{"unknown field", "git", "log", `{"name": "git.log", "version": 2, "runner": {"type": "cli-tool", "command": "git"}}`, "version: is not a known field"},
		{"module escaping through the tool folder", "git", "log", `{"name": "git.log", "runner": {"type": "javascript", "module": "../../../../x.mjs"}}`, `runner.module: must be a portable relative .mjs or .js path without '.', '..', empty or backslash segments; "../../../../x.mjs" has a ".." segment`},
		{"not JSON", "git", "log", "name: git.log\n", "must be well-formed JSON"},
		{"not an object", "git", "log", `[1]`, "must be a mapping"},
		{"dotted namespace folder", "g.it", "log", `{}`, "a tool namespace folder must be named"},
		{"duplicate key", "git", "log", `{"name": "git.log", "name": "git.log"}`, "name: is given more than once"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseToolManifest(tc.ns, tc.tool, []byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrAdmission) {
				t.Fatalf("error %v: want %q", err, tc.wantErr)
			}
			if tc.ns == "git" && !strings.HasPrefix(err.Error(), "tools/git/log/manifest.json") {
				t.Fatalf("error %q does not name the manifest file", err)
			}
		})
	}
}

func FuzzParseRunnerManifest(f *testing.F) {
	f.Add([]byte("run:\n  type: javascript\n  module: m.mjs\n  export: run\n  timeout_seconds: 3\n"))
	f.Add([]byte("runners:\n  a: {type: cli-tool, command: x, default: true, args: [\"{{a}}\", \"{{env.B}}\"], environment: {required: [B]}}\n  b: {type: agent-task, allowed_tools: x y}\n"))
	f.Add([]byte("run: {type: cli-tool, command: x, inputs: {a: {type: object, default: {k: [1, 2]}}}, cwd: \"{{env.RUNX_CWD}}\"}\n"))
	f.Add([]byte("run: {type: javascript, module: a.mjs, pages: {path_from: f, media_type: application/json, framing: json_array, page_bytes: 10}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		runners, err := ParseRunnerManifest(data)
		if err != nil {
			if !errors.Is(err, ErrAdmission) || !strings.HasPrefix(err.Error(), RunnerFile) {
				t.Fatalf("unexpected error form: %v", err)
			}
			return
		}
		defaults := 0
		for _, r := range runners {
			if r.Default {
				defaults++
			}
			switch r.Type {
			case TypeJavaScript:
				if r.Module == "" || strings.HasPrefix(r.Module, "..") || strings.HasPrefix(r.Module, "/") {
					t.Fatalf("admitted module %q", r.Module)
				}
				if r.Timeout < MinJavaScriptTimeout || r.Timeout > MaxJavaScriptTimeout {
					t.Fatalf("admitted javascript timeout %v", r.Timeout)
				}
			case TypeCLITool:
				if r.Command == "" || r.Timeout <= 0 {
					t.Fatalf("admitted cli-tool %+v", r)
				}
				for _, a := range r.Args {
					if _, err := ParseTemplate(a); err != nil {
						t.Fatalf("admitted bad template %q: %v", a, err)
					}
				}
			case TypeAgentTask:
			default:
				t.Fatalf("admitted type %q", r.Type)
			}
			for _, d := range r.Inputs {
				if d.Default != nil && CheckType(d.Type, d.Default) != nil {
					t.Fatalf("admitted default %s of type %s", d.Default, d.Type)
				}
			}
		}
		if defaults != 1 {
			t.Fatalf("admitted %d default runners", defaults)
		}
	})
}

func FuzzParseToolManifest(f *testing.F) {
	f.Add("git", "log", []byte(`{"name": "git.log", "description": "d", "runner": {"type": "cli-tool", "command": "git", "args": ["log", "{{n}}"]}}`))
	f.Add("ns", "t", []byte(`{"name": "ns.t", "runner": {"type": "javascript", "module": "../t/index.mjs"}}`))
	f.Add("ns", "t", []byte(`{"name": "ns.t", "runner": {"type": "javascript", "module": "../../../lib/shared.mjs"}}`))
	f.Fuzz(func(t *testing.T, ns, tool string, data []byte) {
		got, err := ParseToolManifest(ns, tool, data)
		if err != nil {
			if !errors.Is(err, ErrAdmission) {
				t.Fatalf("unexpected error form: %v", err)
			}
			return
		}
		if got.Name != ns+"."+tool || got.Runner == nil || got.Runner.Default {
			t.Fatalf("admitted %+v", got)
		}
		if m := got.Runner.Module; got.Runner.Type == TypeJavaScript && (m == ".." || strings.HasPrefix(m, "../") || strings.HasPrefix(m, "/")) {
			t.Fatalf("admitted module %q outside the package", m)
		}
	})
}

// withoutLocations clears what parsing records of where fields were
// written (TestModuleLocations checks it), for comparing the rest.
func withoutLocations(runners []*Runner) []*Runner {
	out := make([]*Runner, len(runners))
	for i, r := range runners {
		c := *r
		c.ModuleAt, c.ExportAt = Location{}, Location{}
		if c.Inputs != nil {
			c.Inputs = slices.Clone(c.Inputs)
			for j := range c.Inputs {
				c.Inputs[j].line = 0
			}
		}
		out[i] = &c
	}
	return out
}
