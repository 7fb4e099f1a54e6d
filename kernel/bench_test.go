package kernel

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/clock"
	"github.com/libos/libos/llm"
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
