package objects

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// startLazy runs, on its own goroutine, an Update that sets key and lets
// its sync wait for a later commit's (SyncLater), and returns once that
// commit waits for one; the Update's error arrives on the channel.
func startLazy(t *testing.T, s *Store, key string) <-chan error {
	t.Helper()
	s.lazyMu.Lock()
	before := len(s.lazy)
	s.lazyMu.Unlock()
	done := make(chan error, 1)
	go func() {
		done <- s.Update(func(tx *Txn) error {
			tx.SyncLater()
			return tx.Set([]byte(key), []byte("lazy"))
		})
	}()
	for {
		s.lazyMu.Lock()
		n := len(s.lazy)
		s.lazyMu.Unlock()
		if n > before {
			return done
		}
		select {
		case err := <-done:
			t.Fatalf("the lazy Update returned before it waited: %v", err)
		default:
		}
		runtime.Gosched()
	}
}

// released waits for a lazy Update's error: one that no synced commit
// released would hang the test.
func released(t *testing.T, done <-chan error) error {
	t.Helper()
	return within(t, generous, "a lazy Update after a synced commit", func() error { return <-done })
}

// TestSyncLaterSharesTheNextCommitsSync: a commit applied without a sync
// request returns only once the next commit's sync made it durable too, and
// both cost the log one sync; a crash after that keeps both.
func TestSyncLaterSharesTheNextCommitsSync(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s, err := Open("/store", Options{FS: mem, Clock: newFakeClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	s.lazyWait = time.Hour // only the next commit ends the wait
	syncs := s.fs.syncs.Load()
	lazy := startLazy(t, s, "k/lazy")
	select {
	case err := <-lazy:
		t.Fatalf("the lazy Update returned before any sync: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	mustUpdate(t, s, func(tx *Txn) error { return tx.Set([]byte("k/next"), []byte("synced")) })
	if err := released(t, lazy); err != nil {
		t.Fatalf("the lazy Update: %v", err)
	}
	if n := s.fs.syncs.Load() - syncs; n != 1 {
		t.Errorf("two commits, one lazy, took %d syncs of the log, want 1", n)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	closeTest(t, s)
	s2, err := Open("/store", Options{FS: crashed, Clock: newFakeClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	defer closeTest(t, s2)
	mustView(t, s2, func(tx *Txn) error {
		for _, key := range []string{"k/lazy", "k/next"} {
			if _, err := tx.Get([]byte(key)); err != nil {
				t.Errorf("%s after a crash: %v", key, err)
			}
		}
		return nil
	})
}

// TestSyncLaterAloneSyncsItself: with no commit after it, a lazy commit asks
// for its own sync once its wait is over, and is durable when it returns.
func TestSyncLaterAloneSyncsItself(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s, err := Open("/store", Options{FS: mem, Clock: newFakeClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	syncs := s.fs.syncs.Load()
	if err := s.Update(func(tx *Txn) error {
		tx.SyncLater()
		return tx.Set([]byte("k/alone"), []byte("v"))
	}); err != nil {
		t.Fatal(err)
	}
	if n := s.fs.syncs.Load() - syncs; n != 1 {
		t.Errorf("a lazy commit alone took %d syncs of the log, want 1", n)
	}
	s.lazyMu.Lock()
	left := len(s.lazy)
	s.lazyMu.Unlock()
	if left != 0 {
		t.Errorf("%d lazy commits still wait after the Update returned", left)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	closeTest(t, s)
	s2, err := Open("/store", Options{FS: crashed, Clock: newFakeClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	defer closeTest(t, s2)
	mustView(t, s2, func(tx *Txn) error {
		if _, err := tx.Get([]byte("k/alone")); err != nil {
			t.Errorf("after a crash: %v", err)
		}
		return nil
	})
}

// TestSyncLaterFailsWithTheCommitThatCoversIt: when the sync of the commit
// that would cover a lazy one fails, both Updates fail, and so does every
// later one; the lazy commit is never reported durable.
func TestSyncLaterFailsWithTheCommitThatCoversIt(t *testing.T) {
	fault := walFault(errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo)
	s, err := Open(t.TempDir(), Options{FS: errorfs.Wrap(vfs.Default, fault)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	s.lazyWait = time.Hour
	lazy := startLazy(t, s, "k/lazy")
	fault.On()
	defer fault.Off()
	err = s.Update(func(tx *Txn) error { return tx.Set([]byte("k/next"), []byte("v")) })
	wantErr(t, err, ErrFailed)
	wantErr(t, released(t, lazy), ErrFailed)
	wantErr(t, s.Update(func(tx *Txn) error { return tx.Set([]byte("k/after"), []byte("v")) }), ErrFailed)
}

// TestSyncLaterIsCoveredByOnlyALaterBatch: lazy commits that follow one
// another each wait for a synced commit after them; none covers another,
// and many at once all return once one synced commit follows them.
func TestSyncLaterIsCoveredByOnlyALaterBatch(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	s.lazyWait = time.Hour
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		done := startLazy(t, s, "k/a")
		wg.Go(func() { errs[i] = released(t, done) })
		s.lazyMu.Lock()
		waiting := len(s.lazy)
		s.lazyMu.Unlock()
		if waiting != i+1 {
			t.Fatalf("%d lazy commits wait after %d, want each to wait", waiting, i+1)
		}
	}
	mustUpdate(t, s, func(tx *Txn) error { return tx.Set([]byte("k/b"), []byte("v")) })
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
