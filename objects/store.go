// Package objects is the Pebble database of a runtime directory: versioned
// Objects in namespaces with compare-and-swap writes, two payload tiers
// (runtime-local in memory, durable in Pebble), raw keyed storage for other
// subsystems, an append-only event log and durable counters.
//
// All writes go through Store.Update, which runs a function against a
// transaction overlay and commits everything it staged as one synced Pebble
// batch. Commits are applied in order under a write lock and then wait for
// the WAL sync outside it, so concurrent committers share fsyncs.
package objects

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/uuid"
)

// Options configures Open. The zero value is ready to use.
type Options struct {
	// FS is the filesystem; nil means vfs.Default. Tests pass an
	// errorfs-wrapped FS to inject disk faults.
	FS vfs.FS
	// Clock supplies CreatedAt, UpdatedAt and event times; nil means time.Now.
	Clock func() time.Time
	// Logger receives Pebble's log output; nil means silent. Pebble's
	// Fatalf reaches it as Errorf: the store handles fatal errors itself
	// (see storeLogger), so the logger's Fatalf is never called.
	Logger pebble.Logger
	// Pebble, if set, may tune Pebble's options before Open. FS, Lock,
	// ReadOnly and the handling of fatal errors, corruption and background
	// errors are set afterwards because the store relies on them.
	Pebble func(*pebble.Options)
	// ReadOnly opens an existing store without writing to its directory: no
	// write-ahead-log replay flush, no compactions, no new files. Update
	// returns an error wrapping ErrReadOnly. A missing directory is an
	// error. The directory is still locked, so a runtime that holds it is
	// reported with ErrInUse.
	ReadOnly bool
}

// Stats are cumulative counters of one open store.
type Stats struct {
	// SyncedCommits counts batches committed and synced to the WAL.
	SyncedCommits uint64
	// ReadOnlyUpdates counts Update calls that staged nothing (no batch).
	ReadOnlyUpdates uint64
	// Conflicts counts compare-and-swap mismatches reported by Write/Remove.
	Conflicts uint64
	// WALSyncs counts successful syncs of write-ahead-log files. With many
	// concurrent committers it grows slower than SyncedCommits because
	// commits share syncs.
	WALSyncs uint64
	// WriteLockHeld is the total wall time Update has held the write lock:
	// running transaction functions, which no other commit can overlap.
	WriteLockHeld time.Duration
	// Applying is the total wall time batches took to be applied to Pebble
	// in their turn, one at a time, beside the next Updates' functions.
	Applying time.Duration
	// AppliedRecords counts the records (keys set or deleted) of the
	// batches applied to Pebble, and AppliedBytes their batches' encoded
	// size: what the commits wrote, for a raw baseline of the same shape
	// (RawPebble.SyncedBatches).
	AppliedRecords, AppliedBytes uint64
}

