//go:build linux

package clitool

import (
	"os/exec"
	"syscall"
	"unsafe"
)

// Linux waitid(2) constants; the syscall package does not export them.
const (
	pPID    = 1
	wExited = 0x4
	wNoWait = 0x1000000
)

// awaitExit blocks until cmd's process has exited but leaves it unreaped
// (reaped is false), so that its pid, which is also its process group id,
// cannot be reused while the runtime signals the group. If the process can no
// longer be waited for (it was reaped elsewhere) awaitExit returns at once and
// the caller treats the process as gone.
func awaitExit(cmd *exec.Cmd) (reaped bool, err error) {
	var info [128]byte // siginfo_t; its content is not needed
	pid := uintptr(cmd.Process.Pid)
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, pid, uintptr(unsafe.Pointer(&info[0])), wExited|wNoWait, 0, 0)
		if errno != syscall.EINTR {
			return false, nil
		}
	}
}
