//go:build unix && !linux

package jsrunner

import (
	"fmt"
	"syscall"
)

// applyWorkerLimits sets what a non-Linux Unix supports portably: no core
// dumps and no file writes. Without a readable virtual size the
// address-space backstop is not set; the heap watchdog still applies.
func applyWorkerLimits(cfg configMsg) error {
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{}); err != nil {
		return fmt.Errorf("set RLIMIT_CORE: %w", err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{}); err != nil {
		return fmt.Errorf("set RLIMIT_FSIZE: %w", err)
	}
	return nil
}
