package objects

// readCache holds what Update transactions read of the database, values and
// absences alike, so that a key read at every commit (a process's mailbox
// header) is not looked up in Pebble under the write lock each time: a lookup
// walks every level's iterator.
//
// Most keys a commit reads it reads once (a call record, a new name), so a
// key first enters a small probation segment and moves to the main one when
// a later Update reads it again; read-once keys then churn only probation
// and do not push out the hot ones, even when one Update reads them twice.
//
// It is used only with writeMu held: Update transactions read and fill it,
// and each applied batch updates the entries of the keys it wrote, so it is
// exact for the next Update. A View never reads it, since its snapshot may be
// older. Values are never modified; readers copy them.
type readCache struct {
	main, probation readSegment
	// turn numbers the Updates (newTurn); an entry put on probation
	// records it.
	turn uint64
}

// readSegment is a map of entries with a bound on their bytes; past it, an
// arbitrary entry makes room.
type readSegment struct {
	entries map[string]storedRead
	bytes   int
	limit   int
}

const (
	// readCacheBytes bounds the cache's keys and values, a quarter of it
	// for probation.
	readCacheBytes = 256 << 10
	// readCacheValueMax is the largest value kept: the hot keys are small,
	// and a large one would push many of them out.
	readCacheValueMax = 1 << 10
	// readCacheEntryOverhead approximates a map entry's own cost.
	readCacheEntryOverhead = 64
)

func newReadCache(limit int) *readCache {
	return &readCache{
		main:      readSegment{entries: map[string]storedRead{}, limit: limit - limit/4},
		probation: readSegment{entries: map[string]storedRead{}, limit: limit / 4},
	}
}

// newTurn starts an Update's reads.
func (c *readCache) newTurn() { c.turn++ }

// get returns key's committed state, if held; a key held in probation moves
// to the main segment when an Update after the one that put it reads it.
func (c *readCache) get(key []byte) (storedRead, bool) {
	if r, ok := c.main.entries[string(key)]; ok {
		return r, true
	}
	r, ok := c.probation.entries[string(key)]
	if ok && r.turn != c.turn {
		k := string(key)
		c.probation.remove(k)
		c.main.put(k, r)
	}
	return r, ok
}

// put keeps r as the committed state of a key just read from the database.
func (c *readCache) put(key string, r storedRead) {
	c.main.remove(key)
	r.turn = c.turn
	c.probation.put(key, r)
}

// applied brings the cache up to date with a batch that was applied: each
// key it holds takes its new state. A key written but not held stays out,
// since most writes (events, call and tool records, the live index) are not
// read back; a held key whose value is encoded late (Txn.SetFunc, object
// metadata) leaves, so that it is not encoded under the write lock for a
// read that may never come.
func (c *readCache) applied(writes map[string]*stagedValue) {
	for k, sv := range writes {
		if sv.encode != nil {
			c.main.remove(k)
			c.probation.remove(k)
			continue
		}
		r := storedRead{value: sv.value, found: !sv.deleted} // a delete stages no value
		c.main.refresh(k, r)
		c.probation.refresh(k, r)
	}
}

// refresh gives key its new committed state if the segment holds it.
func (s *readSegment) refresh(key string, r storedRead) {
	if _, held := s.entries[key]; held {
		s.put(key, r)
	}
}

func entryBytes(key string, r storedRead) int {
	return len(key) + len(r.value) + readCacheEntryOverhead
}

// put keeps r under key, evicting arbitrary entries to stay within the
// limit; a value too large to keep removes the key instead.
func (s *readSegment) put(key string, r storedRead) {
	s.remove(key)
	n := entryBytes(key, r)
	if len(r.value) > readCacheValueMax || n > s.limit {
		return
	}
	for s.bytes+n > s.limit {
		for victim := range s.entries {
			s.remove(victim)
			break
		}
	}
	s.entries[key] = r
	s.bytes += n
}

func (s *readSegment) remove(key string) {
	if old, ok := s.entries[key]; ok {
		s.bytes -= entryBytes(key, old)
		delete(s.entries, key)
	}
}
