package objects

import (
	"errors"
	"testing"
)

// A transaction remembers what it read from the database; its own writes,
// rolled back or not, still read through its overlay first, and what it was
// handed it may change without changing what it reads next.
func TestTxnReadsOnceThroughItsOverlay(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	mustUpdate(t, s, func(tx *Txn) error { return tx.Set([]byte("k/a"), []byte("stored")) })
	mustUpdate(t, s, func(tx *Txn) error {
		v, err := tx.Get([]byte("k/a"))
		if err != nil || string(v) != "stored" {
			t.Fatalf("first read: %q %v", v, err)
		}
		v[0] = 'X' // the caller owns what it was handed
		if _, err := tx.Get([]byte("k/missing")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing key: %v", err)
		}
		sp := tx.Savepoint()
		if err := tx.Set([]byte("k/a"), []byte("staged")); err != nil {
			return err
		}
		if err := tx.Set([]byte("k/missing"), []byte("now here")); err != nil {
			return err
		}
		if v, _ := tx.Get([]byte("k/a")); string(v) != "staged" {
			t.Fatalf("read after a staged write: %q", v)
		}
		if v, _ := tx.Get([]byte("k/missing")); string(v) != "now here" {
			t.Fatalf("read of a staged new key: %q", v)
		}
		tx.RollbackTo(sp)
		if v, err := tx.Get([]byte("k/a")); err != nil || string(v) != "stored" {
			t.Fatalf("read after the rollback: %q %v", v, err)
		}
		if _, err := tx.Get([]byte("k/missing")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing key after the rollback: %v", err)
		}
		return nil
	})
}
