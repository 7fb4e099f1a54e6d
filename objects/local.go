package objects

import "sync"

// payload is a runtime-local payload in memory: body followed by tail. A
// caller that extends a payload from version to version hands its closing
// bytes over as the tail (WriteSpec.PayloadTail), so that the next version
// can grow body's array in place, past this version's bytes, which never
// change. Neither part is modified once staged.
type payload struct{ body, tail []byte }

func (p payload) len() int { return len(p.body) + len(p.tail) }

// appendTo appends the payload's bytes to dst.
func (p payload) appendTo(dst []byte) []byte { return append(append(dst, p.body...), p.tail...) }

// bytes returns the payload in one slice: body itself when there is no
// tail, else a copy. It must not be modified.
func (p payload) bytes() []byte {
	if len(p.tail) == 0 {
		return p.body
	}
	return p.appendTo(make([]byte, 0, p.len()))
}

// localEntry is one committed version of a runtime-local payload. Entries are
// immutable once published except for the older/supersededGen links, which
// change only under localStore.mu.
type localEntry struct {
	version uint64
	sha256  string
	data    payload
	removed bool // the object was removed at this point; data is empty
	// spillLen > 0 says data was moved to the spill file at spillOff.
	spillOff int64
	spillLen int
	// publishedGen is the commit generation that published this entry;
	// supersededGen the one that published the next newer entry (zero while
	// this entry is the newest).
	publishedGen  uint64
	supersededGen uint64
	older         *localEntry
}

// localStore holds runtime-local payloads in memory and the bookkeeping that
// ties them to Pebble's commit order.
//
// A View reads metadata from a Pebble snapshot, so it may need a payload
// version that a later commit has replaced. Each oid therefore keeps a chain
// of versions, newest first, and an older entry is dropped once no open View
// could still see the metadata that refers to it. Without open Views a chain
// holds one entry, or two while the commit that replaced the older is applied.
//
// A commit's payloads are published before Pebble makes its batch visible,
// so a snapshot never holds metadata whose payload is not here yet. If the
// apply fails, the versions the commit superseded stay in their chains (its
// gen is never applied), so Views go on finding what Pebble holds.
type localStore struct {
	mu   sync.RWMutex
	head map[string]*localEntry
	// gen counts published commits. A View records gen and takes its
	// snapshot under mu, so no commit is published in between. Commits are
	// published one at a time, each just before Pebble applies it, and the
	// next is published only once that apply is done: the snapshot holds
	// every commit up to gen-1 and perhaps gen, never gen+1. An entry
	// published at P and superseded at S is therefore needed only by a View
	// with recorded gen g where P <= g and g <= S (see neededLocked).
	gen uint64
	// appliedGen is the last gen whose commit Pebble has: an entry that a
	// later one superseded is kept whatever the open Views, because a View
	// that begins now may still take its snapshot without that commit.
	appliedGen uint64
	views      map[uint64]int      // recorded gen of each open View -> count
	chained    map[string]struct{} // oids whose chain has entries to prune later
	// last is the most recent commit handed on: a read-only Update, which
	// reads the batches not yet applied too, waits for it so it never
	// reports state that is not yet durable.
	last *commitWait
	// published is the commit published last (at gen): a View, whose
	// snapshot holds no later one, waits for it.
	published *commitWait
	// spill holds payloads moved out of memory (nil: none are).
	spill *localSpill
	// spillWanted are oids asked to spill while an open View kept an older
	// version of theirs; once pruning drops it, they move to spillReady and
	// the next endView or SpillLocal spills them. Without this, a payload of
	// a process that ended while any View was open stayed in memory.
	spillWanted map[string]struct{}
	spillReady  []string
}

func newLocalStore() *localStore {
	return &localStore{
		head:      make(map[string]*localEntry),
		views:     make(map[uint64]int),
		chained:   make(map[string]struct{}),
		last:      doneCommit(),
		published: doneCommit(),

		spillWanted: make(map[string]struct{}),
	}
}

// localChange is a staged runtime-local payload change of one transaction.
type localChange struct {
	version uint64
	sha256  string
	data    payload
	removed bool
}

// publish installs the changes of one commit about to be applied, in the
// order commits are applied. Every version a change replaces stays in its
// chain until applied runs: a View that begins meanwhile may have taken its
// snapshot before Pebble had this commit. Caller has its batch's turn to be
// applied (Store.applyTurn).
func (l *localStore) publish(changes map[string]*localChange, commit *commitWait) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.published = commit
	// A commit is published once the one before is applied: the store
	// publishes nothing more after a failed apply.
	l.appliedGen = l.gen
	l.gen++
	for oid, c := range changes {
		delete(l.spillWanted, oid) // a new version was not asked to spill
		prev := l.head[oid]
		e := &localEntry{version: c.version, sha256: c.sha256, data: c.data, removed: c.removed, publishedGen: l.gen}
		if prev != nil {
			prev.supersededGen = l.gen
			e.older = prev
			l.chained[oid] = struct{}{}
		} else if c.removed {
			continue
		}
		l.head[oid] = e
	}
}

