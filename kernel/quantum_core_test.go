package kernel

import (
	"context"
	"slices"
	"strings"
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
	if !h.rt.sched.queueEmpty() {
		t.Fatal("the resume scheduled another quantum of a process that went on to its call")
	}
}

// clockTurnsScript is processes of three clock reads each, one a turn, then
// an exit.
func clockTurnsScript(processes int) string {
	var b strings.Builder
	b.WriteString("processes:\n")
	for range processes {
		b.WriteString("  - image: base:v0\n    turns:\n")
		for range 3 {
			b.WriteString("      - tool_calls: [{name: get_current_time, arguments: {}}]\n")
		}
		b.WriteString("      - tool_calls: [{name: process_exit, arguments: {message: done}}]\n")
	}
	return b.String()
}

// TestQuantaGoOnIntoTheNextCall checks that a process whose result leaves
// it runnable, on a worker no other process wants, makes its next call in
// the result's commit: four calls take one start commit and four result
// commits, not eight commits.
func TestQuantaGoOnIntoTheNextCall(t *testing.T) {
	h := newHarness(t, clockTurnsScript(1))
	pid := h.spawn(clockGrants())
	before := h.rt.Store().Stats().SyncedCommits
	h.run()
	if n := h.rt.Store().Stats().SyncedCommits - before; n != 5 {
		t.Fatalf("four calls took %d synced commits, want 5 (a start, then each result with the next call's start)", n)
	}
	info := h.info(pid)
	if info.Status != process.Exited || info.Used.LLMCalls != 4 || info.Used.ToolCalls != 3 {
		t.Fatalf("pid %d: %s, usage %+v, want exited after 4 calls and 3 charged tool calls (the exit is not)", pid, info.Status, info.Used)
	}
	for i, res := range h.toolResults(pid)[:3] {
		if res["iso8601"] == nil {
			t.Fatalf("clock read %d answered %v", i+1, res)
		}
	}
}

// TestQuantaLeaveTheWorkerToOthers checks that a process does not go on
// while another wants the worker: on one worker, two processes take turns
// call by call, each call a start and a result commit of its own.
func TestQuantaLeaveTheWorkerToOthers(t *testing.T) {
	h := newHarness(t, clockTurnsScript(2), func(o *Options) { o.Workers = 1 })
	a, b := h.spawn(clockGrants()), h.spawn(clockGrants())
	h.run()
	want := []int64{a, b, a, b, a, b, a, b}
	if order := h.quantumOrder(); !slices.Equal(order, want) {
		t.Fatalf("calls started in the order %v, want %v", order, want)
	}
	for _, pid := range []int64{a, b} {
		if got := h.info(pid).Status; got != process.Exited {
			t.Fatalf("pid %d is %s, want exited", pid, got)
		}
	}
}

// TestQuantaLeaveTheWorkerToWhomTheirCommitWakes checks that a process
// does not go on when the commit of its result makes another process
// runnable that no free worker could take: on one worker, a parent's spawn
// lets its child's first call start before the parent's wait.
func TestQuantaLeaveTheWorkerToWhomTheirCommitWakes(t *testing.T) {
	h := newHarness(t, parentChildScript, func(o *Options) { o.Workers = 1 })
	parent := h.spawn(append(clockGrants(), spawnGrant()))
	h.run()
	const child = 2
	if got := h.result(parent)["child_said"]; got != "hello from 2" {
		t.Fatalf("parent result %v", got)
	}
	if got := h.quantumOrder(); !slices.Equal(got, []int64{parent, child, parent, child, parent}) {
		t.Fatalf("calls started in the order %v, want parent, child, parent, child, parent", got)
	}
}

// quantumOrder is the pids of the calls started, in order.
func (h *harness) quantumOrder() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var order []int64
	for _, ev := range h.events {
		if ev.Kind == EventQuantum {
			order = append(order, ev.PID)
		}
	}
	return order
}

// TestExitHandsTheWorkerToTheWokenParent checks that a child's exit hands
// its worker to the parent it wakes: the parent's resume and next call
// start in the exit's commit. Five calls (spawn, wait and exit of the
// parent; a clock read and an exit of the child) take seven synced commits:
// the two starts, and five results, each with the next call's start.
func TestExitHandsTheWorkerToTheWokenParent(t *testing.T) {
	h := newHarness(t, parentChildScript)
	parent := h.spawn(append(clockGrants(), spawnGrant()))
	before := h.rt.Store().Stats().SyncedCommits
	h.run()
	if n := h.rt.Store().Stats().SyncedCommits - before; n != 7 {
		t.Fatalf("five calls of a parent and its child took %d synced commits, want 7", n)
	}
	if got := h.result(parent)["child_said"]; got != "hello from 2" {
		t.Fatalf("parent result %v: the resume in the child's exit commit did not see the child's result", got)
	}
}
