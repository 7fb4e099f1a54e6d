//go:build !unix

package skillpkg

// openNonblocking is 0 where there are no FIFOs to block on.
const openNonblocking = 0
