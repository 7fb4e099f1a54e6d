package kernel

import (
	"context"
	"slices"
	"testing"
)

// A queue drained after a burst longer than queueKeep gives its slice and
// map back; a shorter one keeps them for the next.
func TestDrainedQueueGivesItsArraysBack(t *testing.T) {
	h := newHarness(t, "")
	s := h.rt.sched
	drain := func(n int) {
		t.Helper()
		work := make(chan int64, n)
		s.plan(n, work)
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(work) != n || len(s.queue) != 0 {
			t.Fatalf("%d handed out, %d still queued; want %d and none", len(work), len(s.queue), n)
		}
		s.working, s.inflight = 0, map[int64]int{}
	}
	for pid := int64(1); pid <= queueKeep+1; pid++ {
		s.enqueue(pid)
	}
	drain(queueKeep + 1)
	if s.queue != nil || s.queuePeak != 0 {
		t.Fatalf("after a burst of %d: queue cap %d, peak %d; want the arrays given back", queueKeep+1, cap(s.queue), s.queuePeak)
	}
	for pid := int64(1); pid <= 10; pid++ {
		s.enqueue(pid)
	}
	drain(10)
	if s.queue == nil || s.queuePeak != 10 {
		t.Fatalf("after a burst of 10: queue %v, peak %d; want the array kept", s.queue, s.queuePeak)
	}
	// Entries still dedupe after the map was replaced.
	s.enqueue(11)
	s.enqueue(11)
	if len(s.queue) != 1 {
		t.Fatalf("queue %v: pid 11 queued twice", s.queue)
	}
}

// TestTakenProcessIsInFlightUntilLanded checks the scheduler's side of a
// worker going on into a queued process (Runtime.takeQueued): the head is
// taken and counts as in flight, so a wake meanwhile queues it only once it
// lands; a process put back is first in the queue again; none is taken
// while no loop runs (or its workers are stopping) or once the run is
// stopping.
func TestTakenProcessIsInFlightUntilLanded(t *testing.T) {
	s := newScheduler(nil)
	ctx, cancel := context.WithCancel(context.Background())
	if _, ok := s.takeQueued(ctx); ok {
		t.Fatal("a process was taken while no loop runs")
	}
	s.pool = &workerPool{s: s}
	for _, pid := range []int64{1, 2, 3} {
		s.enqueue(pid)
	}
	pid, ok := s.takeQueued(ctx)
	if !ok || pid != 1 || s.inflight[1] != 1 || s.queued[1] || !slices.Equal(s.queue, []int64{2, 3}) {
		t.Fatalf("took %d %v: inflight %v, queue %v, want 1 in flight and [2 3] queued", pid, ok, s.inflight, s.queue)
	}
	s.putBack(1)
	if s.inflight[1] != 0 || !slices.Equal(s.queue, []int64{1, 2, 3}) {
		t.Fatalf("put back: inflight %v, queue %v, want 1 first again", s.inflight, s.queue)
	}
	pid, _ = s.takeQueued(ctx)
	s.enqueue(pid) // woken while in flight: queued when it lands
	if !slices.Equal(s.queue, []int64{2, 3}) {
		t.Fatalf("a process in flight was queued: %v", s.queue)
	}
	s.landed(pid)
	if s.inflight[pid] != 0 || !slices.Equal(s.queue, []int64{2, 3, 1}) {
		t.Fatalf("landed: inflight %v, queue %v, want 1 queued last", s.inflight, s.queue)
	}
	cancel()
	if _, ok := s.takeQueued(ctx); ok {
		t.Fatal("a process was taken for a run that is stopping")
	}
}
