package catalog_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/libos/libos/skills/catalog"
)

// reportLatency prints the median and p99 of per-call latencies.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pick := func(q float64) float64 {
		return float64(lat[int(q*float64(len(lat)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pick(0.5), "median-µs")
	b.ReportMetric(pick(0.99), "p99-µs")
}

// benchmarkTool measures one skill tool call as the kernel makes it:
// schema validation, Invoke (the scope checks) and the outside effect.
func benchmarkTool(b *testing.B, name, args string) {
	c := loadAgent(b)
	tl := toolByName(b, c.Tools(), name)
	sys := &fakeSys{grants: map[string]bool{"execute scope:echo.use": true}}
	once := func() {
		norm, err := tl.Schema.Normalize(json.RawMessage(args))
		if err != nil {
			b.Fatal(err)
		}
		out, err := tl.Invoke(context.Background(), sys, norm)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := out.Effect(context.Background()); err != nil {
			b.Fatal(err)
		}
		sys.authorized = sys.authorized[:0]
	}
	once() // starts the javascript pool and warms the bundle cache
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		once()
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkJavaScriptToolCall calls the tally skill (a module with one
// relative import) through its catalog tool, warm.
func BenchmarkJavaScriptToolCall(b *testing.B) {
	benchmarkTool(b, "tally", `{"text": "the quick brown fox jumps over the lazy dog"}`)
}

// BenchmarkCLIToolCall calls the echo skill (cat with the inputs on stdin)
// through its catalog tool.
func BenchmarkCLIToolCall(b *testing.B) {
	benchmarkTool(b, "echo", `{"text": "hello", "tags": ["a", "b"]}`)
}

// BenchmarkLoadCatalog admits the fixture packages and builds their tools.
func BenchmarkLoadCatalog(b *testing.B) {
	dirs := []string{agentSkills(b)}
	opts := testOptions(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := catalog.LoadCatalog(dirs, opts)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
