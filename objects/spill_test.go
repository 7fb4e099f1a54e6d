package objects

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// A spilled runtime-local payload leaves memory, reads as before, takes a
// new version, and is lost after a reopen like any runtime-local payload.
func TestSpillLocal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s := openTest(t, dir, nil)
	big := bytes.Repeat([]byte("context "), 64)
	m := create(t, s, CreateSpec{Namespace: "proc-1", Name: "ctx", Kind: "k", Tier: TierRuntimeLocal, Payload: big})
	small := create(t, s, CreateSpec{Namespace: "proc-1", Name: "goal", Kind: "k", Tier: TierRuntimeLocal, Payload: []byte("short")})
	durable := create(t, s, CreateSpec{Namespace: "proc-1", Name: "result", Kind: "k", Tier: TierDurable, Payload: big})

	s.SpillLocal(m.OID, small.OID, durable.OID, "no-such-oid", "")
	if e := s.locals.head[m.OID]; e.data.len() != 0 || e.spillLen != len(big) {
		t.Fatalf("large payload still in memory: %d bytes, spilled %d", e.data.len(), e.spillLen)
	}
	if e := s.locals.head[small.OID]; e.spillLen != 0 {
		t.Fatal("a payload under the threshold was spilled")
	}
	if _, err := os.Stat(spillPath(dir)); err != nil {
		t.Fatalf("spill file: %v", err)
	}
	for _, oid := range []string{m.OID, small.OID, durable.OID} {
		if _, got, err := read(t, s, oid); err != nil {
			t.Fatalf("read %s after spilling: %v", oid, err)
		} else if oid != small.OID && !bytes.Equal(got, big) {
			t.Fatalf("read %s after spilling: %q", oid, got)
		}
	}
	mustUpdate(t, s, func(tx *Txn) error {
		if _, got, err := tx.Read(m.OID); err != nil || !bytes.Equal(got, big) {
			return errors.Join(err, errors.New("spilled payload reads differently in an update"))
		}
		_, err := tx.Write(m.OID, m.Version, WriteSpec{Payload: []byte("rewritten after the spill")})
		return err
	})
	if _, got, err := read(t, s, m.OID); err != nil || string(got) != "rewritten after the spill" {
		t.Fatalf("new version after a spill: %q %v", got, err)
	}
	closeTest(t, s)
	if _, err := os.Stat(spillPath(dir)); !os.IsNotExist(err) {
		t.Fatalf("spill file after close: %v", err)
	}
	s = openTest(t, dir, nil)
	defer closeTest(t, s)
	if meta, _, err := read(t, s, m.OID); !errors.Is(err, ErrPayloadLost) || !meta.PayloadLost {
		t.Fatalf("spilled payload after a reopen: %v", err)
	}
}

// A full disk keeps the payload in memory, readable.
func TestSpillLocalDiskFull(t *testing.T) {
	full := &spillFull{}
	fs := errorfs.Wrap(vfs.NewMem(), full)
	s, err := Open("/store", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := bytes.Repeat([]byte("x"), 512)
	m := create(t, s, CreateSpec{Namespace: "proc-1", Name: "ctx", Kind: "k", Tier: TierRuntimeLocal, Payload: big})
	full.on = true
	s.SpillLocal(m.OID)
	full.on = false
	if e := s.locals.head[m.OID]; e.spillLen != 0 || !bytes.Equal(e.data.body, big) {
		t.Fatal("a payload whose spill failed left memory")
	}
	if _, got, err := read(t, s, m.OID); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read after a failed spill: %v", err)
	}
}

// spillFull fails writes to the spill file while on.
type spillFull struct{ on bool }

func (f *spillFull) MaybeError(op errorfs.Op) error {
	if f.on && strings.HasSuffix(op.Path, ".local-spill") {
		return errors.New("injected: no space left on device")
	}
	return nil
}

func (f *spillFull) String() string { return "spill-full" }

// A payload asked to spill while an open View still needs its older version
// stays readable by that View, and leaves memory once the View ends, not
// never (the payloads of a process that ended while any View was open used
// to stay in memory).
func TestSpillLocalWaitsForOpenView(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "store"), nil)
	defer closeTest(t, s)
	v1 := bytes.Repeat([]byte("first "), 64)
	v2 := bytes.Repeat([]byte("second "), 64)
	m := create(t, s, CreateSpec{Namespace: "proc-1", Name: "ctx", Kind: "k", Tier: TierRuntimeLocal, Payload: v1})

	inView, release, viewDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		viewDone <- s.View(func(tx *Txn) error {
			close(inView)
			<-release
			_, got, err := tx.Read(m.OID)
			if err == nil && !bytes.Equal(got, v1) {
				err = fmt.Errorf("the open View read %q, want its version", got)
			}
			return err
		})
	}()
	<-inView
	if err := s.Update(func(tx *Txn) error {
		_, err := tx.Write(m.OID, m.Version, WriteSpec{Payload: v2})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s.SpillLocal(m.OID)
	if e := s.locals.head[m.OID]; e.spillLen != 0 || !bytes.Equal(e.data.body, v2) {
		t.Fatal("spilled while an open View kept an older version")
	}
	close(release)
	if err := <-viewDone; err != nil {
		t.Fatal(err)
	}
	if e := s.locals.head[m.OID]; e.data.len() != 0 || e.spillLen != len(v2) || e.older != nil {
		t.Fatalf("after the View ended: %d bytes in memory, %d spilled, older kept %v", e.data.len(), e.spillLen, e.older != nil)
	}
	if _, got, err := read(t, s, m.OID); err != nil || !bytes.Equal(got, v2) {
		t.Fatalf("read after the deferred spill: %q %v", got, err)
	}
}
