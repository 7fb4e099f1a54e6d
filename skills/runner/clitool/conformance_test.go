package clitool

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/libos/libos/skills/skillpkg"
)

// probeHost is the host environment the conformance runs see: the probe on
// PATH, baseline names, declared names, and variables that must not leak.
func probeHost() map[string]string {
	return map[string]string{
		"PATH":                  probeDir + string(os.PathListSeparator) + "/usr/bin:/bin",
		"HOME":                  "/home/probe",
		"LANG":                  "C.UTF-8",
		"TZ":                    "UTC",
		"REGION":                "eu-west-1",
		"TRACE_LABEL":           "trace-7",
		"HTTPS_PROXY":           "http://user:secret@proxy.example:8080",
		"HTTP_PROXY":            "http://proxy.example:3128",
		"AWS_SECRET_ACCESS_KEY": "never-visible",
		"PWD":                   "/host/pwd",
	}
}

type fixtureCall struct {
	// dir is the package; "" means the conformance package (fixtureDir).
	dir       string
	runner    string
	inputs    string
	host      map[string]string
	workspace string
	ctx       context.Context
	// direct runs the tool without a supervisor process, as a program that
	// does not call MaybeRunSupervisor would.
	direct bool
	// inProcess runs the call in a one-shot program with InProcess
	// supervision (see runOneShot); ctx must be nil.
	inProcess bool
}

type fixtureOutcome struct {
	Result
	pkg      *skillpkg.Package
	tempRoot string
}

// runFixture admits the conformance package and runs one runner the way the
// skills facade does: resolve inputs, resolve declared environment, run.
func runFixture(t *testing.T, fc fixtureCall) (fixtureOutcome, error) {
	t.Helper()
	dir := fc.dir
	if dir == "" {
		dir = fixtureDir
	}
	pkg, err := skillpkg.Load(dir)
	if err != nil {
		t.Fatalf("admitting the fixture: %v", err)
	}
	r, err := pkg.Runner(fc.runner)
	if err != nil {
		t.Fatal(err)
	}
	host := fc.host
	if host == nil {
		host = probeHost()
	}
	lookup := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	inputs, err := skillpkg.ResolveInputs(r.Inputs, json.RawMessage(fc.inputs))
	if err != nil {
		return fixtureOutcome{}, err
	}
	env, err := skillpkg.ResolveEnvironment(r.Environment, lookup)
	if err != nil {
		return fixtureOutcome{}, err
	}
	call := CallFor(pkg, r)
	call.Inputs = inputs
	call.Environment = env
	call.LookupEnv = lookup
	call.Workspace = fc.workspace
	if call.Workspace == "" {
		call.Workspace = t.TempDir()
	}
	call.TempDir = t.TempDir()
	ctx := fc.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	var res Result
	switch {
	case fc.inProcess:
		if fc.ctx != nil {
			t.Fatal("a one-shot call cannot take a context")
		}
		res = oneShot(t, call, host)
	case fc.direct:
		res = run(ctx, call, treeDirect)
	default:
		res = run(ctx, call, placeFor(SupervisorProcess))
	}
	return fixtureOutcome{Result: res, pkg: pkg, tempRoot: call.TempDir}, nil
}

type probeReport struct {
	Argv         []string          `json:"argv"`
	Cwd          string            `json:"cwd"`
	Env          map[string]string `json:"env"`
	Stdin        string            `json:"stdin"`
	Files        map[string]string `json:"files"`
	InputDirMode string            `json:"input_dir_mode"`
	FileModes    map[string]string `json:"file_modes"`
}

func decodeReport(t *testing.T, out fixtureOutcome) probeReport {
	t.Helper()
	if out.Err != nil {
		t.Fatalf("call failed: %v (stderr %q)", out.Err, out.Stderr.Retained)
	}
	var rep probeReport
	if err := json.Unmarshal(out.Output, &rep); err != nil {
		t.Fatalf("output is not a probe report: %v: %s", err, out.Output)
	}
	return rep
}

func assertTempRootEmpty(t *testing.T, root string) {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("the private input folder was not removed: %v", entries)
	}
}

