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

	"github.com/dop251/goja"
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

// baselineSource is the benchmark module as a plain script, for the
// in-process baseline below.
const baselineSource = `function add(inputs) { return { sum: inputs.a + inputs.b }; }`

// gojaBaseline is the in-process reference a warm call is compared with: the
// module compiled once (goja.Compile), and per call a fresh goja runtime that
// runs it, parses the inputs, calls the function and stringifies the result.
// It has no process boundary, no bundle lookup and no limits.
type gojaBaseline struct {
	prg *goja.Program
}

func newGojaBaseline(b *testing.B) *gojaBaseline {
	prg, err := goja.Compile("sum.js", baselineSource, true)
	if err != nil {
		b.Fatal(err)
	}
	return &gojaBaseline{prg: prg}
}

func (g *gojaBaseline) call(b *testing.B, inputs string) {
	vm := goja.New()
	if _, err := vm.RunProgram(g.prg); err != nil {
		b.Fatal(err)
	}
	add, _ := goja.AssertFunction(vm.Get("add"))
	json := vm.Get("JSON").ToObject(vm)
	parse, _ := goja.AssertFunction(json.Get("parse"))
	stringify, _ := goja.AssertFunction(json.Get("stringify"))
	in, err := parse(goja.Undefined(), vm.ToValue(inputs))
	if err != nil {
		b.Fatal(err)
	}
	out, err := add(goja.Undefined(), in)
	if err == nil {
		out, err = stringify(goja.Undefined(), out)
	}
	if err != nil || out.String() != `{"sum":42}` {
		b.Fatalf("baseline: %v %v", out, err)
	}
}

// BenchmarkInvokeWarm calls a small pure module whose bundle is cached on
// the host and compiled in the worker; every call still runs in a fresh
// engine instance and crosses the process boundary. Each iteration also
// times one in-process precompiled goja call (gojaBaseline), so the ratios
// compare both under the same load: absolute figures move several-fold with
// the machine's load. The timer is not stopped around the baseline (each
// stop and start reads memory statistics, stopping the world between
// calls), so ns/op covers both; the latency metrics are timed per call.
func BenchmarkInvokeWarm(b *testing.B) {
	p := newPool(b, PoolOptions{Workers: 1})
	spec := Spec{Dir: fixture(b, "pure"), Module: "sum.mjs", Export: "add"}
	const inputs = `{"a":20,"b":22}`
	in := json.RawMessage(inputs)
	if r := p.Run(context.Background(), spec, in, ""); r.Err != nil || string(r.Output) != `{"sum":42}` {
		b.Fatalf("warm-up: %s %+v", r.Output, r.Err)
	}
	base := newGojaBaseline(b)
	lat := make([]time.Duration, 0, b.N)
	baseLat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		r := p.Run(context.Background(), spec, in, "")
		lat = append(lat, time.Since(start))
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		start = time.Now()
		base.call(b, inputs)
		baseLat = append(baseLat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
	slices.Sort(baseLat)
	b.ReportMetric(percentile(baseLat, 0.5), "goja-median-µs")
	b.ReportMetric(percentile(lat, 0.5)/percentile(baseLat, 0.5), "median-x-goja")
	b.ReportMetric(percentile(lat, 0.99)/percentile(baseLat, 0.99), "p99-x-goja")
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
