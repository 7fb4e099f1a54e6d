package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/process"
)

// stopBound is how long a signalled runtime may take to stop: generous, as
// it waits on real processes on a shared machine.
const stopBound = 10 * time.Second

// liveBin is the built binary running in the background.
type liveBin struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr lockedBuffer
}

func startBin(t *testing.T, args ...string) *liveBin {
	t.Helper()
	b := &liveBin{cmd: exec.Command(libosBin, args...)}
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", args, err)
	}
	t.Cleanup(func() {
		if b.cmd.ProcessState == nil {
			b.cmd.Process.Kill()
			b.cmd.Wait()
		}
	})
	return b
}

// signalAndWait sends sig and returns the exit code, failing if the binary
// does not stop within stopBound.
func (b *liveBin) signalAndWait(t *testing.T, sig os.Signal) int {
	t.Helper()
	if err := b.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
	done := make(chan error, 1)
	go func() { done <- b.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
		return 0
	case <-time.After(stopBound):
		t.Fatalf("still running %s after %v\nstderr:\n%s", sig, stopBound, b.stderr.String())
		return -1
	}
}

// checkStopped asserts what a runtime stopped before its root ended prints.
func checkStopped(t *testing.T, b *liveBin, code, wantCode int, dir string) map[string]any {
	t.Helper()
	stderr := b.stderr.String()
	if code != wantCode {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", code, wantCode, stderr)
	}
	out := decodeOutcome(t, b.stdout.String())
	if out["pid"] != 1.0 || out["image"] == nil {
		t.Fatalf("outcome %v", out)
	}
	if st := process.State(out["status"].(string)); st.Terminal() {
		t.Fatalf("the root is reported %s, yet the run was stopped before it ended", st)
	}
	if !strings.Contains(stderr, "libos resume --dir "+dir) {
		t.Fatalf("stderr must say how to continue:\n%s", stderr)
	}
	if strings.Contains(stderr, "context canceled") {
		t.Fatalf("a clean stop is not an error:\n%s", stderr)
	}
	return out
}

func TestSignalStopsARunMidSleep(t *testing.T) {
	for _, tc := range []struct {
		sig  os.Signal
		code int
	}{{syscall.SIGTERM, exitTerminated}, {os.Interrupt, exitInterrupted}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			b := startBin(t, "run", "base:v0", "--goal", "sleep", "--script", "../../testdata/replay/signal_sleep.yaml", "--dir", dir)
			waitFor(t, func() bool { return strings.Contains(b.stderr.String(), "(timer)") })
			out := checkStopped(t, b, b.signalAndWait(t, tc.sig), tc.code, dir)
			if out["status"] != "waiting" {
				t.Fatalf("the root was asleep: %v", out)
			}
			if _, err := os.Stat(filepath.Join(dir, "control.sock")); !os.IsNotExist(err) {
				t.Fatalf("the control socket must be removed on a clean stop: %v", err)
			}
		})
	}
}

func TestSignalStopsResume(t *testing.T) {
	dir := t.TempDir()
	run := startBin(t, "run", "base:v0", "--goal", "sleep", "--script", "../../testdata/replay/signal_sleep.yaml", "--dir", dir)
	waitFor(t, func() bool { return strings.Contains(run.stderr.String(), "(timer)") })
	checkStopped(t, run, run.signalAndWait(t, syscall.SIGTERM), exitTerminated, dir)

	// The resume wakes the first sleep and waits on the second.
	resume := startBin(t, "resume", "--dir", dir)
	waitFor(t, func() bool { return strings.Contains(resume.stderr.String(), "(timer)") })
	// A second resume of the held directory is refused at once.
	_, stderr, code := runBin(t, "resume", "--dir", dir)
	if code != exitFailed || !strings.Contains(stderr, "in use") {
		t.Fatalf("resume of a held directory: exit %d %q", code, stderr)
	}
	out := checkStopped(t, resume, resume.signalAndWait(t, syscall.SIGTERM), exitTerminated, dir)
	if out["status"] != "waiting" {
		t.Fatalf("the root was asleep: %v", out)
	}
}