func TestConformanceInputsByPathAndInline(t *testing.T) {
	t.Parallel()
	inputs := `{"thread.title": "Quarterly review", "  Padded--Name__x ": {"k": [1, 2]}}`
	out, err := runFixture(t, fixtureCall{inputs: inputs})
	if err != nil {
		t.Fatal(err)
	}
	rep := decodeReport(t, out)

	wantAll := `{"  Padded--Name__x ":{"k":[1,2]},"count":3,"thread.title":"Quarterly review"}`
	wantEnv := map[string]string{
		"PATH": probeHost()["PATH"], "HOME": "/home/probe", "LANG": "C.UTF-8", "TZ": "UTC",
		"REGION": "eu-west-1", "TRACE_LABEL": "trace-7",
		"RUNX_CWD":                      rep.Env["RUNX_CWD"],
		"RUNX_INPUTS_PATH":              rep.Env["RUNX_INPUTS_PATH"],
		"RUNX_INPUTS_JSON":              wantAll,
		"RUNX_INPUT_THREAD_TITLE":       "Quarterly review",
		"RUNX_INPUT_THREAD_TITLE_PATH":  rep.Env["RUNX_INPUT_THREAD_TITLE_PATH"],
		"RUNX_INPUT_PADDED_NAME_X":      `{"k":[1,2]}`,
		"RUNX_INPUT_PADDED_NAME_X_PATH": rep.Env["RUNX_INPUT_PADDED_NAME_X_PATH"],
		"RUNX_INPUT_COUNT":              "3",
		"RUNX_INPUT_COUNT_PATH":         rep.Env["RUNX_INPUT_COUNT_PATH"],
	}
	if !reflect.DeepEqual(rep.Env, wantEnv) {
		t.Fatalf("child environment:\n%v\nwant exactly\n%v", rep.Env, wantEnv)
	}
	for _, k := range []string{"RUNX_CWD", "RUNX_INPUTS_PATH", "RUNX_INPUT_THREAD_TITLE_PATH", "RUNX_INPUT_PADDED_NAME_X_PATH", "RUNX_INPUT_COUNT_PATH"} {
		if rep.Env[k] == "" {
			t.Fatalf("%s is missing", k)
		}
	}
	wantFiles := map[string]string{
		"RUNX_INPUTS_PATH":              wantAll,
		"RUNX_INPUT_THREAD_TITLE_PATH":  "Quarterly review",
		"RUNX_INPUT_PADDED_NAME_X_PATH": `{"k":[1,2]}`,
		"RUNX_INPUT_COUNT_PATH":         "3",
	}
	if !reflect.DeepEqual(rep.Files, wantFiles) {
		t.Fatalf("input files = %v, want %v", rep.Files, wantFiles)
	}
	if rep.InputDirMode != "0700" {
		t.Fatalf("input folder mode = %s, want 0700", rep.InputDirMode)
	}
	for k, mode := range rep.FileModes {
		if mode != "0600" {
			t.Fatalf("%s file mode = %s, want 0600", k, mode)
		}
	}
	wantArgv := []string{"libos-probe", "report", "--title=Quarterly review", "eu-west-1", "3", "opt="}
	if !reflect.DeepEqual(rep.Argv, wantArgv) {
		t.Fatalf("argv = %q, want %q", rep.Argv, wantArgv)
	}
	if rep.Cwd != out.pkg.Dir || out.Cwd != out.pkg.Dir {
		t.Fatalf("cwd = %s (recorded %s), want the package folder %s", rep.Cwd, out.Cwd, out.pkg.Dir)
	}
	if rep.Stdin != "" {
		t.Fatalf("stdin = %q, want it closed without input", rep.Stdin)
	}
	if !out.Exited || out.ExitCode != 0 || !out.Started {
		t.Fatalf("result = %+v", out.Result)
	}
	if sum := sha256.Sum256(out.Stdout.Retained); sum != out.Stdout.SHA256 || out.Stdout.Bytes != int64(len(out.Stdout.Retained)) {
		t.Fatalf("stdout accounting: %d bytes, digest mismatch %v", out.Stdout.Bytes, sum != out.Stdout.SHA256)
	}
	assertTempRootEmpty(t, out.tempRoot)
}

func TestConformanceLargeInputArrivesByPathOnly(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("0123456789abcdef", 80<<10/16)
	raw, _ := json.Marshal(map[string]string{"thread.title": "t", "big": big})
	out, err := runFixture(t, fixtureCall{inputs: string(raw)})
	if err != nil {
		t.Fatal(err)
	}
	rep := decodeReport(t, out)
	if _, ok := rep.Env["RUNX_INPUT_BIG"]; ok {
		t.Fatal("an 80 KiB value was mirrored inline")
	}
	if _, ok := rep.Env["RUNX_INPUTS_JSON"]; ok {
		t.Fatal("an input object over 48 KiB was mirrored inline")
	}
	if rep.Files["RUNX_INPUT_BIG_PATH"] != big {
		t.Fatalf("RUNX_INPUT_BIG_PATH holds %d bytes, want %d", len(rep.Files["RUNX_INPUT_BIG_PATH"]), len(big))
	}
	var all map[string]any
	if err := json.Unmarshal([]byte(rep.Files["RUNX_INPUTS_PATH"]), &all); err != nil || all["big"] != big {
		t.Fatalf("RUNX_INPUTS_PATH does not hold the complete object: %v", err)
	}
	if rep.Env["RUNX_INPUT_THREAD_TITLE"] != "t" {
		t.Fatal("a small value next to a large one lost its inline mirror")
	}
}

