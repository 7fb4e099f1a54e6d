package benchmarks

import (
	"fmt"
	"strings"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/kernel"
)

// clockSpawn is a root process allowed to read the clock.
func clockSpawn(int) kernel.SpawnSpec {
	return kernel.SpawnSpec{Image: "bench:v0", Goal: "g", Grants: []capabilities.Grant{grant("clock:now", capabilities.Read)}}
}

// EndedProcessHeap runs procs processes of two quanta each (a clock read,
// then an exit), batch at a time, and reports the heap the runtime still
// holds for each after they all exited, after a collection: the growth over
// the last four fifths, per process, so that what a runtime holds once
// whatever ran (caches at their bounds, Pebble's tables) is not counted as
// held by each process. The average over all of them is reported too. The
// baseline is the heap each process of the first batch held when spawned,
// before it ran, measured in the same run.
func EndedProcessHeap(dir string, procs, batch int) (Result, error) {
	batch = max(1, min(batch, procs))
	rt, err := open(dir, quantaScript(2))
	if err != nil {
		return Result{}, err
	}
	defer rt.Close()
	start := time.Now()
	h0 := heapAlloc()
	var spawned, hFifth float64
	fifth := 0
	for done := 0; done < procs; {
		n := min(batch, procs-done)
		if fifth == 0 && done > 0 && done+n > procs/5 {
			fifth, hFifth = done, heapAlloc()
		}
		if err := spawnParallel(rt, n, clockSpawn); err != nil {
			return Result{}, err
		}
		if done == 0 {
			spawned = (heapAlloc() - h0) / float64(n)
		}
		if _, err := runAll(rt); err != nil {
			return Result{}, err
		}
		done += n
	}
	if err := checkExited(rt); err != nil {
		return Result{}, err
	}
	hEnd := heapAlloc()
	average := (hEnd - h0) / float64(procs)
	ended := average
	if fifth > 0 {
		ended = (hEnd - hFifth) / float64(procs-fifth)
	}
	return Result{Name: "ended_heap", Elapsed: time.Since(start), Metrics: map[string]float64{
		"heap-B/ended-process": ended, "heap-B/ended-process-average": average, "heap-B/spawned-process": spawned,
		"processes": float64(procs), "processes-measured": float64(procs - fifth),
	}, Rows: []Row{
		row("heap-B/ended-process", fmt.Sprintf("heap retained per ended process, the last %s of %s to run 2 quanta and exit", count(procs-fifth), count(procs)), ended, "B",
			"heap per spawned process before it ran (B)", spawned, "≤ 1 KB", func(v, _ float64) bool { return v <= 1024 }),
	}}, nil
}

// AliveProcessHeap runs procs processes of ten quanta each (nine clock
// reads, then a blocking receive that leaves them waiting) and reports the
// heap the runtime holds for each of them, alive, after a collection. The
// baseline is the heap each held when spawned, before it ran.
func AliveProcessHeap(dir string, procs int) (Result, error) {
	var b strings.Builder
	b.WriteString("processes:\n  - image: bench:v0\n    turns:\n")
	for i := 0; i < 9; i++ {
		b.WriteString("      - tool_calls: [{name: get_current_time, arguments: {timezone: UTC}}]\n")
	}
	b.WriteString("      - tool_calls: [{name: receive_process_messages, arguments: {}}]\n")
	rt, err := open(dir, b.String())
	if err != nil {
		return Result{}, err
	}
	defer rt.Close()
	start := time.Now()
	h0 := heapAlloc()
	if err := spawnParallel(rt, procs, clockSpawn); err != nil {
		return Result{}, err
	}
	spawned := (heapAlloc() - h0) / float64(procs)
	if _, err := runAll(rt); err != nil {
		return Result{}, err
	}
	ps, err := rt.Processes()
	if err != nil {
		return Result{}, err
	}
	for _, p := range ps {
		if p.Status != "waiting" {
			return Result{}, fmt.Errorf("pid %d is %s, not waiting: %s", p.PID, p.Status, p.Reason)
		}
	}
	alive := (heapAlloc() - h0) / float64(procs)
	return Result{Name: "alive_heap", Elapsed: time.Since(start), Metrics: map[string]float64{
		"heap-B/alive-process": alive, "heap-B/spawned-process": spawned, "processes": float64(procs),
	}, Rows: []Row{
		row("heap-B/alive-process", fmt.Sprintf("heap per process at 10 quanta while alive, %s processes", count(procs)), alive, "B",
			"heap per spawned process before it ran (B)", spawned, "≤ 8 KB", func(v, _ float64) bool { return v <= 8192 }),
	}}, nil
}
