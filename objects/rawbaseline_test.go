package objects

import "testing"

// TestWriteLockHeldCounts: an Update adds the time it held the write lock;
// a View adds none.
func TestWriteLockHeldCounts(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	if got := s.Stats().WriteLockHeld; got != 0 {
		t.Fatalf("WriteLockHeld of a new store = %v", got)
	}
	create(t, s, CreateSpec{Namespace: "n", Name: "a", Kind: "k", Payload: []byte("x")})
	afterWrite := s.Stats().WriteLockHeld
	if afterWrite <= 0 {
		t.Fatalf("WriteLockHeld after a commit = %v", afterWrite)
	}
	mustUpdate(t, s, func(*Txn) error { return nil })
	afterEmpty := s.Stats().WriteLockHeld
	if afterEmpty < afterWrite {
		t.Fatalf("WriteLockHeld after an empty update = %v, was %v", afterEmpty, afterWrite)
	}
	mustView(t, s, func(*Txn) error { return nil })
	if got := s.Stats().WriteLockHeld; got != afterEmpty {
		t.Fatalf("WriteLockHeld after a view = %v, was %v", got, afterEmpty)
	}
}

func TestRawPebbleSyncedSets(t *testing.T) {
	r, err := OpenRawPebble(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rate, err := r.SyncedSets(4, 20, benchPayload())
	if err != nil || rate <= 0 {
		t.Fatalf("SyncedSets = %v, %v", rate, err)
	}
	if r.WALSyncs() == 0 {
		t.Fatal("no WAL sync counted")
	}
}
