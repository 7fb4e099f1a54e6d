package objects

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
)

type kv struct{ k, v string }

func collect(t *testing.T, scan func(fn func(k, v []byte) error) error) []kv {
	t.Helper()
	var out []kv
	if err := scan(func(k, v []byte) error {
		out = append(out, kv{string(k), string(v)})
		return nil
	}); err != nil {
		t.Fatalf("scan: %v", err)
	}
	return out
}

func TestReadYourWritesAndScanMerge(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	mustUpdate(t, s, func(tx *Txn) error {
		for _, k := range []string{"a/1", "a/3", "a/5", "b/1"} {
			if err := tx.Set([]byte(k), []byte("db-"+k)); err != nil {
				return err
			}
		}
		return nil
	})
	// Objects exist too: their reserved keys must never show in raw scans.
	create(t, s, CreateSpec{Namespace: "ns", Name: "n", Kind: "k", Tier: TierDurable, Payload: []byte("p")})

	mustUpdate(t, s, func(tx *Txn) error {
		if err := tx.Set([]byte("a/2"), []byte("new-2")); err != nil {
			return err
		}
		if err := tx.Set([]byte("a/3"), []byte("new-3")); err != nil {
			return err
		}
		if err := tx.Delete([]byte("a/5")); err != nil {
			return err
		}
		if err := tx.Set([]byte("a/6"), nil); err != nil {
			return err
		}
		if v, err := tx.Get([]byte("a/3")); err != nil || string(v) != "new-3" {
			t.Fatalf("Get staged a/3 = %q, %v", v, err)
		}
		if _, err := tx.Get([]byte("a/5")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get deleted a/5 = %v", err)
		}
		if v, err := tx.Get([]byte("a/6")); err != nil || len(v) != 0 {
			t.Fatalf("Get empty a/6 = %q, %v", v, err)
		}
		// Get returns a copy: changing it does not change the staged value.
		v, _ := tx.Get([]byte("a/2"))
		v[0] = 'X'
		if v2, _ := tx.Get([]byte("a/2")); string(v2) != "new-2" {
			t.Fatalf("staged value changed through Get's result: %q", v2)
		}

		got := collect(t, func(fn func(k, v []byte) error) error { return tx.Scan([]byte("a/"), fn) })
		want := []kv{{"a/1", "db-a/1"}, {"a/2", "new-2"}, {"a/3", "new-3"}, {"a/6", ""}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Scan(a/) = %v, want %v", got, want)
		}
		got = collect(t, func(fn func(k, v []byte) error) error {
			return tx.ScanRange([]byte("a/2"), []byte("b/2"), true, fn)
		})
		want = []kv{{"b/1", "db-b/1"}, {"a/6", ""}, {"a/3", "new-3"}, {"a/2", "new-2"}}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ScanRange reverse = %v, want %v", got, want)
		}
		// Whole keyspace, both directions: reserved keys are skipped.
		all := collect(t, func(fn func(k, v []byte) error) error { return tx.Scan(nil, fn) })
		if len(all) != 5 {
			t.Fatalf("Scan(nil) = %v", all)
		}
		rev := collect(t, func(fn func(k, v []byte) error) error { return tx.ScanRange(nil, nil, true, fn) })
		if len(rev) != 5 || rev[0].k != "b/1" || rev[4].k != "a/1" {
			t.Fatalf("ScanRange(nil, nil, reverse) = %v", rev)
		}
		// ErrStopScan stops early without an error.
		n := 0
		if err := tx.Scan([]byte("a/"), func(k, v []byte) error {
			n++
			if n == 2 {
				return ErrStopScan
			}
			return nil
		}); err != nil || n != 2 {
			t.Fatalf("stopped scan: n=%d err=%v", n, err)
		}
		// Other callback errors come back unchanged.
		boom := errors.New("boom")
		if err := tx.Scan(nil, func(k, v []byte) error { return boom }); err != boom {
			t.Fatalf("scan callback error = %v", err)
		}
		return nil
	})
	got := rawKeys(t, s)
	want := map[string]string{"a/1": "db-a/1", "a/2": "new-2", "a/3": "new-3", "a/6": "", "b/1": "db-b/1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("committed keys = %v, want %v", got, want)
	}
}

