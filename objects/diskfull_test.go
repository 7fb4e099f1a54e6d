package objects

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/libos/libos/internal/testfs"
)

// diskFull injects ENOSPC, while on, into the operations that need disk
// space on files whose name matches, and counts the creation of table
// files and every operation that would change the directory.
type diskFull struct {
	on      atomic.Bool
	match   func(path string) bool
	creates atomic.Int64 // table files created or attempted
	writes  atomic.Int64 // operations that change the directory, attempted
}

func (d *diskFull) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpCreate, errorfs.OpLink, errorfs.OpRename, errorfs.OpReuseForWrite, errorfs.OpMkdirAll,
		errorfs.OpLock, errorfs.OpRemove, errorfs.OpRemoveAll, errorfs.OpFileWrite, errorfs.OpFileWriteAt,
		errorfs.OpFilePreallocate, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	default:
		return nil
	}
	d.writes.Add(1)
	if op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".sst") {
		d.creates.Add(1)
	}
	switch op.Kind {
	case errorfs.OpRemove, errorfs.OpRemoveAll, errorfs.OpMkdirAll, errorfs.OpLock:
		return nil // needs no space (the directory exists)
	}
	if d.on.Load() && (d.match == nil || d.match(op.Path)) {
		return &os.PathError{Op: "write", Path: op.Path, Err: syscall.ENOSPC}
	}
	return nil
}

func (d *diskFull) String() string { return "disk full" }

// within runs fn and fails the test if it does not return within limit: a
// store that spins or waits forever on a full disk would hang the test.
func within[T any](t *testing.T, limit time.Duration, what string, fn func() T) T {
	t.Helper()
	done := make(chan T, 1)
	go func() { done <- fn() }()
	select {
	case v := <-done:
		return v
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
		panic("unreachable")
	}
}

// generous is the bound on a store giving up on a full disk; it fails in
// milliseconds, and without the fix it never returns.
const generous = 20 * time.Second

func wantDiskFull(t *testing.T, err error) {
	t.Helper()
	wantErr(t, err, ErrDiskFull)
	if !strings.Contains(err.Error(), "disk is full") || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("disk-full error does not say so: %v", err)
	}
}

// storeWithLog leaves a closed store whose log holds commits not yet in a
// table, so that the next open for writing must flush them.
func storeWithLog(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	commitRecords(t, s, 0, 100)
	closeTest(t, s)
	return dir
}

// TestOpenOnFullDiskFailsFast opens, for writing, a store whose log must be
// flushed, on a disk that is full for table files, for the MANIFEST or for
// everything. Open must return ErrDiskFull within bounds, without retrying
// the flush in a loop.
func TestOpenOnFullDiskFailsFast(t *testing.T) {
	for name, match := range map[string]func(string) bool{
		"tables":     func(p string) bool { return strings.HasSuffix(p, ".sst") },
		"manifest":   func(p string) bool { return strings.Contains(filepath.Base(p), "MANIFEST") },
		"everything": nil,
	} {
		t.Run(name, func(t *testing.T) {
			dir := storeWithLog(t)
			full := &diskFull{match: match}
			full.on.Store(true)
			fsys := errorfs.Wrap(vfs.Default, full)

			err := within(t, generous, "Open on a full disk", func() error {
				s, err := Open(dir, Options{FS: fsys})
				if err == nil {
					s.Close()
				}
				return err
			})
			wantDiskFull(t, err)
			if n := full.creates.Load(); n > 3 {
				t.Fatalf("%d table files created or attempted: the flush was retried in a loop", n)
			}
			t.Logf("open: %v (%d table creations)", err, full.creates.Load())
		})
	}
}

