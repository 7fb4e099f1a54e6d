package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/libos/libos/skills/runner/clitool"
	"github.com/libos/libos/skills/runner/jsrunner"
)

// init gives this test binary main's hook: the in-process "skill run" calls
// below re-execute the binary as a cli-tool supervisor (or javascript
// worker), which must take over before any test machinery runs. They use a
// supervisor process, not the test binary, as the tool's subreaper: it runs
// tests in parallel whose children it must not reap or sweep. The binary's
// own one-shot supervision is tested end to end (TestSkillRunBinary...).
func init() {
	jsrunner.MaybeRunWorker()
	skillRunSupervision = clitool.SupervisorProcess
}

// skillPackage writes a skill package whose cli-tool runners use ordinary
// programs found on the host PATH.
func skillPackage(t *testing.T, manifest string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: cli-test\ndescription: CLI test package.\n---\nManual.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "skill.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const cliManifest = `runners:
  echo-inputs:
    default: true
    type: cli-tool
    command: cat
    input_mode: stdin
  where:
    type: cli-tool
    command: pwd
    cwd: "{{env.RUNX_CWD}}"
  fails:
    type: cli-tool
    command: "false"
  typed:
    type: cli-tool
    command: echo
    args: ["{{n}}"]
    inputs:
      n: {type: integer, required: true}
`

type envelope struct {
	Schema       string          `json:"schema"`
	Status       string          `json:"status"`
	Output       json.RawMessage `json:"output"`
	ExitCode     *int            `json:"exit_code"`
	StdoutBytes  *int64          `json:"stdout_bytes"`
	StdoutSHA256 string          `json:"stdout_sha256"`
	Stderr       *string         `json:"stderr"`
	Error        *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func runSkill(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runSkillCommand(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func decodeEnvelope(t *testing.T, stdout string) envelope {
	t.Helper()
	if strings.Count(stdout, "\n") != 1 || !strings.HasSuffix(stdout, "\n") {
		t.Fatalf("want exactly one line of JSON, got %q", stdout)
	}
	var env envelope
	if err := json.Unmarshal([]byte(stdout), &env); err != nil {
		t.Fatalf("stdout is not an envelope: %v: %q", err, stdout)
	}
	if env.Schema != "libos.skill_run.v1" {
		t.Fatalf("schema = %q", env.Schema)
	}
	return env
}

func TestSkillRunSealedWithFlagsAfterTheFolder(t *testing.T) {
	dir := skillPackage(t, cliManifest)
	ws := t.TempDir()
	inputsFile := filepath.Join(ws, "inputs.json")
	if err := os.WriteFile(inputsFile, []byte(`{"b": [1, 2], "a": "x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runSkill(t, "", "run", dir, "--inputs", inputsFile, "--workspace", ws)
	if code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	env := decodeEnvelope(t, stdout)
	if env.Status != "sealed" || string(env.Output) != `{"a":"x","b":[1,2]}` || *env.ExitCode != 0 || *env.StdoutBytes != 19 || len(env.StdoutSHA256) != 64 || env.Error != nil {
		t.Fatalf("envelope = %s", stdout)
	}
}

func TestSkillRunInputsFromStdinAndRunnerFlagFirst(t *testing.T) {
	dir := skillPackage(t, cliManifest)
	code, stdout, stderr := runSkill(t, `{"n": 41}`, "run", "--runner", "typed", "--inputs", "-", dir)
	if code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if env := decodeEnvelope(t, stdout); string(env.Output) != `41` {
		t.Fatalf("output = %s", env.Output)
	}
}

func TestSkillRunWorkspaceFromEnvironment(t *testing.T) {
	dir := skillPackage(t, cliManifest)
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("RUNX_CWD", ws)
	t.Setenv("INIT_CWD", t.TempDir())
	code, stdout, _ := runSkill(t, "", "run", dir, "--runner", "where")
	if env := decodeEnvelope(t, stdout); code != 0 || string(env.Output) != `"`+ws+`\n"` {
		t.Fatalf("exit %d, output %s, want the RUNX_CWD workspace %s", code, env.Output, ws)
	}
	// --workspace wins over RUNX_CWD.
	other, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, _ = runSkill(t, "", "run", dir, "--runner", "where", "--workspace", other)
	if env := decodeEnvelope(t, stdout); code != 0 || string(env.Output) != `"`+other+`\n"` {
		t.Fatalf("exit %d, output %s, want %s", code, env.Output, other)
	}
}

func TestSkillRunFailures(t *testing.T) {
	dir := skillPackage(t, cliManifest)
	tests := []struct {
		name     string
		stdin    string
		args     []string
		wantCode string
		check    func(t *testing.T, env envelope)
	}{
		{name: "non-zero exit", args: []string{"run", dir, "--runner", "fails"}, wantCode: "execution_failed", check: func(t *testing.T, env envelope) {
			if env.ExitCode == nil || *env.ExitCode != 1 || env.Stderr == nil {
				t.Fatalf("exit_code/stderr missing: %+v", env)
			}
		}},
		{name: "unknown runner", args: []string{"run", dir, "--runner", "nope"}, wantCode: "invalid_request"},
		{name: "inputs of the wrong type", stdin: `{"n": "x"}`, args: []string{"run", dir, "--runner", "typed", "--inputs", "-"}, wantCode: "invalid_request"},
		{name: "inputs not JSON", stdin: `{`, args: []string{"run", dir, "--inputs", "-"}, wantCode: "invalid_request"},
		{name: "inputs file missing", args: []string{"run", dir, "--inputs", filepath.Join(dir, "absent.json")}, wantCode: "invalid_request", check: func(t *testing.T, env envelope) {
			if !strings.Contains(env.Error.Message, "--inputs") {
				t.Fatalf("message = %q", env.Error.Message)
			}
		}},
		{name: "workspace not a folder", args: []string{"run", dir, "--workspace", filepath.Join(dir, "SKILL.md")}, wantCode: "invalid_request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runSkill(t, tc.stdin, tc.args...)
			if code != 1 {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
			}
			env := decodeEnvelope(t, stdout)
			if env.Status != "failure" || env.Error == nil || env.Error.Code != tc.wantCode {
				t.Fatalf("envelope = %s", stdout)
			}
			if tc.check != nil {
				tc.check(t, env)
			}
		})
	}
}

