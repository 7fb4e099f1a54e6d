package objects

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A store opened in a directory that did not exist keeps its first commits
// across a crash: the entries leading to it are synced, not only its files.
func TestNewDirectorySurvivesACrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s, err := Open("/runtimes/new/store", Options{FS: mem, Clock: newFakeClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	m := create(t, s, CreateSpec{Namespace: "ns", Name: "first", Kind: "k", Tier: TierDurable, Payload: []byte("acknowledged")})
	s2 := openAfterACrash(t, mem, s, "/runtimes/new/store")
	mustView(t, s2, func(tx *Txn) error {
		_, payload, err := tx.Read(m.OID)
		if err != nil || string(payload) != "acknowledged" {
			t.Fatalf("after the crash: %q, %v", payload, err)
		}
		return nil
	})
}

// A store directory is owner-only: made 0700, and one found open to group
// or others (made by hand, or by an older store) is narrowed at a writable
// open; a read-only open changes nothing.
func TestStoreDirectoryIsOwnerOnly(t *testing.T) {
	fresh := filepath.Join(t.TempDir(), "fresh")
	s := openTest(t, fresh, nil)
	closeTest(t, s)
	wide := filepath.Join(t.TempDir(), "wide")
	if err := os.Mkdir(wide, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(wide, 0o755); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, wide, nil)
	closeTest(t, s)
	for _, dir := range []string{fresh, wide} {
		info, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm != 0o700 {
			t.Fatalf("%s: mode %v, want 0700", dir, perm)
		}
	}
	if err := os.Chmod(wide, 0o750); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(wide, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	ro.Close()
	if info, _ := os.Stat(wide); info.Mode().Perm() != 0o750 {
		t.Fatalf("a read-only open changed the mode to %v", info.Mode().Perm())
	}
}
