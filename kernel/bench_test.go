package kernel

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
)

func benchRuntime(b *testing.B, script string) *Runtime {
	b.Helper()
	s, err := llm.ParseScript([]byte(script))
	if err != nil {
		b.Fatal(err)
	}
	rt, err := Open(b.TempDir(), Options{Clock: clock.NewFake(epoch, true), Workers: 64})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rt.Close() })
	p, err := llm.NewReplay(s, rt)
	if err != nil {
		b.Fatal(err)
	}
	rt.SetProvider(p)
	return rt
}

// fillContext appends synthetic entries of about tokens tokens to pid's context.
func fillContext(b *testing.B, rt *Runtime, pid int64, tokens int) {
	b.Helper()
	text := strings.Repeat("lorem ipsum dolor sit amet ", 40) // about 270 tokens
	err := rt.update(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		c, err := rt.loadContext(tx, r)
		if err != nil {
			return err
		}
		var add []Entry
		for n := 0; n < tokens; n += rt.tokens.Estimate(text) + 4 {
			add = append(add, Entry{Role: llm.RoleUser, Kind: "notice", Content: text})
		}
		return rt.appendEntries(tx, r, c, add...)
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCompaction100k measures the kernel's overhead for compacting a
// 100k-token context in 8 chunks (replay compressors answer at once).
func BenchmarkCompaction100k(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("processes:\n  - image: base:v0\n    turns:\n")
	sb.WriteString("      - tool_calls: [{name: compact_process_context, arguments: {target_tokens: 4000, preserve_recent_entries: 8, max_chunks: 8}}]\n")
	sb.WriteString("      - tool_calls: [{name: process_exit, arguments: {payload: \"${last}\"}}]\n")
	for i := 0; i < 8; i++ {
		sb.WriteString("  - image: context-compressor:v0\n    turns:\n      - tool_calls: [{name: process_exit, arguments: {payload: " + strings.ReplaceAll(summaryPayload, "${process.pid}", "x") + "}}]\n")
	}
	var elapsed time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		rt := benchRuntime(b, sb.String())
		pid, err := rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "compact", Grants: compactionGrants(),
			Budget: capabilities.Budget{LLMTokens: 100_000_000}})
		if err != nil {
			b.Fatal(err)
		}
		fillContext(b, rt, pid, 100_000)
		b.StartTimer()
		start := time.Now()
		if err := rt.RunUntilIdle(context.Background()); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		b.StopTimer()
		info, _ := rt.Process(pid)
		_, payload, _ := rt.ReadObject(info.ResultOID)
		if !strings.Contains(string(payload), `"compacted":true`) {
			b.Fatalf("compaction did not complete: %s %s", info.Status, payload)
		}
	}
	b.ReportMetric(float64(elapsed.Milliseconds())/float64(b.N), "ms/compaction")
}

// BenchmarkMaterialize measures a quantum's cost as the context grows: it
// should grow linearly with the context, not worse.
func BenchmarkMaterialize(b *testing.B) {
	for _, tokens := range []int{1_000, 4_000, 16_000, 64_000} {
		b.Run(fmt.Sprintf("tokens=%d", tokens), func(b *testing.B) {
			var sb strings.Builder
			sb.WriteString("processes:\n  - image: base:v0\n    turns:\n")
			for i := 0; i < b.N; i++ {
				sb.WriteString("      - tool_calls: [{name: get_current_time, arguments: {}}]\n")
			}
			sb.WriteString("      - tool_calls: [{name: process_exit, arguments: {}}]\n")
			rt := benchRuntime(b, sb.String())
			pid, err := rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", Grants: clockGrants(), Budget: capabilities.Budget{LLMTokens: 1 << 50}})
			if err != nil {
				b.Fatal(err)
			}
			fillContext(b, rt, pid, tokens)
			b.ResetTimer()
			start := time.Now()
			if err := rt.RunUntilIdle(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N+1), "µs/quantum")
		})
	}
}

