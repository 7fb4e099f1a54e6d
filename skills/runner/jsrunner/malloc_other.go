//go:build !(linux && cgo)

package jsrunner

// oneMallocArena does nothing: without cgo no C allocator runs, and
// elsewhere than Linux the arena limit is glibc's alone.
func oneMallocArena() {}