// Store is an open runtime database. It is safe for concurrent use by many
// goroutines. One Store holds the directory at a time; Close releases it.
type Store struct {
	dir      string
	db       *pebble.DB
	lock     *pebble.Lock
	release  func() // gives back the claim of heldDirs
	instance string
	clock    func() time.Time
	locals   *localStore
	fs       *storeFS
	readOnly bool
	// checkHandoffs makes the store check what a caller hands over without
	// a copy or a check: a write recomputes a payload digest
	// (WriteSpec.PayloadSHA256) and refuses it on a difference, and an
	// event's encoded data (AppendEventFunc) must be valid JSON; tests turn
	// it on with LIBOS_CHECK_CACHES=1 before a store opens.
	checkHandoffs bool

	// writeMu gives one Update at a time exclusive write access: its
	// function runs and the caches below take its writes under it. Building
	// the batch and applying it to Pebble do not: the next Updates'
	// functions run meanwhile, reading the writes of the batches not yet
	// applied from pending. Each batch waits for its turn (applyTurn), so
	// batches are applied one at a time in writeMu's order, each publishing
	// its runtime-local payloads just before (see localStore); an Update
	// need not wait for the batch before it to be applied to let writeMu
	// go, since applying is the slower of the two. The WAL sync wait holds
	// nothing.
	writeMu sync.Mutex
	// pending holds the batches handed on and not yet in Pebble, oldest
	// first: what an Update reads before Pebble, because Pebble may not have
	// them yet. The list is replaced, never modified: a batch is appended
	// under writeMu and pendingMu, and dropped, once Pebble has it, under
	// pendingMu; its maps are never modified.
	pending   atomic.Pointer[pendingList]
	pendingMu sync.Mutex
	// applyTurn is closed when the batch handed on last has been applied
	// (or given up after a failure): the next batch waits for it, so batches
	// reach Pebble one at a time in writeMu's order. Guarded by writeMu.
	applyTurn chan struct{}
	// lazy are the commits applied without a sync request that wait for a
	// later commit's sync (Txn.SyncLater). Guarded by lazyMu.
	lazyMu   sync.Mutex
	lazy     []*lazySync
	lazyWait time.Duration
	// beforeApply, set only by tests, runs in each batch's turn before it
	// is published and applied.
	beforeApply func()
	// lastEventSeq is the highest event seq applied to Pebble. Written by the
	// batch whose turn it is, read atomically.
	lastEventSeq atomic.Uint64
	// publishedEventSeq is the highest event seq of a batch handed on: the
	// next Update's events follow it. Guarded by writeMu.
	publishedEventSeq uint64
	// stagedHint estimates the keys an Update stages, to size its staging
	// (Txn.keysHint). Guarded by writeMu.
	stagedHint int
	// metaCache holds committed decoded metadata by oid for Update
	// transactions, which read the latest state under writeMu; it spares
	// every compare-and-swap a Pebble lookup and a decode inside the write
	// lock. Guarded by writeMu; values are never modified.
	metaCache      map[string]*storedMeta
	metaCacheLimit int
	// reads caches what Update transactions read; guarded by writeMu.
	reads *readCache

	// mu guards closed; ops counts operations that use db so Close can wait
	// for them.
	mu     sync.Mutex
	closed bool
	ops    sync.WaitGroup

	// failure holds the first write/sync error; once set, Update refuses.
	// failedCh is closed when it is set.
	failure  atomic.Pointer[error]
	failedCh chan struct{}
	// fatal holds the error Pebble reported through Logger.Fatalf; parked
	// is set when that happened on one of Pebble's own goroutines, which
	// then never returns (see storeLogger).
	fatal    atomic.Pointer[error]
	parked   atomic.Bool
	parkedCh chan struct{} // closed when parked is set
	// corruptPath is the file of the last corruption Pebble reported.
	corruptPath atomic.Pointer[string]
	// abandoned is set when Open gave up on a Pebble open that a full disk
	// holds forever.
	abandoned bool

	syncedCommits   atomic.Uint64
	readOnlyUpdates atomic.Uint64
	conflicts       atomic.Uint64
	// writeLockHeld sums nanoseconds writeMu was held (lockWrite to
	// unlockWrite).
	writeLockHeld  atomic.Int64
	applying       atomic.Int64
	appliedRecords atomic.Uint64
	appliedBytes   atomic.Uint64
}

