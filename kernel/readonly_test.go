package kernel

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/internal/testfs"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

// diskFullOn injects ENOSPC, while on, into every operation that needs
// disk space.
func diskFullOn() *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpCreate, errorfs.OpLink, errorfs.OpRename, errorfs.OpReuseForWrite,
			errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFilePreallocate,
			errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
		}
		return nil
	})}
}

// within fails the test if fn does not return within limit: a runtime
// that spins or waits forever on a full disk would hang it.
func within(t *testing.T, limit time.Duration, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
		return nil
	}
}

// generous bounds how long a runtime takes to give up on a full disk; it
// takes milliseconds, and without the fix it never returns.
const generous = 20 * time.Second

// TestReadOnlyRuntime leaves a directory as a crash in the middle of a
// quantum would (a disk fault stops the run), then opens it read-only. The
// runtime shows the process as stored (running; recovery would make it
// runnable), refuses every change with ErrReadOnly, and leaves every file
// of the directory as it was.
func TestReadOnlyRuntime(t *testing.T) {
	dir := t.TempDir()
	fault := walFaultOn(errorfs.OpFileWrite, errorfs.OpFileWriteAt)
	prov := newFaultProvider(t, fault, 2, 2)
	clk := clock.NewFake(epoch, true)
	rt, err := Open(dir, Options{FS: errorfs.Wrap(vfs.Default, fault), Provider: prov, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	prov.rt = rt
	root, err := rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "fault parent",
		Grants: []capabilities.Grant{{Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.RunUntilIdle(context.Background()); !errors.Is(err, objects.ErrFailed) {
		t.Fatalf("run with a disk fault: %v", err)
	}
	_ = rt.Close()
	fault.Off()

	before := testfs.Listing(t, dir)
	time.Sleep(20 * time.Millisecond) // coarse file times must not hide a change
	ro, err := Open(dir, Options{ReadOnly: true, Clock: clk, Provider: prov})
	if err != nil {
		t.Fatalf("read-only open: %v", err)
	}
	procs, err := ro.Processes()
	if err != nil {
		t.Fatal(err)
	}
	running := int64(0)
	for _, p := range procs {
		if p.Status == process.Running {
			running = p.PID
		}
	}
	if running == 0 {
		t.Fatalf("no process shown as stored mid-quantum: %+v", procs)
	}
	if _, err := ro.Process(root); err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Checkpoints(0); err != nil {
		t.Fatal(err)
	}

	changes := map[string]func() error{
		"RunUntilIdle": func() error { return ro.RunUntilIdle(context.Background()) },
		"Spawn": func() error {
			_, err := ro.Spawn(SpawnSpec{Image: "base:v0", Goal: "more"})
			return err
		},
		"PostHumanMessage": func() error {
			_, err := ro.PostHumanMessage(HumanMessage{To: root, From: "ana", Body: "hi"})
			return err
		},
		"SetGoal": func() error {
			_, err := ro.SetGoal(root, "a new goal")
			return err
		},
		"Kill":    func() error { return ro.Kill(root, "stop") },
		"PutMeta": func() error { return ro.PutMeta("k", 1) },
		"CreateCheckpoint": func() error {
			_, err := ro.CreateCheckpoint(root)
			return err
		},
	}
	for name, change := range changes {
		if err := change(); !errors.Is(err, ErrReadOnly) {
			t.Errorf("%s on a read-only runtime: %v, want ErrReadOnly", name, err)
		}
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if after := testfs.Listing(t, dir); after != before {
		t.Fatalf("a read-only runtime changed the directory:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// An ordinary open recovers the process the read-only one showed.
	rw, err := Open(dir, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	info, err := rw.Process(running)
	if err != nil || info.Status == process.Running {
		t.Fatalf("pid %d after recovery: %s (%v)", running, info.Status, err)
	}
}

// TestRuntimeOnFullDisk: with the disk full, a run stops within bounds with
// an error wrapping objects.ErrDiskFull, opening the directory for writing
// (recovery must flush the log) fails the same way, and a read-only open
// still shows every process.
func TestRuntimeOnFullDisk(t *testing.T) {
	dir := t.TempDir()
	full := diskFullOn()
	prov := newFaultProvider(t, full, 2, 2)
	clk := clock.NewFake(epoch, true)
	rt, err := Open(dir, Options{FS: errorfs.Wrap(vfs.Default, full), Provider: prov, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	prov.rt = rt
	if _, err := rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "fault parent",
		Grants: []capabilities.Grant{{Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}}}}); err != nil {
		t.Fatal(err)
	}
	err = within(t, generous, "RunUntilIdle on a full disk", func() error { return rt.RunUntilIdle(context.Background()) })
	if !errors.Is(err, objects.ErrDiskFull) || !strings.Contains(err.Error(), "disk is full") {
		t.Fatalf("run on a full disk: %v, want an error wrapping objects.ErrDiskFull", err)
	}
	_ = within(t, generous, "Close", rt.Close)

	// Still full: a read-only open works and shows the processes.
	ro, err := Open(dir, Options{FS: errorfs.Wrap(vfs.Default, full), ReadOnly: true, Clock: clk})
	if err != nil {
		t.Fatalf("read-only open on a full disk: %v", err)
	}
	procs, err := ro.Processes()
	if err != nil || len(procs) < 2 {
		t.Fatalf("processes on a full disk: %+v %v", procs, err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	err = within(t, generous, "Open for writing on a full disk", func() error {
		rt, err := Open(dir, Options{FS: errorfs.Wrap(vfs.Default, full), Clock: clk})
		if err == nil {
			rt.Close()
		}
		return err
	})
	if !errors.Is(err, objects.ErrDiskFull) {
		t.Fatalf("open on a full disk: %v, want an error wrapping objects.ErrDiskFull", err)
	}
	t.Logf("open: %v", err)
}
