package objects

import (
	"fmt"
	"io"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// heldDirs are the directories this process holds through Open, by path
// (canonical on the operating system's filesystem). POSIX record locks do
// not exclude the process that holds them, and Pebble's in-process check
// does not see the shared lock of a read-only open, so the store keeps its
// own list.
var heldDirs = struct {
	sync.Mutex
	m map[string]bool
}{m: map[string]bool{}}

// holdDir claims dir for this process; release gives it back.
func holdDir(dir string) (release func(), err error) {
	heldDirs.Lock()
	defer heldDirs.Unlock()
	if heldDirs.m[dir] {
		return nil, fmt.Errorf("%w (held by this process)", ErrInUse)
	}
	heldDirs.m[dir] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			heldDirs.Lock()
			delete(heldDirs.m, dir)
			heldDirs.Unlock()
		})
	}, nil
}

// readLockFS takes the directory lock of a read-only open: a shared lock on
// the existing LOCK file, opened for reading. Pebble's own lock creates (and
// so truncates) the file, which changes the directory and fails on
// read-only media; a shared lock also lets read-only opens in several
// processes run together while any of them keeps a writer out.
type readLockFS struct{ vfs.FS }

// Lock implements vfs.FS.
func (fs readLockFS) Lock(name string) (io.Closer, error) {
	if vfs.Root(fs.FS) != vfs.Default {
		return fs.FS.Lock(name)
	}
	return sharedLock(name)
}