// Open opens (creating if needed) the database in dir. It returns an error
// wrapping ErrInUse if another runtime, in this process or another, holds
// the directory, ErrCorrupt if a file of the store is damaged or the
// write-ahead log lost acknowledged commits, and ErrDiskFull if the disk is
// too full to open it. Open does not scan objects, so it is fast however
// many objects the store holds.
func Open(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("objects: open: %w: dir: must not be empty", ErrInvalid)
	}
	given := dir
	fs := opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	if opts.ReadOnly {
		if _, err := fs.Stat(dir); err != nil {
			return nil, fmt.Errorf("objects: open %s read-only: %w", dir, err)
		}
	} else if err := MkdirDurable(fs, dir, 0o700); err != nil {
		if isDiskFull(err) {
			err = diskFullError("create directory", dir, err)
		} else {
			err = fmt.Errorf("create directory: %w", err)
		}
		return nil, fmt.Errorf("objects: open %s: %w", dir, err)
	}
	if vfs.Root(fs) == vfs.Default {
		// POSIX record locks do not exclude the process that holds them, and
		// Pebble's in-process check compares path strings, so two spellings
		// of one directory must become the same path.
		canonical, err := canonicalDir(dir)
		if err != nil {
			return nil, fmt.Errorf("objects: open %s: %w", given, err)
		}
		dir = canonical
		if !opts.ReadOnly {
			if err := ownerOnly(dir); err != nil {
				return nil, fmt.Errorf("objects: open %s: %w", given, err)
			}
		}
	}
	release, err := holdDir(dir)
	if err != nil {
		return nil, fmt.Errorf("objects: open %s: %w", given, err)
	}
	lockFS := fs
	if opts.ReadOnly {
		lockFS = readLockFS{fs}
	}
	lock, err := pebble.LockDirectory(dir, lockFS)
	if err != nil && !opts.ReadOnly && isLockHeld(err) && vfs.Root(fs) == vfs.Default {
		// Read-only opens (libos ps, logs, inspect on an idle directory)
		// hold a shared lock for as long as they read: a runtime starting
		// meanwhile waits for them instead of failing as if another runtime
		// held the directory.
		lockFile := filepath.Join(dir, "LOCK")
		for deadline := time.Now().Add(readersWait); err != nil && isLockHeld(err) && heldByReaders(lockFile) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			lock, err = pebble.LockDirectory(dir, lockFS)
		}
	}
	if err != nil {
		release()
		if isLockHeld(err) {
			return nil, fmt.Errorf("objects: open %s: %w (%v)", given, ErrInUse, err)
		}
		return nil, fmt.Errorf("objects: open %s: lock directory: %w", given, err)
	}
	s := &Store{
		dir:           dir,
		lock:          lock,
		release:       release,
		instance:      uuid.NewString(),
		clock:         opts.Clock,
		locals:        newLocalStore(),
		readOnly:      opts.ReadOnly,
		checkHandoffs: os.Getenv("LIBOS_CHECK_CACHES") == "1",
		failedCh:      make(chan struct{}),
		parkedCh:      make(chan struct{}),

		metaCache:      make(map[string]*storedMeta),
		stagedHint:     stagedKeysHint,
		lazyWait:       lazySyncWait,
		metaCacheLimit: defaultMetaCacheLimit,
		reads:          newReadCache(readCacheBytes),
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	cache := pebble.NewCache(defaultCacheBytes)
	defer cache.Unref()
	popts := pebbleOptions(cache)
	popts.Logger = opts.Logger
	if opts.ReadOnly {
		// A read-only open keeps the format the directory has.
		popts.FormatMajorVersion = 0
	}
	if opts.Pebble != nil {
		opts.Pebble(popts)
	}
	popts.Logger = storeLogger{out: popts.Logger, store: s}
	s.fs = newStoreFS(fs, s.fail, s.fail)
	popts.FS = s.fs
	if !opts.ReadOnly {
		s.locals.spill = newLocalSpill(fs, spillPath(dir))
	}
	popts.Lock = lock
	popts.ReadOnly = opts.ReadOnly
	listener := s.eventListener()
	if popts.EventListener != nil {
		listener = pebble.TeeEventListener(listener, *popts.EventListener)
	}
	popts.EventListener = &listener

	var before *pebble.DBDesc
	if !opts.ReadOnly {
		before, _ = pebble.Peek(dir, fs)
	}
	db, err := s.openPebble(dir, popts)
	if err != nil {
		if !s.abandoned {
			_ = lock.Close()
			release()
		}
		return nil, fmt.Errorf("objects: open %s: %w", given, err)
	}
	s.db = db
	if err := s.afterOpen(before); err != nil {
		if !s.parked.Load() {
			s.fs.releaseHeld()
			_ = s.closePebble()
			_ = lock.Close()
			release()
		}
		return nil, fmt.Errorf("objects: open %s: %w", given, err)
	}
	return s, nil
}

// verifyAllBytes bounds the tables Open reads in full to verify them: at
// about 10 ms a MiB, a few tens of milliseconds.
const verifyAllBytes = 4 << 20

// storeFormat is the Pebble format of a store opened for writing: the
// first with synced offsets in WAL chunks.
const storeFormat = pebble.FormatWALSyncChunks

// openPebble runs pebble.Open, which cannot be interrupted: with a full disk
// it retries the flush of the replayed log forever (storeFS then holds the
// retry back), and after a fatal error on its flush goroutine it waits for
// that goroutine forever (storeLogger parks it). openPebble then gives up
// on the open and returns the error; the held goroutines never run again,
// and the directory stays locked until the process exits so that nothing
// else opens it under them.
func (s *Store) openPebble(dir string, popts *pebble.Options) (*pebble.DB, error) {
	type result struct {
		db  *pebble.DB
		err error
	}
	done := make(chan result, 1)
	s.fs.opening.Store(true)
	go func() {
		var r result
		defer func() { done <- r }()
		defer recoverFatal(&r.err)
		r.db, r.err = pebble.Open(dir, popts)
	}()
	select {
	case r := <-done:
		s.fs.opening.Store(false)
		if r.err != nil {
			return nil, s.openError(r.err)
		}
		return r.db, nil
	case <-s.fs.stalled:
		s.abandoned = true
		err := s.failureCause()
		if err == nil || !errors.Is(err, ErrDiskFull) {
			err = diskFullError("open", dir, syscall.ENOSPC)
		}
		return nil, fmt.Errorf("%w (the directory stays locked until this process exits)", err)
	case <-s.parkedCh:
		// Pebble stopped on a fatal error while it held its locks.
		s.abandoned = true
		return nil, fmt.Errorf("%w (the directory stays locked until this process exits)", *s.fatal.Load())
	}
}

