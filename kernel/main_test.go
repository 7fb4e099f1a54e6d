package kernel

import (
	"os"
	"testing"

	"github.com/libos/libos/skills/runner/jsrunner"
)

func TestMain(m *testing.M) {
	// The javascript pool of a skill catalog re-executes this test binary as
	// its worker.
	jsrunner.MaybeRunWorker()
	os.Exit(m.Run())
}
