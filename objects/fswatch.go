package objects

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// storeFS wraps the store's filesystem. It does four things Pebble cannot
// be told to do:
//
//   - It keeps write-ahead-log errors from Pebble once the store is open.
//     The first error on a log (a write, sync, close or creation) fails the
//     store, and from then on no log operation reaches the disk: each
//     reports success, and a new log lives in memory (walDead). Pebble
//     cannot survive a log error: its log writer keeps the error and panics
//     on the next record, and a commit that rotates the log panics on it
//     with the database mutex released, which a deferred unlock turns into
//     a fatal error that kills the process. No commit is acknowledged past
//     the failure (Store.update checks walDead after the sync), no later
//     commit reaches Pebble (the failed store refuses it), and since no log
//     byte is written after the failure, a log never holds a record after
//     damage: the directory reopens with what was synced before it. A
//     failed sync of the directory, which Pebble makes after creating a log
//     as after creating a table, still reaches Pebble: reporting success
//     for a table could leave a manifest naming a file the directory lost.
//   - It reports a full disk (ENOSPC, EDQUOT) on any file, and from then on
//     holds back the creation of new table files. Pebble retries a failed
//     flush at once and forever, creating a new table file each time; held
//     back, the retry waits instead of spinning until the store closes or,
//     during Open, until Open gives up.
//   - While the store opens, it checks every write-ahead log Pebble opens to
//     replay (checkWAL), so that damage that lost acknowledged commits stops
//     the open instead of being dropped as a torn tail.
//   - It counts WAL syncs, which shows how many commits share one fsync.
type storeFS struct {
	vfs.FS
	onError    func(error)
	onDiskFull func(error)
	syncs      atomic.Uint64

	// walDead is set by the first log error after Open; deadLogs holds the
	// logs Pebble creates afterwards, in memory. rawLogs gives Pebble its
	// log errors as they are (RawPebble, which has no store to fail).
	walDead  atomic.Bool
	deadLogs vfs.FS
	rawLogs  bool

	// opening is set while Pebble opens the store.
	opening atomic.Bool
	// lastOpened is the last file Pebble opened for reading during Open; it
	// names the file when Pebble reports corruption without a path.
	lastOpened atomic.Pointer[string]
	// walCorrupt is the error of a WAL that failed checkWAL during Open.
	walCorrupt atomic.Pointer[error]

	// diskFull is closed when a full disk is first seen; stalled when a
	// table file creation waits because of it; release when waiting table
	// creations may go on (and fail).
	gateMu   sync.Mutex
	diskFull chan struct{}
	stalled  chan struct{}
	release  chan struct{}
}

func newStoreFS(fs vfs.FS, onError, onDiskFull func(error)) *storeFS {
	return &storeFS{
		FS: fs, onError: onError, onDiskFull: onDiskFull, deadLogs: vfs.NewMem(),
		diskFull: make(chan struct{}), stalled: make(chan struct{}), release: make(chan struct{}),
	}
}

func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

// isDiskFull reports whether err says the disk or the quota is full.
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// diskFullAdvice tells an operator how to proceed after a full disk.
const diskFullAdvice = "(free space on the disk, then open the directory again; what was acknowledged is intact)"

// diskFullError wraps ErrDiskFull with the operation that hit it.
func diskFullError(op, name string, err error) error {
	return fmt.Errorf("%w: %s %s: %w %s", ErrDiskFull, op, name, err, diskFullAdvice)
}

// closeOnce closes ch unless it is already closed. Callers hold gateMu.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// noteError looks at the result of an operation on name.
func (fs *storeFS) noteError(op, name string, err error) error {
	if err == nil {
		return nil
	}
	if isDiskFull(err) {
		fs.onDiskFull(diskFullError(op, name, err))
		fs.gateMu.Lock()
		closeOnce(fs.diskFull)
		fs.gateMu.Unlock()
	}
	if isWAL(name) {
		fs.onError(fmt.Errorf("%s write-ahead log %s: %w", op, name, err))
		if !fs.opening.Load() && !fs.rawLogs {
			fs.walDead.Store(true)
			return nil
		}
	}
	return err
}

// deadLog is where a log Pebble creates after a log error goes.
func (fs *storeFS) deadLog(name string) (vfs.File, error) {
	return fs.deadLogs.Create(fs.PathBase(name), vfs.WriteCategoryUnspecified)
}

// holdBack makes the creation of a table file wait while the disk is full
// and the store has not released it; after the release it fails at once.
func (fs *storeFS) holdBack(name string) error {
	if isWAL(name) {
		// A WAL is created by a commit, which the failed store no longer
		// lets through; holding one back could hold a commit forever.
		return nil
	}
	select {
	case <-fs.diskFull:
	default:
		return nil
	}
	fs.gateMu.Lock()
	closeOnce(fs.stalled)
	fs.gateMu.Unlock()
	<-fs.release
	return diskFullError("create", name, syscall.ENOSPC)
}