func TestSignalStopsACLIToolEffect(t *testing.T) {
	skills := t.TempDir()
	pkg := filepath.Join(skills, "napper")
	os.MkdirAll(pkg, 0o755)
	os.WriteFile(filepath.Join(pkg, "SKILL.md"), []byte("---\nname: napper\ndescription: Naps and ignores SIGTERM.\n---\n# napper\n"), 0o644)
	// The command ignores SIGTERM, so stopping it takes the runner's whole
	// terminate grace before the kill: the slowest effect to stop.
	os.WriteFile(filepath.Join(pkg, "skill.yaml"), []byte(`run:
  type: cli-tool
  command: sh
  args: ["-c", "trap '' TERM; : > \"$0\"; sleep 30", "{{marker}}"]
  inputs:
    marker: {type: string, required: true}
`), 0o644)
	marker := filepath.Join(t.TempDir(), "started")
	script := filepath.Join(t.TempDir(), "nap.yaml")
	os.WriteFile(script, []byte(`processes:
  - image: skilled:v0
    turns:
      - tool_calls: [{name: activate_skill, arguments: {name: napper}}]
      - tool_calls: [{name: napper, arguments: {marker: "`+marker+`"}}]
      - tool_calls: [{name: process_exit, arguments: {message: woke}}]
`), 0o644)
	dir := t.TempDir()
	b := startBin(t, "run", "skilled:v0", "--goal", "nap", "--script", script, "--skills", skills, "--dir", dir)
	waitFor(t, func() bool {
		_, err := os.Stat(marker)
		return err == nil
	})
	checkStopped(t, b, b.signalAndWait(t, syscall.SIGTERM), exitTerminated, dir)
}

// cancelOnWriter is a progress sink that cancels a session as soon as a
// line containing trigger is written.
type cancelOnWriter struct {
	lockedBuffer
	trigger string
	cancel  func()
	once    sync.Once
}

func (w *cancelOnWriter) Write(p []byte) (int, error) {
	n, err := w.lockedBuffer.Write(p)
	if bytes.Contains(p, []byte(w.trigger)) {
		w.once.Do(w.cancel)
	}
	return n, err
}

