package kernel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
)

// recordCache holds the committed records of running processes, so that the
// first load of a record in a commit decodes nothing: decoding a record was
// the largest cost of a quantum under the store's write lock. It also keeps
// the records of the last endedKeep processes that ended, apart: a parent
// reads its child's record once more when it waits for it or is woken, and a
// bound of that size leaves memory to the processes that run.
//
// It is used only with the store's write lock held: Update transactions read
// it, and the OnApplied hook of a commit that wrote records brings it up to
// date before the next Update can start. A view never reads it, because its
// snapshot may be older than the cache. Entries are never modified; a load
// hands out a deep copy.
type recordCache struct {
	recs  map[int64]*procRecord
	limit int
	// ended holds the records of processes that ended, the last endedKeep
	// of them: endedOrder is a ring of their pids, oldest at endedNext.
	ended      map[int64]*procRecord
	endedOrder [endedKeep]int64
	endedNext  int
	// check makes every hit compare the cached record's encoding with the
	// stored one and fail on a difference; tests turn it on by setting
	// LIBOS_CHECK_CACHES=1 before a runtime opens.
	check bool
}

// recordCacheLimit bounds the cache; past it an arbitrary entry makes room,
// and a load of it decodes the record again.
const recordCacheLimit = 16384

// endedKeep is how many records of ended processes the cache keeps.
const endedKeep = 64

func newRecordCache() *recordCache {
	return &recordCache{
		recs:  map[int64]*procRecord{},
		limit: recordCacheLimit,
		ended: map[int64]*procRecord{},
		check: os.Getenv("LIBOS_CHECK_CACHES") == "1",
	}
}

// load returns a copy of pid's committed record, if cached.
func (c *recordCache) load(tx *txn, pid int64) (*procRecord, bool, error) {
	if c == nil || tx.readOnly {
		return nil, false, nil
	}
	r, ok := c.recs[pid]
	if !ok {
		if r, ok = c.ended[pid]; !ok {
			return nil, false, nil
		}
	}
	if c.check {
		if err := verifyCached(tx, r); err != nil {
			return nil, false, err
		}
	}
	return r.snapshot(), true, nil
}

// publish registers, in tx, the update of the cache with the records it
// writes. The record of a process that ended moves to the ended records, and
// the record of one in a long wait leaves the cache, as its decoded context
// does (see waitsLong).
func (c *recordCache) publish(tx *txn, written []*procRecord) {
	if c == nil || len(written) == 0 {
		return
	}
	tx.OnApplied(func() {
		for _, r := range written {
			delete(c.ended, r.PID) // a restore can make an ended process live again
			if r.State.Terminal() {
				delete(c.recs, r.PID)
				c.keepEnded(r)
				continue
			}
			if r.waitsLong() {
				delete(c.recs, r.PID)
				continue
			}
			if _, ok := c.recs[r.PID]; !ok && len(c.recs) >= c.limit {
				for victim := range c.recs {
					delete(c.recs, victim)
					break
				}
			}
			c.recs[r.PID] = r
		}
	})
}

// keepEnded keeps r, the record of a process that ended, in place of the
// oldest one kept.
func (c *recordCache) keepEnded(r *procRecord) {
	if old := c.endedOrder[c.endedNext]; old != 0 {
		delete(c.ended, old)
	}
	c.endedOrder[c.endedNext] = r.PID
	c.endedNext = (c.endedNext + 1) % endedKeep
	c.ended[r.PID] = r
}

// verifyCached fails if r does not encode to the record stored for its pid.
func verifyCached(tx *txn, r *procRecord) error {
	stored, err := tx.Get(procKey(r.PID))
	if err != nil {
		return fmt.Errorf("check cached record of pid %d: %w", r.PID, err)
	}
	cached, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("check cached record of pid %d: %w", r.PID, err)
	}
	if !bytes.Equal(cached, stored) {
		return fmt.Errorf("cached record of pid %d differs from the stored one:\ncached %s\nstored %s", r.PID, cached, stored)
	}
	return nil
}
