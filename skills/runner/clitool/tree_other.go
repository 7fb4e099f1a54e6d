//go:build unix && !linux

package clitool

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// canSupervise is false: without Linux child subreapers an orphan of the
// tree goes to init, beyond reach, so tools run directly under the caller
// and only their process group is tracked.
const canSupervise = false

func becomeSubreaper() error {
	return errors.New("tracking descendants beyond the process group needs Linux")
}

// toolProcAttr starts the tool in its own process group.
func toolProcAttr(bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// awaitTool reaps the tool. Without waitid(WNOWAIT) the group kill that
// follows a normal exit runs after the reap, leaving a small window in which
// the group id could be reused.
func awaitTool(pid int, _ <-chan os.Signal) toolExit {
	var ws syscall.WaitStatus
	err := wait4(pid, &ws)
	return toolExit{reaped: err == nil, status: ws, err: err}
}

func sweep(<-chan os.Signal, time.Time) error { return nil }

// lingering reports whether group pgid has a member left. The tool, reaped
// by awaitTool, is not one; a group with members keeps its id from reuse.
func lingering(pgid int, _ bool) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || err == syscall.EPERM
}
