package benchmarks

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/libos/libos/objects"
)

// CASVsRaw measures parallel compare-and-swap writes of the store (64
// writers, each owning one Object so every write succeeds) against raw
// synced Pebble Sets with as many writers, on Pebble opened with the store's
// options, ops of each in alternating rounds so that load from elsewhere on
// the machine falls on both alike. It is the measurement of objects'
// BenchmarkCASVsRawParallel. A third baseline writes, raw, the records a
// write stores (metadata, payload, event) in one synced batch: its rate
// over raw Sets' (raw-like/raw) is the floor of cas/raw for any store that
// keeps them, and cas/raw-like is the store's own cost. The CPU the process
// used a write, for each kind, shows what that cost is made of.
func CASVsRaw(dir string, ops int) (Result, error) {
	const rounds = 4
	s, err := objects.Open(filepath.Join(dir, "store"), objects.Options{})
	if err != nil {
		return Result{}, err
	}
	defer s.Close()
	db, err := objects.OpenRawPebble(filepath.Join(dir, "raw"))
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	payload := benchPayload()
	oids := make([]string, rawWriters)
	versions := make([]uint64, rawWriters)
	err = s.Update(func(tx *objects.Txn) error {
		for w := range oids {
			m, err := tx.Create(objects.CreateSpec{Namespace: "bench", Name: fmt.Sprintf("w%d", w), Kind: "k", Tier: objects.TierDurable, Payload: payload})
			if err != nil {
				return err
			}
			oids[w], versions[w] = m.OID, m.Version
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	cas := func(w int) error {
		return s.Update(func(tx *objects.Txn) error {
			_, err := tx.Write(oids[w], versions[w], objects.WriteSpec{Payload: payload})
			if err == nil {
				versions[w]++
			}
			return err
		})
	}
	keys := make([][]byte, rawWriters)
	for w := range keys {
		keys[w] = fmt.Appendf(nil, "bench/raw/%d", w)
	}
	raw := func(w int) error { return db.Set(keys[w], payload) }
	rawLike, err := db.WriteLike(s, oids, versions, objects.WriteSpec{Payload: payload})
	if err != nil {
		return Result{}, err
	}
	// Each kind's wall time and the process's CPU time while it ran: the
	// CPU a write costs, the syncs' share in the kernel included.
	var casTime, rawTime, likeTime, casCPU, rawCPU, likeCPU time.Duration
	run := func(op func(w int) error, n int, wall, cpu *time.Duration) error {
		before := processCPU()
		d, err := objects.RunWriters(rawWriters, n, op)
		*wall += d
		*cpu += processCPU() - before
		return err
	}
	start := time.Now()
	for r := range rounds {
		n := ops / rounds
		if r < ops%rounds {
			n++
		}
		if err := run(raw, n, &rawTime, &rawCPU); err != nil {
			return Result{}, err
		}
		if err := run(cas, n, &casTime, &casCPU); err != nil {
			return Result{}, err
		}
		if err := run(rawLike, n, &likeTime, &likeCPU); err != nil {
			return Result{}, err
		}
	}
	casRate, rawRate, likeRate := perSecond(ops, casTime), perSecond(ops, rawTime), perSecond(ops, likeTime)
	perWrite := func(cpu time.Duration) float64 { return float64(cpu.Microseconds()) / float64(ops) }
	return Result{Name: "cas", Elapsed: time.Since(start), Metrics: map[string]float64{
		"cas/s": casRate, "raw-sets/s": rawRate, "cas/raw": casRate / rawRate,
		"raw-like/s": likeRate, "raw-like/raw": likeRate / rawRate, "cas/raw-like": casRate / likeRate,
		"cas-cpu-µs/write": perWrite(casCPU), "raw-like-cpu-µs/write": perWrite(likeCPU), "raw-cpu-µs/set": perWrite(rawCPU),
	}, Rows: []Row{
		row("cas/s", fmt.Sprintf("parallel CAS writes/s, 64 writers, %s writes", count(ops)), casRate, "/s",
			"raw Pebble synced Sets/s, 64 writers", rawRate, "≥ 0.9×", func(_, r float64) bool { return r >= 0.9 }),
	}}, nil
}