// TestConformanceManyInlineInputsStillStart: 300 inputs of 8,000 bytes
// would mirror 2.4 MB into the environment, past what a process may start
// with; the tool starts with every path and the mirrors that fit
// (MaxStartBytes).
func TestConformanceManyInlineInputsStillStart(t *testing.T) {
	t.Parallel()
	value := strings.Repeat("x", 8000)
	out, err := runFixture(t, fixtureCall{runner: "undeclared", inputs: manyInputs(300, value, nil)})
	if err != nil {
		t.Fatal(err)
	}
	rep := decodeReport(t, out)
	checkManyInputs(t, rep, 300, value)
	if rep.Env["RUNX_INPUT_V00000"] != value {
		t.Fatal("the first input lost its inline mirror")
	}
}

// TestConformanceLargeArgumentsLeaveLessForMirrors: arguments of about 1
// MiB leave the mirrors less room; the tool still starts, with every path.
func TestConformanceLargeArgumentsLeaveLessForMirrors(t *testing.T) {
	t.Parallel()
	doc, value := strings.Repeat("d", 120<<10), strings.Repeat("x", 8000)
	out, err := runFixture(t, fixtureCall{runner: "large-args", inputs: manyInputs(140, value, map[string]any{"doc": doc})})
	if err != nil {
		t.Fatal(err)
	}
	rep := decodeReport(t, out)
	if len(rep.Argv) < 10 || rep.Argv[len(rep.Argv)-1] != doc {
		t.Fatalf("argv of %d entries, want the document nine times", len(rep.Argv))
	}
	checkManyInputs(t, rep, 140, value)
}

