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
