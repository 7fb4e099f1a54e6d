package objects

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walWatchFS wraps the store's filesystem and reports the first write or
// sync error on a write-ahead-log file before Pebble sees it.
//
// Pebble's log writer keeps such an error and panics on the next record it
// is asked to write, while holding its commit mutex. Marking the store failed
// at the moment the error happens guarantees that no later commit reaches
// Pebble (commits are serialized by the store's write lock), so the database
// can still be closed and the directory released.
//
// It also counts WAL syncs, which shows how many commits share one fsync.
type walWatchFS struct {
	vfs.FS
	onError func(error)
	syncs   atomic.Uint64
}

func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

func (fs *walWatchFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		if isWAL(name) {
			fs.onError(fmt.Errorf("create write-ahead log %s: %w", name, err))
		}
		return f, err
	}
	if !isWAL(name) {
		return f, nil
	}
	return &walWatchFile{File: f, name: name, fs: fs}, nil
}

// Create implements vfs.FS.
func (fs *walWatchFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	return fs.wrap(name, f, err)
}

// ReuseForWrite implements vfs.FS; Pebble recycles old log files this way.
func (fs *walWatchFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	return fs.wrap(newname, f, err)
}

// OpenReadWrite implements vfs.FS.
func (fs *walWatchFS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, category, opts...)
	return fs.wrap(name, f, err)
}

// Unwrap implements vfs.FS.
func (fs *walWatchFS) Unwrap() vfs.FS { return fs.FS }

type walWatchFile struct {
	vfs.File
	name string
	fs   *walWatchFS
}

func (f *walWatchFile) check(op string, err error) error {
	if err != nil {
		f.fs.onError(fmt.Errorf("%s write-ahead log %s: %w", op, f.name, err))
	} else if op == "sync" {
		f.fs.syncs.Add(1)
	}
	return err
}

func (f *walWatchFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.check("write", err)
}

func (f *walWatchFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.check("write", err)
}

func (f *walWatchFile) Sync() error { return f.check("sync", f.File.Sync()) }

func (f *walWatchFile) SyncData() error { return f.check("sync", f.File.SyncData()) }

func (f *walWatchFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, f.check("sync", err)
}
