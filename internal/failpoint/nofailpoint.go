//go:build !failpoints

package failpoint

// Enabled reports whether failpoints are compiled in.
const Enabled = false

// Hit does nothing without the failpoints build tag.
func Hit(string) {}