// openError explains why pebble.Open failed.
func (s *Store) openError(err error) error {
	if p := s.fs.walCorrupt.Load(); p != nil {
		return *p
	}
	if cause := s.failureCause(); cause != nil && (errors.Is(cause, ErrDiskFull) || errors.Is(cause, ErrCorrupt)) {
		return cause
	}
	if isDiskFull(err) {
		return diskFullError("open", s.dir, err)
	}
	if pebble.IsCorruptionError(err) {
		path := s.dir
		if p := s.corruptPath.Load(); p != nil {
			path = *p
		} else if p := s.fs.lastOpened.Load(); p != nil {
			path = *p
		}
		return corruptError(path, err)
	}
	return err
}

// afterOpen verifies what is cheap to verify, moves a store written in an
// older format onto a WAL with synced offsets, and reads the last event seq.
func (s *Store) afterOpen(before *pebble.DBDesc) (err error) {
	defer recoverFatal(&err)
	// Every table's footer, index and properties blocks are read and their
	// checksums verified; data blocks are verified when read, and at open
	// too while the tables are small enough to read them all quickly.
	if _, err := s.db.SSTables(pebble.WithProperties()); err != nil {
		return s.readErr(fmt.Errorf("verify tables: %w", err))
	}
	if s.db.Metrics().Total().TablesSize <= verifyAllBytes {
		if err := s.db.CheckLevels(nil); err != nil {
			return s.readErr(fmt.Errorf("verify tables: %w", err))
		}
	}
	if !s.readOnly && (before == nil || !before.Exists || before.FormatMajorVersion < storeFormat) {
		// The open ratcheted the format, but the log it started was created
		// in the old one; a flush starts a new log.
		flushed, err := s.db.AsyncFlush()
		if err != nil {
			return s.writeErr(fmt.Errorf("start a write-ahead log in format %d: %w", storeFormat, err))
		}
		select {
		case <-flushed:
		case <-s.failedCh:
			// A full disk holds the flush back (storeFS), and stopped
			// Pebble never finishes it.
			return s.failureCause()
		}
	}
	last, err := readLastEventSeq(s.db)
	if err != nil {
		return s.readErr(err)
	}
	s.lastEventSeq.Store(last)
	s.publishedEventSeq = last
	return nil
}

// eventListener turns Pebble's reports into store failures instead of
// Pebble's defaults (a Fatalf on corruption; a log line on a background
// error that Pebble then retries).
func (s *Store) eventListener() pebble.EventListener {
	return pebble.EventListener{
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			path := info.Path
			s.corruptPath.Store(&path)
			s.fail(corruptError(path, info.Details))
		},
		BackgroundError: func(err error) {
			switch {
			case isDiskFull(err):
				s.fail(diskFullError("background write in", s.dir, err))
			case pebble.IsCorruptionError(err):
				path := s.dir
				if p := s.corruptPath.Load(); p != nil {
					path = *p
				}
				s.fail(corruptError(path, err))
			}
		},
	}
}

// readErr turns a corruption error from a Pebble read into one wrapping
// ErrCorrupt and naming the file.
func (s *Store) readErr(err error) error {
	if err == nil || errors.Is(err, ErrCorrupt) || !pebble.IsCorruptionError(err) {
		return err
	}
	path := s.dir
	if p := s.corruptPath.Load(); p != nil {
		path = *p
	} else if m := tableInError.FindStringSubmatch(err.Error()); m != nil {
		// Some reads (CheckLevels) report no path; the message has the
		// table's number.
		path = filepath.Join(s.dir, m[1]+".sst")
	}
	s.fail(corruptError(path, err))
	return corruptError(path, err)
}

// tableInError finds the table number in Pebble's message about a block.
var tableInError = regexp.MustCompile(`\bfile (\d{6,}): block`)

// writeErr turns a disk-full error from a Pebble write into one wrapping
// ErrDiskFull.
func (s *Store) writeErr(err error) error {
	if err == nil || errors.Is(err, ErrDiskFull) || !isDiskFull(err) {
		return err
	}
	if cause := s.failureCause(); cause != nil && errors.Is(cause, ErrDiskFull) {
		return cause
	}
	return diskFullError("write in", s.dir, err)
}

func canonicalDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("resolve directory: %w", err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("resolve directory: %w", err)
	}
	return resolved, nil
}

// readersWait bounds how long a writer's Open waits for read-only opens to
// let the directory go.
const readersWait = 10 * time.Second

// isLockHeld tells a held lock apart from other failures to take it (a
// missing or unwritable directory comes back as *os.PathError).
func isLockHeld(err error) bool {
	var pathErr *os.PathError
	if errors.As(err, &pathErr) {
		return false
	}
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) ||
		strings.Contains(err.Error(), "lock held by current process")
}

