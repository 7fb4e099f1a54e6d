//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package objects

import (
	"io"
	"os"
	"syscall"
)

// sharedLock opens the existing file name for reading and takes a shared
// record lock on all of it; closing the returned file releases the lock.
func sharedLock(name string) (io.Closer, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	lk := syscall.Flock_t{Type: syscall.F_RDLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		f.Close()
		return nil, err // EAGAIN or EACCES: held by another process
	}
	return f, nil
}

// heldByReaders reports whether the record lock on the file name is held
// by read-only opens only (shared locks): they last as long as one command
// reads, so a writer waits for them rather than fail as if a runtime held
// the directory.
func heldByReaders(name string) bool {
	f, err := os.Open(name)
	if err != nil {
		return false
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: io.SeekStart}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil {
		return false
	}
	// A writer's lock excludes every other, so a shared lock found means
	// readers alone hold it; none found means it was just let go.
	return lk.Type == syscall.F_RDLCK || lk.Type == syscall.F_UNLCK
}
