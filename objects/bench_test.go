package objects

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// benchPayloadSize is the payload of both the CAS and the raw benchmarks so
// their rates compare the store's overhead, not the data volume.
const benchPayloadSize = 256

// benchParallelism multiplies GOMAXPROCS into the goroutine count of the
// parallel variants, enough committers to show fsyncs being shared.
const benchParallelism = 16

func benchPayload() []byte {
	p := make([]byte, benchPayloadSize)
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	return p
}

func reportRate(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "ops/s")
	}
}

func reportCommitsPerSync(b *testing.B, fs *storeFS, syncsBefore uint64, commits int) {
	if syncs := fs.syncs.Load() - syncsBefore; syncs > 0 {
		b.ReportMetric(float64(commits)/float64(syncs), "commits/fsync")
	}
}

func BenchmarkCASWrite(b *testing.B) {
	s := openTest(b, b.TempDir(), nil)
	defer closeTest(b, s)
	payload := benchPayload()
	m := create(b, s, CreateSpec{Namespace: "bench", Name: "cas", Kind: "k", Tier: TierDurable, Payload: payload})
	version := m.Version
	syncs := s.fs.syncs.Load()
	b.ResetTimer()
	for range b.N {
		if err := s.Update(func(tx *Txn) error {
			_, err := tx.Write(m.OID, version, WriteSpec{Payload: payload})
			return err
		}); err != nil {
			b.Fatal(err)
		}
		version++
	}
	b.StopTimer()
	reportRate(b)
	reportCommitsPerSync(b, s.fs, syncs, b.N)
}

func BenchmarkRawSyncedSet(b *testing.B) {
	db, fs := openRawPebble(b)
	defer db.Close()
	payload := benchPayload()
	key := []byte("bench/raw")
	syncs := fs.syncs.Load()
	b.ResetTimer()
	for range b.N {
		if err := db.Set(key, payload, pebble.Sync); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportRate(b)
	reportCommitsPerSync(b, fs, syncs, b.N)
}

func BenchmarkCASWriteParallel(b *testing.B) {
	s := openTest(b, b.TempDir(), nil)
	defer closeTest(b, s)
	payload := benchPayload()
	var worker atomic.Int64
	syncs := s.fs.syncs.Load()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine owns one object, so every CAS succeeds and the
		// benchmark measures commit throughput rather than conflicts.
		var m Meta
		if err := s.Update(func(tx *Txn) error {
			var err error
			m, err = tx.Create(CreateSpec{Namespace: "bench", Name: fmt.Sprintf("w%d", worker.Add(1)),
				Kind: "k", Tier: TierDurable, Payload: payload})
			return err
		}); err != nil {
			b.Error(err)
			return
		}
		version := m.Version
		for pb.Next() {
			if err := s.Update(func(tx *Txn) error {
				_, err := tx.Write(m.OID, version, WriteSpec{Payload: payload})
				return err
			}); err != nil {
				b.Error(err)
				return
			}
			version++
		}
	})
	b.StopTimer()
	reportRate(b)
	reportCommitsPerSync(b, s.fs, syncs, b.N)
}

func BenchmarkRawSyncedSetParallel(b *testing.B) {
	db, fs := openRawPebble(b)
	defer db.Close()
	payload := benchPayload()
	var worker atomic.Int64
	syncs := fs.syncs.Load()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		key := fmt.Appendf(nil, "bench/raw/%d", worker.Add(1))
		for pb.Next() {
			if err := db.Set(key, payload, pebble.Sync); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	reportRate(b)
	reportCommitsPerSync(b, fs, syncs, b.N)
}

// openRawPebble opens Pebble with the options the store uses (including the
// WAL-watching filesystem, which counts syncs), as the baseline for the CAS
// benchmarks.
func openRawPebble(b *testing.B) (*pebble.DB, *storeFS) {
	fs := newStoreFS(vfs.Default, func(error) {}, func(error) {})
	db, err := pebble.Open(b.TempDir(), &pebble.Options{Logger: storeLogger{}, FS: fs})
	if err != nil {
		b.Fatal(err)
	}
	return db, fs
}

func BenchmarkReopen(b *testing.B) {
	const objectCount = 100_000
	const perCommit = 1000
	dir := b.TempDir()
	s := openTest(b, dir, nil)
	payload := benchPayload()
	for c := 0; c < objectCount/perCommit; c++ {
		mustUpdate(b, s, func(tx *Txn) error {
			for i := range perCommit {
				tier := TierRuntimeLocal
				if i%2 == 0 {
					tier = TierDurable
				}
				if _, err := tx.Create(CreateSpec{Namespace: fmt.Sprintf("ns%d", c%10), Name: fmt.Sprintf("obj-%d-%d", c, i),
					Kind: "k", Tier: tier, Payload: payload}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	closeTest(b, s)

	b.ResetTimer()
	var total time.Duration
	for range b.N {
		start := time.Now()
		s, err := Open(dir, Options{})
		if err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		b.StopTimer()
		if s.LastEventSeq() != objectCount {
			b.Fatalf("LastEventSeq after reopen = %d, want %d", s.LastEventSeq(), objectCount)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/open")
	b.ReportMetric(objectCount, "objects")
}
