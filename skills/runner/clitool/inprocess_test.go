package clitool

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/libos/libos/skills/skillpkg"
)

// oneShotEnv turns this test binary into a program that runs one call with
// InProcess supervision and exits, as "libos skill run" does. The call runs
// in a process of its own because an in-process supervisor reaps and sweeps
// every child of its process: inside this test binary it would take the
// children of the tests running in parallel.
const oneShotEnv = "LIBOS_CLITOOL_TEST_ONE_SHOT"

// oneShotRequest is what the one-shot program reads on stdin (gob, which
// skips Call.LookupEnv).
type oneShotRequest struct {
	Call Call
	Host map[string]string
}

// oneShotReply is what it writes on stdout. Result.Err travels as the index
// of its sentinel in sentinels and its message.
type oneShotReply struct {
	Result  Result
	PID     int
	ErrKind int
	ErrMsg  string
}

var sentinels = []error{ErrInvalidRequest, ErrSpawn, ErrExitStatus, ErrTimeout, ErrAborted, ErrOutputRejected, ErrInternal}

// remoteErr is a one-shot program's error: its message, matching its sentinel.
type remoteErr struct {
	sentinel error
	msg      string
}

func (e *remoteErr) Error() string { return e.msg }
func (e *remoteErr) Unwrap() error { return e.sentinel }

// runOneShot is the one-shot program's main.
func runOneShot() int {
	var req oneShotRequest
	if err := gob.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "one-shot: reading the call:", err)
		return 2
	}
	host := req.Host
	req.Call.LookupEnv = func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	req.Call.Supervision = InProcess
	// As in libos skill run, a termination signal ends the call through its
	// context.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	res := Run(ctx, req.Call)
	reply := oneShotReply{Result: res, PID: os.Getpid(), ErrKind: -1}
	if res.Err != nil {
		reply.ErrMsg = res.Err.Error()
		for i, s := range sentinels {
			if errors.Is(res.Err, s) {
				reply.ErrKind = i
			}
		}
	}
	reply.Result.Err = nil
	if err := gob.NewEncoder(os.Stdout).Encode(reply); err != nil {
		fmt.Fprintln(os.Stderr, "one-shot: writing the result:", err)
		return 2
	}
	return 0
}

// oneShotRun is a started one-shot program.
type oneShotRun struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

func startOneShot(t *testing.T, call Call, host map[string]string) *oneShotRun {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var in bytes.Buffer
	if err := gob.NewEncoder(&in).Encode(oneShotRequest{Call: call, Host: host}); err != nil {
		t.Fatal(err)
	}
	// A race-enabled build would sleep a second at exit.
	race := "atexit_sleep_ms=0"
	if g := os.Getenv("GORACE"); g != "" {
		race = g + " " + race
	}
	r := &oneShotRun{cmd: exec.Command(exe, "-test.run=^$")}
	r.cmd.Env = append(os.Environ(), oneShotEnv+"=1", "GORACE="+race)
	r.cmd.Stdin, r.cmd.Stdout, r.cmd.Stderr = &in, &r.stdout, &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return r
}

// wait returns the call's result and the one-shot program's pid.
func (r *oneShotRun) wait() (Result, int, error) {
	if err := r.cmd.Wait(); err != nil {
		return Result{}, 0, fmt.Errorf("the one-shot program failed: %v\n%s", err, r.stderr.Bytes())
	}
	return r.decode()
}

// decode reads the result of a one-shot program that has exited.
func (r *oneShotRun) decode() (Result, int, error) {
	var reply oneShotReply
	if err := gob.NewDecoder(&r.stdout).Decode(&reply); err != nil {
		return Result{}, 0, fmt.Errorf("decoding the one-shot result: %v\n%s", err, r.stderr.Bytes())
	}
	if reply.ErrKind >= 0 {
		reply.Result.Err = &remoteErr{sentinel: sentinels[reply.ErrKind], msg: reply.ErrMsg}
	} else if reply.ErrMsg != "" {
		reply.Result.Err = errors.New(reply.ErrMsg)
	}
	return reply.Result, reply.PID, nil
}

