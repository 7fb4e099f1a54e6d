package objects

import (
	"errors"
	"runtime"
	"strings"
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
	keptAfterACrash(t, mem, s, "k/lazy", "k/next")
}

// keptAfterACrash closes s, opens what a crash would have left of mem, and
// checks that it holds keys.
func keptAfterACrash(t *testing.T, mem *vfs.MemFS, s *Store, keys ...string) {
	t.Helper()
	s2 := openAfterACrash(t, mem, s, "/store")
	mustView(t, s2, func(tx *Txn) error {
		for _, key := range keys {
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
	keptAfterACrash(t, mem, s, "k/alone")
}

// TestSyncLaterFailsWithTheCommitThatCoversIt: when the sync of the commit
// that would cover a lazy one fails, both Updates fail, and so does every
// later one; the lazy commit is never reported durable.
func TestSyncLaterFailsWithTheCommitThatCoversIt(t *testing.T) {
	s, fault := openSyncFault(t)
	s.lazyWait = time.Hour
	lazy := startLazy(t, s, "k/lazy")
	fault.On()
	defer fault.Off()
	err := s.Update(func(tx *Txn) error { return tx.Set([]byte("k/next"), []byte("v")) })
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

// heldSyncs holds every sync of a write-ahead log while held is set, and
// counts the syncs it holds.
type heldSyncs struct {
	mu      sync.Mutex
	held    bool
	release chan struct{}
	waiting int
}

func newHeldSyncs() *heldSyncs { return &heldSyncs{release: make(chan struct{})} }

func (h *heldSyncs) hold() {
	h.mu.Lock()
	h.held = true
	h.mu.Unlock()
}

// unhold lets the held syncs go, and every later one; a second call does
// nothing, so a failing test may call it again before closing the store.
func (h *heldSyncs) unhold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		h.held = false
		close(h.release)
	}
}

// holding reports how many syncs wait.
func (h *heldSyncs) holding() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting
}

func (h *heldSyncs) inject(op errorfs.Op) error {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	default:
		return nil
	}
	if !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	h.mu.Lock()
	if !h.held {
		h.mu.Unlock()
		return nil
	}
	h.waiting++
	release := h.release
	h.mu.Unlock()
	<-release
	return nil
}

// openHeld opens a store whose log syncs h can hold; it is closed at the
// test's end, after h lets its syncs go.
func openHeld(t *testing.T) (*Store, *heldSyncs) {
	t.Helper()
	h := newHeldSyncs()
	s, err := Open(t.TempDir(), Options{FS: errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(h.inject))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.unhold() // before the close, which a held sync would block
		closeTest(t, s)
	})
	return s, h
}

// waitFor polls cond until it holds, failing the test after a while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(generous)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, generous)
		}
		time.Sleep(time.Millisecond)
	}
}

// notYet fails the test if done delivers within a short while.
func notYet(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v)", what, err)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestSyncLaterIsNotCoveredByAnEarlierCommit: a commit whose sync began
// before a lazy commit was applied does not release it, whatever the order
// in which their Updates wait; the next synced commit does.
func TestSyncLaterIsNotCoveredByAnEarlierCommit(t *testing.T) {
	s, h := openHeld(t)
	s.lazyWait = time.Hour
	h.hold()
	earlier := make(chan error, 1)
	go func() { earlier <- s.Update(func(tx *Txn) error { return tx.Set([]byte("k/earlier"), []byte("v")) }) }()
	waitFor(t, "the earlier commit's sync is held", func() bool { return h.holding() > 0 })
	lazy := startLazy(t, s, "k/lazy")
	h.unhold()
	if err := released(t, earlier); err != nil {
		t.Fatal(err)
	}
	notYet(t, lazy, "a lazy commit applied after a synced commit's sync began, once that sync ended,")
	mustUpdate(t, s, func(tx *Txn) error { return tx.Set([]byte("k/later"), []byte("v")) })
	if err := released(t, lazy); err != nil {
		t.Fatal(err)
	}
}

// TestSyncLaterWaitsForTheCommitThatTookIt: a lazy commit whose wait ends
// after a synced commit took it returns only once that commit's sync did,
// not before, and does not ask for a sync of its own; with every sync of
// the log held, no Update returns.
func TestSyncLaterWaitsForTheCommitThatTookIt(t *testing.T) {
	s, h := openHeld(t)
	s.lazyWait = 20 * time.Millisecond
	h.hold()
	lazy := startLazy(t, s, "k/lazy")
	covering := make(chan error, 1)
	go func() { covering <- s.Update(func(tx *Txn) error { return tx.Set([]byte("k/covering"), []byte("v")) }) }()
	waitFor(t, "the covering commit took the lazy one", func() bool {
		s.lazyMu.Lock()
		defer s.lazyMu.Unlock()
		return len(s.lazy) == 0
	})
	time.Sleep(3 * s.lazyWait) // the lazy commit's wait is over
	notYet(t, lazy, "a lazy commit whose covering commit's sync is held")
	notYet(t, covering, "a commit whose sync is held")
	syncs := s.fs.syncs.Load()
	h.unhold()
	if err := released(t, covering); err != nil {
		t.Fatal(err)
	}
	if err := released(t, lazy); err != nil {
		t.Fatal(err)
	}
	if n := s.fs.syncs.Load() - syncs; n != 1 {
		t.Errorf("%d syncs of the log after the hold, want the covering commit's alone", n)
	}
}

// TestSyncLaterEndsWithAFailedStore: lazy commits waiting when the store
// fails return its failure, and none asks Pebble for a sync after it.
func TestSyncLaterEndsWithAFailedStore(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer func() { _ = s.Close() }()
	s.lazyWait = time.Hour
	lazy := startLazy(t, s, "k/lazy")
	syncs := s.fs.syncs.Load()
	s.fail(errors.New("injected"))
	wantErr(t, released(t, lazy), ErrFailed)
	s.lazyWait = time.Nanosecond
	late := s.Update(func(tx *Txn) error {
		tx.SyncLater()
		return tx.Set([]byte("k/late"), []byte("v"))
	})
	wantErr(t, late, ErrFailed)
	if n := s.fs.syncs.Load() - syncs; n != 0 {
		t.Errorf("%d syncs of the log after the failure", n)
	}
}

// openAfterACrash closes s and opens, at dir, what a crash would have left
// of mem; the store is closed when the test ends.
func openAfterACrash(t *testing.T, mem *vfs.MemFS, s *Store, dir string) *Store {
	t.Helper()
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	closeTest(t, s)
	s2, err := Open(dir, Options{FS: crashed, Clock: newFakeClock().Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeTest(t, s2) })
	return s2
}
