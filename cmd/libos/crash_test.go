package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	failpointBinOnce sync.Once
	failpointBin     string
	failpointBinErr  error
)

// failpointBinary builds libos with failpoints compiled in, once.
func failpointBinary(t *testing.T) string {
	t.Helper()
	failpointBinOnce.Do(func() {
		failpointBin = filepath.Join(filepath.Dir(libosBin), "libos-failpoints")
		out, err := exec.Command("go", "build", "-tags", "failpoints", "-o", failpointBin, ".").CombinedOutput()
		if err != nil {
			failpointBinErr = err
			t.Logf("%s", out)
		}
	})
	if failpointBinErr != nil {
		t.Fatalf("build with failpoints: %v", failpointBinErr)
	}
	return failpointBin
}

// TestKillBetweenCompactionStagesThenResume kills the runtime (SIGKILL from
// a failpoint) right after the second compressor is spawned; resume finishes
// the compaction from its durable job.
func TestKillBetweenCompactionStagesThenResume(t *testing.T) {
	t.Parallel()
	bin := failpointBinary(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "run", "base:v0", "--goal", "compact", "--dir", dir,
		"--script", "../../testdata/replay/compact_two_stages.yaml",
		"--grant", "process:spawn=write", "--grant", "image:context-compressor:v0=read")
	cmd.Env = append(os.Environ(), "LIBOS_FAILPOINT=after-commit:spawn", "LIBOS_FAILPOINT_SKIP=1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 || !strings.Contains(string(out), "spawned context-compressor:v0") {
		t.Fatalf("the run must die by SIGKILL after the second spawn: %v\n%s", err, out)
	}
	if strings.Count(string(out), "spawned context-compressor:v0") != 2 {
		t.Fatalf("killed before the second stage started:\n%s", out)
	}
	stdout, stderr, code := runBin(t, "resume", "--dir", dir)
	if code != 0 {
		t.Fatalf("resume exit %d:\n%s", code, stderr)
	}
	res := decodeOutcome(t, stdout)["result"].(map[string]any)
	if res["compacted"] != true || len(res["compressor_pids"].([]any)) != 2 {
		t.Fatalf("compaction after resume: %v\n%s", res, stderr)
	}
}
