//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package objects

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestHelperHoldsLock is not a test: run by holdLockInAnotherProcess, it
// takes a record lock on $LIBOS_TEST_LOCK (shared, or exclusive when
// $LIBOS_TEST_LOCK_MODE is "write"), says so, and holds it for
// $LIBOS_TEST_LOCK_FOR: a lock of another process, as a read-only libos
// command or a running runtime holds one.
func TestHelperHoldsLock(t *testing.T) {
	name := os.Getenv("LIBOS_TEST_LOCK")
	if name == "" {
		return
	}
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	lk := syscall.Flock_t{Type: syscall.F_RDLCK, Whence: io.SeekStart}
	if os.Getenv("LIBOS_TEST_LOCK_MODE") == "write" {
		lk.Type = syscall.F_WRLCK
	}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("locked\n")
	hold, _ := time.ParseDuration(os.Getenv("LIBOS_TEST_LOCK_FOR"))
	time.Sleep(hold)
}

// holdLockInAnotherProcess runs TestHelperHoldsLock on dir's LOCK and
// returns once the lock is held; the process ends after hold.
func holdLockInAnotherProcess(t *testing.T, dir, mode string, hold time.Duration) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldsLock$")
	cmd.Env = append(os.Environ(), "LIBOS_TEST_LOCK="+filepath.Join(dir, "LOCK"), "LIBOS_TEST_LOCK_MODE="+mode, "LIBOS_TEST_LOCK_FOR="+hold.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("the lock holder said %q (%v)", line, err)
	}
	return cmd
}

// A runtime opening a directory that read-only commands of other processes
// are reading waits for them to let it go, instead of failing as if another
// runtime held it; one held by another runtime (an exclusive lock) still
// fails at once.
func TestOpenWaitsForReadersOnly(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	holdLockInAnotherProcess(t, dir, "read", 300*time.Millisecond)
	start := time.Now()
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatalf("opening a directory a reader held for 300 ms: %v", err)
	}
	s.Close()
	if waited := time.Since(start); waited >= readersWait {
		t.Fatalf("waited %s", waited)
	}

	holdLockInAnotherProcess(t, dir, "write", 30*time.Second)
	start = time.Now()
	if _, err := Open(dir, Options{}); !errors.Is(err, ErrInUse) {
		t.Fatalf("opening a directory another runtime holds: %v, want ErrInUse", err)
	}
	if waited := time.Since(start); waited > readersWait/2 {
		t.Fatalf("a runtime's hold was waited on for %s", waited)
	}
}
