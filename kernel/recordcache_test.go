package kernel

import (
	"context"
	"strings"
	"testing"

	"github.com/libos/libos/process"
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

// TestCachesKeepParentWaitingForChild checks the caches' rule for waits
// (procRecord.waitsLong): a parent waiting for its child keeps its record
// and decoded context cached through the child's quanta, while a process
// waiting for a message lets both go.
func TestCachesKeepParentWaitingForChild(t *testing.T) {
	h := newHarness(t, parentChildScript)
	parent := h.spawn(append(clockGrants(), spawnGrant()))
	ctx := context.Background()
	cached := func(pid int64) (record, context bool) {
		_, record = h.rt.records.recs[pid]
		return record, h.rt.cachedContext(pid) != nil
	}
	for range 2 { // the spawn, then the wait
		if err := h.rt.quantum(ctx, parent); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.info(parent).Status; got != process.Waiting {
		t.Fatalf("parent is %s, want waiting for its child", got)
	}
	const child = 2
	for i := range 2 {
		if rec, c := cached(parent); !rec || !c {
			t.Fatalf("before child quantum %d: parent record cached %v, context cached %v; want both", i, rec, c)
		}
		if err := h.rt.quantum(ctx, child); err != nil {
			t.Fatal(err)
		}
	}
	h.run()
	if got := h.result(parent)["child_said"]; got != "hello from 2" {
		t.Fatalf("parent result %v", got)
	}
	if rec, c := cached(parent); rec || c {
		t.Fatalf("after the parent exited: record cached %v, context cached %v; want neither", rec, c)
	}

	h = newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {}}]
`)
	pid := h.spawn(nil)
	h.run()
	if got := h.info(pid).Status; got != process.Waiting {
		t.Fatalf("receiver is %s, want waiting", got)
	}
	if _, ok := h.rt.records.recs[pid]; ok {
		t.Fatal("a process waiting for a message keeps its record cached")
	}
	if h.rt.cachedContext(pid) != nil {
		t.Fatal("a process waiting for a message keeps its context cached")
	}
}
