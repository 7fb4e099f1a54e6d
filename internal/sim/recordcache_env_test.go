package sim

import "os"

// Every runtime the simulation opens checks each record-cache hit against
// the store, so a stale cache shows up as a failed step.
func init() { os.Setenv("LIBOS_CHECK_RECORD_CACHE", "1") }
