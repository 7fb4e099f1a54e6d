package objects

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// A transaction reads its own writes, rolled back or not, through its
// overlay first, and what it was handed it may change without changing what
// it reads next. Find answers a missing key with found false and no error.
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
		if _, err := tx.Get([]byte("k/missing")); !errors.Is(err, ErrNotFound) || err.Error() != `objects: get "k/missing": `+ErrNotFound.Error() {
			t.Fatalf("missing key: %v", err)
		}
		if v, found, err := tx.Find([]byte("k/missing")); v != nil || found || err != nil {
			t.Fatalf("Find of a missing key = %q, %v, %v", v, found, err)
		}
		if v, found, err := tx.Find([]byte("k/a")); string(v) != "stored" || !found || err != nil {
			t.Fatalf("Find of a stored key = %q, %v, %v", v, found, err)
		}
		if _, _, err := tx.Find([]byte("o/m/x")); !errors.Is(err, ErrReservedKey) {
			t.Fatalf("Find of a reserved key: %v", err)
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

// TestReadCacheFollowsCommits drives random commits of sets, deletes and
// reads over a few keys, with a cache small enough to evict, and checks
// every read of an Update and of a View against a model of what was
// committed: the store's cache of committed reads must never serve a stale
// value or absence.
func TestReadCacheFollowsCommits(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	s.reads = newReadCache(1000) // a few entries: eviction happens often
	rng := rand.New(rand.NewPCG(7, 11))
	model := map[string]string{}
	keys := []string{"k/a", "k/b", "k/c", "mb/h/1", "mb/h/2", "k/big"}
	check := func(tx *Txn, k string, staged map[string]*string) {
		want, found := model[k]
		if v, ok := staged[k]; ok {
			want, found = "", v != nil
			if v != nil {
				want = *v
			}
		}
		got, err := tx.Get([]byte(k))
		switch {
		case !found && !errors.Is(err, ErrNotFound):
			t.Fatalf("Get(%s) = %q, %v; want not found", k, got, err)
		case found && (err != nil || string(got) != want):
			t.Fatalf("Get(%s) = %q, %v; want %q", k, got, err, want)
		}
	}
	for i := range 2000 {
		fail := rng.IntN(10) == 0
		staged := map[string]*string{}
		err := s.Update(func(tx *Txn) error {
			for range 1 + rng.IntN(4) {
				k := keys[rng.IntN(len(keys))]
				switch rng.IntN(3) {
				case 0:
					v := fmt.Sprintf("v%d", i)
					if k == "k/big" {
						v = strings.Repeat("x", readCacheValueMax+1+rng.IntN(10))
					}
					if err := tx.Set([]byte(k), []byte(v)); err != nil {
						return err
					}
					staged[k] = &v
				case 1:
					if err := tx.Delete([]byte(k)); err != nil {
						return err
					}
					staged[k] = nil
				default:
					check(tx, k, staged)
				}
			}
			if fail {
				return errors.New("abandoned")
			}
			return nil
		})
		if fail {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range staged {
			if v == nil {
				delete(model, k)
			} else {
				model[k] = *v
			}
		}
		if err := s.View(func(tx *Txn) error {
			check(tx, keys[rng.IntN(len(keys))], nil)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, seg := range []readSegment{s.reads.main, s.reads.probation} {
			if seg.bytes > seg.limit {
				t.Fatalf("a segment of the cache holds %d bytes, over its limit %d", seg.bytes, seg.limit)
			}
		}
	}
}

// TestSetHandoff: a handed-over value is staged and committed as given, and
// read back as a copy the reader owns.
func TestSetHandoff(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	value := []byte("handed")
	mustUpdate(t, s, func(tx *Txn) error {
		if err := tx.SetHandoff([]byte("o/x"), value); !errors.Is(err, ErrReservedKey) {
			t.Fatalf("handoff under a reserved prefix: %v", err)
		}
		return tx.SetHandoff([]byte("k/h"), value)
	})
	mustUpdate(t, s, func(tx *Txn) error {
		v, err := tx.Get([]byte("k/h"))
		if err != nil || string(v) != "handed" {
			t.Fatalf("read back %q, %v", v, err)
		}
		v[0] = 'X'
		if again, _ := tx.Get([]byte("k/h")); string(again) != "handed" {
			t.Fatalf("a reader's change reached the store: %q", again)
		}
		return nil
	})
}

// TestProbationIsLeftByALaterRead: a key read twice by one Update stays on
// probation, so that keys one commit reads twice do not push hot ones out of
// the main segment; a later Update's read moves it there.
func TestProbationIsLeftByALaterRead(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	mustUpdate(t, s, func(tx *Txn) error { return tx.Set([]byte("k/a"), []byte("v")) })
	mustUpdate(t, s, func(tx *Txn) error {
		for range 2 {
			if _, err := tx.Get([]byte("k/a")); err != nil {
				return err
			}
			if _, _, err := tx.Find([]byte("k/none")); err != nil {
				return err
			}
		}
		return nil
	})
	for _, key := range []string{"k/a", "k/none"} {
		if _, ok := s.reads.main.entries[key]; ok {
			t.Errorf("%s read twice by one Update is in the main segment", key)
		}
		if _, ok := s.reads.probation.entries[key]; !ok {
			t.Errorf("%s read by an Update is not on probation", key)
		}
	}
	mustUpdate(t, s, func(tx *Txn) error {
		_, err := tx.Get([]byte("k/a"))
		return err
	})
	if _, ok := s.reads.main.entries["k/a"]; !ok {
		t.Error("a key a later Update read is not in the main segment")
	}
}

// TestStagedHintSettles: the estimate of the keys an Update stages follows
// what Updates stage, down to a small write and up to a large one, within
// its bounds.
func TestStagedHintSettles(t *testing.T) {
	h := stagedKeysHint
	for range 200 {
		h = nextStagedHint(h, 2)
	}
	if h != 2 {
		t.Errorf("after writes of 2 keys the estimate is %d", h)
	}
	for range 200 {
		h = nextStagedHint(h, 30)
	}
	if h != 30 {
		t.Errorf("after writes of 30 keys the estimate is %d", h)
	}
	for range 200 {
		h = nextStagedHint(h, 1000)
	}
	if h != 4*stagedKeysHint {
		t.Errorf("after writes of 1,000 keys the estimate is %d, want the bound %d", h, 4*stagedKeysHint)
	}
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	for range 50 {
		_ = s.Update(func(tx *Txn) error {
			for i := range 60 {
				if err := tx.Set(fmt.Appendf(nil, "k/%d", i), []byte("v")); err != nil {
					return err
				}
			}
			return errors.New("refused")
		})
	}
	if s.stagedHint != stagedKeysHint {
		t.Errorf("refused Updates moved the estimate to %d", s.stagedHint)
	}
}