// TestConformanceTooManyInputsRefusedBeforeStarting: inputs whose paths
// alone the environment cannot carry are refused, before anything is
// written or started.
func TestConformanceTooManyInputsRefusedBeforeStarting(t *testing.T) {
	t.Parallel()
	out, err := runFixture(t, fixtureCall{runner: "undeclared", inputs: manyInputs(30_000, 1, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out.Err, ErrInvalidRequest) || out.Started || !strings.Contains(out.Err.Error(), "path variables") {
		t.Fatalf("30,000 inputs: started %v, %v; want invalid_request before starting", out.Started, out.Err)
	}
	assertTempRootEmpty(t, out.tempRoot)
}

// manyInputs is a JSON input object of n inputs v00000, v00001, ...
// holding value, and extra's members.
func manyInputs(n int, value any, extra map[string]any) string {
	inputs := map[string]any{}
	for i := range n {
		inputs[fmt.Sprintf("v%05d", i)] = value
	}
	maps.Copy(inputs, extra)
	raw, _ := json.Marshal(inputs)
	return string(raw)
}

// checkManyInputs checks that each of n inputs of manyInputs arrived by
// path, and that the mirrors stopped before the last.
func checkManyInputs(t *testing.T, rep probeReport, n int, value string) {
	t.Helper()
	for i := range n {
		key := fmt.Sprintf("RUNX_INPUT_V%05d", i)
		if rep.Files[key+"_PATH"] != value {
			t.Fatalf("%s_PATH does not hold the value", key)
		}
	}
	if _, ok := rep.Env[fmt.Sprintf("RUNX_INPUT_V%05d", n-1)]; ok {
		t.Fatal("every input was mirrored inline")
	}
}

func TestConformanceStdinMode(t *testing.T) {
	t.Parallel()
	out, err := runFixture(t, fixtureCall{runner: "stdin", inputs: `{"b": [true], "a": "x"}`})
	if err != nil {
		t.Fatal(err)
	}
	rep := decodeReport(t, out)
	if rep.Stdin != `{"a":"x","b":[true]}` || rep.Env["RUNX_INPUTS_JSON"] != rep.Stdin {
		t.Fatalf("stdin = %q, RUNX_INPUTS_JSON = %q", rep.Stdin, rep.Env["RUNX_INPUTS_JSON"])
	}
}

func TestConformanceStdinModeWithLargeInput(t *testing.T) {
	t.Parallel()
	// Larger than a pipe buffer: the writer must not deadlock against the
	// drains.
	big := strings.Repeat("y", 1<<20)
	out, err := runFixture(t, fixtureCall{runner: "stdin", inputs: `{"v": "` + big + `"}`})
	if err != nil {
		t.Fatal(err)
	}
	rep := decodeReport(t, out)
	if rep.Stdin != `{"v":"`+big+`"}` {
		t.Fatalf("stdin holds %d bytes", len(rep.Stdin))
	}
}

func TestConformanceCwd(t *testing.T) {
	t.Parallel()
	out, err := runFixture(t, fixtureCall{runner: "relative-cwd"})
	if err != nil {
		t.Fatal(err)
	}
	rep := decodeReport(t, out)
	if want := filepath.Join(out.pkg.Dir, "sub"); rep.Cwd != want || out.Cwd != want {
		t.Fatalf("relative cwd = %s (recorded %s), want %s", rep.Cwd, out.Cwd, want)
	}

	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out, err = runFixture(t, fixtureCall{runner: "workspace-cwd", workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	rep = decodeReport(t, out)
	if rep.Cwd != ws || rep.Env["RUNX_CWD"] != ws {
		t.Fatalf("workspace cwd = %s, RUNX_CWD = %s, want %s", rep.Cwd, rep.Env["RUNX_CWD"], ws)
	}
}

func TestConformanceProxyVariables(t *testing.T) {
	t.Parallel()
	out, err := runFixture(t, fixtureCall{runner: "proxy"})
	if err != nil {
		t.Fatal(err)
	}
	rep := decodeReport(t, out)
	if _, ok := rep.Env["HTTPS_PROXY"]; ok {
		t.Fatal("the undeclared HTTPS_PROXY reached the process")
	}
	if rep.Env["HTTP_PROXY"] != "http://proxy.example:3128" {
		t.Fatalf("the declared HTTP_PROXY = %q", rep.Env["HTTP_PROXY"])
	}
	for _, leaked := range []string{"AWS_SECRET_ACCESS_KEY", "PWD", "REGION"} {
		if _, ok := rep.Env[leaked]; ok {
			t.Fatalf("undeclared %s reached the process", leaked)
		}
	}
}

func TestConformanceStdoutSizes(t *testing.T) {
	t.Parallel()
	t.Run("2 MiB intact", func(t *testing.T) {
		t.Parallel()
		out, err := runFixture(t, fixtureCall{runner: "emit", inputs: `{"stream": "stdout", "bytes": 2097152, "text": "abc"}`})
		if err != nil {
			t.Fatal(err)
		}
		if out.Err != nil {
			t.Fatal(out.Err)
		}
		want := strings.Repeat("abc", 2<<20/3+1)[:2<<20]
		var got string
		if err := json.Unmarshal(out.Output, &got); err != nil || got != want {
			t.Fatalf("output is %d chars (%v), want the 2 MiB text", len(got), err)
		}
		if out.Stdout.Bytes != 2<<20 || out.Stdout.Truncated || out.Stdout.SHA256 != sha256.Sum256([]byte(want)) {
			t.Fatalf("stdout = %d bytes truncated=%v", out.Stdout.Bytes, out.Stdout.Truncated)
		}
	})
	t.Run("9 MiB rejected but counted and hashed", func(t *testing.T) {
		t.Parallel()
		out, err := runFixture(t, fixtureCall{runner: "emit", inputs: `{"stream": "stdout", "bytes": 9437184, "text": "x\u00e9"}`})
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(out.Err, ErrOutputRejected) {
			t.Fatalf("err = %v, want ErrOutputRejected", out.Err)
		}
		full := []byte(strings.Repeat("x\u00e9", 9<<20/3+1)[:9<<20])
		if out.Stdout.Bytes != 9<<20 || out.Stdout.SHA256 != sha256.Sum256(full) || !out.Stdout.Truncated {
			t.Fatalf("stdout = %d bytes, digest match %v", out.Stdout.Bytes, out.Stdout.SHA256 == sha256.Sum256(full))
		}
		// 8 MiB falls inside a 2-byte rune of this pattern.
		if len(out.Stdout.Retained) != MaxRetainedBytes-1 || !utf8.Valid(out.Stdout.Retained) {
			t.Fatalf("retained %d bytes, valid UTF-8 %v", len(out.Stdout.Retained), utf8.Valid(out.Stdout.Retained))
		}
		if out.Output != nil || out.ExitCode != 0 || !out.Exited {
			t.Fatalf("result = exit %d output %d bytes", out.ExitCode, len(out.Output))
		}
	})
	t.Run("9 MiB of stderr is kept as a prefix and does not fail the call", func(t *testing.T) {
		t.Parallel()
		out, err := runFixture(t, fixtureCall{runner: "emit", inputs: `{"stream": "stderr", "bytes": 9437184, "text": "\u20ac"}`})
		if err != nil {
			t.Fatal(err)
		}
		if out.Err != nil {
			t.Fatal(out.Err)
		}
		if !out.Stderr.Truncated || out.Stderr.Bytes != 9<<20 || !utf8.Valid(out.Stderr.Retained) || len(out.Stderr.Retained) > MaxRetainedBytes {
			t.Fatalf("stderr = %d bytes retained of %d, valid %v", len(out.Stderr.Retained), out.Stderr.Bytes, utf8.Valid(out.Stderr.Retained))
		}
		if string(out.Output) != `""` {
			t.Fatalf("output = %s", out.Output)
		}
	})
}

func TestConformanceNonZeroExitKeepsStderr(t *testing.T) {
	t.Parallel()
	out, err := runFixture(t, fixtureCall{runner: "fail", inputs: `{"message": "disk on fire"}`})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out.Err, ErrExitStatus) || !strings.Contains(out.Err.Error(), "exited with code 7") {
		t.Fatalf("err = %v", out.Err)
	}
	if !out.Exited || out.ExitCode != 7 || string(out.Stderr.Retained) != "disk on fire" || string(out.Output) != `"partial"` {
		t.Fatalf("result = exit %d stderr %q output %s", out.ExitCode, out.Stderr.Retained, out.Output)
	}
}

func TestConformanceMissingCommand(t *testing.T) {
	t.Parallel()
	out, err := runFixture(t, fixtureCall{runner: "missing-command"})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out.Err, ErrSpawn) || out.Started || !strings.Contains(out.Err.Error(), "libos-no-such-command") {
		t.Fatalf("result = %+v", out.Result)
	}
	assertTempRootEmpty(t, out.tempRoot)
}

func TestConformanceMissingCwdIsASpawnFailure(t *testing.T) {
	t.Parallel()
	pkg, err := skillpkg.Load(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := pkg.Runner("undeclared")
	call := CallFor(pkg, r)
	call.Cwd = filepath.Join(t.TempDir(), "gone")
	call.LookupEnv = func(k string) (string, bool) { v, ok := probeHost()[k]; return v, ok }
	call.TempDir = t.TempDir()
	res := Run(context.Background(), call)
	if !errors.Is(res.Err, ErrSpawn) || res.Started {
		t.Fatalf("result = %+v", res)
	}
	assertTempRootEmpty(t, call.TempDir)
}

func TestConformanceRequiredVariableMissing(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "ran")
	_, err := runFixture(t, fixtureCall{runner: "needs-token", inputs: `{"marker": "` + marker + `"}`})
	if !errors.Is(err, skillpkg.ErrMissingEnvironment) || !strings.Contains(err.Error(), "PROBE_REQUIRED_VALUE") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the process ran although a required variable was missing")
	}
	// With the variable set the same runner runs.
	host := probeHost()
	host["PROBE_REQUIRED_VALUE"] = "present"
	out, err := runFixture(t, fixtureCall{runner: "needs-token", inputs: `{"marker": "` + marker + `"}`, host: host})
	if err != nil || out.Err != nil {
		t.Fatalf("with the variable set: %v %v", err, out.Err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the process did not run with the variable set")
	}
}

func TestConformanceCollidingInputNames(t *testing.T) {
	t.Parallel()
	out, err := runFixture(t, fixtureCall{runner: "undeclared", inputs: `{"a.b": 1, "A_B": 2}`})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out.Err, ErrInvalidRequest) || out.Started || !strings.Contains(out.Err.Error(), "RUNX_INPUT_A_B") {
		t.Fatalf("result = %+v", out.Result)
	}
	assertTempRootEmpty(t, out.tempRoot)
}

// processGone reports whether pid has exited (absent, or a zombie waiting for
// its new parent to reap it).
func processGone(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X')
}

// waitGone polls (for real OS behaviour, with a generous bound) until the
// process recorded in pidFile is gone.
func waitGone(t *testing.T, pidFile string) {
	t.Helper()
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the descendant never started: %v", err)
	}
	pid, err := strconv.Atoi(string(data))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !processGone(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("descendant %d is still running", pid)
		}
	}
}

