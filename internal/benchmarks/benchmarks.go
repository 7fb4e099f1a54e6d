// Package benchmarks holds the runtime's benchmark scenarios, shared by `go
// test -bench` and `libos bench`. Most run the real kernel on a fresh
// directory with the replay provider and a fake clock. Each returns its
// figures and the rows of the performance goals it measures, every row with
// a baseline measured in the same run; nothing here asserts a time.
package benchmarks

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/images"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
)

// Result is one scenario's figures and the goal rows they answer.
type Result struct {
	Name    string             `json:"name"`
	Elapsed time.Duration      `json:"elapsed_ns"`
	Metrics map[string]float64 `json:"metrics"`
	Rows    []Row              `json:"rows,omitempty"`
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func grant(resource string, right capabilities.Right) capabilities.Grant {
	return capabilities.Grant{Resource: resource, Rights: []capabilities.Right{right}}
}

// open starts a runtime on dir with script and bench:v0, which is base:v0
// without budget limits so long scenarios run out of nothing but turns.
func open(dir, script string) (*kernel.Runtime, error) {
	s, err := llm.ParseScript([]byte(script))
	if err != nil {
		return nil, err
	}
	bench, err := images.Builtin("base:v0")
	if err != nil {
		return nil, err
	}
	bench.Name, bench.Budget = "bench", images.Budget{}
	rt, err := kernel.Open(dir, kernel.Options{Clock: clock.NewFake(epoch, true), Workers: 64,
		Images: map[string]*images.Image{"bench:v0": bench}})
	if err != nil {
		return nil, err
	}
	p, err := llm.NewReplay(s, rt)
	if err != nil {
		rt.Close()
		return nil, err
	}
	rt.SetProvider(p)
	return rt, nil
}

func runAll(rt *kernel.Runtime) (time.Duration, error) {
	start := time.Now()
	err := rt.RunUntilIdle(context.Background())
	return time.Since(start), err
}

func checkExited(rt *kernel.Runtime) error {
	ps, err := rt.Processes()
	if err != nil {
		return err
	}
	for _, p := range ps {
		if p.Status != "exited" && p.Status != "waiting" {
			return fmt.Errorf("pid %d ended %s: %s", p.PID, p.Status, p.Reason)
		}
	}
	return nil
}

// quantaScript is the script of a process that runs quanta quanta: clock
// reads, then an exit.
func quantaScript(quanta int) string {
	return textQuantaScript(quanta, 0)
}

// textQuantaScript is quantaScript with replies that also carry text of
// textBytes bytes, so each process's context grows by that much a quantum.
func textQuantaScript(quanta, textBytes int) string {
	var b strings.Builder
	b.WriteString("processes:\n  - image: bench:v0\n    turns:\n")
	text := replyText(textBytes)
	for i := 0; i < quanta-1; i++ {
		b.WriteString("      - {" + text + "tool_calls: [{name: get_current_time, arguments: {timezone: UTC}}]}\n")
	}
	b.WriteString("      - tool_calls: [{name: process_exit, arguments: {message: done}}]\n")
	return b.String()
}

// replyText is the field a scripted reply carries to hold textBytes bytes
// of text, in the flow mapping of a turn ("" for none).
func replyText(textBytes int) string {
	if textBytes <= 0 {
		return ""
	}
	return "text: " + strings.Repeat("lorem ipsum ", textBytes/12) + ", "
}

// Quanta runs procs processes of quanta quanta each (clock reads, then an
// exit) and reports quanta per second against raw Pebble synced Sets per
// second with 64 writers, measured just before and just after it (their
// mean); synced commits per quantum; and the time the store's write lock
// was held per quantum against the process's CPU time per quantum. The lock
// time is wall time (objects.Stats.WriteLockHeld), so on a loaded machine it
// also holds the time its holder waited for a CPU: it bounds the CPU spent
// under the lock from above. lock-busy is the share of the run the lock was
// held. A third baseline, raw-like, writes raw batches of the records and
// bytes the run's commits held on average, as many a quantum as it made,
// with 64 writers: its ratio to raw Sets is the floor of quanta/raw for any
// runtime that keeps what a quantum keeps, and quanta/raw-like is the
// runtime's own cost.
func Quanta(dir string, procs, quanta int) (Result, error) {
	rawOps := 100 * rawWriters
	rawBefore, err := RawSyncedSets(filepath.Join(dir, "raw-before"), rawWriters, rawOps)
	if err != nil {
		return Result{}, err
	}
	run, err := runQuanta(filepath.Join(dir, "runtime"), quantaScript(quanta), procs, quanta)
	if err != nil {
		return Result{}, err
	}
	rawAfter, err := RawSyncedSets(filepath.Join(dir, "raw-after"), rawWriters, rawOps)
	if err != nil {
		return Result{}, err
	}
	raw := (rawBefore + rawAfter) / 2
	batches, err := rawLikeBatches(filepath.Join(dir, "raw-like"), rawOps, run)
	if err != nil {
		return Result{}, err
	}
	rawLike := batches / run.commits
	size := fmt.Sprintf("%s × %d", count(procs), quanta)
	return Result{Name: "quanta", Elapsed: run.elapsed, Metrics: map[string]float64{
		"quanta/s": run.rate, "commits/quantum": run.commits, "processes": float64(procs),
		"raw-sets/s": raw, "quanta/raw": run.rate / raw, "lock-ms/quantum": run.lockMS, "cpu-ms/quantum": run.cpuMS,
		"lock-busy": run.lockBusy, "records/commit": run.records, "bytes/commit": run.bytes,
		"raw-like-quanta/s": rawLike, "raw-like/raw": rawLike / raw, "quanta/raw-like": run.rate / rawLike,
	}, Rows: []Row{
		row("quanta/s", "quanta/s, "+size, run.rate, "/s", "raw Pebble synced Sets/s, 64 writers", raw,
			"≥ 10,000/s and ≥ 0.35×", func(v, r float64) bool { return v >= 10_000 && r >= 0.35 }),
		row("commits/quantum", "synced commits a quantum, "+size, run.commits, "commits", "", 0,
			"≤ 2", func(v, _ float64) bool { return v <= 2 }),
		row("lock-ms/quantum", "store write lock held a quantum (wall time), "+size, run.lockMS, "ms", "process CPU a quantum (ms)", run.cpuMS,
			"≤ 0.05 ms", func(v, _ float64) bool { return v <= 0.05 }),
	}}, nil
}

// LargeContexts runs procs processes of 10 quanta twice, once with replies
// of a tool call alone and once with replies that also carry 11 KB of text,
// so that contexts grow to about 100 KB, and reports the store's write lock
// held a quantum in the second run against the first; then the same for
// parents that spawn a child and wait for it, 10 times each. The work under
// the lock should follow what a quantum adds to a context, not its size.
func LargeContexts(dir string, procs int) (Result, error) {
	const quanta, textBytes = 10, 11_000
	small, err := runQuanta(filepath.Join(dir, "small"), quantaScript(quanta), procs, quanta)
	if err != nil {
		return Result{}, err
	}
	large, err := runQuanta(filepath.Join(dir, "large"), textQuantaScript(quanta, textBytes), procs, quanta)
	if err != nil {
		return Result{}, err
	}
	// Parents that wait for a child each round take their context up
	// again at every wake-up, after the cache let it go.
	const parents, rounds = 20, 10
	smallWaits, err := spawnRounds(filepath.Join(dir, "small-waits"), parents, rounds, 0)
	if err != nil {
		return Result{}, err
	}
	largeWaits, err := spawnRounds(filepath.Join(dir, "large-waits"), parents, rounds, textBytes)
	if err != nil {
		return Result{}, err
	}
	perTrip := func(d time.Duration) float64 { return ms(d) / (parents * rounds) }
	size := fmt.Sprintf("%s × %d", count(procs), quanta)
	return Result{Name: "large_context", Elapsed: small.elapsed + large.elapsed + smallWaits.elapsed + largeWaits.elapsed, Metrics: map[string]float64{
		"lock-ms/quantum": large.lockMS, "small-lock-ms/quantum": small.lockMS, "cpu-ms/quantum": large.cpuMS,
		"small-cpu-ms/quantum": small.cpuMS, "quanta/s": large.rate, "small-quanta/s": small.rate, "processes": float64(procs),
		"lock-ms/roundtrip": perTrip(largeWaits.lock), "small-lock-ms/roundtrip": perTrip(smallWaits.lock),
	}, Rows: []Row{
		row("large-context-lock-ms", "store write lock held a quantum, contexts growing to 100 KB, "+size, large.lockMS, "ms",
			"the same with contexts under 3 KB (ms)", small.lockMS,
			"≤ 2×", func(_, r float64) bool { return r <= 2 }),
		row("large-context-wait-lock-ms", fmt.Sprintf("store write lock held a spawn+wait round trip, contexts growing to 200 KB, %d parents × %d", parents, rounds),
			perTrip(largeWaits.lock), "ms", "the same with contexts under 5 KB (ms)", perTrip(smallWaits.lock),
			"≤ 2×", func(_, r float64) bool { return r <= 2 }),
	}}, nil
}

// quantaRun is what runQuanta measured.
type quantaRun struct {
	elapsed                                time.Duration
	rate, commits, lockMS, cpuMS, lockBusy float64
	// records and bytes are a commit's mean records and encoded batch size.
	records, bytes float64
}

// rawLikeBatches opens Pebble as the store does in dir and returns the rate
// of n synced batches of the mean shape of run's commits, with 64 writers.
func rawLikeBatches(dir string, n int, run quantaRun) (float64, error) {
	db, err := objects.OpenRawPebble(dir)
	if err != nil {
		return 0, err
	}
	rate, err := db.SyncedBatches(rawWriters, n, max(int(math.Round(run.records)), 1), int(math.Round(run.bytes)))
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return rate, err
}

// runQuanta runs procs processes of script (quanta quanta each, ending in
// an exit) on a runtime in dir, and measures quanta per second, synced
// commits, the store's write lock and the process's CPU a quantum.
func runQuanta(dir, script string, procs, quanta int) (quantaRun, error) {
	rt, err := open(dir, script)
	if err != nil {
		return quantaRun{}, err
	}
	defer rt.Close()
	err = spawnParallel(rt, procs, func(p int) kernel.SpawnSpec {
		return kernel.SpawnSpec{Image: "bench:v0", Goal: fmt.Sprintf("goal %d", p), Grants: []capabilities.Grant{grant("clock:now", capabilities.Read)}}
	})
	if err != nil {
		return quantaRun{}, err
	}
	before := rt.Store().Stats()
	cpuBefore := processCPU()
	elapsed, err := runAll(rt)
	if err != nil {
		return quantaRun{}, err
	}
	cpu := processCPU() - cpuBefore
	after := rt.Store().Stats()
	if err := checkExited(rt); err != nil {
		return quantaRun{}, err
	}
	total := float64(procs * quanta)
	commits := float64(after.SyncedCommits - before.SyncedCommits)
	return quantaRun{
		records:  float64(after.AppliedRecords-before.AppliedRecords) / commits,
		bytes:    float64(after.AppliedBytes-before.AppliedBytes) / commits,
		elapsed:  elapsed,
		rate:     total / elapsed.Seconds(),
		commits:  commits / total,
		lockMS:   ms(after.WriteLockHeld-before.WriteLockHeld) / total,
		cpuMS:    ms(cpu) / total,
		lockBusy: float64(after.WriteLockHeld-before.WriteLockHeld) / float64(elapsed),
	}, nil
}

// spawnScript is a parent that spawns a child, waits for it and is woken by
// its exit, rounds times, and the children it spawns.
func spawnScript(rounds, textBytes int) string {
	var b strings.Builder
	text := replyText(textBytes)
	b.WriteString("processes:\n  - image: bench:v0\n    turns:\n")
	for i := 0; i < rounds; i++ {
		b.WriteString("      - {" + text + "tool_calls: [{name: spawn_child_process, arguments: {image: bench:v0, goal: g}}]}\n")
		b.WriteString("      - {" + text + "tool_calls: [{name: wait_child_process, arguments: {child_pid: \"${last.pid}\"}}]}\n")
	}
	b.WriteString("      - tool_calls: [{name: process_exit, arguments: {}}]\n")
	for i := 0; i < rounds; i++ {
		b.WriteString("  - image: bench:v0\n    turns:\n      - tool_calls: [{name: process_exit, arguments: {message: done}}]\n")
	}
	return b.String()
}

// spawnRun is what spawnRounds measured: the time the round trips took,
// and the store's write lock held, synced commits and WAL syncs meanwhile.
type spawnRun struct {
	elapsed, lock  time.Duration
	commits, syncs uint64
}

// spawnRounds runs parents parents of spawnScript(rounds, textBytes).
func spawnRounds(dir string, parents, rounds, textBytes int) (spawnRun, error) {
	rt, err := open(dir, spawnScript(rounds, textBytes))
	if err != nil {
		return spawnRun{}, err
	}
	defer rt.Close()
	err = spawnParallel(rt, parents, func(int) kernel.SpawnSpec {
		return kernel.SpawnSpec{Image: "bench:v0", Goal: "spawn", Grants: []capabilities.Grant{grant("process:spawn", capabilities.Write)}}
	})
	if err != nil {
		return spawnRun{}, err
	}
	before := rt.Store().Stats()
	elapsed, err := runAll(rt)
	if err != nil {
		return spawnRun{}, err
	}
	after := rt.Store().Stats()
	return spawnRun{elapsed: elapsed, lock: after.WriteLockHeld - before.WriteLockHeld,
		commits: after.SyncedCommits - before.SyncedCommits, syncs: after.WALSyncs - before.WALSyncs}, checkExited(rt)
}

// SpawnRoundTrips has one parent spawn a child, wait for it and be woken by
// its exit, rounds times in a row: a chain bound by the latency of each
// commit, against raw Pebble synced Sets/s with one writer. It reports the
// synced commits and WAL syncs a round trip takes: the parent's spawn and
// wait are calls of their own, and the child's exit a third.
func SpawnRoundTrips(dir string, rounds int) (Result, error) {
	raw, err := RawSyncedSets(filepath.Join(dir, "raw"), 1, min(rounds, 200)*2)
	if err != nil {
		return Result{}, err
	}
	run, err := spawnRounds(filepath.Join(dir, "runtime"), 1, rounds, 0)
	if err != nil {
		return Result{}, err
	}
	rate := perSecond(rounds, run.elapsed)
	return Result{Name: "spawn_wait", Elapsed: run.elapsed, Metrics: map[string]float64{"roundtrips/s": rate, "raw-sets/s": raw,
		"commits/roundtrip": float64(run.commits) / float64(rounds), "wal-syncs/roundtrip": float64(run.syncs) / float64(rounds)},
		Rows: []Row{row("roundtrips/s", fmt.Sprintf("spawn+run+exit+wake round trips/s, 1 parent × %s in a row", count(rounds)), rate, "/s",
			"raw Pebble synced Sets/s, 1 writer", raw, "≥ 1,000/s", func(v, _ float64) bool { return v >= 1000 })}}, nil
}

// ParallelSpawnRoundTrips runs parents parents at once, each doing rounds
// spawn+run+exit+wake round trips in a row: the throughput when commits
// share fsyncs, against raw Pebble synced Sets/s with as many writers.
func ParallelSpawnRoundTrips(dir string, parents, rounds int) (Result, error) {
	raw, err := RawSyncedSets(filepath.Join(dir, "raw"), parents, 100*parents)
	if err != nil {
		return Result{}, err
	}
	run, err := spawnRounds(filepath.Join(dir, "runtime"), parents, rounds, 0)
	if err != nil {
		return Result{}, err
	}
	rate := perSecond(parents*rounds, run.elapsed)
	return Result{Name: "spawn_wait_parallel", Elapsed: run.elapsed, Metrics: map[string]float64{"roundtrips/s": rate, "raw-sets/s": raw},
		Rows: []Row{row("parallel-roundtrips/s", fmt.Sprintf("spawn+run+exit+wake round trips/s, %d parents × %s", parents, count(rounds)), rate, "/s",
			fmt.Sprintf("raw Pebble synced Sets/s, %d writers", parents), raw, "≥ 1,000/s", func(v, _ float64) bool { return v >= 1000 })}}, nil
}

// MessageRoundTrips has a parent and a child play ping-pong: each round is
// a post and a blocking receive on each side.
func MessageRoundTrips(dir string, rounds int) (Result, error) {
	var b strings.Builder
	b.WriteString("processes:\n  - image: bench:v0\n    turns:\n")
	b.WriteString("      - tool_calls: [{name: spawn_child_process, arguments: {image: bench:v0, goal: pong}}]\n")
	for i := 0; i < rounds; i++ {
		b.WriteString("      - tool_calls: [{name: send_process_message, arguments: {recipient_pid: 2, body: ping}}]\n")
		b.WriteString("      - tool_calls: [{name: receive_process_messages, arguments: {}}]\n")
	}
	b.WriteString("      - tool_calls: [{name: process_exit, arguments: {}}]\n  - image: bench:v0\n    turns:\n")
	for i := 0; i < rounds; i++ {
		b.WriteString("      - tool_calls: [{name: receive_process_messages, arguments: {}}]\n")
		b.WriteString("      - tool_calls: [{name: send_process_message, arguments: {recipient_pid: 1, body: pong}}]\n")
	}
	b.WriteString("      - tool_calls: [{name: receive_process_messages, arguments: {}}]\n")
	rt, err := open(dir, b.String())
	if err != nil {
		return Result{}, err
	}
	defer rt.Close()
	pid, err := rt.Spawn(kernel.SpawnSpec{Image: "bench:v0", Goal: "ping", Grants: []capabilities.Grant{grant("process:spawn", capabilities.Write)}})
	if err != nil {
		return Result{}, err
	}
	elapsed, err := runAll(rt)
	if err != nil {
		return Result{}, err
	}
	if info, err := rt.Process(pid); err != nil || info.Status != "exited" {
		return Result{}, fmt.Errorf("ping process ended %s: %s (%v)", info.Status, info.Reason, err)
	}
	return Result{Name: "messages", Elapsed: elapsed, Metrics: map[string]float64{"post+receive/s": float64(2*rounds) / elapsed.Seconds()}}, nil
}
