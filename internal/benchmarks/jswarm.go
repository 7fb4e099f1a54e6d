package benchmarks

import (
	"context"
	"fmt"
	"time"

	"github.com/libos/libos/skills/runner/jsrunner"
)

// JSWarm times calls warm javascript calls through a pool of one worker
// process (jsrunner.MeasureWarmCalls) against the same function called on a
// precompiled goja program in this process, interleaved in the same run.
// The worker is executable (empty: this program), which must call
// jsrunner.MaybeRunWorker first.
func JSWarm(dir string, calls int, executable string) (Result, error) {
	start := time.Now()
	w, err := jsrunner.MeasureWarmCalls(context.Background(), dir, calls, jsrunner.PoolOptions{Executable: executable})
	if err != nil {
		return Result{}, err
	}
	med, p99, gmed, gp99 := µs(w.Median), µs(w.P99), µs(w.GojaMedian), µs(w.GojaP99)
	size := fmt.Sprintf("%s calls", count(calls))
	if w.LimitFailures > 0 {
		// A trivial call ended by a limit misses the goal whatever the
		// latencies of the others.
		size += fmt.Sprintf(", %d ENDED AT A LIMIT", w.LimitFailures)
	}
	ok := w.LimitFailures == 0
	return Result{Name: "js_warm", Elapsed: time.Since(start), Metrics: map[string]float64{
		"median-µs": med, "p99-µs": p99, "goja-median-µs": gmed, "goja-p99-µs": gp99,
		"median-x-goja": med / gmed, "p99-x-goja": p99 / gp99, "limit-failures": float64(w.LimitFailures),
	}, Rows: []Row{
		row("js-median-µs", "javascript warm call median, "+size, med, "µs", "precompiled goja call median (µs)", gmed,
			"≤ 50 µs", func(v, _ float64) bool { return ok && v <= 50 }),
		row("js-p99-µs", "javascript warm call p99, "+size, p99, "µs", "precompiled goja call p99 (µs)", gp99,
			"≤ 250 µs", func(v, _ float64) bool { return ok && v <= 250 }),
	}}, nil
}
