package kernel

import "testing"

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
