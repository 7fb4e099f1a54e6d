package objects

import (
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// lazySyncWait bounds how long a commit applied without a sync request
// waits for a later commit's sync before it asks for its own
// (Store.lazyWait, which tests change).
const lazySyncWait = time.Millisecond

// lazySync is a commit applied without a sync request (Txn.SyncLater).
type lazySync struct {
	done   chan struct{} // closed by the commit whose sync covered it
	failed bool          // that commit failed; set before done closes
}

// release tells l's Update the outcome of the sync that covered it, or the
// store's failure. Only whoever took l from the list calls it.
func (l *lazySync) release(failed bool) {
	l.failed = failed
	close(l.done)
}

// outcome is what l's Update reports once released.
func (s *Store) outcome(l *lazySync) error {
	if l.failed {
		return fmt.Errorf("the commit that covered it failed: %w", s.failedErr())
	}
	return nil
}

// addLazy records l, applied, for the next synced commit to cover, or for
// fail to release. Whoever takes l from the list closes its done. Caller
// has its batch's turn.
func (s *Store) addLazy(l *lazySync) {
	s.lazyMu.Lock()
	s.lazy = append(s.lazy, l)
	s.lazyMu.Unlock()
}

// takeLazy takes the lazy commits applied so far, which a commit applied
// after them with a sync covers. Caller has its batch's turn.
func (s *Store) takeLazy() []*lazySync {
	s.lazyMu.Lock()
	defer s.lazyMu.Unlock()
	l := s.lazy
	s.lazy = nil
	return l
}

// waitSync waits until batch, applied, is durable: its own sync, or, for a
// lazy commit, the sync of a later commit, or after lazySyncWait a sync it
// asks for.
func (s *Store) waitSync(batch *pebble.Batch, lazy *lazySync) error {
	if lazy == nil {
		return batch.SyncWait()
	}
	t := time.NewTimer(s.lazyWait)
	defer t.Stop()
	select {
	case <-lazy.done:
		return s.outcome(lazy)
	case <-t.C:
	}
	s.lazyMu.Lock()
	if i := slices.Index(s.lazy, lazy); i >= 0 {
		s.lazy = slices.Delete(s.lazy, i, i+1)
		s.lazyMu.Unlock()
		// A failed store sends Pebble nothing more (fail releases the
		// lazy commits; this one may have left the list first).
		if err := s.failedErr(); err != nil {
			return err
		}
		return s.syncLog()
	}
	s.lazyMu.Unlock()
	// A commit took it meanwhile, and reports its sync.
	<-lazy.done
	return s.outcome(lazy)
}

// syncLog asks for a sync of the write-ahead log, through an empty log
// record, and waits for it.
func (s *Store) syncLog() (err error) {
	defer recoverCommit("sync log", &err)
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("sync log: %w", s.writeErr(err))
	}
	return nil
}
