package jsrunner

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// applyWorkerLimits sets the worker's own resource limits before it accepts
// any module. The address-space limit is relative to what the worker has
// mapped at this point, because a Go runtime (and even more so a
// race-instrumented one) reserves a large, build-dependent amount of address
// space up front; what matters is the headroom a module can add.
func applyWorkerLimits(cfg configMsg) error {
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{}); err != nil {
		return fmt.Errorf("set RLIMIT_CORE: %w", err)
	}
	// A worker never writes files.
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{}); err != nil {
		return fmt.Errorf("set RLIMIT_FSIZE: %w", err)
	}
	if cfg.AddressSpace <= 0 {
		return nil
	}
	mapped, err := mappedBytes()
	if err != nil {
		return err
	}
	limit := uint64(mapped + cfg.AddressSpace)
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &cur); err != nil {
		return fmt.Errorf("get RLIMIT_AS: %w", err)
	}
	if cur.Max < limit {
		limit = cur.Max
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		return fmt.Errorf("set RLIMIT_AS to %d bytes: %w", limit, err)
	}
	return nil
}

// mappedBytes reads the process's current virtual size.
func mappedBytes() (int64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read /proc/self/status: %w", err)
	}
	for _, line := range bytes.Split(status, []byte("\n")) {
		rest, ok := bytes.CutPrefix(line, []byte("VmSize:"))
		if !ok {
			continue
		}
		fields := bytes.Fields(rest)
		if len(fields) != 2 || string(fields[1]) != "kB" {
			break
		}
		kb, err := strconv.ParseInt(string(fields[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse VmSize %q: %w", fields[0], err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no VmSize line in /proc/self/status")
}
