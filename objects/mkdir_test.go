package objects

import (
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
