package clitool

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestSweepStopsTheTreeBeforeKillingIt hands the sweep's signalling a tree
// listed children first, the order that lets a parent see its child killed
// and act: a shell whose sleep ends runs its next command. Every process is
// stopped before any is killed, so the shell never writes.
func TestSweepStopsTheTreeBeforeKillingIt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i := range 20 {
		effect := filepath.Join(dir, "effect")
		started := filepath.Join(dir, "started")
		_ = os.Remove(started)
		shell := exec.Command("sh", "-c", `sleep 30 & echo > "$1"; wait; echo escaped >> "$2"`, "sh", started, effect)
		if err := shell.Start(); err != nil {
			t.Fatal(err)
		}
		var below []descendant
		for deadline := time.Now().Add(10 * time.Second); len(below) == 0; {
			if time.Now().After(deadline) {
				t.Fatal("the shell's sleep never started")
			}
			if _, err := os.Stat(started); err == nil {
				var err error
				if below, err = descendants(shell.Process.Pid); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(time.Millisecond)
		}
		tree := append([]descendant{{pid: shell.Process.Pid, ppid: os.Getpid()}}, below...)
		slices.Reverse(tree)
		stopThenKill(tree, os.Getpid())
		_ = shell.Wait()
		if data, err := os.ReadFile(effect); err == nil {
			t.Fatalf("run %d: the shell acted after its child was killed: %q", i, data)
		}
	}
}
