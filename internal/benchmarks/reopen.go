package benchmarks

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/libos/libos/clock"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/objects"
)

// reopenRuns is how many times Reopen opens the directory; the figures are
// medians.
const reopenRuns = 3

// Reopen fills a runtime directory with procs processes (spawned through
// the kernel 64 at a time, never run: each holds its record, its goal and
// its context Object) and objs further small Objects (half of them durable,
// in batches of 1,000), closes it, and times kernel.Open of it against
// objects.Open of its store alone, alternately, reopenRuns times each. The
// absolute kernel figure is the goal's (< 1 s); the store open is the floor
// under it.
func Reopen(dir string, procs, objs int) (Result, error) {
	start := time.Now()
	open := func() (*kernel.Runtime, error) {
		return kernel.Open(dir, kernel.Options{Clock: clock.NewFake(epoch, true)})
	}
	rt, err := open()
	if err != nil {
		return Result{}, err
	}
	err = spawnParallel(rt, procs, func(i int) kernel.SpawnSpec {
		return kernel.SpawnSpec{Image: "base:v0", Goal: fmt.Sprintf("goal %d", i)}
	})
	spawned := time.Since(start)
	if err == nil {
		err = createObjects(rt.Store(), objs)
	}
	if cerr := rt.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Result{}, err
	}
	built := time.Since(start)
	var kernelTimes, storeTimes []time.Duration
	for range reopenRuns {
		t := time.Now()
		s, err := objects.Open(filepath.Join(dir, "store"), objects.Options{})
		if err != nil {
			return Result{}, err
		}
		storeTimes = append(storeTimes, time.Since(t))
		if err := s.Close(); err != nil {
			return Result{}, err
		}
		t = time.Now()
		rt, err := open()
		if err != nil {
			return Result{}, err
		}
		kernelTimes = append(kernelTimes, time.Since(t))
		if err := rt.Close(); err != nil {
			return Result{}, err
		}
	}
	k, s := ms(median(kernelTimes)), ms(median(storeTimes))
	return Result{Name: "reopen", Elapsed: time.Since(start), Metrics: map[string]float64{
		"reopen-ms": k, "store-open-ms": s, "processes": float64(procs), "objects": float64(objs + 2*procs), "spawn-s": spawned.Seconds(), "build-s": built.Seconds(),
	}, Rows: []Row{
		row("reopen-ms", fmt.Sprintf("reopen, %s Objects + %s processes (and their %s own)", count(objs), count(procs), count(2*procs)), k, "ms",
			"objects.Open of its store (ms)", s, "< 1 s", func(v, _ float64) bool { return v < 1000 }),
	}}, nil
}

// createObjects creates n small Objects in the namespace bench, 1,000 a
// commit, every other one durable.
func createObjects(s *objects.Store, n int) error {
	payload := []byte(`{"x":1}`)
	for c := 0; c*1000 < n; c++ {
		err := s.Update(func(tx *objects.Txn) error {
			for i := c * 1000; i < min(n, (c+1)*1000); i++ {
				tier := objects.TierRuntimeLocal
				if i%2 == 0 {
					tier = objects.TierDurable
				}
				if _, err := tx.Create(objects.CreateSpec{Namespace: "bench", Name: fmt.Sprintf("o-%d", i), Kind: "data", Tier: tier, Payload: payload}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
