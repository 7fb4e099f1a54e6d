package kernel

import (
	"context"
	"testing"

	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/process"
	"github.com/libos/libos/quantum"
)

// The core tells an interrupt by its kind without importing the mailbox.
func TestQuantumInterruptKindIsTheMailbox(t *testing.T) {
	if quantum.KindInterrupt != mailbox.KindInterrupt {
		t.Fatalf("quantum.KindInterrupt %q, mailbox.KindInterrupt %q", quantum.KindInterrupt, mailbox.KindInterrupt)
	}
}

// TestWakeResumesAndCallsInOneQuantum checks that a process woken from a
// wait produces the wait's result and makes its next call in one quantum:
// one commit for both, then the call's result commit, and nothing scheduled
// between them.
func TestWakeResumesAndCallsInOneQuantum(t *testing.T) {
	h := newHarness(t, parentChildScript)
	parent := h.spawn(append(clockGrants(), spawnGrant()))
	ctx := context.Background()
	for range 2 { // the spawn, then the wait
		if err := h.rt.quantum(ctx, parent); err != nil {
			t.Fatal(err)
		}
	}
	const child = 2
	for h.info(child).Status != process.Exited {
		if err := h.rt.quantum(ctx, child); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.info(parent).Status; got != process.Runnable {
		t.Fatalf("parent is %s after its child exited, want runnable", got)
	}
	// The wake queued the parent; this test runs its quantum by hand.
	h.rt.sched.mu.Lock()
	h.rt.sched.queue, h.rt.sched.queued = nil, map[int64]bool{}
	h.rt.sched.mu.Unlock()
	before := h.rt.Store().Stats().SyncedCommits
	if err := h.rt.quantum(ctx, parent); err != nil {
		t.Fatal(err)
	}
	if n := h.rt.Store().Stats().SyncedCommits - before; n != 2 {
		t.Fatalf("the woken parent's quantum took %d synced commits, want 2 (resume with the call's start, then its result)", n)
	}
	if got := h.info(parent).Status; got != process.Exited {
		t.Fatalf("parent is %s after one quantum, want exited", got)
	}
	if got := h.result(parent)["child_said"]; got != "hello from 2" {
		t.Fatalf("parent result %v: the call after the resume did not see the wait's result", got)
	}
	if !h.rt.sched.idle() {
		t.Fatal("the resume scheduled another quantum of a process that went on to its call")
	}
}