func TestConformanceTimeoutKillsTheGroup(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "late")
	const delay = 3 * time.Second // past the runner's 2 s timeout
	begin := time.Now()
	out, err := runFixture(t, fixtureCall{runner: "timeout", inputs: `{"marker": "` + marker + `", "delay": "` + delay.String() + `"}`})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out.Err, ErrTimeout) || out.Exited || out.Signal == "" {
		t.Fatalf("result = err %v exited %v signal %q", out.Err, out.Exited, out.Signal)
	}
	if out.Duration < 2*time.Second || out.Duration > 2*time.Second+TerminateGrace+3*time.Second {
		t.Fatalf("duration = %v for a 2 s timeout", out.Duration)
	}
	waitGone(t, marker+".pid")
	// Real time must pass the descendant's delay to show it never writes.
	time.Sleep(time.Until(begin.Add(delay + 500*time.Millisecond)))
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the descendant of a timed-out process wrote its file")
	}
	assertTempRootEmpty(t, out.tempRoot)
}

func TestConformanceTimeoutEscalatesToSIGKILL(t *testing.T) {
	t.Parallel()
	out, err := runFixture(t, fixtureCall{runner: "stubborn"})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out.Err, ErrTimeout) || out.Signal != "killed (9)" {
		t.Fatalf("result = err %v signal %q", out.Err, out.Signal)
	}
	if out.Duration < time.Second+TerminateGrace {
		t.Fatalf("SIGKILL came after %v, before the grace period ended", out.Duration)
	}
	if string(out.Output) != `"ignoring SIGTERM\n"` {
		t.Fatalf("output = %s", out.Output)
	}
}

func TestConformanceDescendantsAfterNormalExitAreKilled(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "late")
	const delay = time.Second
	begin := time.Now()
	out, err := runFixture(t, fixtureCall{runner: "orphan", inputs: `{"marker": "` + marker + `", "delay": "` + delay.String() + `"}`})
	if err != nil {
		t.Fatal(err)
	}
	if out.Err != nil || string(out.Output) != `{"orphaned":true}` {
		t.Fatalf("result = err %v output %s", out.Err, out.Output)
	}
	if out.Duration >= delay {
		t.Fatalf("the call waited %v for the descendant instead of killing it", out.Duration)
	}
	waitGone(t, marker+".pid")
	time.Sleep(time.Until(begin.Add(delay + 500*time.Millisecond)))
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a descendant left behind after a normal exit wrote its file")
	}
}

