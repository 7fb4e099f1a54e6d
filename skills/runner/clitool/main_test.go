package clitool

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// probeDir holds the libos-probe binary built from testdata for this test
// binary's run.
var probeDir string

// probeSource is the probe's package folder, relative to this package.
const probeSource = "../../../testdata/skills/cli/probe"

// fixtureDir is the conformance skill package.
const fixtureDir = "../../../testdata/skills/cli/probe-skill"

func TestMain(m *testing.M) {
	// Calls run under a supervisor that is this test binary re-executed.
	MaybeRunSupervisor()
	if os.Getenv(oneShotEnv) == "1" {
		os.Exit(runOneShot())
	}
	dir, err := os.MkdirTemp("", "libos-probe-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating probe folder:", err)
		os.Exit(1)
	}
	probeDir = dir
	if err := buildProbe(filepath.Join(dir, "libos-probe")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func buildProbe(out string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goTool, "build", "-o", out, probeSource)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the probe: %v\n%s", err, msg)
	}
	return nil
}
