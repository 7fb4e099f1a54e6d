//go:build unix && !linux

package clitool

import "os/exec"

// awaitExit reaps cmd's process. Without waitid(WNOWAIT) the group kill that
// follows a normal exit runs after the reap, leaving a small window in which
// the group id could be reused.
func awaitExit(cmd *exec.Cmd) (reaped bool, err error) {
	return true, cmd.Wait()
}
