package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libos/libos/skills/runner/clitool"
	"github.com/libos/libos/skills/runner/jsrunner"
	"github.com/libos/libos/skills/skillpkg"
)

var probeDir string

const fixtureDir = "../../testdata/skills/cli/probe-skill"

func TestMain(m *testing.M) {
	jsrunner.MaybeRunWorker()
	dir, err := os.MkdirTemp("", "libos-probe-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	probeDir = dir
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	if msg, err := exec.Command(goTool, "build", "-o", filepath.Join(dir, "libos-probe"), "../../testdata/skills/cli/probe").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the probe: %v\n%s", err, msg)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if shared.pool != nil {
		shared.pool.Close()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

var shared struct {
	once sync.Once
	pool *jsrunner.Pool
	err  error
}

func sharedPool(t *testing.T) *jsrunner.Pool {
	t.Helper()
	shared.once.Do(func() { shared.pool, shared.err = jsrunner.NewPool(jsrunner.PoolOptions{Workers: 1}) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.pool
}

func hostLookup(extra map[string]string) func(string) (string, bool) {
	host := map[string]string{
		"PATH":        probeDir + string(os.PathListSeparator) + "/usr/bin:/bin",
		"REGION":      "eu-west-1",
		"HTTPS_PROXY": "http://user:secret@proxy:8080",
	}
	for k, v := range extra {
		host[k] = v
	}
	return func(k string) (string, bool) { v, ok := host[k]; return v, ok }
}

func loadFixture(t *testing.T) *skillpkg.Package {
	t.Helper()
	pkg, err := skillpkg.Load(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}

// members decodes an envelope's JSON to check which members are present.
func members(t *testing.T, env Envelope) map[string]json.RawMessage {
	t.Helper()
	raw, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// keys lists the envelope members other than metadata (which every run
// carries, tested on its own).
func keys(m map[string]json.RawMessage) string {
	delete(m, "metadata")
	var out []string
	for _, k := range []string{"schema", "status", "output", "exit_code", "stdout_bytes", "stdout_sha256", "stderr", "duration_ms", "error"} {
		if _, ok := m[k]; ok {
			out = append(out, k)
		}
	}
	if len(out) != len(m) {
		return fmt.Sprintf("unexpected members in %v", m)
	}
	return strings.Join(out, ",")
}

func TestCLIToolEnvelopes(t *testing.T) {
	pkg := loadFixture(t)
	ws := t.TempDir()
	tests := []struct {
		name     string
		runner   string
		inputs   string
		extraEnv map[string]string
		status   Status
		code     Code
		members  string
		check    func(t *testing.T, env Envelope)
	}{
		{
			name: "sealed report", runner: "", inputs: `{"thread.title": "T"}`, status: StatusSealed,
			members: "schema,status,output,exit_code,stdout_bytes,stdout_sha256,stderr,duration_ms",
			check: func(t *testing.T, env Envelope) {
				var rep struct {
					Env  map[string]string `json:"env"`
					Argv []string          `json:"argv"`
				}
				if err := json.Unmarshal(env.Output, &rep); err != nil {
					t.Fatal(err)
				}
				if *env.ExitCode != 0 || *env.Stderr != "" || len(env.StdoutSHA256) != 64 || *env.StdoutBytes == 0 {
					t.Fatalf("envelope = %+v", env)
				}
				if rep.Env["RUNX_CWD"] != ws || rep.Env["REGION"] != "eu-west-1" || rep.Env["HTTPS_PROXY"] != "" {
					t.Fatalf("environment = %v", rep.Env)
				}
			},
		},
		{
			name: "malformed inputs JSON", runner: "fail", inputs: `{"message": "bad \xff escape"}`, status: StatusFailure, code: CodeInvalidRequest,
			members: "schema,status,duration_ms,error",
		},
		{
			name: "exit code 7 keeps stderr", runner: "fail", inputs: `{"message": "it broke"}`, status: StatusFailure, code: CodeExecutionFailed,
			members: "schema,status,output,exit_code,stdout_bytes,stdout_sha256,stderr,duration_ms,error",
			check: func(t *testing.T, env Envelope) {
				if *env.ExitCode != 7 || *env.Stderr != "it broke" || string(env.Output) != `"partial"` || *env.StdoutBytes != 7 {
					t.Fatalf("envelope = %+v", env)
				}
			},
		},
		{
			name: "9 MiB stdout", runner: "emit", inputs: `{"stream": "stdout", "bytes": 9437184}`, status: StatusFailure, code: CodeOutputRejected,
			members: "schema,status,exit_code,stdout_bytes,stdout_sha256,stderr,duration_ms,error",
			check: func(t *testing.T, env Envelope) {
				if *env.StdoutBytes != 9<<20 || *env.ExitCode != 0 {
					t.Fatalf("envelope = %+v", env)
				}
			},
		},
		{
			name: "missing command", runner: "missing-command", status: StatusFailure, code: CodeExecutionFailed,
			members: "schema,status,duration_ms,error",
		},
		{
			name: "timeout", runner: "stubborn", status: StatusFailure, code: CodeResourceLimit,
			members: "schema,status,output,stdout_bytes,stdout_sha256,stderr,duration_ms,error",
			check: func(t *testing.T, env Envelope) {
				if !strings.Contains(env.Error.Message, "timed out after 1s") {
					t.Fatalf("message = %q", env.Error.Message)
				}
			},
		},
		{
			name: "colliding input names", runner: "undeclared", inputs: `{"x.y": 1, "X_Y": 2}`, status: StatusFailure, code: CodeInvalidRequest,
			members: "schema,status,duration_ms,error",
		},
		{
			name: "required variable missing", runner: "needs-token", inputs: `{"marker": "/nonexistent/m"}`, status: StatusFailure, code: CodeInvalidRequest,
			members: "schema,status,duration_ms,error",
			check: func(t *testing.T, env Envelope) {
				if !strings.Contains(env.Error.Message, "PROBE_REQUIRED_VALUE") {
					t.Fatalf("message = %q", env.Error.Message)
				}
			},
		},
		{
			name: "undeclared input", runner: "fail", inputs: `{"message": "m", "extra": 1}`, status: StatusFailure, code: CodeInvalidRequest,
			members: "schema,status,duration_ms,error",
		},
		{
			name: "unknown runner", runner: "nope", status: StatusFailure, code: CodeInvalidRequest,
			members: "schema,status,duration_ms,error",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := Run(context.Background(), pkg, tc.runner, json.RawMessage(tc.inputs), RunOptions{Workspace: ws, LookupEnv: hostLookup(tc.extraEnv), TempDir: t.TempDir()})
			if env.Schema != Schema || env.Status != tc.status {
				t.Fatalf("envelope = %+v (error %+v)", env, env.Error)
			}
			if tc.status == StatusFailure && (env.Error == nil || env.Error.Code != tc.code) {
				t.Fatalf("error = %+v, want code %s", env.Error, tc.code)
			}
			if got := keys(members(t, env)); got != tc.members {
				t.Fatalf("members = %s, want %s", got, tc.members)
			}
			if tc.check != nil {
				tc.check(t, env)
			}
		})
	}
}

func TestCLIToolContextEnds(t *testing.T) {
	pkg := loadFixture(t)
	marker := filepath.Join(t.TempDir(), "late")
	inputs := json.RawMessage(`{"marker": "` + marker + `", "delay": "1h"}`)
	opts := RunOptions{Workspace: t.TempDir(), LookupEnv: hostLookup(nil)}

	r, _ := pkg.Runner("timeout")
	long := *r
	long.Timeout = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	env := RunRunner(ctx, pkg, &long, inputs, opts)
	if env.Error == nil || env.Error.Code != CodeResourceLimit {
		t.Fatalf("deadline: %+v", env.Error)
	}

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	env = RunRunner(ctx, pkg, &long, inputs, opts)
	if env.Error == nil || env.Error.Code != CodeExecutionFailed {
		t.Fatalf("cancel: %+v", env.Error)
	}
}

func TestEnvelopeJSONOrder(t *testing.T) {
	code := 0
	n := int64(3)
	stderr := ""
	env := Envelope{Schema: Schema, Status: StatusSealed, Output: json.RawMessage(`{"a":1}`), ExitCode: &code, StdoutBytes: &n, StdoutSHA256: "ab", Stderr: &stderr, DurationMS: 5}
	raw, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"schema":"libos.skill_run.v1","status":"sealed","output":{"a":1},"exit_code":0,"stdout_bytes":3,"stdout_sha256":"ab","stderr":"","duration_ms":5}`
	if string(raw) != want {
		t.Fatalf("envelope JSON = %s\nwant %s", raw, want)
	}
}

func TestRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, content string) {
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("SKILL.md", "---\nname: x\n---\n")
	write("skill.yaml", "run: {type: javascript, module: missing.mjs}\n")
	_, err := skillpkg.Load(dir)
	if env := Refused(err); env.Status != StatusFailure || env.Error.Code != CodeModuleRejected || !strings.Contains(env.Error.Message, "missing.mjs") {
		t.Fatalf("module refusal = %+v", env.Error)
	}
	write("skill.yaml", "run: {type: javascript, module: m.mjs, shell: true}\n")
	_, err = skillpkg.Load(dir)
	if env := Refused(err); env.Error.Code != CodeInvalidRequest || !strings.Contains(env.Error.Message, "run.shell") {
		t.Fatalf("manifest refusal = %+v", env.Error)
	}
}

func TestResolveWorkspace(t *testing.T) {
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	file := filepath.Join(a, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cwd, _ := os.Getwd()
	lookup := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	tests := []struct {
		explicit string
		host     map[string]string
		want     string
		wantErr  string
	}{
		{explicit: a, host: map[string]string{"RUNX_CWD": b, "INIT_CWD": c}, want: a},
		{host: map[string]string{"RUNX_CWD": b, "INIT_CWD": c}, want: b},
		{host: map[string]string{"RUNX_CWD": "", "INIT_CWD": c}, want: c},
		{host: map[string]string{}, want: cwd},
		{explicit: ".", want: cwd},
		{explicit: file, wantErr: "workspace from the workspace option: " + file + " is not a folder"},
		{host: map[string]string{"RUNX_CWD": filepath.Join(a, "gone")}, wantErr: "workspace from RUNX_CWD"},
	}
	for _, tc := range tests {
		got, err := ResolveWorkspace(tc.explicit, lookup(tc.host))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ResolveWorkspace(%q, %v) error = %v, want %q", tc.explicit, tc.host, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ResolveWorkspace(%q, %v) = %q, %v; want %q", tc.explicit, tc.host, got, err, tc.want)
		}
	}
}

func TestWorkspaceFailureIsInvalidRequest(t *testing.T) {
	pkg := loadFixture(t)
	env := Run(context.Background(), pkg, "undeclared", nil, RunOptions{Workspace: filepath.Join(t.TempDir(), "gone"), LookupEnv: hostLookup(nil)})
	if env.Error == nil || env.Error.Code != CodeInvalidRequest || !strings.Contains(env.Error.Message, "workspace") {
		t.Fatalf("envelope = %+v", env.Error)
	}
}

// writePackage creates a javascript skill package.
func writePackage(t *testing.T, files map[string]string) *skillpkg.Package {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pkg, err := skillpkg.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}

func TestJavaScriptRunner(t *testing.T) {
	pkg := writePackage(t, map[string]string{
		"SKILL.md": "---\nname: js\n---\n",
		"skill.yaml": `runners:
  add:
    default: true
    type: javascript
    module: lib/add.mjs
    export: add
    environment: {required: [REGION], optional: [ABSENT]}
    inputs:
      a: {type: number, required: true}
      b: {type: number, default: 10}
  throws:
    type: javascript
    module: lib/add.mjs
    export: boom
  pages:
    type: javascript
    module: lib/count.mjs
    inputs:
      archive: {type: string, required: true}
    pages: {path_from: archive, media_type: application/json, framing: json_array, page_bytes: 16}
  agent:
    type: agent-task
`,
		"lib/add.mjs": `import { label } from "./label.mjs";
export function add(inputs, ctx) {
  return { sum: inputs.a + inputs.b, region: label(ctx.environment.REGION), keys: Object.keys(ctx.environment) };
}
export async function boom() { throw new Error("exploded"); }
`,
		"lib/label.mjs": "export const label = (r) => `region:${r}`;\n",
		"lib/count.mjs": `export default function (inputs) {
  const page = inputs.runx_page;
  const seen = (page.state ? page.state.seen : 0) + page.records.length;
  if (!page.eof) return { runx_page: { state: { seen } } };
  return { seen, pages: page.page_index + 1 };
}
`,
	})
	ws := t.TempDir()
	records := make([]string, 20)
	for i := range records {
		records[i] = fmt.Sprintf(`{"i":%d}`, i)
	}
	if err := os.WriteFile(filepath.Join(ws, "data.json"), []byte("["+strings.Join(records, ",")+"]"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := RunOptions{Workspace: ws, LookupEnv: hostLookup(nil), JavaScript: sharedPool(t)}

	env := Run(context.Background(), pkg, "", json.RawMessage(`{"a": 2}`), opts)
	if env.Status != StatusSealed || string(env.Output) != `{"sum":12,"region":"region:eu-west-1","keys":["REGION"]}` {
		t.Fatalf("add = %+v (%+v)", env, env.Error)
	}
	if got := keys(members(t, env)); got != "schema,status,output,duration_ms" {
		t.Fatalf("javascript envelope members = %s", got)
	}

	// Inputs a caller resolved before the call are the ones the run uses.
	resolved := opts
	resolved.Resolved = map[string]json.RawMessage{"a": json.RawMessage(`5`), "b": json.RawMessage(`1`)}
	env = Run(context.Background(), pkg, "", json.RawMessage(`{"a": 2}`), resolved)
	if env.Status != StatusSealed || !strings.Contains(string(env.Output), `"sum":6`) {
		t.Fatalf("add with resolved inputs = %+v (%+v)", env, env.Error)
	}

	env = Run(context.Background(), pkg, "throws", nil, opts)
	if env.Status != StatusFailure || env.Error.Code != CodeExecutionFailed || !strings.Contains(env.Error.Message, "exploded") || env.Output != nil {
		t.Fatalf("throws = %+v (%+v)", env, env.Error)
	}

	env = Run(context.Background(), pkg, "", json.RawMessage(`{"a": "two"}`), opts)
	if env.Error == nil || env.Error.Code != CodeInvalidRequest {
		t.Fatalf("bad input = %+v", env.Error)
	}

	noRegion := opts
	noRegion.LookupEnv = func(string) (string, bool) { return "", false }
	env = Run(context.Background(), pkg, "", json.RawMessage(`{"a": 2}`), noRegion)
	if env.Error == nil || env.Error.Code != CodeInvalidRequest || !strings.Contains(env.Error.Message, "REGION") {
		t.Fatalf("missing REGION = %+v", env.Error)
	}

	env = Run(context.Background(), pkg, "pages", json.RawMessage(`{"archive": "data.json"}`), opts)
	if env.Status != StatusSealed {
		t.Fatalf("paged run = %+v", env.Error)
	}
	var paged struct{ Seen, Pages int }
	if err := json.Unmarshal(env.Output, &paged); err != nil || paged.Seen != 20 || paged.Pages < 3 {
		t.Fatalf("paged output = %s (%v)", env.Output, err)
	}

	env = Run(context.Background(), pkg, "agent", nil, opts)
	if env.Error == nil || env.Error.Code != CodeInvalidRequest || !strings.Contains(env.Error.Message, "agent-task") {
		t.Fatalf("agent-task = %+v", env.Error)
	}

	// Without a pool the facade starts and stops one for the call.
	ownPool := opts
	ownPool.JavaScript = nil
	env = Run(context.Background(), pkg, "", json.RawMessage(`{"a": 1, "b": 1}`), ownPool)
	if env.Status != StatusSealed || !strings.Contains(string(env.Output), `"sum":2`) {
		t.Fatalf("own pool = %+v (%+v)", env, env.Error)
	}
}

func TestRefusedEnvelopeFromErrorsIs(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &skillpkg.AdmissionError{File: "skill.yaml", Rule: "x"})
	if !errors.Is(err, skillpkg.ErrAdmission) || Refused(err).Error.Code != CodeInvalidRequest {
		t.Fatal("a wrapped admission error is not classified")
	}
}

func TestCredentialEnvironmentNeverReachesARunner(t *testing.T) {
	pkg := loadFixture(t)
	const key = "sk-host-provider-key"
	opts := RunOptions{Workspace: t.TempDir(), LookupEnv: hostLookup(map[string]string{"OPENAI_API_KEY": key}), JavaScript: sharedPool(t)}
	js := writePackage(t, map[string]string{
		"SKILL.md":   "---\nname: js\n---\n",
		"skill.yaml": "run: {type: javascript, module: m.mjs}\n",
		"m.mjs":      "export default (inputs, ctx) => ctx.environment;\n",
	})
	// Runners edited after admission, as if it had been bypassed.
	for _, tc := range []struct {
		pkg    *skillpkg.Package
		runner string
	}{{pkg, "undeclared"}, {js, ""}} {
		r, err := tc.pkg.Runner(tc.runner)
		if err != nil {
			t.Fatal(err)
		}
		bypassed := *r
		bypassed.Environment = skillpkg.Environment{Optional: []string{"OPENAI_API_KEY"}}
		env := RunRunner(context.Background(), tc.pkg, &bypassed, nil, opts)
		raw, _ := json.Marshal(env)
		if env.Error == nil || env.Error.Code != CodeInvalidRequest || !strings.Contains(env.Error.Message, "OPENAI_API_KEY") || strings.Contains(string(raw), key) {
			t.Fatalf("%s runner: envelope = %s", bypassed.Type, raw)
		}
	}
}

// A stderr longer than the retained prefix ends with how much was left out.
func TestTruncatedStderrSaysWhatWasOmitted(t *testing.T) {
	res := clitool.Result{Started: true, Exited: true}
	res.Stderr = clitool.Stream{Retained: []byte("first part"), Bytes: 10 + 5000, Truncated: true}
	env := cliEnvelope(context.Background(), res)
	if env.Stderr == nil || *env.Stderr != "first part\n[5000 bytes of stderr omitted]" {
		t.Fatalf("stderr %q", *env.Stderr)
	}
	res.Stderr = clitool.Stream{Retained: []byte("all of it"), Bytes: 9}
	if env := cliEnvelope(context.Background(), res); *env.Stderr != "all of it" {
		t.Fatalf("whole stderr %q", *env.Stderr)
	}
}