// BenchmarkReopen measures opening a directory holding 100,000 Objects and
// 10,000 processes.
func BenchmarkReopen(b *testing.B) {
	dir := b.TempDir()
	rt, err := Open(dir, Options{Clock: clock.NewFake(epoch, true)})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 10_000; i++ {
		if _, err := rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g"}); err != nil {
			b.Fatal(err)
		}
	}
	// 10,000 processes hold 20,000 Objects (goal, context); add 80,000 more.
	for batch := 0; batch < 80; batch++ {
		err := rt.update(func(tx *txn) error {
			for j := 0; j < 1000; j++ {
				if _, err := tx.Create(objects.CreateSpec{Namespace: "bench", Name: fmt.Sprintf("o-%d-%d", batch, j), Kind: "data", Payload: []byte(`{"x":1}`)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	rt.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rt, err := Open(dir, Options{Clock: clock.NewFake(epoch, true)})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		rt.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/open")
}

// BenchmarkCheckpoint measures create and restore of a subtree holding
// 10,000 Objects.
func BenchmarkCheckpoint(b *testing.B) {
	rt, err := Open(b.TempDir(), Options{Clock: clock.NewFake(epoch, true)})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	pid, err := rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g"})
	if err != nil {
		b.Fatal(err)
	}
	for batch := 0; batch < 10; batch++ {
		err := rt.update(func(tx *txn) error {
			for j := 0; j < 1000; j++ {
				if _, err := tx.Create(objects.CreateSpec{Namespace: Namespace(pid), Name: fmt.Sprintf("o-%d-%d", batch, j), Kind: "data", Payload: []byte(`{"x":1}`)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	var create, restore time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		cp, err := rt.CreateCheckpoint(pid)
		if err != nil {
			b.Fatal(err)
		}
		create += time.Since(start)
		start = time.Now()
		if _, err := rt.RestoreCheckpoint(cp.ID); err != nil {
			b.Fatal(err)
		}
		restore += time.Since(start)
	}
	b.ReportMetric(float64(create.Milliseconds())/float64(b.N), "ms/create")
	b.ReportMetric(float64(restore.Milliseconds())/float64(b.N), "ms/restore")
}

// BenchmarkEndedProcessHeap reports the heap a runtime still holds for each
// process that ran two quanta and exited, after a collection.
func BenchmarkEndedProcessHeap(b *testing.B) {
	const procs = 2000
	rt := benchRuntime(b, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: get_current_time, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {message: done}}]
`)
	grants := []capabilities.Grant{{Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for b.Loop() {
		for i := 0; i < procs; i++ {
			if _, err := rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", Grants: grants}); err != nil {
				b.Fatal(err)
			}
		}
		if err := rt.RunUntilIdle(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	ended := float64(procs * b.N)
	b.ReportMetric((float64(after.HeapAlloc)-float64(before.HeapAlloc))/ended, "heap-B/ended-process")
}

// BenchmarkContextExtend appends one 1 KB entry a commit to a context and
// encodes it, from 10 KB and from 500 KB (it starts over from that size every
// 256 commits): the cost follows what the commit adds, since the entries and
// the payload's body grow in place, so the two sizes should cost about the
// same.
func BenchmarkContextExtend(b *testing.B) {
	k := &Runtime{tokens: byteEstimator{}}
	r := &procRecord{}
	entry := Entry{Role: llm.RoleTool, ToolCallID: "c", Content: strings.Repeat("x", 1000)}
	for _, size := range []int{10 << 10, 500 << 10} {
		b.Run(fmt.Sprintf("from=%dKB", size>>10), func(b *testing.B) {
			start := &llmContext{}
			for len(start.encoded) < size {
				if err := k.appendEntries(&txn{}, r, start, entry); err != nil {
					b.Fatal(err)
				}
				if _, _, err := start.encode(0, nil); err != nil {
					b.Fatal(err)
				}
			}
			const restart = 256
			var c *llmContext
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%restart == 0 {
					// A copy with room for the next restart commits, as the
					// context would have after its arrays last grew.
					b.StopTimer()
					c = start.share()
					c.entries = append(make([]Entry, 0, len(start.entries)+restart+1), start.entries...)
					c.encoded = append(make([]byte, 0, len(start.encoded)+(restart+1)*(len(entry.Content)+64)), start.encoded...)
					c.entriesGrown, c.grown = new(int), new(int)
					*c.entriesGrown, *c.grown = len(c.entries), len(c.encoded)
					b.StartTimer()
				}
				if err := k.appendEntries(&txn{}, r, c, entry); err != nil {
					b.Fatal(err)
				}
				if _, _, err := c.encode(len(c.entries), nil); err != nil {
					b.Fatal(err)
				}
				c.owned = false // committed: the cache shares the arrays
			}
		})
	}
}
