package kernel

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/images"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
)

// tenQuantumScript is one entry of ten turns: nine clock reads and an exit.
// Every root is its own process tree, so every root plays this entry.
func tenQuantumScript() *llm.Script {
	var b strings.Builder
	b.WriteString("processes:\n  - image: base:v0\n    turns:\n")
	for i := 0; i < 9; i++ {
		b.WriteString("      - tool_calls: [{name: get_current_time, arguments: {timezone: UTC}}]\n")
	}
	b.WriteString("      - tool_calls: [{name: process_exit, arguments: {message: done}}]\n")
	s, err := llm.ParseScript([]byte(b.String()))
	if err != nil {
		panic(err)
	}
	return s
}

// BenchmarkQuanta runs 1,000 processes of 10 quanta each with the replay
// provider and reports quanta per second and synced commits per quantum.
func BenchmarkQuanta(b *testing.B) {
	const procs, quantaPerProc = 1000, 10
	script := tenQuantumScript()
	provider, err := llm.NewReplay(script)
	if err != nil {
		b.Fatal(err)
	}
	var totalQuanta, totalCommits uint64
	var elapsed time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		rt, err := Open(b.TempDir(), Options{Provider: provider, Clock: clock.NewFake(epoch, true), Workers: 64})
		if err != nil {
			b.Fatal(err)
		}
		for p := 0; p < procs; p++ {
			if _, err := rt.Spawn(SpawnSpec{Image: "base:v0", Goal: fmt.Sprintf("goal %d", p), Grants: clockGrants()}); err != nil {
				b.Fatal(err)
			}
		}
		before := rt.Store().Stats().SyncedCommits
		b.StartTimer()
		start := time.Now()
		if err := rt.RunUntilIdle(context.Background()); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		b.StopTimer()
		totalCommits += rt.Store().Stats().SyncedCommits - before
		totalQuanta += procs * quantaPerProc
		ps, _ := rt.Processes()
		for _, p := range ps {
			if p.Status != "exited" {
				b.Fatalf("pid %d ended %s: %s", p.PID, p.Status, p.Reason)
			}
		}
		rt.Close()
	}
	b.ReportMetric(float64(totalQuanta)/elapsed.Seconds(), "quanta/s")
	b.ReportMetric(float64(totalCommits)/float64(totalQuanta), "commits/quantum")
}

func benchRuntime(b *testing.B, script string) *Runtime {
	b.Helper()
	s, err := llm.ParseScript([]byte(script))
	if err != nil {
		b.Fatal(err)
	}
	p, err := llm.NewReplay(s)
	if err != nil {
		b.Fatal(err)
	}
	// bench:v0 is base:v0 without budget limits, so long scripts run out
	// of nothing but turns.
	bench, err := images.Builtin("base:v0")
	if err != nil {
		b.Fatal(err)
	}
	bench.Name, bench.Budget = "bench", images.Budget{}
	rt, err := Open(b.TempDir(), Options{Provider: p, Clock: clock.NewFake(epoch, true), Workers: 64,
		Images: map[string]*images.Image{"bench:v0": bench}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rt.Close() })
	return rt
}

// BenchmarkSpawnWaitRoundTrip measures spawn + child run + exit + parent
// wake round trips, sequential in one parent.
func BenchmarkSpawnWaitRoundTrip(b *testing.B) {
	const rounds = 200
	var sb strings.Builder
	sb.WriteString("processes:\n  - image: bench:v0\n    turns:\n")
	for i := 0; i < rounds; i++ {
		sb.WriteString("      - tool_calls: [{name: spawn_child_process, arguments: {image: bench:v0, goal: g}}]\n")
		sb.WriteString("      - tool_calls: [{name: wait_child_process, arguments: {child_pid: \"${last.pid}\"}}]\n")
	}
	sb.WriteString("      - tool_calls: [{name: process_exit, arguments: {}}]\n")
	for i := 0; i < rounds; i++ {
		sb.WriteString("  - image: bench:v0\n    turns:\n      - tool_calls: [{name: process_exit, arguments: {message: done}}]\n")
	}
	var elapsed time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		rt := benchRuntime(b, sb.String())
		pid, err := rt.Spawn(SpawnSpec{Image: "bench:v0", Goal: "spawn", Grants: []capabilities.Grant{spawnGrant()}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := rt.RunUntilIdle(context.Background()); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		if info, _ := rt.Process(pid); info.Status != "exited" {
			b.Fatalf("parent %s: %s", info.Status, info.Reason)
		}
	}
	b.ReportMetric(float64(rounds*b.N)/elapsed.Seconds(), "roundtrips/s")
}

// BenchmarkMessageRoundTrip measures post + blocking receive round trips
// between a parent and a child playing ping-pong.
func BenchmarkMessageRoundTrip(b *testing.B) {
	const rounds = 200
	var sb strings.Builder
	sb.WriteString("processes:\n  - image: bench:v0\n    turns:\n")
	sb.WriteString("      - tool_calls: [{name: spawn_child_process, arguments: {image: bench:v0, goal: pong}}]\n")
	for i := 0; i < rounds; i++ {
		sb.WriteString("      - tool_calls: [{name: send_process_message, arguments: {recipient_pid: 2, body: ping}}]\n")
		sb.WriteString("      - tool_calls: [{name: receive_process_messages, arguments: {}}]\n")
	}
	sb.WriteString("      - tool_calls: [{name: process_exit, arguments: {}}]\n  - image: bench:v0\n    turns:\n")
	for i := 0; i < rounds; i++ {
		sb.WriteString("      - tool_calls: [{name: receive_process_messages, arguments: {}}]\n")
		sb.WriteString("      - tool_calls: [{name: send_process_message, arguments: {recipient_pid: 1, body: pong}}]\n")
	}
	sb.WriteString("      - tool_calls: [{name: receive_process_messages, arguments: {}}]\n")
	var elapsed time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		rt := benchRuntime(b, sb.String())
		pid, err := rt.Spawn(SpawnSpec{Image: "bench:v0", Goal: "ping", Grants: []capabilities.Grant{spawnGrant()}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := rt.RunUntilIdle(context.Background()); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		if info, _ := rt.Process(pid); info.Status != "exited" {
			b.Fatalf("parent %s: %s", info.Status, info.Reason)
		}
	}
	// Each round is two posts and two blocking receives.
	b.ReportMetric(float64(2*rounds*b.N)/elapsed.Seconds(), "post+receive/s")
}

// fillContext appends synthetic entries of about tokens tokens to pid's context.
func fillContext(b *testing.B, rt *Runtime, pid int64, tokens int) {
	b.Helper()
	text := strings.Repeat("lorem ipsum dolor sit amet ", 40) // about 270 tokens
	err := rt.update(func(tx *objects.Txn) error {
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
		err := rt.update(func(tx *objects.Txn) error {
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
		err := rt.update(func(tx *objects.Txn) error {
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