func TestSkillRunRefusedPackagesPrintAnEnvelope(t *testing.T) {
	manifestError := skillPackage(t, "run: {type: cli-tool, command: cat, shell: true}\n")
	code, stdout, _ := runSkill(t, "", "run", manifestError)
	env := decodeEnvelope(t, stdout)
	if code != 1 || env.Status != "failure" || env.Error.Code != "invalid_request" || !strings.Contains(env.Error.Message, "skill.yaml:1: run.shell: is not a known runner field") {
		t.Fatalf("exit %d envelope %s", code, stdout)
	}

	moduleError := skillPackage(t, "run: {type: javascript, module: ../escape.mjs}\n")
	code, stdout, _ = runSkill(t, "", "run", moduleError)
	env = decodeEnvelope(t, stdout)
	if code != 1 || env.Error.Code != "module_rejected" {
		t.Fatalf("exit %d envelope %s", code, stdout)
	}

	code, stdout, _ = runSkill(t, "", "run", filepath.Join(t.TempDir(), "no-package"))
	if env := decodeEnvelope(t, stdout); code != 1 || env.Error.Code != "invalid_request" {
		t.Fatalf("missing folder: exit %d envelope %s", code, stdout)
	}
}

func TestSkillUsageErrors(t *testing.T) {
	dir := skillPackage(t, cliManifest)
	for _, args := range [][]string{
		nil,
		{"launch", dir},
		{"run"},
		{"run", dir, dir},
		{"run", dir, "--bogus"},
		{"run", dir, "--runner"},
		{"check"},
		{"check", dir, "--runner", "x"},
	} {
		code, stdout, stderr := runSkill(t, "", args...)
		if code != 2 || stdout != "" || !(strings.Contains(stderr, "usage:") || strings.Contains(stderr, "--help' for usage")) {
			t.Errorf("args %q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	if code, stdout, _ := runSkill(t, "", "help"); code != 0 || !strings.Contains(stdout, "libos skill run") {
		t.Errorf("help: exit %d", code)
	}
}

func TestSkillCheck(t *testing.T) {
	dir := skillPackage(t, cliManifest)
	code, stdout, stderr := runSkill(t, "", "check", dir)
	if code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	var rep struct {
		Schema  string `json:"schema"`
		Status  string `json:"status"`
		Name    string `json:"name"`
		Runners []struct {
			Name           string  `json:"name"`
			Type           string  `json:"type"`
			Default        bool    `json:"default"`
			InputMode      string  `json:"input_mode"`
			TimeoutSeconds float64 `json:"timeout_seconds"`
			Inputs         []struct {
				Name     string `json:"name"`
				Type     string `json:"type"`
				Required bool   `json:"required"`
			} `json:"inputs"`
		} `json:"runners"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Schema != "libos.skill_check.v1" || rep.Status != "admitted" || rep.Name != "cli-test" || len(rep.Runners) != 4 {
		t.Fatalf("report = %s", stdout)
	}
	first, typed := rep.Runners[0], rep.Runners[3]
	if first.Name != "echo-inputs" || !first.Default || first.InputMode != "stdin" || first.TimeoutSeconds != 60 {
		t.Fatalf("first runner = %+v", first)
	}
	if len(typed.Inputs) != 1 || typed.Inputs[0].Name != "n" || typed.Inputs[0].Type != "integer" || !typed.Inputs[0].Required {
		t.Fatalf("typed runner = %+v", typed)
	}

	refused := skillPackage(t, "runners:\n  a: {type: cli-tool, command: x, default: true}\n  b: {type: cli-tool, command: x, default: true}\n")
	code, stdout, _ = runSkill(t, "", "check", refused)
	if code != 1 || !strings.Contains(stdout, `"status": "refused"`) || !strings.Contains(stdout, "at most one runner may be marked default: true") {
		t.Fatalf("refused check: exit %d, %s", code, stdout)
	}
}

func TestSkillCheckTheConformanceFixture(t *testing.T) {
	code, stdout, stderr := runSkill(t, "", "check", "../../testdata/skills/cli/probe-skill")
	if code != 0 || !strings.Contains(stdout, `"name": "cli-probe"`) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// checkReport decodes what "libos skill check" printed.
func decodeCheck(t *testing.T, stdout string) (status string, code, message string) {
	t.Helper()
	var rep struct {
		Status string `json:"status"`
		Error  *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("stdout is not a check report: %v: %q", err, stdout)
	}
	if rep.Error == nil {
		return rep.Status, "", ""
	}
	return rep.Status, rep.Error.Code, rep.Error.Message
}

func TestSkillCheckRefusesCredentialEnvironment(t *testing.T) {
	const key = "sk-host-provider-key"
	t.Setenv("OPENAI_API_KEY", key)
	for _, tc := range []struct{ manifest, field, variable string }{
		{"runners:\n  deploy:\n    default: true\n    type: cli-tool\n    command: env\n    environment:\n      optional: [REGION, OPENAI_API_KEY]\n",
			"runners.deploy.environment.optional[1]", "OPENAI_API_KEY"},
		{"run:\n  type: cli-tool\n  command: env\n  environment:\n    required: [Registry_Token]\n",
			"run.environment.required[0]", "Registry_Token"},
	} {
		dir := skillPackage(t, tc.manifest)
		code, stdout, stderr := runSkill(t, "", "check", dir)
		status, errCode, message := decodeCheck(t, stdout)
		if code != 1 || status != "refused" || errCode != "invalid_request" {
			t.Fatalf("check: exit %d, stdout %s, stderr %q", code, stdout, stderr)
		}
		for _, part := range []string{tc.field, tc.variable, "credentials never flow through the environment channel"} {
			if !strings.Contains(message, part) {
				t.Fatalf("check message %q does not name %q", message, part)
			}
		}
		// run refuses the package the same way, before anything is spawned.
		code, stdout, _ = runSkill(t, "", "run", dir)
		env := decodeEnvelope(t, stdout)
		if code != 1 || env.Error == nil || env.Error.Message != message || strings.Contains(stdout, key) {
			t.Fatalf("run: exit %d envelope %s", code, stdout)
		}
	}
}

func TestSkillCheckRefusesModulesThatLeaveThePackage(t *testing.T) {
	const fixtures = "../../testdata/skills/js"
	outside, err := filepath.Abs(filepath.Join(fixtures, "outside.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	// A committed symlink out of the tree would be awkward; the symlink case
	// is a temporary copy of its fixture with the link added.
	linked := t.TempDir()
	for _, rel := range []string{"SKILL.md", "skill.yaml", "main.mjs"} {
		data, err := os.ReadFile(filepath.Join(fixtures, "escape-symlink", rel))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(linked, rel), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(linked, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(linked, "lib", "linked.mjs")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, dir, importSpec string }{
		{"parent", filepath.Join(fixtures, "escape-parent"), `import "../../outside.mjs" from lib/util.mjs is refused`},
		{"absolute", filepath.Join(fixtures, "escape-absolute"), `import "/etc/libos-outside.mjs" is refused`},
		{"symlink", linked, `import "./lib/linked.mjs" from ./main.mjs is refused`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runSkill(t, "", "check", tc.dir)
			status, errCode, message := decodeCheck(t, stdout)
			if code != 1 || status != "refused" || errCode != "module_rejected" || !strings.Contains(message, tc.importSpec) {
				t.Fatalf("check: exit %d, stdout %s, stderr %q", code, stdout, stderr)
			}
			// run refuses it with the same error.
			code, stdout, _ = runSkill(t, "", "run", tc.dir)
			env := decodeEnvelope(t, stdout)
			if code != 1 || env.Error == nil || env.Error.Code != errCode || env.Error.Message != message {
				t.Fatalf("run: exit %d envelope %s; check said %s: %s", code, stdout, errCode, message)
			}
		})
	}
}

func TestSkillRunEndsDescendantsThatLeftTheProcessGroup(t *testing.T) {
	for _, runner := range []string{"exit", "hang"} {
		t.Run(runner, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "descendant.pid")
			code, stdout, stderr := runSkill(t, `{"pid_file": "`+pidFile+`"}`, "run", "../../testdata/skills/cli/setsid-escape", "--runner", runner, "--inputs", "-")
			env := decodeEnvelope(t, stdout)
			wantCode := 0
			if runner == "hang" {
				wantCode = 1
				if env.Error == nil || env.Error.Code != "resource_limit" {
					t.Fatalf("envelope %s", stdout)
				}
			}
			if code != wantCode || string(env.Output) != `{"escaped":true}` {
				t.Fatalf("exit %d, stdout %s, stderr %q", code, stdout, stderr)
			}
			data, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			// The supervisor reaps every descendant before the result is
			// sealed, so the process is gone, not merely dying.
			if _, err := os.Stat("/proc/" + strings.TrimSpace(string(data))); err == nil {
				t.Fatalf("descendant %s outlived the call", strings.TrimSpace(string(data)))
			}
		})
	}
}

// skillRunBin runs "libos skill run" in the built binary, which supervises
// its cli-tool itself, and returns the exit code, stdout and the binary's pid.
func skillRunBin(t *testing.T, stdin string, args ...string) (int, string, int) {
	t.Helper()
	cmd := exec.Command(libosBin, append([]string{"skill", "run"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	if errOut.Len() > 0 {
		t.Logf("stderr: %s", errOut.Bytes())
	}
	return cmd.ProcessState.ExitCode(), out.String(), cmd.Process.Pid
}

const oneShotManifest = `runners:
  parent:
    default: true
    type: cli-tool
    command: sh
    args: ["-c", "echo $PPID"]
  fails:
    type: cli-tool
    command: sh
    args: ["-c", "printf partial; echo oops >&2; exit 7"]
  big:
    type: cli-tool
    command: sh
    args: ["-c", "head -c 9437184 /dev/zero"]
`

// TestSkillRunBinarySupervisesInProcess runs the binary's one-shot path: no
// supervisor process stands between it and the tool, and exit codes and
// truncation are reported as under a supervisor process (runSkill, in this
// test binary).
func TestSkillRunBinarySupervisesInProcess(t *testing.T) {
	t.Parallel()
	dir := skillPackage(t, oneShotManifest)
	ws := t.TempDir()

	code, stdout, pid := skillRunBin(t, "", dir, "--workspace", ws)
	env := decodeEnvelope(t, stdout)
	// The tool's stdout, its parent's pid, is a JSON number.
	if code != 0 || string(env.Output) != fmt.Sprint(pid) {
		t.Fatalf("exit %d, envelope %s; the binary is %d", code, stdout, pid)
	}

	for _, r := range []string{"fails", "big"} {
		code, stdout, _ := skillRunBin(t, "", dir, "--runner", r, "--workspace", ws)
		sup, supOut, _ := runSkill(t, "", "run", dir, "--runner", r, "--workspace", ws)
		in, viaSup := decodeEnvelope(t, stdout), decodeEnvelope(t, supOut)
		if code != 1 || sup != code || in.Error == nil || viaSup.Error == nil || *in.Error != *viaSup.Error ||
			!reflect.DeepEqual(in.ExitCode, viaSup.ExitCode) || !reflect.DeepEqual(in.StdoutBytes, viaSup.StdoutBytes) ||
			in.StdoutSHA256 != viaSup.StdoutSHA256 || !reflect.DeepEqual(in.Stderr, viaSup.Stderr) || string(in.Output) != string(viaSup.Output) {
			t.Fatalf("%s: in-process exit %d %s\nsupervisor process exit %d %s", r, code, stdout, sup, supOut)
		}
		switch r {
		case "fails":
			if *in.ExitCode != 7 || in.Error.Code != "execution_failed" || *in.Stderr != "oops\n" {
				t.Fatalf("fails: %s", stdout)
			}
		case "big":
			zeros := sha256.Sum256(make([]byte, 9<<20))
			if *in.StdoutBytes != 9<<20 || in.StdoutSHA256 != hex.EncodeToString(zeros[:]) || in.Error.Code != "output_rejected" {
				t.Fatalf("big: %s", stdout)
			}
		}
	}
}

// TestSkillRunBinaryEndsEscapedDescendants: the binary, as the tool's
// subreaper, kills a grandchild that called setsid, after a normal exit and
// on timeout, before it prints the envelope.
func TestSkillRunBinaryEndsEscapedDescendants(t *testing.T) {
	t.Parallel()
	for _, runner := range []string{"exit", "hang"} {
		t.Run(runner, func(t *testing.T) {
			t.Parallel()
			pidFile := filepath.Join(t.TempDir(), "descendant.pid")
			code, stdout, _ := skillRunBin(t, `{"pid_file": "`+pidFile+`"}`, "../../testdata/skills/cli/setsid-escape", "--runner", runner, "--inputs", "-", "--workspace", t.TempDir())
			env := decodeEnvelope(t, stdout)
			wantCode, wantError := 0, ""
			if runner == "hang" {
				wantCode, wantError = 1, "resource_limit"
			}
			if code != wantCode || (env.Error == nil) != (wantError == "") || (env.Error != nil && env.Error.Code != wantError) || string(env.Output) != `{"escaped":true}` {
				t.Fatalf("exit %d, envelope %s", code, stdout)
			}
			data, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			// Killed and reaped before the envelope was printed: gone, not
			// merely dying and not left to init.
			if stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(data)) + "/stat"); err == nil {
				t.Fatalf("descendant %s outlived the call: %s", strings.TrimSpace(string(data)), stat)
			}
		})
	}
}

// wantInputsRefused runs skill run and wants the failure envelope of a
// refused --inputs, whose message holds every part.
func wantInputsRefused(t *testing.T, stdin string, args []string, parts ...string) {
	t.Helper()
	// A FIFO's open or read would block: the run gets a bounded time.
	type result struct {
		code           int
		stdout, stderr string
	}
	ch := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		code := runSkillCommand(append([]string{"run"}, args...), strings.NewReader(stdin), &out, &errOut)
		ch <- result{code, out.String(), errOut.String()}
	}()
	var r result
	select {
	case r = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("skill run %q: still running after 10 s", args)
	}
	code, stdout, stderr := r.code, r.stdout, r.stderr
	if code != 1 {
		t.Fatalf("exit %d, want 1; stdout %q, stderr %q", code, stdout, stderr)
	}
	env := decodeEnvelope(t, stdout)
	if env.Status != "failure" || env.Error == nil || env.Error.Code != "invalid_request" {
		t.Fatalf("envelope = %s", stdout)
	}
	for _, p := range parts {
		if !strings.Contains(env.Error.Message, p) {
			t.Fatalf("message %q lacks %q", env.Error.Message, p)
		}
	}
}

// TestSkillRunInputsRefusesAnEmptyDocument: an empty or white-space file or
// stdin is no object, not {}: runx's document must decode to exactly one
// JSON object.
func TestSkillRunInputsRefusesAnEmptyDocument(t *testing.T) {
	dir := skillPackage(t, cliManifest)
	ws := t.TempDir()
	for _, body := range []string{"", " \n\t\r\n"} {
		if err := os.WriteFile(filepath.Join(ws, "e.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(ws, "e.json")
		wantInputsRefused(t, "", []string{dir, "--inputs", file, "--workspace", ws}, "--inputs "+file+": ", "exactly one JSON object")
		wantInputsRefused(t, body, []string{dir, "--inputs", "-", "--workspace", ws}, "--inputs - (stdin): ", "exactly one JSON object")
	}
}

// TestSkillRunInputsFileIsContainedInTheWorkspace: a relative --inputs path
// is resolved against the workspace, not the current directory, and the
// file must be a regular file inside it.
func TestSkillRunInputsFileIsContainedInTheWorkspace(t *testing.T) {
	dir := skillPackage(t, cliManifest)
	ws, outside := t.TempDir(), t.TempDir()
	write := func(path, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(ws, "req.json"), `{"from": "workspace"}`)
	write(filepath.Join(ws, "sub", "req.json"), `{"from": "sub"}`)
	write(filepath.Join(outside, "req.json"), `{"from": "outside"}`)
	t.Chdir(outside)

	sealed := func(inputs, want string) {
		t.Helper()
		code, stdout, stderr := runSkill(t, "", "run", dir, "--inputs", inputs, "--workspace", ws)
		if code != 0 {
			t.Fatalf("--inputs %s: exit %d, stdout %q, stderr %q", inputs, code, stdout, stderr)
		}
		if env := decodeEnvelope(t, stdout); string(env.Output) != want {
			t.Fatalf("--inputs %s: output %s, want %s", inputs, env.Output, want)
		}
	}
	sealed("req.json", `{"from":"workspace"}`)
	sealed(filepath.Join(ws, "sub", "req.json"), `{"from":"sub"}`)
	if err := os.Symlink("sub/req.json", filepath.Join(ws, "inner.json")); err != nil {
		t.Fatal(err)
	}
	sealed("inner.json", `{"from":"sub"}`)

	if err := os.Symlink(filepath.Join(outside, "req.json"), filepath.Join(ws, "link.json")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "pipe.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	outsideFile := filepath.Join(outside, "req.json")
	for _, tc := range []struct{ arg, why string }{
		{outsideFile, "the path is outside it"},
		{"../" + filepath.Base(outside) + "/req.json", "escapes"},
		{"link.json", "escapes"},
		{"absent.json", "no such file"},
		{"sub", "it is a folder"},
		{"pipe.json", "it is a named pipe (FIFO)"},
	} {
		wantInputsRefused(t, "", []string{dir, "--inputs", tc.arg, "--workspace", ws}, "--inputs "+tc.arg+": must name a regular file inside the workspace "+ws, tc.why)
	}
}

// TestSkillRunInputsErrorsNameTheSourceAndOffset: a refused document is
// named (the file, or stdin) with the byte offset and the rule it breaks.
func TestSkillRunInputsErrorsNameTheSourceAndOffset(t *testing.T) {
	dir := skillPackage(t, cliManifest)
	ws := t.TempDir()
	for _, tc := range []struct {
		name, body string
		parts      []string
	}{
		{"bom", "\xef\xbb\xbf{\"a\": 1}", []string{"byte offset 0: a UTF-8 byte order mark"}},
		{"syntax", `{"a": 1,}`, []string{"byte offset 8: not JSON: invalid character '}'"}},
		{"latin1", "{\"a\": \"caf\xe9\"}", []string{"byte offset 10: not UTF-8"}},
		{"trailing", `{"a": 1} {"b": 2}`, []string{"byte offset 9: data after the JSON object"}},
		{"truncated", `{"a": 1`, []string{"byte offset 7: the document ends inside its JSON value"}},
		{"array", ` [1]`, []string{"holds an array, not a JSON object"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(ws, tc.name+".json")
			if err := os.WriteFile(file, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			wantInputsRefused(t, "", []string{dir, "--inputs", file, "--workspace", ws}, append([]string{"--inputs " + file + ": "}, tc.parts...)...)
			wantInputsRefused(t, tc.body, []string{dir, "--inputs", "-", "--workspace", ws}, append([]string{"--inputs - (stdin): "}, tc.parts...)...)
		})
	}
}
