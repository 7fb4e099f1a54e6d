package objects

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// RawPebble is Pebble opened as a store opens it (its format, memtable
// size, bloom filters and block cache, on the same WAL-watching filesystem)
// with none of the store around it: the floor a store's synced commits are
// compared with in benchmarks. It is not a store and holds no runtime
// directory. The memtable size matters to syncs as much as to flushes: a
// log is recycled only once a memtable is flushed, and a sync of a new log,
// which grows, takes about twice as long here as one of a recycled log.
type RawPebble struct {
	db *pebble.DB
	fs *storeFS
}

// OpenRawPebble opens (creating) a bare Pebble database in dir with the
// store's options.
func OpenRawPebble(dir string) (*RawPebble, error) {
	cache := pebble.NewCache(defaultCacheBytes)
	defer cache.Unref()
	opts := pebbleOptions(cache)
	fs := newStoreFS(vfs.Default, func(error) {}, func(error) {})
	fs.rawLogs = true
	opts.Logger, opts.FS = storeLogger{}, fs
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("objects: open raw pebble %s: %w", dir, err)
	}
	return &RawPebble{db: db, fs: fs}, nil
}

// Set writes key in a synced batch of its own.
func (r *RawPebble) Set(key, value []byte) error { return r.db.Set(key, value, pebble.Sync) }

// WALSyncs counts the syncs of write-ahead-log files so far.
func (r *RawPebble) WALSyncs() uint64 { return r.fs.syncs.Load() }

// Close closes the database.
func (r *RawPebble) Close() error { return r.db.Close() }

// RunWriters runs n calls of op spread over writers goroutines, each passing
// its own index (0 to writers-1), and returns the elapsed time and the first
// error. Concurrent synced commits share fsyncs, as a store's do.
func RunWriters(writers, n int, op func(w int) error) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	start := time.Now()
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := op(w); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// SyncedSets runs n synced Sets of value spread over writers goroutines,
// each writing its own key, and returns their rate per second.
func (r *RawPebble) SyncedSets(writers, n int, value []byte) (float64, error) {
	keys := make([][]byte, writers)
	for w := range keys {
		keys[w] = fmt.Appendf(nil, "bench/raw/%d", w)
	}
	d, err := RunWriters(writers, n, func(w int) error { return r.Set(keys[w], value) })
	if err != nil {
		return 0, err
	}
	return float64(n) / d.Seconds(), nil
}

// SyncedBatches runs n synced batches spread over writers goroutines, each
// of records Sets under keys of its own, with values sized so that a batch
// encodes to about batchBytes (Stats.AppliedBytes counts the same), and
// returns their rate per second: raw Pebble writing batches of the shape a
// store's commits had, with none of the work that chose what they hold.
func (r *RawPebble) SyncedBatches(writers, n, records, batchBytes int) (float64, error) {
	if records < 1 {
		return 0, fmt.Errorf("objects: synced batches: %w: records: %d, want at least 1", ErrInvalid, records)
	}
	const keyBytes = 32 // about a store key: a prefix and a UUID or a sequence
	// A batch's header is 12 bytes; a record adds its kind and two length
	// varints (about 4 bytes) to its key and value.
	valueBytes := max((batchBytes-12)/records-4-keyBytes, 0)
	value := make([]byte, valueBytes)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	var seq atomic.Uint64
	d, err := RunWriters(writers, n, func(w int) error {
		b := r.db.NewBatch()
		defer b.Close()
		first := seq.Add(uint64(records)) - uint64(records)
		for i := range records {
			key := fmt.Appendf(make([]byte, 0, keyBytes), "bench/batch/%03d/%016d", w%1000, first+uint64(i))
			if err := b.Set(key, value, nil); err != nil {
				return err
			}
		}
		return b.Commit(pebble.Sync)
	})
	if err != nil {
		return 0, err
	}
	return float64(n) / d.Seconds(), nil
}

// errShapeOnly ends the transaction WriteLike reads a write's records from.
var errShapeOnly = errors.New("objects: shape only")

// WriteLike returns an op for RunWriters that writes to r, in one synced
// batch, the records a compare-and-swap write of spec to each writer's
// Object of s stores (its metadata, payload and event; an event under a new
// key each time): raw Pebble writing the data the store writes, with none
// of the store's own work. oids[w] is writer w's Object, at versions[w].
// Nothing is written to s.
func (r *RawPebble) WriteLike(s *Store, oids []string, versions []uint64, spec WriteSpec) (func(w int) error, error) {
	if len(versions) != len(oids) {
		return nil, fmt.Errorf("objects: write like: %w: versions: %d for %d oids", ErrInvalid, len(versions), len(oids))
	}
	type record struct{ key, value []byte }
	shapes := make([][]record, len(oids))
	events := make([][]byte, len(oids))
	for w, oid := range oids {
		err := s.Update(func(tx *Txn) error {
			if _, err := tx.Write(oid, versions[w], spec); err != nil {
				return err
			}
			for k, sv := range tx.writes {
				v, err := sv.bytes()
				if err != nil {
					return err
				}
				shapes[w] = append(shapes[w], record{[]byte(k), v})
			}
			if err := tx.encodeEvents(); err != nil {
				return err
			}
			for i := range tx.events {
				events[w] = encodeEvent(&tx.events[i])
			}
			return errShapeOnly
		})
		if !errors.Is(err, errShapeOnly) {
			return nil, fmt.Errorf("objects: the records of a write of %s: %w", oid, err)
		}
	}
	var seq atomic.Uint64
	return func(w int) error {
		b := r.db.NewBatch()
		defer b.Close()
		for _, rec := range shapes[w] {
			if err := b.Set(rec.key, rec.value, nil); err != nil {
				return err
			}
		}
		if events[w] != nil {
			if err := b.Set(eventKey(1<<62+seq.Add(1)), events[w], nil); err != nil {
				return err
			}
		}
		return b.Commit(pebble.Sync)
	}, nil
}
