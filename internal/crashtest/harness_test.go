package crashtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/libos/libos/process"
)

// libosBin is the binary under test, built once with failpoints compiled in.
var libosBin string

// parallelPerCPU is how many parallel tests run per CPU unless -parallel
// says otherwise: a crash scenario mostly waits on its binary's fsyncs and
// start-up, not on the CPU.
const parallelPerCPU = 4

func TestMain(m *testing.M) {
	flag.Parse()
	if !flagSet("test.parallel") {
		flag.Set("test.parallel", fmt.Sprint(parallelPerCPU*runtime.GOMAXPROCS(0)))
	}
	dir, err := os.MkdirTemp("", "libos-crashtest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	libosBin = filepath.Join(dir, "libos")
	build := exec.Command("go", "build", "-tags", "failpoints", "-o", libosBin, "./cmd/libos")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build libos with failpoints: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// flagSet reports whether the command line set the flag name.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// scenario is a replay-scripted process tree and how to start it.
type scenario struct {
	script string
	image  string
	goal   string
	grants []string
	// skills is a --skills folder for the run, if any.
	skills string
	// entry maps every process the scenario creates to its script entry;
	// another process is a duplicated effect.
	entry entryFunc
	// checkpoint, when set, is the pid whose subtree `libos checkpoint
	// create` snapshots once the runtime is idle waiting for the Human.
	checkpoint int64
	// human is the message a process waits for idle, posted with libos send.
	humanTo   int64
	humanFrom string
	humanBody string
}

// tree is the scenario of testdata/crash/tree.yaml.
var tree = scenario{
	script: filepath.Join("..", "..", "testdata", "crash", "tree.yaml"),
	image:  "coding:v0",
	goal:   "crash scenario root: delegate a count to a worker, then read the follow-up",
	grants: []string{"process:spawn=write", "image:base:v0=read", "image:context-compressor:v0=read"},
	skills: filepath.Join("..", "..", "testdata", "crash", "skills"),
	entry: func(pid int64, image string) (int, bool) {
		switch {
		case pid == 1 && image == "coding:v0":
			return 0, true
		case (pid == 2 || pid == 3) && image == "base:v0":
			return int(pid - 2), true
		case pid >= 4 && image == "context-compressor:v0":
			// Every compressor, a stage run again after a crash included,
			// answers from the one compressor entry.
			return 0, true
		}
		return 0, false
	},
	checkpoint: 1,
	humanTo:    1,
	humanFrom:  "alice",
	humanBody:  "please also confirm the greeter said hello",
}

// invocation is one run of the binary.
type invocation struct {
	step   string // run, resume, checkpoint or send
	code   int    // exit code; -1 when killed
	killed bool
	fired  string // the failpoint that killed it, if one did
	stdout string
	stderr string
	took   time.Duration
}

func (inv invocation) String() string {
	state := fmt.Sprintf("exit %d", inv.code)
	switch {
	case inv.fired != "":
		state = "killed at " + inv.fired
	case inv.killed:
		state = "killed"
	}
	return fmt.Sprintf("%s (%s, %s)", inv.step, state, inv.took.Round(time.Millisecond))
}

// outcome is the final JSON line of run and resume.
type outcome struct {
	PID       int64           `json:"pid"`
	Status    string          `json:"status"`
	ResultOID *string         `json:"result_oid"`
	Result    json.RawMessage `json:"result"`
	Reason    string          `json:"reason"`
}

// arming says how one invocation may be cut short: a failpoint to arm
// (name and skip) and/or a delay after which the test sends SIGKILL.
type arming struct {
	failpoint string
	skip      int
	killAfter time.Duration // 0: never
}

// errUnrecordedRoot reports a `libos run` killed after it spawned the root
// but before it recorded the root for `libos resume`.
var errUnrecordedRoot = errors.New("libos run was killed after spawning the root but before recording it, so libos resume cannot continue the directory")

// subprocessBound is the generous bound on one invocation: a hung binary is
// killed and reported instead of hanging the test.
const subprocessBound = 60 * time.Second

// effectLogVar names the file the crash-effect skill appends to.
const effectLogVar = "CRASH_EFFECT_LOG"

// cleanEnv is the environment of every invocation: the test's own, without
// settings that would change what the binary does.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "LIBOS_"), strings.HasPrefix(name, "OPENAI_"), name == effectLogVar:
			continue
		}
		env = append(env, kv)
	}
	// Every record-cache hit of the binary is checked against the store.
	return append(env, "LIBOS_CHECK_CACHES=1")
}

