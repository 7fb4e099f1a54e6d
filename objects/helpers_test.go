package objects

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeClock is a deterministic clock advanced by the test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func openTest(t testing.TB, dir string, clock *fakeClock) *Store {
	t.Helper()
	opts := Options{}
	if clock != nil {
		opts.Clock = clock.Now
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return s
}

func closeTest(t testing.TB, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func mustUpdate(t testing.TB, s *Store, fn func(tx *Txn) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func mustView(t testing.TB, s *Store, fn func(tx *Txn) error) {
	t.Helper()
	if err := s.View(fn); err != nil {
		t.Fatalf("View: %v", err)
	}
}

func create(t testing.TB, s *Store, spec CreateSpec) Meta {
	t.Helper()
	var m Meta
	mustUpdate(t, s, func(tx *Txn) error {
		var err error
		m, err = tx.Create(spec)
		return err
	})
	return m
}

func read(t testing.TB, s *Store, oid string) (Meta, []byte, error) {
	t.Helper()
	var (
		m    Meta
		data []byte
		rerr error
	)
	mustView(t, s, func(tx *Txn) error {
		m, data, rerr = tx.Read(oid)
		return nil
	})
	return m, data, rerr
}

// rawKeys returns every raw (non-reserved) key/value visible in a View.
func rawKeys(t testing.TB, s *Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	mustView(t, s, func(tx *Txn) error {
		return tx.Scan(nil, func(k, v []byte) error {
			out[string(k)] = string(v)
			return nil
		})
	})
	return out
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want one wrapping %v", err, target)
	}
}