func TestConformanceAbort(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	marker := filepath.Join(t.TempDir(), "late")
	done := make(chan fixtureOutcome, 1)
	go func() {
		out, _ := runFixture(t, fixtureCall{runner: "timeout", ctx: ctx, inputs: `{"marker": "` + marker + `", "delay": "1h"}`})
		done <- out
	}()
	// Cancel once the process group demonstrably exists.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(marker + ".pid"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process never started")
		}
	}
	cancel()
	out := <-done
	if !errors.Is(out.Err, ErrAborted) || errors.Is(out.Err, ErrTimeout) {
		t.Fatalf("err = %v", out.Err)
	}
	waitGone(t, marker+".pid")

	already, stop := context.WithCancel(context.Background())
	stop()
	out, _ = runFixture(t, fixtureCall{runner: "undeclared", ctx: already})
	if !errors.Is(out.Err, ErrAborted) || out.Started {
		t.Fatalf("a call with a done context = %+v", out.Result)
	}
}

func TestConformanceBundledToolCommandResolvesFromItsFolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{
		"SKILL.md":                      "---\nname: bundled\n---\n",
		"tools/probe/run/manifest.json": `{"name": "probe.run", "runner": {"type": "cli-tool", "command": "./bin/libos-probe", "args": ["report"]}}`,
	}
	for rel, content := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "tools/probe/run/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(probeDir, "libos-probe"), filepath.Join(dir, "tools/probe/run/bin/libos-probe")); err != nil {
		t.Fatal(err)
	}
	pkg, err := skillpkg.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := pkg.Tool("probe.run")
	call := CallFor(pkg, tool.Runner)
	call.LookupEnv = func(string) (string, bool) { return "", false }
	res := Run(context.Background(), call)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	var rep probeReport
	if err := json.Unmarshal(res.Output, &rep); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(pkg.Dir, "tools/probe/run"); rep.Cwd != want {
		t.Fatalf("cwd = %s, want the tool's folder %s", rep.Cwd, want)
	}
	keys := make([]string, 0, len(rep.Env))
	for k := range rep.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if !reflect.DeepEqual(keys, []string{"RUNX_CWD", "RUNX_INPUTS_JSON", "RUNX_INPUTS_PATH"}) {
		t.Fatalf("environment with an empty host = %v", keys)
	}
}

func TestConformanceDefaultInputFolderIsRemoved(t *testing.T) {
	t.Parallel()
	pkg, err := skillpkg.Load(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := pkg.Runner("undeclared")
	call := CallFor(pkg, r)
	call.Inputs = map[string]json.RawMessage{"x": json.RawMessage(`"y"`)}
	call.LookupEnv = func(k string) (string, bool) { v, ok := probeHost()[k]; return v, ok }
	res := Run(context.Background(), call)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	var rep probeReport
	if err := json.Unmarshal(res.Output, &rep); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(rep.Env["RUNX_INPUTS_PATH"])
	if rep.InputDirMode != "0700" || !strings.HasPrefix(filepath.Base(dir), "libos-skill-") {
		t.Fatalf("input folder %s mode %s", dir, rep.InputDirMode)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("input folder %s survived the call: %v", dir, err)
	}
}

func TestConformanceDescendantOutsideTheGroupIsKilled(t *testing.T) {
	t.Parallel()
	requireSupervisor(t)
	marker := filepath.Join(t.TempDir(), "late")
	out, err := runFixture(t, fixtureCall{runner: "escape", inputs: `{"marker": "` + marker + `", "delay": "1h"}`})
	if err != nil {
		t.Fatal(err)
	}
	// The descendant held stdout open; ending it completes the output.
	if out.Err != nil || string(out.Output) != `{"escaped":true}` {
		t.Fatalf("result = err %v output %s", out.Err, out.Output)
	}
	if out.Duration > 3*time.Second {
		t.Fatalf("the call took %v; an escaped descendant held it", out.Duration)
	}
	assertGoneNow(t, marker+".pid")
}

func TestConformanceDirectCallsTrackOnlyTheGroup(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "late")
	out, err := runFixture(t, fixtureCall{runner: "escape", direct: true, inputs: `{"marker": "` + marker + `", "delay": "1h"}`})
	if err != nil {
		t.Fatal(err)
	}
	// Without a supervisor the escaped descendant is beyond the group kill;
	// clean it up here.
	if data, err := os.ReadFile(marker + ".pid"); err == nil {
		if pid, err := strconv.Atoi(string(data)); err == nil {
			if p, err := os.FindProcess(pid); err == nil {
				p.Kill()
			}
		}
	}
	if !errors.Is(out.Err, ErrOutputRejected) || !strings.Contains(out.Err.Error(), "held open") {
		t.Fatalf("err = %v", out.Err)
	}
	if out.Duration > drainGrace+3*time.Second {
		t.Fatalf("the call took %v; an escaped descendant held it", out.Duration)
	}
	if !out.Exited || out.ExitCode != 0 || string(out.Stdout.Retained) != "{\"escaped\":true}\n" {
		t.Fatalf("result = exit %d stdout %q", out.ExitCode, out.Stdout.Retained)
	}

	// The rest of the contract holds without a supervisor.
	rep := decodeReport(t, mustRun(t, fixtureCall{runner: "undeclared", direct: true}))
	if rep.Cwd == "" || rep.Env["RUNX_INPUTS_PATH"] == "" {
		t.Fatalf("report = %+v", rep)
	}
	late := filepath.Join(t.TempDir(), "late")
	timedOut := mustRun(t, fixtureCall{runner: "timeout", direct: true, inputs: `{"marker": "` + late + `", "delay": "1h"}`})
	if !errors.Is(timedOut.Err, ErrTimeout) || timedOut.Signal == "" {
		t.Fatalf("timeout = err %v signal %q", timedOut.Err, timedOut.Signal)
	}
	waitGone(t, late+".pid")
}