// TestSignalAsTheRootExits stops the session in the moment the root's exit
// commits, the window a real signal cannot be aimed at: the run still
// reports the exit and succeeds.
func TestSignalAsTheRootExits(t *testing.T) {
	script, err := filepath.Abs("../../testdata/replay/clock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stderr := &cancelOnWriter{trigger: "[pid 1] running -> exited", cancel: func() { cancel(signalStop{sig: syscall.SIGTERM}) }}
	var stdout bytes.Buffer
	code := runSession(ctx, t.TempDir(), &stdout, stderr,
		spawnRoot("base:v0", "read the clock", rootGrants(nil, nil)), &runSettings{Provider: "replay", Script: script})
	if ctx.Err() == nil {
		t.Fatal("the root's exit was not seen")
	}
	if code != exitOK {
		t.Fatalf("exit %d after the root exited\nstderr:\n%s", code, stderr.String())
	}
	if out := decodeOutcome(t, stdout.String()); out["status"] != "exited" || out["result"].(map[string]any)["zone"] != "Europe/Paris" {
		t.Fatalf("outcome %v", out)
	}
	if s := stderr.String(); strings.Contains(s, "context canceled") || strings.Contains(s, "libos resume") {
		t.Fatalf("nothing is left to resume and nothing failed:\n%s", s)
	}
}

// TestSignalBeforeTheSchedulerStarts: a signal that arrives while the
// directory is being opened still leaves a root to resume, and says so.
func TestSignalBeforeTheSchedulerStarts(t *testing.T) {
	script, err := filepath.Abs("../../testdata/replay/clock.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(signalStop{sig: os.Interrupt})
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := runSession(ctx, dir, &stdout, &stderr,
		spawnRoot("base:v0", "read the clock", rootGrants(nil, nil)), &runSettings{Provider: "replay", Script: script})
	if code != exitInterrupted {
		t.Fatalf("exit %d\nstderr:\n%s", code, stderr.String())
	}
	if out := decodeOutcome(t, stdout.String()); out["status"] != "runnable" {
		t.Fatalf("outcome %v", out)
	}
	if !strings.Contains(stderr.String(), "stopped by SIGINT; continue with: libos resume --dir "+dir) {
		t.Fatalf("stderr:\n%s", stderr.String())
	}
}

func TestSignalSecondForcesExit(t *testing.T) {
	var stderr lockedBuffer
	exited := make(chan int, 1)
	ctx, stop := watchSignals(&stderr, func(code int) { exited <- code })
	defer stop()
	// A real signal to this process: watchSignals has taken it over.
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(stopBound):
		t.Fatal("SIGTERM did not cancel the session")
	}
	if s := stopCause(ctx); s.sig != syscall.SIGTERM || s.exitCode() != exitTerminated {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
	select {
	case code := <-exited:
		t.Fatalf("the first signal must stop cleanly, not exit (%d)", code)
	default:
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != exitInterrupted {
			t.Fatalf("second signal SIGINT: exit %d", code)
		}
	case <-time.After(stopBound):
		t.Fatal("a second signal must force the exit")
	}
	if s := stderr.String(); !strings.Contains(s, "SIGTERM: stopping") || !strings.Contains(s, "second signal (SIGINT): exiting") {
		t.Fatalf("stderr:\n%s", s)
	}
}

// blockingProvider answers no call until its context is cancelled, like a
// provider whose reply is slow to come.
type blockingProvider struct{ entered chan struct{} }

func (p blockingProvider) Name() string { return "blocking" }

func (p blockingProvider) Complete(ctx context.Context, _ llm.Request) (llm.Response, error) {
	p.entered <- struct{}{}
	<-ctx.Done()
	return llm.Response{}, ctx.Err()
}

// TestRunUntilIdleStopsInAProviderCall checks the kernel half of a clean
// stop: cancellation ends RunUntilIdle while a quantum waits on the
// provider, the runtime closes, and the process resumes later.
func TestRunUntilIdleStopsInAProviderCall(t *testing.T) {
	dir := t.TempDir()
	p := blockingProvider{entered: make(chan struct{}, 1)}
	rt, err := kernel.Open(dir, kernel.Options{Provider: p})
	if err != nil {
		t.Fatal(err)
	}
	pid, err := rt.Spawn(kernel.SpawnSpec{Image: "base:v0", Goal: "wait", Grants: []capabilities.Grant{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- rt.RunUntilIdle(ctx) }()
	select {
	case <-p.entered:
	case <-time.After(stopBound):
		t.Fatal("the provider was never called")
	}
	cancel()
	select {
	case err := <-ran:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RunUntilIdle: %v", err)
		}
	case <-time.After(stopBound):
		t.Fatal("RunUntilIdle did not return after cancellation")
	}
	closed := make(chan error, 1)
	go func() { closed <- rt.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(stopBound):
		t.Fatal("Close did not return after the stop")
	}
	rt, err = kernel.Open(dir, kernel.Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer rt.Close()
	info, err := rt.Process(pid)
	if err != nil || info.Status != process.Runnable {
		t.Fatalf("the interrupted process must be runnable again: %+v %v", info, err)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"./.libos":      "./.libos",
		"/tmp/run-1":    "/tmp/run-1",
		"my dir":        "'my dir'",
		"it's":          `'it'\''s'`,
		"$HOME/x":       "'$HOME/x'",
		"":              "''",
		"/a/b_c@d:e,f=": "/a/b_c@d:e,f=",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
