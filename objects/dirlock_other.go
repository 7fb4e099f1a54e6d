//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package objects

import (
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// sharedLock falls back to Pebble's exclusive lock where record locks are
// not available.
func sharedLock(name string) (io.Closer, error) {
	return vfs.Default.Lock(name)
}

// heldByReaders cannot tell a reader's lock from a writer's here.
func heldByReaders(string) bool { return false }