func mustRun(t *testing.T, fc fixtureCall) fixtureOutcome {
	t.Helper()
	out, err := runFixture(t, fc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// requireSupervisor fails a test of supervisor behaviour when calls would
// not run under one (this test binary calls MaybeRunSupervisor first).
func requireSupervisor(t *testing.T) {
	t.Helper()
	if !supervised() {
		t.Fatal("cli-tool calls do not run under a supervisor on this system")
	}
}

// assertGoneNow fails unless the process recorded in pidFile is gone when
// the call has returned: the supervisor kills and reaps every descendant
// before it reports, so no waiting is due. A zombie would mean it was not
// reaped.
func assertGoneNow(t *testing.T, pidFile string) {
	t.Helper()
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the descendant never recorded its pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		t.Fatalf("descendant %d outlived the call: %s", pid, stat)
	}
}

// setsidFixture is the shell-script package whose descendant calls setsid.
const setsidFixture = "../../../testdata/skills/cli/setsid-escape"

func TestConformanceSetsidDescendantIsKilled(t *testing.T) {
	t.Parallel()
	requireSupervisor(t)
	t.Run("after a normal exit", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(t.TempDir(), "descendant.pid")
		out := mustRun(t, fixtureCall{dir: setsidFixture, runner: "exit", inputs: `{"pid_file": "` + pidFile + `"}`})
		if out.Err != nil || !out.Exited || out.ExitCode != 0 || string(out.Output) != `{"escaped":true}` {
			t.Fatalf("result = err %v exit %d output %s stderr %q", out.Err, out.ExitCode, out.Output, out.Stderr.Retained)
		}
		if out.Duration > 3*time.Second {
			t.Fatalf("the call took %v; the descendant held it", out.Duration)
		}
		assertGoneNow(t, pidFile)
	})
	t.Run("after a timeout", func(t *testing.T) {
		t.Parallel()
		pidFile := filepath.Join(t.TempDir(), "descendant.pid")
		out := mustRun(t, fixtureCall{dir: setsidFixture, runner: "hang", inputs: `{"pid_file": "` + pidFile + `"}`})
		if !errors.Is(out.Err, ErrTimeout) || out.Exited || out.Signal == "" {
			t.Fatalf("result = err %v exited %v signal %q stderr %q", out.Err, out.Exited, out.Signal, out.Stderr.Retained)
		}
		if out.Duration > 3*time.Second+TerminateGrace+3*time.Second {
			t.Fatalf("duration = %v for a 3 s timeout", out.Duration)
		}
		assertGoneNow(t, pidFile)
	})
}

