//go:build failpoints

// Package failpoint kills the process at named points, for crash tests. It
// is compiled in only with the failpoints build tag; without it every call
// is an empty function the compiler removes.
//
// LIBOS_FAILPOINT names the point; LIBOS_FAILPOINT_SKIP (default 0) how many
// hits to let pass first. At the chosen hit the process sends itself SIGKILL:
// no deferred function, buffer flush or Pebble close runs, as in a power cut
// of the process.
package failpoint

import (
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether failpoints are compiled in.
const Enabled = true

var (
	target = os.Getenv("LIBOS_FAILPOINT")
	skip   = func() int64 {
		n, _ := strconv.ParseInt(os.Getenv("LIBOS_FAILPOINT_SKIP"), 10, 64)
		return n
	}()
	hits atomic.Int64
)

// Hit kills the process if name is the armed failpoint and its skip count
// is used up.
func Hit(name string) {
	if target == "" || name != target {
		return
	}
	if hits.Add(1) <= skip {
		return
	}
	if log := os.Getenv("LIBOS_FAILPOINT_LOG"); log != "" {
		// Tell the test harness which point fired, synchronously, before dying.
		if f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			f.WriteString(name + "\n")
			f.Sync()
			f.Close()
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
