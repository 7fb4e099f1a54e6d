// Package crashtest holds the crash tests of the runtime: they build the
// real libos binary with failpoints compiled in, kill it with SIGKILL at
// named commit boundaries or at random moments, resume it with
// `libos resume`, and check what the runtime directory holds afterwards.
// The package has no code outside its tests.
package crashtest