func TestConformanceCredentialVariablesAreRefused(t *testing.T) {
	t.Parallel()
	pkg, err := skillpkg.Load(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := pkg.Runner("undeclared")
	// Calls built by hand, as if admission had been bypassed.
	for name, mutate := range map[string]func(*Call){
		"declared provider key": func(c *Call) {
			c.Declared = []string{"REGION", "OPENAI_API_KEY"}
			c.Environment = map[string]string{"REGION": "eu-west-1", "OPENAI_API_KEY": "sk-host-key"}
		},
		"undeclared value":    func(c *Call) { c.Environment = map[string]string{"Deploy_Token": "t"} },
		"declared but absent": func(c *Call) { c.Declared = []string{"DB_PASSWORD"} },
	} {
		t.Run(name, func(t *testing.T) {
			call := CallFor(pkg, r)
			mutate(&call)
			call.LookupEnv = func(k string) (string, bool) { v, ok := probeHost()[k]; return v, ok }
			call.TempDir = t.TempDir()
			res := Run(context.Background(), call)
			if !errors.Is(res.Err, ErrInvalidRequest) || !errors.Is(res.Err, skillpkg.ErrCredentialEnvironment) || res.Started {
				t.Fatalf("result = %+v", res)
			}
			if strings.Contains(res.Err.Error(), "sk-host-key") {
				t.Fatalf("the error shows the value: %v", res.Err)
			}
			assertTempRootEmpty(t, call.TempDir)
		})
	}
}

func TestConformanceSupervisorChannelsAreNotInherited(t *testing.T) {
	t.Parallel()
	requireSupervisor(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: fds\n---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The shell lists its own descriptors: a supervisor's request and event
	// channels must not be among them.
	manifest := "run:\n  type: cli-tool\n  command: sh\n  args: [\"-c\", \"ls /proc/$$/fd\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "skill.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	// A tool started directly has the standard streams, what the shell opens
	// itself and whatever this test binary inherited without close-on-exec;
	// under a supervisor it must have exactly the same.
	fds := func(direct bool) string {
		out := mustRun(t, fixtureCall{dir: dir, direct: direct})
		if out.Err != nil {
			t.Fatalf("direct %v: %v (stderr %q)", direct, out.Err, out.Stderr.Retained)
		}
		return strings.Join(strings.Fields(string(out.Stdout.Retained)), " ")
	}
	direct, supervised := fds(true), fds(false)
	if !strings.HasPrefix(direct, "0 1 ") || supervised != direct {
		t.Fatalf("descriptors under a supervisor = %q, started directly = %q", supervised, direct)
	}
}

// graceScript is the tool of the grace tests: the shell the runtime starts
// leaves a second shell in its group whose SIGTERM handler takes a while to
// clean up, and writes M once it has. SIGTERM ends the first shell at once.
const graceScript = `sh -c 'trap "echo start > M.start; sleep 0.2; echo term > M; exit 0" TERM; sleep 30 & wait' & wait`

// TestConformanceTimeoutGraceIsTheGroups: after a timeout the rest of the
// group has the grace period too, not only the tool, in whichever place the
// call is supervised: a member's SIGTERM handler that outlives the tool
// finishes its work.
func TestConformanceTimeoutGraceIsTheGroups(t *testing.T) {
	t.Parallel()
	dir := writePackage(t, fmt.Sprintf("run:\n  type: cli-tool\n  command: sh\n  args: [\"-c\", %q]\n  cwd: \"{{env.RUNX_CWD}}\"\n  timeout_seconds: 1\n", graceScript))
	for _, place := range []struct {
		name              string
		direct, inProcess bool
	}{{name: "supervisor process"}, {name: "direct", direct: true}, {name: "in process", inProcess: true}} {
		t.Run(place.name, func(t *testing.T) {
			t.Parallel()
			workspace := t.TempDir()
			out := mustRun(t, fixtureCall{dir: dir, workspace: workspace, direct: place.direct, inProcess: place.inProcess})
			if !errors.Is(out.Err, ErrTimeout) || out.Exited || out.Signal != "terminated (15)" {
				t.Fatalf("result = err %v exited %v signal %q stderr %q", out.Err, out.Exited, out.Signal, out.Stderr.Retained)
			}
			if _, err := os.Stat(filepath.Join(workspace, "M.start")); err != nil {
				t.Fatalf("the group member never got SIGTERM: %v", err)
			}
			if data, err := os.ReadFile(filepath.Join(workspace, "M")); err != nil || string(data) != "term\n" {
				t.Fatalf("the group member was killed within the grace period: M = %q, %v", data, err)
			}
		})
	}
}

// TestConformanceTimeoutKillsAMemberThatOutlivesTheGrace: a group member that
// ignores SIGTERM keeps the call for the whole grace period, however soon the
// tool itself ended, and is then killed.
func TestConformanceTimeoutKillsAMemberThatOutlivesTheGrace(t *testing.T) {
	t.Parallel()
	script := `sh -c 'trap "" TERM; printf %s $$ > member.tmp && mv member.tmp member.pid && exec sleep 30' & wait`
	dir := writePackage(t, fmt.Sprintf("run:\n  type: cli-tool\n  command: sh\n  args: [\"-c\", %q]\n  cwd: \"{{env.RUNX_CWD}}\"\n  timeout_seconds: 1\n", script))
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct %v", direct), func(t *testing.T) {
			t.Parallel()
			workspace := t.TempDir()
			out := mustRun(t, fixtureCall{dir: dir, workspace: workspace, direct: direct})
			if !errors.Is(out.Err, ErrTimeout) || out.Signal != "terminated (15)" {
				t.Fatalf("result = err %v signal %q stderr %q", out.Err, out.Signal, out.Stderr.Retained)
			}
			if out.Duration < time.Second+TerminateGrace {
				t.Fatalf("the member was killed after %v, before the grace period ended", out.Duration)
			}
			// The group's SIGKILL precedes the result; only its reap by
			// whoever inherited it may lag.
			waitGone(t, filepath.Join(workspace, "member.pid"))
		})
	}
}
