package sim

import "os"

// Every runtime the simulation opens checks each record-cache hit against
// the store, and each payload digest the kernel hands the store against the
// payload, so a stale cache shows up as a failed step.
func init() { os.Setenv("LIBOS_CHECK_CACHES", "1") }