// releaseHeld lets held-back creations fail, so that Pebble can close.
func (fs *storeFS) releaseHeld() {
	fs.gateMu.Lock()
	closeOnce(fs.release)
	fs.gateMu.Unlock()
}

func (fs *storeFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		if err = fs.noteError("create", name, err); err == nil {
			return fs.deadLog(name) // a log, created after the store opened
		}
		return f, err
	}
	return &storeFile{File: f, name: name, wal: isWAL(name), fs: fs}, nil
}

// Create implements vfs.FS.
func (fs *storeFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if isWAL(name) && fs.walDead.Load() {
		return fs.deadLog(name)
	}
	if err := fs.holdBack(name); err != nil {
		return nil, err
	}
	f, err := fs.FS.Create(name, category)
	return fs.wrap(name, f, err)
}

// ReuseForWrite implements vfs.FS; Pebble recycles old log files this way.
func (fs *storeFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if isWAL(newname) && fs.walDead.Load() {
		return fs.deadLog(newname)
	}
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return fs.wrap(newname, f, err)
}

// OpenReadWrite implements vfs.FS.
func (fs *storeFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	return fs.wrap(name, f, err)
}

// Open implements vfs.FS. During Open it checks a WAL before Pebble replays
// it; refusing to open the file stops the replay.
func (fs *storeFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if fs.opening.Load() {
		fs.lastOpened.Store(&name)
		if isWAL(name) {
			if err := checkWAL(fs.FS, name); err != nil {
				fs.walCorrupt.CompareAndSwap(nil, &err)
				return nil, err
			}
		}
	}
	return fs.FS.Open(name, opts...)
}

// Link implements vfs.FS.
func (fs *storeFS) Link(oldname, newname string) error {
	return fs.noteError("link", newname, fs.FS.Link(oldname, newname))
}

// Rename implements vfs.FS.
func (fs *storeFS) Rename(oldname, newname string) error {
	return fs.noteError("rename", newname, fs.FS.Rename(oldname, newname))
}

// MkdirAll implements vfs.FS.
func (fs *storeFS) MkdirAll(dir string, perm os.FileMode) error {
	return fs.noteError("create directory", dir, fs.FS.MkdirAll(dir, perm))
}

// Unwrap implements vfs.FS.
func (fs *storeFS) Unwrap() vfs.FS { return fs.FS }

type storeFile struct {
	vfs.File
	name string
	wal  bool
	fs   *storeFS
}

func (f *storeFile) check(op string, err error) error {
	if err == nil && op == "sync" && f.wal {
		f.fs.syncs.Add(1)
	}
	return f.fs.noteError(op, f.name, err)
}

// dead reports whether this is a log no operation reaches the disk of.
func (f *storeFile) dead() bool { return f.wal && f.fs.walDead.Load() }

func (f *storeFile) Write(p []byte) (int, error) {
	if f.dead() {
		return len(p), nil
	}
	n, err := f.File.Write(p)
	if err = f.check("write", err); err == nil && f.wal {
		n = len(p) // a failed write to a log reports success, whole
	}
	return n, err
}

func (f *storeFile) WriteAt(p []byte, off int64) (int, error) {
	if f.dead() {
		return len(p), nil
	}
	n, err := f.File.WriteAt(p, off)
	if err = f.check("write", err); err == nil && f.wal {
		n = len(p)
	}
	return n, err
}

// Preallocate reserves space. Pebble ignores its failure (later writes
// report what matters), so only a full disk is noted.
func (f *storeFile) Preallocate(off, length int64) error {
	if f.dead() {
		return nil
	}
	err := f.File.Preallocate(off, length)
	if isDiskFull(err) {
		return f.check("preallocate", err)
	}
	return err
}

func (f *storeFile) Sync() error {
	if f.dead() {
		return nil
	}
	return f.check("sync", f.File.Sync())
}

func (f *storeFile) SyncData() error {
	if f.dead() {
		return nil
	}
	return f.check("sync", f.File.SyncData())
}

func (f *storeFile) SyncTo(length int64) (bool, error) {
	if f.dead() {
		return true, nil
	}
	full, err := f.File.SyncTo(length)
	return full, f.check("sync", err)
}

// Close closes the file; a log's close error is a log error like the others.
func (f *storeFile) Close() error {
	err := f.File.Close()
	if !f.wal {
		return err
	}
	if f.fs.walDead.Load() {
		return nil
	}
	return f.check("close", err)
}