// TestReadOnlyOpenOnFullDisk: with every write failing, a read-only open
// reads the whole store, including what only the log holds, and attempts
// no write at all.
func TestReadOnlyOpenOnFullDisk(t *testing.T) {
	dir := storeWithLog(t)
	full := &diskFull{}
	full.on.Store(true)
	s, err := Open(dir, Options{FS: errorfs.Wrap(vfs.Default, full), ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open on a full disk: %v", err)
	}
	keys := rawKeys(t, s)
	for i := range 100 {
		if keys[string(recordKey(i))] != string(recordValue(i)) {
			t.Fatalf("record %d missing from a read-only open", i)
		}
	}
	err = s.Update(func(tx *Txn) error { return tx.Set([]byte("k"), []byte("v")) })
	wantErr(t, err, ErrReadOnly)
	closeTest(t, s)
	if n := full.writes.Load(); n != 0 {
		t.Fatalf("a read-only open attempted %d writes", n)
	}
}

// TestReadOnlyOpenChangesNothing: a read-only open of a store whose log
// would be replayed and flushed by an ordinary open, reads and a close
// leave every file as it was.
func TestReadOnlyOpenChangesNothing(t *testing.T) {
	dir := storeWithLog(t)
	before := testfs.Listing(t, dir)
	// Coarse file times must not hide a change.
	time.Sleep(20 * time.Millisecond)
	s, err := Open(dir, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rawKeys(t, s)) != 100 {
		t.Fatal("read-only open does not see the logged records")
	}
	if _, err := s.Events(0, 0); err != nil {
		t.Fatal(err)
	}
	closeTest(t, s)
	if after := testfs.Listing(t, dir); before != after {
		t.Fatalf("a read-only open changed the directory:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// A missing directory is an error, and is not created.
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err := Open(missing, Options{ReadOnly: true}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only open of a missing directory: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a read-only open created the directory")
	}
}

// TestDiskFullWhileOpen fills the disk under an open store: for the log (a
// commit fails), for table files (a flush fails in the background) and for
// the MANIFEST (Pebble's fatal path). Each time the store must fail with
// ErrDiskFull, refuse writes at once, not retry in a loop, and Close within
// bounds.
func TestDiskFullWhileOpen(t *testing.T) {
	cases := map[string]func(string) bool{
		"log":      func(p string) bool { return strings.HasSuffix(p, ".log") },
		"tables":   func(p string) bool { return strings.HasSuffix(p, ".sst") },
		"manifest": func(p string) bool { return strings.Contains(filepath.Base(p), "MANIFEST") },
	}
	for name, match := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			full := &diskFull{match: match}
			s, err := Open(dir, Options{FS: errorfs.Wrap(vfs.Default, full)})
			if err != nil {
				t.Fatal(err)
			}
			commitRecords(t, s, 0, 50)
			full.on.Store(true)

			if name == "log" {
				err = s.Update(func(tx *Txn) error { return tx.Set([]byte("lost"), []byte("v")) })
				wantDiskFull(t, err)
			} else {
				// A flush writes a table and records it in the MANIFEST; it
				// never completes.
				if _, err := s.db.AsyncFlush(); err != nil {
					t.Fatal(err)
				}
				err = within(t, generous, "the store to fail", func() error {
					for s.failedErr() == nil {
						time.Sleep(time.Millisecond)
					}
					return s.Update(func(tx *Txn) error { return tx.Set([]byte("lost"), []byte("v")) })
				})
				wantDiskFull(t, err)
				wantErr(t, err, ErrFailed)
				// Held back, the flush is not retried while the store is open.
				creates := full.creates.Load()
				time.Sleep(200 * time.Millisecond)
				if n := full.creates.Load() - creates; n > 1 {
					t.Fatalf("%d more table files attempted: the flush is retried in a loop", n)
				}
			}
			err = s.Update(func(tx *Txn) error { return nil })
			wantDiskFull(t, err)
			cerr := within(t, generous, "Close", s.Close)
			t.Logf("close: %v", cerr)
			full.on.Store(false)

			if name == "manifest" {
				// Pebble stopped in the middle of recording a table: it is
				// not closed, and the directory stays held.
				if _, err := Open(dir, Options{}); !errors.Is(err, ErrInUse) {
					t.Fatalf("reopen after Pebble stopped: %v, want ErrInUse", err)
				}
				return
			}
			s2 := openTest(t, dir, nil)
			defer closeTest(t, s2)
			keys := rawKeys(t, s2)
			for i := range 50 {
				if keys[string(recordKey(i))] != string(recordValue(i)) {
					t.Fatalf("acknowledged record %d missing after the disk filled", i)
				}
			}
			if _, ok := keys["lost"]; ok {
				t.Fatal("a write refused for a full disk exists")
			}
		})
	}
}
