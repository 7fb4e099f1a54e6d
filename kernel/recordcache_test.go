package kernel

import (
	"context"
	"strings"
	"testing"
)

// TestRecordCacheHoldsLiveRecords checks that a committed record of a live
// process is what the next commit loads, that an ended process leaves the
// cache, and that the check tests run with catches a cache that differs from
// the store.
func TestRecordCacheHoldsLiveRecords(t *testing.T) {
	h := newHarness(t, clockScript)
	pid := h.spawn(clockGrants())
	cached, ok := h.rt.records.recs[pid]
	if !ok {
		t.Fatalf("pid %d is not cached after its spawn committed", pid)
	}
	h.run()
	if _, ok := h.rt.records.recs[pid]; ok {
		t.Fatalf("pid %d is still cached after it exited", pid)
	}
	if cached.State.Terminal() {
		t.Fatal("a cached record was changed in place")
	}

	other := h.spawn(clockGrants())
	h.rt.records.recs[other].RetainSeq += 7 // what a stale entry would look like
	err := h.rt.RunUntilIdle(context.Background())
	if err == nil || !strings.Contains(err.Error(), "differs from the stored one") {
		t.Fatalf("run with a stale cache entry = %v, want the check to refuse it", err)
	}
}

// TestRecordCacheBound checks that the cache keeps at most its limit.
func TestRecordCacheBound(t *testing.T) {
	h := newHarness(t, clockScript)
	h.rt.records.limit = 2
	for range 5 {
		h.spawn(clockGrants())
	}
	if n := len(h.rt.records.recs); n != 2 {
		t.Fatalf("cache holds %d records, want its limit 2", n)
	}
}
