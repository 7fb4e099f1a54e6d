package kernel

import "os"

// Every runtime the kernel's tests open checks each record-cache hit against
// the store, and each payload digest the kernel hands the store against the
// payload.
func init() { os.Setenv("LIBOS_CHECK_CACHES", "1") }