func TestScanRangeBounds(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	mustUpdate(t, s, func(tx *Txn) error {
		for i := range 5 {
			if err := tx.Set(fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
				return err
			}
		}
		return nil
	})
	mustView(t, s, func(tx *Txn) error {
		got := collect(t, func(fn func(k, v []byte) error) error { return tx.ScanRange([]byte("k1"), []byte("k3"), false, fn) })
		if len(got) != 2 || got[0].k != "k1" || got[1].k != "k2" {
			t.Fatalf("ScanRange[k1,k3) = %v", got)
		}
		got = collect(t, func(fn func(k, v []byte) error) error { return tx.ScanRange([]byte("k3"), nil, false, fn) })
		if len(got) != 2 || got[0].k != "k3" {
			t.Fatalf("ScanRange[k3,) = %v", got)
		}
		got = collect(t, func(fn func(k, v []byte) error) error { return tx.ScanRange([]byte("k2"), []byte("k2"), false, fn) })
		if len(got) != 0 {
			t.Fatalf("empty range = %v", got)
		}
		err := tx.ScanRange([]byte("k3"), []byte("k1"), false, func(k, v []byte) error { return nil })
		wantErr(t, err, ErrInvalid)
		if !strings.Contains(err.Error(), "end") {
			t.Fatalf("range error does not name end: %v", err)
		}
		return nil
	})
}

func TestReservedKeysRefused(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	m := create(t, s, CreateSpec{Namespace: "ns", Name: "n", Kind: "k", Tier: TierDurable, Payload: []byte("p")})
	keys := []string{"o/", "o/m/" + m.OID, "o/p/" + m.OID, "o/n/ns\x00n", "ev/", "ev/\x00\x00\x00\x00\x00\x00\x00\x01", "seq/x"}
	for _, k := range keys {
		err := s.Update(func(tx *Txn) error { return tx.Set([]byte(k), []byte("evil")) })
		wantErr(t, err, ErrReservedKey)
		err = s.Update(func(tx *Txn) error { return tx.Delete([]byte(k)) })
		wantErr(t, err, ErrReservedKey)
		err = s.View(func(tx *Txn) error { _, err := tx.Get([]byte(k)); return err })
		wantErr(t, err, ErrReservedKey)
		err = s.View(func(tx *Txn) error { return tx.Scan([]byte(k), func(k, v []byte) error { return nil }) })
		wantErr(t, err, ErrReservedKey)
		err = s.View(func(tx *Txn) error {
			return tx.ScanRange([]byte(k), nil, false, func(k, v []byte) error { return nil })
		})
		wantErr(t, err, ErrReservedKey)
	}
	// Neighbours of reserved prefixes are ordinary keys.
	mustUpdate(t, s, func(tx *Txn) error {
		for _, k := range []string{"o", "obj/1", "ev", "events/1", "seq", "sequence/1"} {
			if err := tx.Set([]byte(k), []byte("ok")); err != nil {
				return err
			}
		}
		return nil
	})
	if got := rawKeys(t, s); len(got) != 6 {
		t.Fatalf("raw keys = %v", got)
	}
	err := s.Update(func(tx *Txn) error { return tx.Set(nil, []byte("v")) })
	wantErr(t, err, ErrInvalid)
	if _, data, err := read(t, s, m.OID); err != nil || string(data) != "p" {
		t.Fatalf("object changed: %q %v", data, err)
	}
}