func readLastEventSeq(db *pebble.DB) (uint64, error) {
	lower := []byte(prefixEvents)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return 0, fmt.Errorf("read last event: %w", err)
	}
	var seq uint64
	if it.Last() {
		seq, err = eventSeqFromKey(it.Key())
	}
	if cerr := it.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("read last event: %w", cerr)
	}
	return seq, err
}

// Instance returns the id of this open; every Open gets a new one.
// Runtime-local payloads written under another instance are lost.
func (s *Store) Instance() string { return s.instance }

// Dir returns the directory the store was opened on (absolute, with symbolic
// links resolved, when it is on the operating system's filesystem).
func (s *Store) Dir() string { return s.dir }

// Close waits for running operations, closes Pebble and releases the
// directory, also after the store failed or found corruption. Later calls
// return ErrClosed. Close must not be called from inside an Update or View
// function; an AfterCommit hook may call it.
//
// If Pebble stopped on one of its own goroutines (a fatal error, see
// storeLogger), it cannot be closed: Close returns that error and the
// directory stays locked until the process exits.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.mu.Unlock()
	if s.parked.Load() {
		return fmt.Errorf("objects: close %s: %w (Pebble stopped; the directory stays locked until this process exits)", s.dir, *s.fatal.Load())
	}
	// A flush held back by a full disk must fail for Pebble to close.
	s.fs.releaseHeld()
	s.ops.Wait()
	if s.locals.spill != nil {
		s.locals.spill.close()
	}
	err := s.closePebble()
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	s.release()
	if err != nil {
		return fmt.Errorf("objects: close %s: %w", s.dir, err)
	}
	return nil
}

// closePebble closes the database. After corruption Pebble may panic while
// closing (a reader it cannot release); the directory must still be
// released, so the panic becomes an error.
func (s *Store) closePebble() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pebble panicked while closing: %v", r)
		}
	}()
	return s.db.Close()
}

// begin registers an operation that uses the database.
func (s *Store) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.parked.Load() {
		// Pebble's goroutine stopped holding its locks: a call could wait
		// forever.
		return fmt.Errorf("%w: %w", ErrFailed, *s.fatal.Load())
	}
	s.ops.Add(1)
	return nil
}

// fail records the first write or sync error; every later Update refuses.
func (s *Store) fail(cause error) {
	if s.failure.CompareAndSwap(nil, &cause) {
		close(s.failedCh)
		// No commit applied after the failure covers the lazy ones
		// waiting, and none may ask Pebble for a sync now.
		for _, l := range s.takeLazy() {
			l.release(true)
		}
	}
}

// failureCause returns the recorded cause of the failure, or nil.
func (s *Store) failureCause() error {
	if p := s.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// failedErr returns an error wrapping ErrFailed and the recorded cause, or
// nil if the store has not failed.
func (s *Store) failedErr() error {
	p := s.failure.Load()
	if p == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrFailed, *p)
}

// Stats returns the store's counters.
func (s *Store) Stats() Stats {
	return Stats{
		SyncedCommits:   s.syncedCommits.Load(),
		ReadOnlyUpdates: s.readOnlyUpdates.Load(),
		Conflicts:       s.conflicts.Load(),
		WALSyncs:        s.fs.syncs.Load(),
		WriteLockHeld:   time.Duration(s.writeLockHeld.Load()),
		Applying:        time.Duration(s.applying.Load()),
		AppliedRecords:  s.appliedRecords.Load(),
		AppliedBytes:    s.appliedBytes.Load(),
	}
}

// lockWrite takes writeMu and returns when it got it, for unlockWrite.
func (s *Store) lockWrite() time.Time {
	s.writeMu.Lock()
	return time.Now()
}

// unlockWrite releases writeMu and adds the time it was held to Stats.
func (s *Store) unlockWrite(since time.Time) {
	s.writeLockHeld.Add(int64(time.Since(since)))
	s.writeMu.Unlock()
}

// LastEventSeq returns the seq of the newest event applied to the database
// (0 if none). An event may become visible here a moment before the commit
// that wrote it has finished syncing.
func (s *Store) LastEventSeq() uint64 { return s.lastEventSeq.Load() }

// Update runs fn with exclusive write access and commits everything fn
// staged as one synced batch. If fn returns an error nothing is written and
// that error is returned. Update returns only after the batch is durable,
// then runs the AfterCommit hooks in order. fn must be fast (no I/O besides
// store reads) because it holds the store's write lock; fn must not call
// Update or Close (both would wait for fn forever), and tx must not be used
// after fn returns or from another goroutine.
//
// A read-only fn (nothing staged) writes no batch; Update still waits until
// every commit it could have read is durable. After a write or sync error,
// or an event's encoder failing (Txn.AppendEventFunc), every Update returns
// an error wrapping ErrFailed and the cause.
func (s *Store) Update(fn func(tx *Txn) error) error {
	if fn == nil {
		return fmt.Errorf("objects: update: %w: fn: must not be nil", ErrInvalid)
	}
	tx, err := s.update(fn)
	if err != nil {
		return err
	}
	// Hooks run after the operation is deregistered so that a hook may call
	// Close.
	tx.runHooks()
	return nil
}

