package clitool

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startTree starts script in a shell of its own process group, with the
// paths started and effect as $1 and $2, waits for the script to write
// started, and returns the shell and the processes below it. The whole
// group is killed when the test ends, whatever happened.
func startTree(t *testing.T, script, started, effect string) (*exec.Cmd, []descendant) {
	t.Helper()
	_ = os.Remove(started)
	shell := exec.Command("sh", "-c", script, "sh", started, effect)
	shell.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := shell.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-shell.Process.Pid, syscall.SIGKILL)
		_ = shell.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the script never started its processes")
		}
		if _, err := os.Stat(started); err == nil {
			break
		}
	}
	below, err := descendants(shell.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return shell, below
}

// TestSweepStopsTheTreeBeforeKillingIt hands the sweep's signalling a tree
// listed children first, the order that lets a parent see its child killed
// and act: a shell whose sleep ends runs its next command. Every process is
// stopped before any is killed, so the shell never writes.
func TestSweepStopsTheTreeBeforeKillingIt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effect, started := filepath.Join(dir, "effect"), filepath.Join(dir, "started")
	for i := range 20 {
		shell, below := startTree(t, `sleep 30 & echo > "$1"; wait; echo escaped >> "$2"`, started, effect)
		tree := append([]descendant{{pid: shell.Process.Pid, ppid: os.Getpid()}}, below...)
		slices.Reverse(tree)
		stopThenKill(shell.Process.Pid, tree)
		_ = shell.Wait()
		if data, err := os.ReadFile(effect); err == nil {
			t.Fatalf("run %d: the shell acted after its child was killed: %q", i, data)
		}
	}
}

// TestSweepOutlastsSIGCONT has a process of the tree continue every other
// one, over and over, while the tree is ended: a reader of a pipe, once
// continued, would see its writer killed and write. Stopped processes are
// stopped again until the whole tree is halted, and only then killed, so
// nothing writes.
func TestSweepOutlastsSIGCONT(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effect, started := filepath.Join(dir, "effect"), filepath.Join(dir, "started")
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Sleeps between the writer and its reader widen the window in which a
	// continued reader could see the writer end.
	script := fmt.Sprintf(`sleep 30 > %q &
%s
(read x < %q; echo escaped >> "$2") &
(while :; do kill -CONT 0; done) 2>/dev/null &
echo > "$1"; wait`, fifo, strings.Repeat("sleep 30 &\n", 300), fifo)
	for i := range 5 {
		shell, below := startTree(t, script, started, effect)
		tree := append([]descendant{{pid: shell.Process.Pid, ppid: os.Getpid()}}, below...)
		stopThenKill(shell.Process.Pid, tree)
		for _, d := range tree {
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
				if state, _, ok := procState(d.pid); !ok || state == 'Z' || state == 'X' {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("run %d: pid %d of the tree still alive after it was killed", i, d.pid)
				}
			}
		}
		_ = shell.Wait()
		if data, err := os.ReadFile(effect); err == nil {
			t.Fatalf("run %d: a continued process acted while the tree was killed: %q", i, data)
		}
	}
}

// TestBarePinSignalsOnlyItsProcess: without a pidfd (an old kernel, a
// supervisor out of descriptors) a process is signalled by its pid, and
// only while its parent is still the one it was listed with.
func TestBarePinSignalsOnlyItsProcess(t *testing.T) {
	t.Parallel()
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	})
	notInTree := func(int) bool { return false }
	stranger := pin{pid: child.Process.Pid, ppid: os.Getpid() + 1, fd: -1}
	stranger.signal(syscall.SIGSTOP, notInTree)
	time.Sleep(50 * time.Millisecond)
	if state, _, _ := procState(child.Process.Pid); state == 'T' {
		t.Fatal("a pid whose parent is not the listed one was signalled")
	}
	own := pin{pid: child.Process.Pid, ppid: os.Getpid(), fd: -1}
	own.signal(syscall.SIGSTOP, notInTree)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if state, _, _ := procState(child.Process.Pid); state == 'T' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the listed process was not stopped by its pid")
		}
	}
	own.signal(syscall.SIGKILL, notInTree)
	if err := child.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the listed process after SIGKILL by its pid: %v", err)
	}
}

// TestTerminationEndsWithTheTree: a tool and a child that both exit on
// SIGTERM end the call at once; the grace period is waited out only for what
// still runs. The grace here is far longer than the bound.
func TestTerminationEndsWithTheTree(t *testing.T) {
	t.Parallel()
	requireSupervisor(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	const grace = time.Minute
	req := treeRequest{Path: []byte(sh), Argv: toBytes([]string{"sh", "-c", "sleep 30 & echo started; wait"}), Dir: []byte("/"), Grace: int64(grace)}
	for _, place := range []treePlace{treeSupervisor, treeDirect} {
		t.Run(map[treePlace]string{treeSupervisor: "supervisor process", treeDirect: "direct"}[place], func(t *testing.T) {
			t.Parallel()
			stdin, err := os.Open(os.DevNull)
			if err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			outR, outW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer outR.Close()
			stdio := []*os.File{stdin, outW, outW}
			var p process
			// Once the tool is spawned it holds its own copy of outW.
			if place == treeSupervisor {
				err = p.startSupervisor(req, stdio)
				outW.Close()
			} else {
				p.startLocal(req, stdio, false, func() { outW.Close() }, func() {})
			}
			if err != nil {
				t.Fatal(err)
			}
			// Terminate once the child is running.
			if line, err := bufio.NewReader(outR).ReadString('\n'); line != "started\n" {
				t.Fatalf("the tool never started: %q %v", line, err)
			}
			begin := time.Now()
			p.stop()
			var end *treeEvent
			for e := range p.events {
				if e.Op == opEnded {
					end = &e
				} else if e.Op != opStarted {
					t.Fatalf("event %+v", e)
				}
			}
			took := time.Since(begin)
			if p.finish != nil {
				if err := p.finish(); err != nil {
					t.Fatal(err)
				}
			}
			if end == nil || !end.Terminated || syscall.WaitStatus(end.Status).Signal() != syscall.SIGTERM {
				t.Fatalf("end = %+v", end)
			}
			if took > grace/2 {
				t.Fatalf("the call waited %v after every process had exited", took)
			}
		})
	}
}
