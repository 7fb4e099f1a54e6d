package kernel

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/libos/libos/process"
)

// TestRecordCacheHoldsLiveRecords checks that a committed record of a live
// process is what the next commit loads, that an ended process moves to the
// ended records, and that the check tests run with catches a cache that
// differs from the store.
func TestRecordCacheHoldsLiveRecords(t *testing.T) {
	h := newHarness(t, clockScript)
	pid := h.spawn(clockGrants())
	cached, ok := h.rt.records.recs[pid]
	if !ok {
		t.Fatalf("pid %d is not cached after its spawn committed", pid)
	}
	h.run()
	if _, ok := h.rt.records.recs[pid]; ok {
		t.Fatalf("pid %d is still cached as live after it exited", pid)
	}
	if r := h.rt.records.ended[pid]; r == nil || r.State != process.Exited {
		t.Fatalf("pid %d: ended record %v, want its exited record kept", pid, r)
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

// TestRecordCacheKeepsTheLastEnded checks that the records of ended
// processes are kept up to endedKeep, the oldest leaving first, and that a
// parent's wait for a child that ended before it loads the kept record.
func TestRecordCacheKeepsTheLastEnded(t *testing.T) {
	var script strings.Builder
	script.WriteString("processes:\n")
	for range endedKeep + 3 {
		script.WriteString("  - image: base:v0\n    turns:\n      - tool_calls: [{name: process_exit, arguments: {message: done}}]\n")
	}
	h := newHarness(t, script.String(), func(o *Options) { o.Workers = 1 }) // they end in the order spawned
	var pids []int64
	for range endedKeep + 3 {
		pids = append(pids, h.spawn(nil))
	}
	h.run()
	c := h.rt.records
	if len(c.ended) != endedKeep {
		t.Fatalf("%d ended records kept, want %d", len(c.ended), endedKeep)
	}
	for i, pid := range pids {
		if _, kept := c.ended[pid]; kept != (i >= 3) {
			t.Fatalf("pid %d (ended %d of %d) kept %v", pid, i+1, len(pids), kept)
		}
	}

	h = newHarness(t, parentChildScript)
	parent := h.spawn(append(clockGrants(), spawnGrant()))
	ctx := context.Background()
	if err := h.rt.quantum(ctx, parent); err != nil { // the spawn
		t.Fatal(err)
	}
	const child = 2
	for range 2 {
		if err := h.rt.quantum(ctx, child); err != nil {
			t.Fatal(err)
		}
	}
	kept := h.rt.records.ended[child]
	if kept == nil {
		t.Fatal("the child's record is not kept after it exited")
	}
	kept.RetainSeq += 7 // a stale entry: the parent's wait must load it, and the check refuse it
	h.run()
	res := h.toolResults(parent)
	if len(res) < 2 || !strings.Contains(fmt.Sprint(res[1]["error"]), "differs from the stored one") {
		t.Fatalf("the parent's wait with a stale ended record answered %v, want the check to refuse it", res)
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