func (s *Store) update(fn func(tx *Txn) error) (*Txn, error) {
	if s.readOnly {
		return nil, fmt.Errorf("objects: update: %w: the store was opened read-only", ErrReadOnly)
	}
	if err := s.begin(); err != nil {
		return nil, fmt.Errorf("objects: update: %w", err)
	}
	defer s.ops.Done()

	held := s.lockWrite()
	locked := true
	defer func() {
		if locked {
			s.unlockWrite(held)
		}
	}()
	if ferr := s.failedErr(); ferr != nil {
		return nil, fmt.Errorf("objects: update: %w", ferr)
	}
	tx := newTxn(s, s.db, false)
	tx.keysHint = s.stagedHint
	s.reads.newTurn()
	err := fn(tx)
	tx.finished = true
	if tx.readFailedBatch {
		// The batch fn read that value from fails the store in its turn,
		// which needs no write lock.
		<-s.failedCh
		return nil, fmt.Errorf("objects: update: %w (the transaction's own error: %v)", s.failedErr(), err)
	}
	if err != nil {
		if ferr := s.failedErr(); ferr != nil {
			// A batch fn read from pending failed meanwhile and was
			// dropped, so fn may have read a state torn between it and
			// Pebble: its error is not to be acted on.
			return nil, fmt.Errorf("objects: update: %w (the transaction's own error: %v)", ferr, err)
		}
		return nil, err
	}

	if tx.empty() {
		wait := s.locals.lastCommit()
		s.unlockWrite(held)
		locked = false
		if werr := wait.wait(); werr != nil {
			return nil, fmt.Errorf("objects: update: earlier commit: %w", werr)
		}
		s.readOnlyUpdates.Add(1)
		return tx, nil
	}

	if n := len(tx.writes); n > 0 {
		s.stagedHint = nextStagedHint(s.stagedHint, n)
	}
	commit := newCommitWait()
	s.locals.setLast(commit)
	// The caches take this batch's writes now, and pending holds them until
	// Pebble has them: the next Update reads them from there, so it can run
	// while this batch is applied. If the apply fails, the store fails and
	// refuses every later Update, and every Update whose function ran
	// meanwhile fails too, so none acts on what was not written.
	tx.publishMetas()
	s.reads.applied(tx.writes)
	for _, fn := range tx.applied {
		fn()
	}
	if n := len(tx.events); n > 0 {
		s.publishedEventSeq = tx.events[n-1].Seq
	}
	pb := &pendingBatch{writes: tx.writes, locals: tx.locals}
	s.addPending(pb)
	turn, done := s.applyTurn, make(chan struct{})
	s.applyTurn = done
	s.unlockWrite(held)
	locked = false

	// The batch is built out of the write lock and before this batch's
	// turn, while earlier ones are applied: the next Update reads this
	// one's writes from pending, not from the batch, and only reads them,
	// as this does.
	var batch *pebble.Batch
	berr := s.failedErr()
	if berr == nil {
		batch, berr = tx.buildBatch()
	}
	if turn != nil {
		<-turn
	}
	if s.beforeApply != nil {
		s.beforeApply()
	}
	applyStart := time.Now()
	// A failed store publishes and applies nothing more: the commit before
	// may not be in Pebble, and publishing counts it as applied. Otherwise
	// published first, so a View whose snapshot holds this batch finds its
	// payloads.
	aerr := s.failedErr()
	if aerr == nil {
		aerr = berr
	}
	lazy := tx.syncLater && aerr == nil
	var covered []*lazySync
	if !lazy {
		covered = s.takeLazy()
	}
	if aerr == nil {
		s.locals.publish(tx.locals, commit)
		aerr = s.apply(batch, !lazy)
	}
	var mine *lazySync
	if lazy && aerr == nil {
		mine = &lazySync{done: make(chan struct{})}
		s.addLazy(mine)
	}
	if aerr == nil {
		s.appliedRecords.Add(uint64(batch.Count()))
		s.appliedBytes.Add(uint64(batch.Len()))
		s.locals.applied(tx.locals)
		if n := len(tx.events); n > 0 {
			s.lastEventSeq.Store(tx.events[n-1].Seq)
		}
	} else {
		s.fail(aerr)
	}
	s.dropPending(pb)
	s.applying.Add(int64(time.Since(applyStart)))
	close(done)
	failed := aerr != nil
	if !failed {
		serr := s.waitSync(batch, mine)
		if serr != nil {
			s.fail(fmt.Errorf("sync: %w", serr))
			failed = true
		}
		// A log that failed before this commit's sync returned may not hold
		// its record, whatever Pebble was told (storeFS).
		failed = failed || s.fs.walDead.Load()
	}
	for _, c := range covered {
		c.release(failed)
	}
	if batch != nil {
		_ = batch.Close()
	}
	if failed {
		ferr := s.failedErr()
		commit.finish(ferr)
		return nil, fmt.Errorf("objects: update: %w", ferr)
	}
	s.syncedCommits.Add(1)
	commit.finish(nil)
	return tx, nil
}

