package jsrunner

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// percentile returns the q-quantile of sorted latencies in microseconds.
func percentile(sorted []time.Duration, q float64) float64 {
	return float64(sorted[int(q*float64(len(sorted)-1))].Nanoseconds()) / 1e3
}

// reportLatency prints the median and p99 of per-invocation latencies.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(percentile(lat, 0.5), "median-µs")
	b.ReportMetric(percentile(lat, 0.99), "p99-µs")
}

// BenchmarkInvokeWarm is MeasureWarmCalls with b.N calls: a small pure
// module whose bundle is cached on the host and compiled in the worker,
// every call still in a fresh engine instance across the process boundary,
// each followed by one in-process precompiled goja call, so the ratios
// compare both under the same load (absolute figures move several-fold with
// the machine's load). ns/op covers both calls and the collections between
// them; the latency metrics are timed per call.
func BenchmarkInvokeWarm(b *testing.B) {
	w, err := MeasureWarmCalls(context.Background(), b.TempDir(), b.N, PoolOptions{MemoryLimit: testMemoryLimit})
	if err != nil {
		b.Fatal(err)
	}
	µs := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(µs(w.Median), "median-µs")
	b.ReportMetric(µs(w.P99), "p99-µs")
	b.ReportMetric(µs(w.GojaMedian), "goja-median-µs")
	b.ReportMetric(float64(w.Median)/float64(w.GojaMedian), "median-x-goja")
	b.ReportMetric(float64(w.P99)/float64(w.GojaP99), "p99-x-goja")
	b.ReportMetric(float64(w.LimitFailures), "limit-failures")
}

// BenchmarkInvokeFresh changes the module before every call, so each call
// bundles a new module graph with esbuild and compiles it in the worker.
func BenchmarkInvokeFresh(b *testing.B) {
	p := newPool(b, PoolOptions{Workers: 1})
	dir := b.TempDir()
	spec := Spec{Dir: dir, Module: "sum.mjs", Export: "add"}
	in := json.RawMessage(`{"a":20,"b":22}`)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		src := fmt.Sprintf("const revision = %d;\nexport function add(inputs) {\n  return { sum: inputs.a + inputs.b, revision };\n}\n", i)
		if err := os.WriteFile(filepath.Join(dir, "sum.mjs"), []byte(src), 0o644); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		r := p.Run(context.Background(), spec, in, "")
		lat = append(lat, time.Since(start))
		if r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkPagedThroughput totals a 64 MiB JSON array page by page.
func BenchmarkPagedThroughput(b *testing.B) {
	p := newPool(b, PoolOptions{Workers: 1})
	ws := b.TempDir()
	path := filepath.Join(ws, "data", "ledger.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	const target = 64 << 20
	written, n := 0, 0
	w.WriteString("[")
	written++
	for written < target-200 {
		if n > 0 {
			w.WriteString(",\n")
			written += 2
		}
		k, _ := fmt.Fprintf(w, `{"id":%d,"amount":%d,"note":"entry %d of the benchmark ledger"}`, n, n%97, n)
		written += k
		n++
	}
	w.WriteString("]")
	written++
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()

	spec := pagedSpec(b, "totalPage", 0)
	in := json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace"}`)
	b.SetBytes(int64(written))
	b.ResetTimer()
	start := time.Now()
	var pages int
	for i := 0; i < b.N; i++ {
		r := p.Run(context.Background(), spec, in, ws)
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		var out struct{ Count int }
		if err := json.Unmarshal(r.Output, &out); err != nil || out.Count != n {
			b.Fatalf("count %d, want %d (%s)", out.Count, n, r.Output)
		}
		pages = r.Pages
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(written)*float64(b.N)/(1<<20)/elapsed.Seconds(), "MiB/s")
	b.ReportMetric(float64(pages), "pages")
}