func TestSavepointRollbackExact(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	base := create(t, s, CreateSpec{Namespace: "ns", Name: "base", Kind: "k", Payload: []byte("b1")})
	mustUpdate(t, s, func(tx *Txn) error {
		if _, err := tx.NextSequence("ids"); err != nil {
			return err
		}
		return tx.Set([]byte("x"), []byte("x0"))
	})
	seqBefore := s.LastEventSeq()

	hooks := 0
	var kept Meta
	mustUpdate(t, s, func(tx *Txn) error {
		// Changes before the savepoint survive.
		if err := tx.Set([]byte("x"), []byte("x1")); err != nil {
			return err
		}
		var err error
		if kept, err = tx.Create(CreateSpec{Namespace: "ns", Name: "kept", Kind: "k", Payload: []byte("kept")}); err != nil {
			return err
		}
		if id, err := tx.NextSequence("ids"); err != nil || id != 2 {
			t.Fatalf("NextSequence = %d, %v", id, err)
		}
		tx.AfterCommit(func() { hooks++ })
		sp := tx.Savepoint()

		// Everything below is rolled back.
		if err := tx.Set([]byte("x"), []byte("x2")); err != nil {
			return err
		}
		if err := tx.Set([]byte("y"), []byte("y")); err != nil {
			return err
		}
		if err := tx.Delete([]byte("x")); err != nil {
			return err
		}
		if _, err := tx.Create(CreateSpec{Namespace: "ns", Name: "gone", Kind: "k", Tier: TierDurable, Payload: []byte("g")}); err != nil {
			return err
		}
		if _, err := tx.Write(base.OID, 1, WriteSpec{Payload: []byte("b2")}); err != nil {
			return err
		}
		if _, err := tx.Write(kept.OID, 1, WriteSpec{Payload: []byte("kept2")}); err != nil {
			return err
		}
		if err := tx.Remove(kept.OID, 2); err != nil {
			return err
		}
		for range 3 {
			if _, err := tx.NextSequence("ids"); err != nil {
				return err
			}
		}
		if _, err := tx.NextSequence("other"); err != nil {
			return err
		}
		if _, err := tx.AppendEvent("custom", map[string]int{"n": 1}); err != nil {
			return err
		}
		tx.AfterCommit(func() { hooks += 100 })
		inner := tx.Savepoint()
		if err := tx.Set([]byte("z"), []byte("z")); err != nil {
			return err
		}
		tx.RollbackTo(inner)
		if _, err := tx.Get([]byte("z")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("z after inner rollback: %v", err)
		}

		tx.RollbackTo(sp)

		if v, err := tx.Get([]byte("x")); err != nil || string(v) != "x1" {
			t.Fatalf("x after rollback = %q, %v", v, err)
		}
		if _, err := tx.Get([]byte("y")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("y after rollback: %v", err)
		}
		if _, err := tx.Lookup("ns", "gone"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("gone after rollback: %v", err)
		}
		if m, data, err := tx.Read(base.OID); err != nil || m.Version != 1 || string(data) != "b1" {
			t.Fatalf("base after rollback = v%d %q %v", m.Version, data, err)
		}
		if m, data, err := tx.Read(kept.OID); err != nil || m.Version != 1 || string(data) != "kept" {
			t.Fatalf("kept after rollback = v%d %q %v", m.Version, data, err)
		}
		if len(tx.events) != 1 { // object.created of "kept"
			t.Fatalf("staged events after rollback = %d", len(tx.events))
		}
		// The savepoint can be used again; the inner one is now invalid.
		if err := tx.Set([]byte("w"), []byte("w")); err != nil {
			return err
		}
		tx.RollbackTo(sp)
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("RollbackTo with an invalidated savepoint did not panic")
				}
			}()
			tx.RollbackTo(inner)
		}()
		if id, err := tx.NextSequence("ids"); err != nil || id != 3 {
			t.Fatalf("NextSequence after rollback = %d, %v", id, err)
		}
		return nil
	})
	if hooks != 1 {
		t.Fatalf("hooks value = %d, want 1 (rolled-back hook must not run)", hooks)
	}
	if got, want := rawKeys(t, s), map[string]string{"x": "x1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("raw keys = %v, want %v", got, want)
	}
	mustView(t, s, func(tx *Txn) error {
		list, err := tx.List("ns")
		if err != nil {
			return err
		}
		if len(list) != 2 || list[0].Name != "base" || list[0].Version != 1 || list[1].Name != "kept" || list[1].Version != 1 {
			t.Fatalf("objects = %+v", list)
		}
		if v, ok, err := tx.get(sequenceKey("other")); err != nil || ok {
			t.Fatalf("rolled-back sequence persisted: %x %v", v, err)
		}
		return nil
	})
	if got := s.LastEventSeq(); got != seqBefore+1 {
		t.Fatalf("LastEventSeq = %d, want %d", got, seqBefore+1)
	}
	mustUpdate(t, s, func(tx *Txn) error {
		if id, err := tx.NextSequence("ids"); err != nil || id != 4 {
			t.Fatalf("NextSequence next txn = %d, %v", id, err)
		}
		return nil
	})

	// A savepoint of another transaction is refused.
	var foreign Savepoint
	mustUpdate(t, s, func(tx *Txn) error { foreign = tx.Savepoint(); return nil })
	mustUpdate(t, s, func(tx *Txn) error {
		defer func() {
			if recover() == nil {
				t.Fatal("RollbackTo with a foreign savepoint did not panic")
			}
		}()
		tx.RollbackTo(foreign)
		return nil
	})
}

