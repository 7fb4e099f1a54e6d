package benchmarks

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/objects"
)

// Row is one line of the runtime's performance goals: a figure, the
// baseline it is compared with, measured in the same run (absolute figures
// move several-fold with the machine's load, ratios much less), their
// ratio, and the goal with whether this run met it. A row without a
// baseline has an empty Baseline and a zero Ratio.
type Row struct {
	// Key is a short name without spaces: the metric name under `go test
	// -bench` (with -baseline and -ratio for the other two figures).
	Key           string  `json:"key"`
	Name          string  `json:"name"`
	Value         float64 `json:"value"`
	Unit          string  `json:"unit"`
	Baseline      string  `json:"baseline"`
	BaselineValue float64 `json:"baseline_value"`
	Ratio         float64 `json:"ratio"`
	Goal          string  `json:"goal"`
	Met           bool    `json:"met"`
}

// row builds a row with a baseline, its ratio value/baseline, and met.
func row(key, name string, value float64, unit, baseline string, baseValue float64, goal string, met func(value, ratio float64) bool) Row {
	r := Row{Key: key, Name: name, Value: value, Unit: unit, Baseline: baseline, BaselineValue: baseValue, Goal: goal}
	if baseValue > 0 {
		r.Ratio = value / baseValue
	}
	r.Met = met(value, r.Ratio)
	return r
}

// rawWriters is the number of concurrent writers of the raw Pebble baseline
// of throughput rows (and of the parallel compare-and-swap row).
const rawWriters = 64

// benchPayload is the value of raw Sets and compare-and-swap writes: 256
// bytes, as in objects' benchmarks.
func benchPayload() []byte {
	p := make([]byte, 256)
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	return p
}

// RawSyncedSets opens Pebble as the store does in dir and returns the rate
// of n synced Sets (each its own batch) spread over writers goroutines.
func RawSyncedSets(dir string, writers, n int) (float64, error) {
	db, err := objects.OpenRawPebble(dir)
	if err != nil {
		return 0, err
	}
	rate, err := db.SyncedSets(writers, n, benchPayload())
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return rate, err
}

// spawnParallel spawns n root processes from spec(i) over 64 goroutines, so
// their commits share fsyncs; it is how scenarios fill a runtime quickly.
func spawnParallel(rt *kernel.Runtime, n int, spec func(i int) kernel.SpawnSpec) error {
	var next atomic.Int64
	_, err := objects.RunWriters(rawWriters, n, func(int) error {
		_, err := rt.Spawn(spec(int(next.Add(1) - 1)))
		return err
	})
	return err
}

// heapAlloc returns the live heap after a full collection.
func heapAlloc() float64 {
	// Two collections: objects in sync.Pools survive the first one (in
	// the pools' victim caches) but are not retained by anything.
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}

// perSecond is n over d as a rate, 0 for an empty duration.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// count formats n with thousands separators for row names.
func count(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// µs is d in microseconds.
func µs(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