// pendingBatch is what a batch being applied writes: raw keys and
// runtime-local payloads.
type pendingBatch struct {
	writes map[string]*stagedValue
	locals map[string]*localChange
}

// pendingList is the batches not yet in Pebble, oldest first.
type pendingList struct{ batches []*pendingBatch }

// newestFirst calls fn on each batch, newest first, until it returns false.
func (l *pendingList) newestFirst(fn func(*pendingBatch) bool) {
	if l == nil {
		return
	}
	for i := len(l.batches) - 1; i >= 0; i-- {
		if !fn(l.batches[i]) {
			return
		}
	}
}

// addPending appends pb to the pending list. Caller holds writeMu.
func (s *Store) addPending(pb *pendingBatch) {
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	var batches []*pendingBatch
	if l := s.pending.Load(); l != nil {
		batches = make([]*pendingBatch, 0, len(l.batches)+1)
		batches = append(batches, l.batches...)
	}
	s.pending.Store(&pendingList{batches: append(batches, pb)})
}

// dropPending removes pb from the pending list once Pebble has it (or the
// store failed). Batches are applied in order, so pb is the oldest.
func (s *Store) dropPending(pb *pendingBatch) {
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	l := s.pending.Load()
	if len(l.batches) == 1 {
		s.pending.Store(nil)
		return
	}
	kept := make([]*pendingBatch, 0, len(l.batches)-1)
	for _, b := range l.batches {
		if b != pb {
			kept = append(kept, b)
		}
	}
	s.pending.Store(&pendingList{batches: kept})
}

// recoverCommit turns what Pebble does instead of returning an error on a
// commit's path, Logger.Fatalf (a panic on this goroutine, see storeLogger)
// and a panic on a record after a WAL error, into an error of op. Deferred.
func recoverCommit(op string, errp *error) {
	if r := recover(); r != nil {
		if f, ok := r.(pebbleFatal); ok {
			*errp = fmt.Errorf("%s: %w", op, f.err)
			return
		}
		*errp = fmt.Errorf("%s: pebble panic: %v", op, r)
	}
}

// apply hands the batch to Pebble without waiting for the sync, or, with
// sync false, without asking for one (Txn.SyncLater). Pebble's panics on a
// commit's path are turned into an error (recoverCommit).
func (s *Store) apply(batch *pebble.Batch, sync bool) (err error) {
	if ferr := s.failedErr(); ferr != nil {
		// A WAL error the filesystem watcher saw since it was published.
		return ferr
	}
	defer recoverCommit("apply batch", &err)
	apply := func() error { return s.db.ApplyNoSyncWait(batch, pebble.Sync) }
	if !sync {
		apply = func() error { return s.db.Apply(batch, pebble.NoSync) }
	}
	if err := apply(); err != nil {
		return fmt.Errorf("apply batch: %w", s.writeErr(err))
	}
	return nil
}

// View runs fn against a consistent read-only snapshot. Staging a write in
// it returns ErrReadOnly. View returns after every commit visible in the
// snapshot is durable, so what fn read survives a crash. AfterCommit hooks
// registered in a View run after fn returns nil. tx must not be used after
// fn returns or from another goroutine.
func (s *Store) View(fn func(tx *Txn) error) error {
	if fn == nil {
		return fmt.Errorf("objects: view: %w: fn: must not be nil", ErrInvalid)
	}
	tx, err := s.view(fn)
	if err != nil {
		return err
	}
	tx.runHooks()
	return nil
}

// Peek is View without the wait for durability: what fn reads may belong
// to a commit whose sync is still running (and could fail). It serves a
// caller that only prepares a hint it checks later against an Update's
// reads, and must not wait for other commits' syncs to do so.
func (s *Store) Peek(fn func(tx *Txn) error) error {
	if fn == nil {
		return fmt.Errorf("objects: peek: %w: fn: must not be nil", ErrInvalid)
	}
	_, err := s.read(fn, false)
	return err
}