func TestFnErrorWritesNothing(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	m := create(t, s, CreateSpec{Namespace: "ns", Name: "n", Kind: "k", Tier: TierDurable, Payload: []byte("p1")})
	local := create(t, s, CreateSpec{Namespace: "ns", Name: "l", Kind: "k", Payload: []byte("l1")})
	before := s.Stats()
	seq := s.LastEventSeq()
	fail := errors.New("fn failed")
	ran := false
	err := s.Update(func(tx *Txn) error {
		tx.AfterCommit(func() { ran = true })
		if err := tx.Set([]byte("k"), []byte("v")); err != nil {
			return err
		}
		if _, err := tx.Create(CreateSpec{Namespace: "ns", Name: "new", Kind: "k"}); err != nil {
			return err
		}
		if _, err := tx.Write(m.OID, 1, WriteSpec{Payload: []byte("p2")}); err != nil {
			return err
		}
		if _, err := tx.Write(local.OID, 1, WriteSpec{Payload: []byte("l2")}); err != nil {
			return err
		}
		if _, err := tx.NextSequence("s"); err != nil {
			return err
		}
		if _, err := tx.AppendEvent("e", "x"); err != nil {
			return err
		}
		return fail
	})
	if err != fail {
		t.Fatalf("Update = %v, want the fn's error unchanged", err)
	}
	if ran {
		t.Fatal("AfterCommit hook ran for a failed transaction")
	}
	if after := s.Stats(); after.SyncedCommits != before.SyncedCommits {
		t.Fatalf("SyncedCommits %d -> %d", before.SyncedCommits, after.SyncedCommits)
	}
	if s.LastEventSeq() != seq {
		t.Fatalf("LastEventSeq moved %d -> %d", seq, s.LastEventSeq())
	}
	if keys := rawKeys(t, s); len(keys) != 0 {
		t.Fatalf("raw keys = %v", keys)
	}
	for oid, want := range map[string]string{m.OID: "p1", local.OID: "l1"} {
		if got, data, err := read(t, s, oid); err != nil || got.Version != 1 || string(data) != want {
			t.Fatalf("Read(%s) = v%d %q %v", oid, got.Version, data, err)
		}
	}
	mustUpdate(t, s, func(tx *Txn) error {
		if _, err := tx.Lookup("ns", "new"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Lookup(new) = %v", err)
		}
		if id, err := tx.NextSequence("s"); err != nil || id != 1 {
			t.Fatalf("NextSequence = %d, %v", id, err)
		}
		return nil
	})
	// A panicking fn releases the write lock and writes nothing.
	func() {
		defer func() { _ = recover() }()
		_ = s.Update(func(tx *Txn) error {
			_ = tx.Set([]byte("panic"), []byte("v"))
			panic("fn panicked")
		})
	}()
	mustUpdate(t, s, func(tx *Txn) error {
		if _, err := tx.Get([]byte("panic")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("key from panicking fn: %v", err)
		}
		return nil
	})
}

