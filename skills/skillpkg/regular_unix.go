//go:build unix

package skillpkg

import "syscall"

// openNonblocking makes opening a FIFO return at once instead of waiting
// for a writer; reads of a regular file ignore it.
const openNonblocking = syscall.O_NONBLOCK
