package objects

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// RawPebble is Pebble opened as a store opens it (its format, bloom filters
// and block cache, on the same WAL-watching filesystem) with none of the
// store around it: the floor a store's synced commits are compared with in
// benchmarks. It is not a store and holds no runtime directory.
type RawPebble struct {
	db *pebble.DB
	fs *storeFS
}

// OpenRawPebble opens (creating) a bare Pebble database in dir with the
// store's options.
func OpenRawPebble(dir string) (*RawPebble, error) {
	cache := pebble.NewCache(defaultCacheBytes)
	defer cache.Unref()
	opts := &pebble.Options{FormatMajorVersion: storeFormat, Cache: cache}
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
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