func (r *oneShotRun) reply(t *testing.T) Result {
	t.Helper()
	res, _, err := r.decode()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (r *oneShotRun) mustWait(t *testing.T) (Result, int) {
	t.Helper()
	res, pid, err := r.wait()
	if err != nil {
		t.Fatal(err)
	}
	return res, pid
}

// oneShot runs call in a one-shot program with InProcess supervision.
func oneShot(t *testing.T, call Call, host map[string]string) Result {
	t.Helper()
	res, _ := startOneShot(t, call, host).mustWait(t)
	return res
}

// sameOutcome fails unless the in-process result reports what the
// supervisor process's did; only the duration may differ.
func sameOutcome(t *testing.T, sup, in Result) {
	t.Helper()
	if (sup.Err == nil) != (in.Err == nil) || (sup.Err != nil && sup.Err.Error() != in.Err.Error()) {
		t.Fatalf("error in-process %v, under a supervisor process %v", in.Err, sup.Err)
	}
	for _, s := range sentinels {
		if errors.Is(sup.Err, s) != errors.Is(in.Err, s) {
			t.Fatalf("error in-process %v, under a supervisor process %v: different kinds", in.Err, sup.Err)
		}
	}
	type fields struct {
		Argv            string
		Cwd             string
		Started, Exited bool
		ExitCode        int
		Signal          string
		Out, Err        streamFields
		Output          string
		OutputNil       bool
	}
	of := func(r Result) fields {
		return fields{strings.Join(r.Argv, "\x00"), r.Cwd, r.Started, r.Exited, r.ExitCode, r.Signal,
			streamOf(r.Stdout), streamOf(r.Stderr), string(r.Output), r.Output == nil}
	}
	if a, b := of(in), of(sup); a != b {
		t.Fatalf("in-process %+v\nunder a supervisor process %+v", a, b)
	}
	if !bytes.Equal(in.Stdout.Retained, sup.Stdout.Retained) || !bytes.Equal(in.Stderr.Retained, sup.Stderr.Retained) {
		t.Fatal("the retained output differs")
	}
}

type streamFields struct {
	Retained  int
	Bytes     int64
	SHA256    string
	Truncated bool
}

func streamOf(s Stream) streamFields {
	return streamFields{len(s.Retained), s.Bytes, s.SHA256Hex(), s.Truncated}
}

// TestInProcessMatchesTheSupervisorProcess runs the same calls under a
// supervisor process and in a one-shot program that supervises them itself,
// and wants the same results, descendants that left the process group
// included.
func TestInProcessMatchesTheSupervisorProcess(t *testing.T) {
	t.Parallel()
	requireSupervisor(t)
	cases := []struct {
		name, dir, runner string
		// inputs builds the inputs from a per-case folder; pidFile names
		// the file in it where a descendant records its pid.
		inputs  func(dir string) string
		pidFile string
		check   func(t *testing.T, r Result)
	}{
		{name: "non-zero exit code", runner: "fail", inputs: func(string) string { return `{"message": "disk on fire"}` },
			check: func(t *testing.T, r Result) {
				if !errors.Is(r.Err, ErrExitStatus) || !r.Exited || r.ExitCode != 7 || string(r.Stderr.Retained) != "disk on fire" {
					t.Fatalf("result = err %v exit %d stderr %q", r.Err, r.ExitCode, r.Stderr.Retained)
				}
			}},
		{name: "stdout beyond the retained prefix", runner: "emit", inputs: func(string) string {
			return `{"stream": "stdout", "bytes": 9437184, "text": "x\u00e9"}`
		}, check: func(t *testing.T, r Result) {
			if !errors.Is(r.Err, ErrOutputRejected) || !r.Stdout.Truncated || r.Stdout.Bytes != 9<<20 || len(r.Stdout.Retained) != MaxRetainedBytes-1 {
				t.Fatalf("result = err %v stdout %d of %d bytes", r.Err, len(r.Stdout.Retained), r.Stdout.Bytes)
			}
		}},
		{name: "stderr beyond the retained prefix", runner: "emit", inputs: func(string) string {
			return `{"stream": "stderr", "bytes": 9437184, "text": "\u20ac"}`
		}, check: func(t *testing.T, r Result) {
			if r.Err != nil || !r.Stderr.Truncated || r.Stderr.Bytes != 9<<20 {
				t.Fatalf("result = err %v stderr %d of %d bytes", r.Err, len(r.Stderr.Retained), r.Stderr.Bytes)
			}
		}},
		{name: "SIGKILL after the grace period", runner: "stubborn", check: func(t *testing.T, r Result) {
			if !errors.Is(r.Err, ErrTimeout) || r.Signal != "killed (9)" {
				t.Fatalf("result = err %v signal %q", r.Err, r.Signal)
			}
		}},
		{name: "timeout ends the group", runner: "timeout", pidFile: "late.pid",
			inputs: func(dir string) string { return `{"marker": "` + filepath.Join(dir, "late") + `", "delay": "1h"}` },
			check: func(t *testing.T, r Result) {
				if !errors.Is(r.Err, ErrTimeout) || r.Exited {
					t.Fatalf("result = err %v exited %v", r.Err, r.Exited)
				}
			}},
		{name: "descendant outside the group holding stdout", runner: "escape", pidFile: "late.pid",
			inputs: func(dir string) string { return `{"marker": "` + filepath.Join(dir, "late") + `", "delay": "1h"}` },
			check: func(t *testing.T, r Result) {
				if r.Err != nil || string(r.Output) != `{"escaped":true}` {
					t.Fatalf("result = err %v output %s", r.Err, r.Output)
				}
			}},
		{name: "setsid grandchild after a normal exit", dir: setsidFixture, runner: "exit", pidFile: "descendant.pid",
			inputs: func(dir string) string { return `{"pid_file": "` + filepath.Join(dir, "descendant.pid") + `"}` },
			check: func(t *testing.T, r Result) {
				if r.Err != nil || r.ExitCode != 0 || string(r.Output) != `{"escaped":true}` {
					t.Fatalf("result = err %v exit %d output %s", r.Err, r.ExitCode, r.Output)
				}
			}},
		{name: "setsid grandchild on timeout", dir: setsidFixture, runner: "hang", pidFile: "descendant.pid",
			inputs: func(dir string) string { return `{"pid_file": "` + filepath.Join(dir, "descendant.pid") + `"}` },
			check: func(t *testing.T, r Result) {
				if !errors.Is(r.Err, ErrTimeout) || r.Exited || r.Signal == "" {
					t.Fatalf("result = err %v exited %v signal %q", r.Err, r.Exited, r.Signal)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// One folder for both runs keeps the argument vectors equal; the
			// descendant's pid file is removed between them.
			dir := t.TempDir()
			inputs := "{}"
			if tc.inputs != nil {
				inputs = tc.inputs(dir)
			}
			var results [2]Result
			for i, inProcess := range []bool{false, true} {
				out := mustRun(t, fixtureCall{dir: tc.dir, runner: tc.runner, inputs: inputs, workspace: dir, inProcess: inProcess})
				tc.check(t, out.Result)
				if tc.pidFile != "" {
					// Both supervise as a subreaper: every descendant is
					// reaped before the result is reported.
					assertGoneNow(t, filepath.Join(dir, tc.pidFile))
					if err := os.Remove(filepath.Join(dir, tc.pidFile)); err != nil {
						t.Fatal(err)
					}
				}
				assertTempRootEmpty(t, out.tempRoot)
				results[i] = out.Result
			}
			sameOutcome(t, results[0], results[1])
		})
	}
}

// loadPackage admits the package in dir.
func loadPackage(t *testing.T, dir string) *skillpkg.Package {
	t.Helper()
	pkg, err := skillpkg.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}

// writePackage writes a one-runner skill package.
func writePackage(t *testing.T, manifest string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: one-shot\n---\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "skill.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestInProcessToolIsAChildOfTheProgram shows that no supervisor process
// stands between the one-shot program and its tool.
func TestInProcessToolIsAChildOfTheProgram(t *testing.T) {
	t.Parallel()
	dir := writePackage(t, "run:\n  type: cli-tool\n  command: sh\n  args: [\"-c\", \"echo $PPID\"]\n")
	pkg := loadPackage(t, dir)
	call := CallFor(pkg, pkg.Runners[0])
	call.Workspace, call.TempDir = t.TempDir(), t.TempDir()
	res, pid := startOneShot(t, call, probeHost()).mustWait(t)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if got := strings.TrimSpace(string(res.Stdout.Retained)); got != strconv.Itoa(pid) {
		t.Fatalf("the tool's parent is %s, the program is %d", got, pid)
	}
}

// TestInProcessSignalledProgramEndsTheTree sends the one-shot program
// SIGTERM, as a Host ends "libos skill run": the call is aborted, its group
// terminated and a grandchild that left the group killed before the program
// reports.
func TestInProcessSignalledProgramEndsTheTree(t *testing.T) {
	t.Parallel()
	escape, err := filepath.Abs(filepath.Join(setsidFixture, "escape.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := writePackage(t, fmt.Sprintf("run:\n  type: cli-tool\n  command: %q\n  args: [hang, \"{{pid_file}}\"]\n  timeout_seconds: 30\n  inputs:\n    pid_file: {type: string, required: true}\n", escape))
	pidFile := filepath.Join(t.TempDir(), "descendant.pid")
	pkg := loadPackage(t, dir)
	call := CallFor(pkg, pkg.Runners[0])
	call.Inputs = raws(map[string]string{"pid_file": strconv.Quote(pidFile)})
	call.Workspace, call.TempDir = t.TempDir(), t.TempDir()
	run := startOneShot(t, call, probeHost())
	done := make(chan error, 1)
	go func() { done <- run.cmd.Wait() }()
	// Signal once the escaped grandchild demonstrably exists.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if data, err := os.ReadFile(pidFile); err == nil && len(data) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the grandchild never started: %s", run.stderr.Bytes())
		}
	}
	if err := run.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the one-shot program failed: %v\n%s", err, run.stderr.Bytes())
	}
	res := run.reply(t)
	if !errors.Is(res.Err, ErrAborted) || res.Exited || res.Signal == "" {
		t.Fatalf("result = err %v exited %v signal %q", res.Err, res.Exited, res.Signal)
	}
	assertGoneNow(t, pidFile)
}
