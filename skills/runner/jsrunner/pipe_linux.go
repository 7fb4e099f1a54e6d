package jsrunner

import (
	"os"
	"syscall"
)

// blockingPipe is os.Pipe without Go's poller. os.Pipe registers its ends
// with the poller's epoll set, and they stay registered after Fd puts them
// in blocking mode and after the worker's end is closed here (the worker
// still holds it). Every frame either side wrote then woke this process's
// poller thread for nothing: a cross-CPU wake-up that cost the writer tens
// of microseconds on a virtual machine, a third of a warm call. Blocking
// reads and writes on these ends go straight to the kernel.
func blockingPipe() (r, w *os.File, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}