// runner drives one scenario in one runtime directory.
type runner struct {
	t     *testing.T
	sc    scenario
	dir   string
	model *model
	// effectLog is the file the crash-effect skill appends to.
	effectLog string
	log       []string
	invs      []invocation
	// snaps are the directory's states after each invocation, oldest first.
	snaps []*snapshot
}

func newRunner(t *testing.T, sc scenario) *runner {
	tmp := t.TempDir()
	return &runner{t: t, sc: sc, dir: filepath.Join(tmp, "rt"), model: newModel(t, sc.script, sc.entry),
		effectLog: filepath.Join(tmp, "effects.log")}
}

// transcript is the history of the invocations, for failure messages.
func (r *runner) transcript() string { return strings.Join(r.log, "\n") }

// exec runs the binary with args under arm.
func (r *runner) exec(step string, arm arming, args ...string) invocation {
	r.t.Helper()
	env := append(cleanEnv(), effectLogVar+"="+r.effectLog)
	logFile := ""
	if arm.failpoint != "" {
		logFile = filepath.Join(r.t.TempDir(), "failpoint.log")
		env = append(env, "LIBOS_FAILPOINT="+arm.failpoint, fmt.Sprintf("LIBOS_FAILPOINT_SKIP=%d", arm.skip), "LIBOS_FAILPOINT_LOG="+logFile)
	}
	cmd := exec.Command(libosBin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start libos %v: %v", args, err)
	}
	hung := time.AfterFunc(subprocessBound, func() { cmd.Process.Kill() })
	var kill *time.Timer
	if arm.killAfter > 0 {
		kill = time.AfterFunc(arm.killAfter, func() { cmd.Process.Signal(syscall.SIGKILL) })
	}
	err := cmd.Wait()
	took := time.Since(start)
	hungFired := !hung.Stop()
	if kill != nil {
		kill.Stop()
	}
	inv := invocation{step: step, stdout: stdout.String(), stderr: stderr.String(), took: took}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		inv.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			inv.killed, inv.code = true, -1
		}
	default:
		r.t.Fatalf("libos %v: %v", args, err)
	}
	if hungFired && took >= subprocessBound {
		r.t.Fatalf("libos %v did not finish within %s\nstderr:\n%s\n%s", args, subprocessBound, inv.stderr, r.transcript())
	}
	if logFile != "" {
		// Goroutines that reach the point together may each log it
		// before the kill lands.
		if b, err := os.ReadFile(logFile); err == nil {
			first, _, _ := strings.Cut(string(b), "\n")
			inv.fired = strings.TrimSpace(first)
		}
	}
	if inv.fired != "" && !inv.killed {
		r.t.Fatalf("failpoint %s fired but libos %v was not killed (exit %d)", inv.fired, args, inv.code)
	}
	r.log = append(r.log, inv.String())
	r.invs = append(r.invs, inv)
	return inv
}

func (r *runner) runArgs() []string {
	args := []string{"run", r.sc.image, "--goal", r.sc.goal, "--dir", r.dir,
		"--provider", "openai", "--model", "crash-replay", "--base-url", r.model.baseURL()}
	for _, g := range r.sc.grants {
		args = append(args, "--grant", g)
	}
	if r.sc.skills != "" {
		args = append(args, "--skills", r.sc.skills)
	}
	return args
}