// applied drops, once Pebble has the commit that published changes, the
// versions it superseded that no open View can read. Caller has its batch's
// turn to be applied.
func (l *localStore) applied(changes map[string]*localChange) {
	if len(changes) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.appliedGen = l.gen
	for oid := range changes {
		if _, ok := l.chained[oid]; ok {
			l.pruneChainLocked(oid)
		}
	}
}

// beginView registers an open View, runs snapshot with no commit published
// meanwhile, and returns the generation it must pass to endView and the
// commit it must wait for: the last one published, which the snapshot may
// hold, and no later one.
func (l *localStore) beginView(snapshot func()) (uint64, *commitWait) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.views[l.gen]++
	snapshot()
	return l.gen, l.published
}

func (l *localStore) endView(gen uint64) {
	l.mu.Lock()
	if l.views[gen]--; l.views[gen] <= 0 {
		delete(l.views, gen)
	}
	l.pruneLocked()
	l.mu.Unlock()
	l.spillPending()
}

// spillPending spills the payloads whose spill waited for an open View.
func (l *localStore) spillPending() {
	if l.spill == nil {
		return
	}
	l.mu.Lock()
	ready := l.spillReady
	l.spillReady = nil
	l.mu.Unlock()
	for _, oid := range ready {
		l.spillOut(oid)
	}
}

// pruneLocked unlinks chain entries no open View can need.
func (l *localStore) pruneLocked() {
	for oid := range l.chained {
		l.pruneChainLocked(oid)
	}
}

// pruneChainLocked unlinks the entries of oid's chain that no open View
// can need.
func (l *localStore) pruneChainLocked(oid string) {
	head := l.head[oid]
	if head == nil {
		delete(l.chained, oid)
		return
	}
	kept := head
	for e := head.older; e != nil; e = e.older {
		if l.neededLocked(e) {
			kept.older = e
			kept = e
		}
	}
	kept.older = nil
	if head.older == nil {
		delete(l.chained, oid)
		if head.removed {
			delete(l.head, oid)
		}
		if _, ok := l.spillWanted[oid]; ok {
			delete(l.spillWanted, oid)
			l.spillReady = append(l.spillReady, oid)
		}
	}
}

// neededLocked reports whether an open View may read e: one whose snapshot
// may hold a commit from the one that published e to the last before the one
// that superseded it (see gen).
func (l *localStore) neededLocked(e *localEntry) bool {
	if e.supersededGen > l.appliedGen {
		return true
	}
	for g := range l.views {
		if e.publishedGen <= g && g <= e.supersededGen {
			return true
		}
	}
	return false
}

// lookup returns the payload with the given version and hash, searching
// older versions that an open View may still see.
func (l *localStore) lookup(oid string, version uint64, sha string) (payload, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for e := l.head[oid]; e != nil; e = e.older {
		if !e.removed && e.version == version && e.sha256 == sha {
			if e.spillLen > 0 {
				data, err := l.spill.read(e.spillOff, e.spillLen)
				return payload{body: data}, err == nil
			}
			return e.data, true
		}
	}
	return payload{}, false
}

// spillOut moves the newest payload of oid to the spill file unless it is
// too small; while an older version is still kept for a View, it only marks
// oid to spill once that version is pruned.
func (l *localStore) spillOut(oid string) {
	l.mu.RLock()
	e := l.head[oid]
	spillable := e != nil && !e.removed && e.spillLen == 0 && e.data.len() >= minSpillBytes
	kept := spillable && e.older != nil
	l.mu.RUnlock()
	if kept {
		l.wantSpill(oid, e)
		return
	}
	if !spillable {
		return
	}
	off, err := l.spill.write(e.data)
	if err != nil {
		return // it stays in memory
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.head[oid] != e {
		return // a commit came first; the bytes written are unused
	}
	if e.older != nil {
		// A View's history came first: spill once it is pruned.
		l.spillWanted[oid] = struct{}{}
		return
	}
	// Entries are immutable once published: readers may hold e.
	spilled := *e
	spilled.data, spilled.spillOff, spilled.spillLen = payload{}, off, e.data.len()
	l.head[oid] = &spilled
}

// wantSpill marks oid to spill once no open View needs an older version of
// it, unless e is no longer its newest payload or that already happened.
func (l *localStore) wantSpill(oid string, e *localEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.head[oid] != e:
	case e.older == nil:
		l.spillReady = append(l.spillReady, oid)
	default:
		l.spillWanted[oid] = struct{}{}
	}
}

// setLast records the commit handed on, before any Update can read its
// batch.
func (l *localStore) setLast(c *commitWait) {
	l.mu.Lock()
	l.last = c
	l.mu.Unlock()
}

func (l *localStore) lastCommit() *commitWait {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.last
}

// publishedCommit returns the commit published last: a reader of Pebble
// that began before this call can see no later one.
func (l *localStore) publishedCommit() *commitWait {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.published
}

// commitWait completes when a commit's batch is durable (or failed).
type commitWait struct {
	done chan struct{}
	err  error // set before done is closed
}

func newCommitWait() *commitWait { return &commitWait{done: make(chan struct{})} }

func doneCommit() *commitWait {
	c := newCommitWait()
	close(c.done)
	return c
}

func (c *commitWait) finish(err error) {
	c.err = err
	close(c.done)
}

func (c *commitWait) wait() error {
	<-c.done
	return c.err
}
