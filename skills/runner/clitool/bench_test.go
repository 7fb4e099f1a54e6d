package clitool

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// BenchmarkOverheadVersusDirectExec runs the same small program (the probe
// writing 64 bytes) directly with os/exec and as a cli-tool call with one
// input, interleaved so that both see the same machine load, and reports
// both medians and their ratio.
func BenchmarkOverheadVersusDirectExec(b *testing.B) {
	probe := filepath.Join(probeDir, "libos-probe")
	args := []string{"emit", "stdout", "64", "a"}
	call := Call{
		Command:    probe,
		Args:       args,
		PackageDir: b.TempDir(),
		Workspace:  b.TempDir(),
		Inputs:     map[string]json.RawMessage{"n": json.RawMessage("1")},
		LookupEnv:  func(k string) (string, bool) { return map[string]string{"PATH": "/usr/bin:/bin"}[k], k == "PATH" },
	}
	direct := make([]time.Duration, 0, b.N)
	tool := make([]time.Duration, 0, b.N)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		cmd := exec.Command(probe, args...)
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil || out.Len() != 64 {
			b.Fatalf("direct exec: %v (%d bytes)", err, out.Len())
		}
		direct = append(direct, time.Since(start))

		start = time.Now()
		res := Run(ctx, call)
		if res.Err != nil || res.Stdout.Bytes != 64 {
			b.Fatalf("cli-tool call: %v (%d bytes)", res.Err, res.Stdout.Bytes)
		}
		tool = append(tool, time.Since(start))
	}
	b.StopTimer()
	d, c := median(direct), median(tool)
	b.ReportMetric(float64(d.Microseconds()), "direct-median-µs")
	b.ReportMetric(float64(c.Microseconds()), "clitool-median-µs")
	b.ReportMetric(float64(c)/float64(d), "ratio-median")
	b.ReportMetric(float64(sum(tool))/float64(sum(direct)), "ratio-mean")
	b.ReportMetric(0, "ns/op") // the pair of calls per op is not a meaningful unit
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}