// drive runs the scenario to its end: `libos run`, then `libos resume` until
// the root is terminal; when an invocation ends with the runtime idle and
// the Human's recipient waiting for it, it creates the scenario's
// checkpoint with `libos checkpoint create` and posts the Human message
// with `libos send`. armFor decides how each invocation may be cut short.
// After every invocation the directory is snapshotted and compared with the
// previous snapshots. It returns the outcome printed by the last
// invocation, or errUnrecordedRoot.
func (r *runner) drive(armFor func(step string) arming, maxInvocations int) (outcome, error) {
	r.t.Helper()
	step := "run"
	humanSent, checkpointed := false, false
	for n := 0; ; n++ {
		if n >= maxInvocations {
			r.t.Fatalf("the root is not terminal after %d invocations:\n%s", n, r.transcript())
		}
		var inv invocation
		arm := armFor(step)
		switch step {
		case "run":
			inv = r.exec(step, arm, r.runArgs()...)
		case "resume":
			inv = r.exec(step, arm, "resume", "--dir", r.dir)
		case "checkpoint":
			inv = r.exec(step, arm, "checkpoint", "create", fmt.Sprint(r.sc.checkpoint), "--dir", r.dir)
		case "send":
			inv = r.exec(step, arm, "send", fmt.Sprint(r.sc.humanTo), r.sc.humanBody, "--from", r.sc.humanFrom, "--dir", r.dir)
		}
		snap := r.snapshot()
		if snap == nil {
			// Killed before the store existed: nothing happened yet.
			if !inv.killed || step != "run" {
				r.t.Fatalf("%s left no runtime directory:\n%s\n%s", inv, inv.stderr, r.transcript())
			}
			continue
		}
		r.checkSnapshot(snap)
		if inv.killed {
			switch {
			case step == "send":
				// The post is either durable or absent; a careful Host
				// looks before posting again.
				humanSent = snap.humanMessages(r.sc.humanTo) > 0
				if humanSent {
					step = "resume"
				}
			case step == "checkpoint":
				// Likewise for the checkpoint.
				checkpointed = snap.checkpoints > 0
				if checkpointed {
					step = "send"
				}
			case step == "run" && !snap.rootRecorded:
				// Killed before the run recorded its root. With no process
				// yet, the run starts again; with one, `libos resume`
				// cannot continue the directory (see
				// TestResumeAfterRunKilledBeforeRootRecorded).
				if len(snap.procs) > 0 {
					return outcome{}, fmt.Errorf("%w: pid(s) %v", errUnrecordedRoot, snap.pids())
				}
			default:
				step = "resume"
			}
			continue
		}
		switch step {
		case "checkpoint":
			if inv.code != 0 || snap.checkpoints != 1 {
				r.t.Fatalf("libos checkpoint create: exit %d, %d checkpoints\n%s\n%s", inv.code, snap.checkpoints, inv.stderr, r.transcript())
			}
			checkpointed = true
			step = "send"
			continue
		case "send":
			if inv.code != 0 {
				r.t.Fatalf("libos send: exit %d\n%s\n%s", inv.code, inv.stderr, r.transcript())
			}
			humanSent = true
			step = "resume"
			continue
		}
		out := r.decodeOutcome(inv)
		switch inv.code {
		case 0, 1:
			if !terminal(out.Status) {
				r.t.Fatalf("exit %d with root status %q", inv.code, out.Status)
			}
			return out, nil
		case 3:
			to := snap.procs[r.sc.humanTo]
			if humanSent || to.State != "waiting" || to.Wait == nil || to.Wait.Kind != "human" {
				r.t.Fatalf("the runtime went idle with pid %d %s (wait %s) and the Human message sent=%v:\n%s\n%s",
					r.sc.humanTo, to.State, describeWait(to.Wait), humanSent, inv.stderr, r.transcript())
			}
			step = "send"
			if r.sc.checkpoint != 0 && !checkpointed {
				step = "checkpoint"
			}
		default:
			r.t.Fatalf("%s: unexpected exit code\nstdout: %s\nstderr:\n%s\n%s", inv, inv.stdout, inv.stderr, r.transcript())
		}
	}
}

func (r *runner) decodeOutcome(inv invocation) outcome {
	r.t.Helper()
	lines := strings.Split(strings.TrimSpace(inv.stdout), "\n")
	var out outcome
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &out); err != nil {
		r.t.Fatalf("%s: the last stdout line is not the outcome JSON: %v\nstdout: %q\nstderr:\n%s\n%s", inv, err, inv.stdout, inv.stderr, r.transcript())
	}
	return out
}

func describeWait(w *process.Wait) string {
	if w == nil {
		return "none"
	}
	return fmt.Sprintf("%s child=%d filter=%s", w.Kind, w.ChildPID, w.Filter)
}

func terminal(status string) bool {
	return status == "exited" || status == "failed" || status == "killed"
}
