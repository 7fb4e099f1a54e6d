package objects

import (
	"errors"
	"testing"
)

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

// TestAppliedRecordsAndBytes: a commit counts its batch's records and
// encoded size; a read-only Update counts nothing.
func TestAppliedRecordsAndBytes(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	before := s.Stats()
	mustUpdate(t, s, func(tx *Txn) error {
		if err := tx.Set([]byte("t/a"), []byte("12345")); err != nil {
			return err
		}
		if err := tx.Set([]byte("t/bb"), make([]byte, 200)); err != nil {
			return err
		}
		return tx.Delete([]byte("t/c"))
	})
	after := s.Stats()
	// A batch's 12-byte header; a set adds its kind, the key and value
	// with their lengths (one byte each under 128, two for 200); a delete
	// its kind and the key with its length.
	const want = 12 + (1 + 1 + 3 + 1 + 5) + (1 + 1 + 4 + 2 + 200) + (1 + 1 + 3)
	if got := after.AppliedRecords - before.AppliedRecords; got != 3 {
		t.Fatalf("AppliedRecords grew by %d, want 3", got)
	}
	if got := after.AppliedBytes - before.AppliedBytes; got != want {
		t.Fatalf("AppliedBytes grew by %d, want %d", got, want)
	}
	mustUpdate(t, s, func(tx *Txn) error { _, _, err := tx.Find([]byte("t/a")); return err })
	if got := s.Stats(); got.AppliedRecords != after.AppliedRecords || got.AppliedBytes != after.AppliedBytes {
		t.Fatalf("a read-only Update counted %d records, %d bytes", got.AppliedRecords-after.AppliedRecords, got.AppliedBytes-after.AppliedBytes)
	}
}

// TestRawPebbleSyncedBatches: batches hold the records asked for, of about
// the size asked for, and a batch needs at least one record.
func TestRawPebbleSyncedBatches(t *testing.T) {
	r, err := OpenRawPebble(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const batches, records, size = 20, 15, 3000
	rate, err := r.SyncedBatches(4, batches, records, size)
	if err != nil || rate <= 0 {
		t.Fatalf("SyncedBatches = %v, %v", rate, err)
	}
	m := r.db.Metrics()
	if got := m.WAL.BytesIn; got < batches*(size-records) || got > batches*(size+records) {
		t.Fatalf("the log took %d bytes for %d batches of about %d", got, batches, size)
	}
	n := 0
	it, err := r.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for it.First(); it.Valid(); it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if n != batches*records {
		t.Fatalf("%d keys written, want %d", n, batches*records)
	}
	if _, err := r.SyncedBatches(1, 1, 0, size); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SyncedBatches of no records: %v, want ErrInvalid", err)
	}
}
