//go:build linux && cgo

package jsrunner

/*
#include <malloc.h>

static void libos_one_malloc_arena(void) {
#ifdef M_ARENA_MAX
	mallopt(M_ARENA_MAX, 1);
#endif
}
*/
import "C"

// oneMallocArena keeps a worker's C allocator to one arena. In a cgo build
// each thread that mallocs (the runtime does, to start a thread) may get its
// own glibc arena, reserving 64 MiB of address space; a few of them used up
// the address-space headroom measured at start, so a warm call of a small
// module under load ended with the heap unable to grow ("out of memory" with
// a few MiB in use) and was reported as resource_limit. It is set here, not
// by MALLOC_ARENA_MAX, because a worker's environment stays empty; glibc
// reads the limit whenever it would add an arena (until it has eight), so
// setting it as the worker starts is soon enough: the arenas of the threads
// the runtime started before are within the mapping the address-space limit
// is measured above, and no thread gets a new one after.
func oneMallocArena() { C.libos_one_malloc_arena() }
