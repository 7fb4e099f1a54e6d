package kernel

import "os"

// Every runtime the kernel's tests open checks each record-cache hit against
// the store.
func init() { os.Setenv("LIBOS_CHECK_RECORD_CACHE", "1") }