func TestEventSeqGapFree(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				err := s.Update(func(tx *Txn) error {
					if _, err := tx.AppendEvent("tick", map[string]int{"w": w, "i": i}); err != nil {
						return err
					}
					if _, err := tx.AppendEvent("tock", nil); err != nil {
						return err
					}
					if i%3 == 0 {
						return errors.New("abandon") // consumes no seqs
					}
					return nil
				})
				if err != nil && err.Error() != "abandon" {
					t.Errorf("Update: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	committed := workers * (perWorker - (perWorker+2)/3)
	checkEvents := func(s *Store, want int) {
		t.Helper()
		events, err := s.Events(0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != want {
			t.Fatalf("%d events, want %d", len(events), want)
		}
		for i, e := range events {
			if e.Seq != uint64(i+1) {
				t.Fatalf("event %d has seq %d", i, e.Seq)
			}
			if i%2 == 1 && (e.Kind != "tock" || events[i-1].Kind != "tick") {
				t.Fatalf("events of one commit interleaved at %d: %s %s", i, events[i-1].Kind, e.Kind)
			}
		}
		if s.LastEventSeq() != uint64(want) {
			t.Fatalf("LastEventSeq = %d, want %d", s.LastEventSeq(), want)
		}
	}
	checkEvents(s, 2*committed)

	page, err := s.Events(10, 5)
	if err != nil || len(page) != 5 || page[0].Seq != 11 || page[4].Seq != 15 {
		t.Fatalf("Events(10, 5) = %+v, %v", page, err)
	}
	if _, err := s.Events(0, -1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Events(limit -1) = %v", err)
	}
	closeTest(t, s)

	s = openTest(t, dir, nil)
	defer closeTest(t, s)
	checkEvents(s, 2*committed)
	var seq uint64
	mustUpdate(t, s, func(tx *Txn) error {
		var err error
		seq, err = tx.AppendEvent("after-reopen", nil)
		return err
	})
	if seq != uint64(2*committed+1) {
		t.Fatalf("first seq after reopen = %d, want %d", seq, 2*committed+1)
	}
	err = s.Update(func(tx *Txn) error {
		_, err := tx.AppendEvent("bad", make(chan int))
		return err
	})
	wantErr(t, err, ErrInvalid)
	if !strings.Contains(err.Error(), "data") {
		t.Fatalf("marshal error does not name data: %v", err)
	}
}

// TestOnApplied checks that an OnApplied hook runs under the write lock
// before the commit's AfterCommit hooks, and never for what a transaction did
// not apply: not after an error, a rollback past it, or an empty batch.
func TestOnApplied(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	var order []string
	if err := s.Update(func(tx *Txn) error {
		tx.OnApplied(func() { order = append(order, "applied") })
		tx.AfterCommit(func() { order = append(order, "after-commit") })
		return tx.Set([]byte("k"), []byte("v"))
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"applied", "after-commit"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("hooks ran %v, want %v", order, want)
	}

	ran := 0
	mustNotRun := func() { ran++ }
	fail := errors.New("fn failed")
	if err := s.Update(func(tx *Txn) error {
		tx.OnApplied(mustNotRun)
		if err := tx.Set([]byte("k"), []byte("w")); err != nil {
			return err
		}
		return fail
	}); !errors.Is(err, fail) {
		t.Fatalf("Update = %v, want %v", err, fail)
	}
	if err := s.Update(func(tx *Txn) error {
		sp := tx.Savepoint()
		tx.OnApplied(mustNotRun)
		if err := tx.Set([]byte("k"), []byte("x")); err != nil {
			return err
		}
		tx.RollbackTo(sp)
		return tx.Set([]byte("other"), []byte("y"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(tx *Txn) error {
		tx.OnApplied(mustNotRun)
		_, err := tx.Get([]byte("k"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if ran != 0 {
		t.Fatalf("OnApplied ran %d times for transactions that applied nothing of theirs", ran)
	}

	// A hook runs under the write lock, so no Update can start before it ends.
	held := false
	if err := s.Update(func(tx *Txn) error {
		tx.OnApplied(func() {
			held = !s.writeMu.TryLock()
			if !held {
				s.writeMu.Unlock()
			}
		})
		return tx.Set([]byte("a"), []byte("1"))
	}); err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Fatal("an OnApplied hook ran without the write lock")
	}
}

// TestSetFuncEncodesWhenTheBatchIsBuilt checks SetFunc: the value is
// encoded once, after the transaction's function returns and with the write
// lock let go, unless a read needs it first; a scan of the transaction sees
// it; a rollback drops it unrun; a nil encoder is refused; a key the read
// cache held leaves it, and the next Update reads the new value; an
// encoder's error is a read's error, and fails the commit and the store.
func TestSetFuncEncodesWhenTheBatchIsBuilt(t *testing.T) {
	s := openTest(t, t.TempDir(), newFakeClock())
	defer closeTest(t, s)
	var returned bool
	runs := 0
	encode := func(v string) ValueEncoderFunc {
		return func(dst []byte) ([]byte, error) {
			runs++
			if !returned {
				t.Errorf("%s was encoded before the transaction's function returned", v)
			}
			if !s.writeMu.TryLock() {
				t.Errorf("%s was encoded under the write lock", v)
			} else {
				s.writeMu.Unlock()
			}
			return append(dst, v...), nil
		}
	}
	mustUpdate(t, s, func(tx *Txn) error { return tx.Set([]byte("k/held"), []byte("old")) })
	mustUpdate(t, s, func(tx *Txn) error {
		_, err := tx.Get([]byte("k/held")) // read twice: the read cache holds it
		return err
	})
	mustUpdate(t, s, func(tx *Txn) error {
		_, err := tx.Get([]byte("k/held"))
		return err
	})
	if _, ok := s.reads.get([]byte("k/held")); !ok {
		t.Fatal("the read cache does not hold a key read twice")
	}
	mustUpdate(t, s, func(tx *Txn) error {
		if err := tx.SetFunc([]byte("k/late"), encode("late")); err != nil {
			return err
		}
		if err := tx.SetFunc([]byte("k/held"), encode("new")); err != nil {
			return err
		}
		sp := tx.Savepoint()
		if err := tx.SetFunc([]byte("k/dropped"), encode("dropped")); err != nil {
			return err
		}
		tx.RollbackTo(sp)
		if err := tx.SetFunc([]byte("k/nil"), nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("a nil encoder: %v", err)
		}
		if err := tx.SetFunc([]byte("k/nil"), ValueEncoderFunc(nil)); !errors.Is(err, ErrInvalid) {
			t.Errorf("a nil encoder function: %v", err)
		}
		returned = true
		return nil
	})
	if runs != 2 {
		t.Fatalf("the encoders ran %d times, want twice (the rolled-back one not at all)", runs)
	}
	if _, ok := s.reads.get([]byte("k/held")); ok {
		t.Fatal("the read cache still holds a key written with SetFunc")
	}
	mustUpdate(t, s, func(tx *Txn) error {
		for key, want := range map[string]string{"k/late": "late", "k/held": "new"} {
			if v, err := tx.Get([]byte(key)); err != nil || string(v) != want {
				t.Errorf("%s after its commit: %q %v, want %q", key, v, err, want)
			}
		}
		if _, err := tx.Get([]byte("k/dropped")); !errors.Is(err, ErrNotFound) {
			t.Errorf("a rolled-back value: %v, want ErrNotFound", err)
		}
		return nil
	})

	runs = 0
	mustUpdate(t, s, func(tx *Txn) error {
		if err := tx.SetFunc([]byte("k/read"), ValueEncoderFunc(func(dst []byte) ([]byte, error) { runs++; return append(dst, "read"...), nil })); err != nil {
			return err
		}
		var seen []string
		err := tx.Scan([]byte("k/"), func(key, value []byte) error {
			seen = append(seen, string(key)+"="+string(value))
			return nil
		})
		if want := []string{"k/held=new", "k/late=late", "k/read=read"}; err != nil || !slices.Equal(seen, want) {
			t.Errorf("a scan: %q %v, want %q", seen, err, want)
		}
		if v, err := tx.Get([]byte("k/read")); err != nil || string(v) != "read" {
			t.Errorf("a read of a value encoded late: %q %v", v, err)
		}
		return nil
	})
	if runs != 1 {
		t.Fatalf("an encoder a read ran first ran %d times, want once", runs)
	}

	err := s.Update(func(tx *Txn) error {
		if err := tx.SetFunc([]byte("k/broken"), ValueEncoderFunc(func([]byte) ([]byte, error) { return nil, errors.New("no encoding") })); err != nil {
			return err
		}
		if _, err := tx.Get([]byte("k/broken")); err == nil || !strings.Contains(err.Error(), "no encoding") {
			t.Errorf("a read of a value whose encoder fails: %v", err)
		}
		return nil
	})
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "no encoding") {
		t.Fatalf("a failing encoder: %v, want the store failed by its error", err)
	}
	if err := s.Update(func(tx *Txn) error { return tx.Set([]byte("k/v"), []byte("v")) }); !errors.Is(err, ErrFailed) {
		t.Fatalf("an update after a failed encoding: %v, want ErrFailed", err)
	}
}

// TestSetFuncKeepsWhatTheEncoderReturned checks values encoded late past
// the scratch buffer's room, and that an encoder that returns a buffer of
// its own keeps it: the store copies it and never lends it out again.
func TestSetFuncKeepsWhatTheEncoderReturned(t *testing.T) {
	s := openTest(t, t.TempDir(), newFakeClock())
	defer closeTest(t, s)
	own := []byte("mine")
	big := bytes.Repeat([]byte("0123456789abcdef"), 5000) // 80 KB: grown past the scratch buffer
	mustUpdate(t, s, func(tx *Txn) error {
		return tx.SetFunc([]byte("k/own"), ValueEncoderFunc(func([]byte) ([]byte, error) { return own, nil }))
	})
	// Encodings after it reuse the pool's buffers, which must not be own.
	for i := range 20 {
		mustUpdate(t, s, func(tx *Txn) error {
			return tx.SetFunc([]byte(fmt.Sprintf("k/%d", i)), ValueEncoderFunc(func(dst []byte) ([]byte, error) { return append(dst, "XYZW"...), nil }))
		})
	}
	mustUpdate(t, s, func(tx *Txn) error {
		return tx.SetFunc([]byte("k/big"), ValueEncoderFunc(func(dst []byte) ([]byte, error) { return append(dst, big...), nil }))
	})
	if string(own) != "mine" {
		t.Fatalf("the encoder's own buffer was written over: %q", own)
	}
	mustUpdate(t, s, func(tx *Txn) error {
		if v, err := tx.Get([]byte("k/own")); err != nil || string(v) != "mine" {
			t.Errorf("k/own: %q %v", v, err)
		}
		if v, err := tx.Get([]byte("k/big")); err != nil || !bytes.Equal(v, big) {
			t.Errorf("k/big: %d bytes %v, want %d", len(v), err, len(big))
		}
		return nil
	})
}

// A commit's hooks all run, whatever one of them does: one that panics
// does not keep the ones after it from running, and its panic goes on up
// once they ran.
func TestEveryHookRunsAfterOnePanics(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	var ran []int
	func() {
		defer func() {
			if r := recover(); r != "hook 2" {
				t.Fatalf("recovered %v, want hook 2's panic", r)
			}
		}()
		_ = s.Update(func(tx *Txn) error {
			for i := 1; i <= 4; i++ {
				tx.AfterCommit(func() {
					ran = append(ran, i)
					if i == 2 {
						panic("hook 2")
					}
				})
			}
			return tx.Set([]byte("k"), []byte("v"))
		})
	}()
	if fmt.Sprint(ran) != "[1 2 3 4]" {
		t.Fatalf("hooks ran: %v, want all four in order", ran)
	}
}
