package objects

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// walIOFault fails, once on, every write, sync and close of a write-ahead
// log with EIO.
type walIOFault struct{ on atomic.Bool }

func (w *walIOFault) MaybeError(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo,
		errorfs.OpFileClose:
	default:
		return nil
	}
	if w.on.Load() && strings.HasSuffix(op.Path, ".log") {
		return &os.PathError{Op: "write", Path: op.Path, Err: syscall.EIO}
	}
	return nil
}

func (w *walIOFault) String() string { return "wal fault" }

// A WAL error met by the commit that rotates the log fails the store like
// any WAL error. Pebble panics on it with its mutex released, which a
// deferred unlock turns into a fatal error no recover catches (the whole
// process dies); the store keeps every WAL error from Pebble instead, so
// the database stays consistent and closable, and what was acknowledged
// is there after a reopen.
func TestWALErrorDuringRotationFailsTheStore(t *testing.T) {
	dir := t.TempDir()
	fault := &walIOFault{}
	small := func(o *pebble.Options) { o.MemTableSize = 1 << 20 }
	s, err := Open(dir, Options{FS: errorfs.Wrap(vfs.Default, fault), Pebble: small})
	if err != nil {
		t.Fatal(err)
	}
	var acked []string
	write := func(i, size int) error {
		payload := make([]byte, size)
		copy(payload, strconv.Itoa(i)) // distinct payloads: equal ones are stored once
		var oid string
		err := s.Update(func(tx *Txn) error {
			m, err := tx.Create(CreateSpec{Namespace: "n", Name: "o" + strconv.Itoa(i), Kind: "k", Tier: TierDurable, Payload: payload})
			oid = m.OID
			return err
		})
		if err == nil {
			acked = append(acked, oid)
		}
		return err
	}
	for i := range 20 {
		if err := write(i, 1<<10); err != nil {
			t.Fatalf("write %d before the fault: %v", i, err)
		}
	}
	// Every commit so far is synced, so the log is idle. A batch over half
	// the memtable has its record written to the old log and then rotates
	// it: the write fails on the log's flush goroutine, and the rotation
	// closes the log that failed.
	fault.on.Store(true)
	if err := write(20, 700<<10); !errors.Is(err, ErrFailed) {
		t.Fatalf("a commit whose WAL rotation fails: %v, want ErrFailed", err)
	}
	if err := s.Update(func(tx *Txn) error { return tx.Set([]byte("x/after"), []byte("1")) }); !errors.Is(err, ErrFailed) {
		t.Fatalf("an update after the failure: %v, want ErrFailed", err)
	}
	if err := s.View(func(*Txn) error { return nil }); err == nil {
		t.Fatal("a view after the failure succeeded: it may read the commit that was not acknowledged")
	}
	_ = s.Close()
	fault.on.Store(false)
	s, err = Open(dir, Options{FS: errorfs.Wrap(vfs.Default, fault), Pebble: small})
	if err != nil {
		t.Fatalf("reopen after the failure: %v", err)
	}
	defer s.Close()
	err = s.View(func(tx *Txn) error {
		for i, oid := range acked {
			_, payload, err := tx.Read(oid)
			if err != nil {
				return err
			}
			if want := strconv.Itoa(i); !bytes.HasPrefix(payload, []byte(want)) {
				return fmt.Errorf("object %d holds %.8q", i, payload)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("an acknowledged write is missing after the reopen: %v", err)
	}
}