func (s *Store) view(fn func(tx *Txn) error) (*Txn, error) { return s.read(fn, true) }

// read runs fn against a snapshot, and waits until the commits it could
// have seen are durable when durable.
func (s *Store) read(fn func(tx *Txn) error, durable bool) (*Txn, error) {
	op := "view"
	if !durable {
		op = "peek"
	}
	if err := s.begin(); err != nil {
		return nil, fmt.Errorf("objects: %s: %w", op, err)
	}
	defer s.ops.Done()
	var snap *pebble.Snapshot
	gen, wait := s.locals.beginView(func() { snap = s.db.NewSnapshot() })
	defer s.locals.endView(gen)
	defer snap.Close()

	tx := newTxn(s, snap, true)
	err := fn(tx)
	tx.finished = true
	if err != nil {
		return nil, err
	}
	if !durable {
		return tx, nil
	}
	if werr := wait.wait(); werr != nil {
		return nil, fmt.Errorf("objects: view: read state that failed to sync: %w", werr)
	}
	return tx, nil
}

// Events returns up to limit events with seq greater than afterSeq in
// ascending order; limit 0 means no limit.
func (s *Store) Events(afterSeq uint64, limit int) ([]Event, error) {
	if limit < 0 {
		return nil, fmt.Errorf("objects: events: %w: limit: must not be negative, got %d", ErrInvalid, limit)
	}
	if err := s.begin(); err != nil {
		return nil, fmt.Errorf("objects: events: %w", err)
	}
	defer s.ops.Done()
	if afterSeq == ^uint64(0) {
		return nil, nil
	}
	lower := eventKey(afterSeq + 1)
	events, err := s.readEvents(lower, limit)
	if err != nil {
		return nil, fmt.Errorf("objects: events: %w", err)
	}
	return events, nil
}

func (s *Store) readEvents(lower []byte, limit int) ([]Event, error) {
	return s.scanEvents(lower, prefixEnd([]byte(prefixEvents)), limit, false)
}

// scanEvents reads up to limit events (0: all) with keys in [lower, upper),
// oldest first, or newest first when reverse.
func (s *Store) scanEvents(lower, upper []byte, limit int, reverse bool) (events []Event, err error) {
	defer recoverFatal(&err)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, s.readErr(err)
	}
	first, next := it.First, it.Next
	if reverse {
		first, next = it.Last, it.Prev
	}
	// Taken after the iterator: it can see no commit published later.
	wait := s.locals.publishedCommit()
	for ok := first(); ok && (limit == 0 || len(events) < limit); ok = next() {
		seq, derr := eventSeqFromKey(it.Key())
		if derr != nil {
			err = derr
			break
		}
		value, verr := it.ValueAndErr()
		if verr != nil {
			err = verr
			break
		}
		e, derr := decodeEvent(seq, value)
		if derr != nil {
			err = fmt.Errorf("event %d: %w", seq, derr)
			break
		}
		events = append(events, e)
	}
	if err == nil {
		err = it.Error()
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, s.readErr(err)
	}
	if werr := wait.wait(); werr != nil {
		return nil, fmt.Errorf("read state that failed to sync: %w", werr)
	}
	return events, nil
}

// now returns the clock's time at nanosecond precision in UTC, exactly as it
// reads back from storage.
func (s *Store) now() time.Time {
	return time.Unix(0, s.clock().UnixNano()).UTC()
}

// pebbleOptions are the options a store opens Pebble with, but for the
// filesystem, lock, logger and listeners, which RawPebble shares.
func pebbleOptions(cache *pebble.Cache) *pebble.Options {
	popts := &pebble.Options{Cache: cache, MemTableSize: memTableBytes}
	// Point lookups dominate (records, headers, object metadata, often of
	// keys that do not exist): bloom filters spare misses a walk through
	// every level, and a block cache keeps index blocks off the disk.
	for i := range popts.Levels {
		popts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	// Process records, call records and the live index are rewritten every
	// quantum: a memtable that holds many quanta keeps only the last version
	// of each for the flush, and flushes and compactions were a fifth of a
	// quantum's CPU with Pebble's 4 MiB. Pebble grows a new store's
	// memtables to this size, from 256 KiB; built with cgo (the default),
	// it allocates them outside the Go heap.
	//
	// WAL chunks of storeFormat carry the offset synced so far, which tells
	// damage in the middle of a log from a torn tail (checkWAL).
	popts.FormatMajorVersion = storeFormat
	return popts
}

// memTableBytes is the size a store's memtables grow to.
const memTableBytes = 32 << 20

// defaultCacheBytes is the block cache of a store.
const defaultCacheBytes = 64 << 20
