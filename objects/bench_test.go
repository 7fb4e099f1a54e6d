package objects

import (
	"fmt"
	"runtime"
	"sync"
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

// BenchmarkCASVsRawParallel measures parallel compare-and-swap writes and
// raw synced Pebble Sets in the same run, in alternating rounds so that load
// from elsewhere on the machine falls on all of them alike, and reports the
// ratios of their rates; absolute rates move too much between runs to
// compare. cas/raw compares with Pebble opened as the store opens it,
// cas/raw-default with Pebble's default options, and cas/raw-same-data with
// raw batches of the same keys and values a compare-and-swap write stores.
func BenchmarkCASVsRawParallel(b *testing.B) {
	const rounds = 4
	s := openTest(b, b.TempDir(), nil)
	defer closeTest(b, s)
	db, _ := openRawPebble(b)
	defer db.Close()
	dbDefault, _ := openRawPebbleWith(b, &pebble.Options{})
	defer dbDefault.Close()
	payload := benchPayload()
	writers := benchParallelism * runtime.GOMAXPROCS(0)

	// Each CAS writer owns one object, so every compare-and-swap succeeds.
	oids := make([]string, writers)
	versions := make([]uint64, writers)
	for w := range writers {
		m := create(b, s, CreateSpec{Namespace: "bench", Name: fmt.Sprintf("w%d", w), Kind: "k", Tier: TierDurable, Payload: payload})
		oids[w], versions[w] = m.OID, m.Version
	}
	cas := func(w int) error {
		return s.Update(func(tx *Txn) error {
			_, err := tx.Write(oids[w], versions[w], WriteSpec{Payload: payload})
			if err == nil {
				versions[w]++
			}
			return err
		})
	}
	rawKeys := make([][]byte, writers)
	for w := range rawKeys {
		rawKeys[w] = fmt.Appendf(nil, "bench/raw/%d", w)
	}
	raw := func(w int) error { return db.Set(rawKeys[w], payload, pebble.Sync) }
	rawDefault := func(w int) error { return dbDefault.Set(rawKeys[w], payload, pebble.Sync) }
	// The same keys and values as a compare-and-swap write (metadata,
	// payload, event) in one synced raw batch: what is left between this and
	// cas is the store's own cost, the rest is the data a write stores.
	rawSameData, err := (&RawPebble{db: db}).WriteLike(s, oids, versions, WriteSpec{Payload: payload})
	if err != nil {
		b.Fatal(err)
	}
	var casTime, rawTime, rawDefaultTime, rawSameDataTime time.Duration
	b.ResetTimer()
	for r := range rounds {
		n := b.N / rounds
		if r < b.N%rounds {
			n++
		}
		rawTime += runWriters(b, writers, n, raw)
		casTime += runWriters(b, writers, n, cas)
		rawDefaultTime += runWriters(b, writers, n, rawDefault)
		rawSameDataTime += runWriters(b, writers, n, rawSameData)
	}
	b.StopTimer()
	if casTime > 0 && rawTime > 0 && rawDefaultTime > 0 && rawSameDataTime > 0 {
		// Equal op counts, so the ratio of rates is the inverse ratio of
		// times.
		b.ReportMetric(float64(b.N)/casTime.Seconds(), "cas-ops/s")
		b.ReportMetric(rawTime.Seconds()/casTime.Seconds(), "cas/raw")
		b.ReportMetric(rawDefaultTime.Seconds()/casTime.Seconds(), "cas/raw-default")
		b.ReportMetric(rawSameDataTime.Seconds()/casTime.Seconds(), "cas/raw-same-data")
	}
}

// runWriters runs n calls of op spread over writers goroutines (each passing
// its own index) and returns the elapsed time.
func runWriters(b *testing.B, writers, n int, op func(w int) error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := op(w); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// openRawPebble opens Pebble as the store does (OpenRawPebble), as the
// baseline for the CAS benchmarks.
func openRawPebble(b *testing.B) (*pebble.DB, *storeFS) {
	r, err := OpenRawPebble(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	return r.db, r.fs
}

// openRawPebbleWith opens Pebble with opts on the WAL-watching filesystem.
func openRawPebbleWith(b *testing.B, opts *pebble.Options) (*pebble.DB, *storeFS) {
	fs := newStoreFS(vfs.Default, func(error) {}, func(error) {})
	opts.Logger, opts.FS = storeLogger{}, fs
	db, err := pebble.Open(b.TempDir(), opts)
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
