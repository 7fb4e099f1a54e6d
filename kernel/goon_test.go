package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/images"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

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
// call by call. The worker goes on into the call of the process that waited
// in the commit of the other's result (takeQueued): eight calls take one
// start commit and eight result commits, not sixteen commits.
func TestQuantaLeaveTheWorkerToOthers(t *testing.T) {
	h := newHarness(t, clockTurnsScript(2), func(o *Options) { o.Workers = 1 })
	a, b := h.spawn(clockGrants()), h.spawn(clockGrants())
	before := h.rt.Store().Stats().SyncedCommits
	h.run()
	if n := h.rt.Store().Stats().SyncedCommits - before; n != 9 {
		t.Fatalf("eight calls took %d synced commits, want 9 (a start, then each result with the other's next call)", n)
	}
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
// its worker to the parent it wakes (the parent's resume and next call
// start in the exit's commit), and that the parent's spawn starts the
// child's first call on a free worker. Five calls (spawn, wait and exit of
// the parent; a clock read and an exit of the child) take six synced
// commits: the parent's start, and five results, each with the next call's
// start, the spawn's with the child's too.
func TestExitHandsTheWorkerToTheWokenParent(t *testing.T) {
	h := newHarness(t, parentChildScript)
	parent := h.spawn(append(clockGrants(), spawnGrant()))
	before := h.rt.Store().Stats().SyncedCommits
	h.run()
	if n := h.rt.Store().Stats().SyncedCommits - before; n != 6 {
		t.Fatalf("five calls of a parent and its child took %d synced commits, want 6", n)
	}
	if got := h.result(parent)["child_said"]; got != "hello from 2" {
		t.Fatalf("parent result %v: the resume in the child's exit commit did not see the child's result", got)
	}
}

// TestHandOffMovesWhatIsInFlight checks the scheduler's side of a hand-off:
// the process handed to is in flight, and the one that handed its worker
// away is not, and is queued if it became runnable meanwhile.
func TestHandOffMovesWhatIsInFlight(t *testing.T) {
	h := newHarness(t, "")
	s := h.rt.sched
	s.mu.Lock()
	s.inflight[1], s.working = 1, 1
	s.mu.Unlock()
	s.enqueue(1) // runnable again while in flight
	s.handOff(1, 2)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight[1] != 0 || s.inflight[2] != 1 || s.working != 1 {
		t.Fatalf("in flight after the hand-off: %v on %d workers, want only pid 2 on one", s.inflight, s.working)
	}
	if !slices.Equal(s.queue, []int64{1}) || s.requeue[1] {
		t.Fatalf("queue %v, requeue %v: pid 1 became runnable in flight and must be queued", s.queue, s.requeue)
	}
}

// TestHandedProcessStaysInFlight checks that a process handed to one worker
// stays in flight when another worker that held it lands later (its last
// quantum's report, or a stale queue entry it skipped), and that free
// workers are counted by the workers busy, not by the processes in flight.
func TestHandedProcessStaysInFlight(t *testing.T) {
	h := newHarness(t, "", func(o *Options) { o.Workers = 2 })
	s := h.rt.sched
	s.mu.Lock()
	s.running = true
	s.inflight[1], s.inflight[2], s.working = 1, 1, 2 // worker A ran pid 1, worker B runs pid 2
	s.mu.Unlock()
	s.handOff(2, 1) // pid 2's commit woke pid 1 and B goes on with it
	s.mu.Lock()
	s.working--
	s.landedLocked(1) // A's report of pid 1 arrives after the hand-off
	s.mu.Unlock()
	s.mu.Lock()
	held := s.inflight[1]
	s.mu.Unlock()
	if held != 1 {
		t.Fatalf("pid 1 is held by %d workers after A landed, want 1 (B runs it)", held)
	}
	s.enqueue(3)
	share := s.share(t.Context(), 0)
	s.mu.Lock()
	s.running = false // no loop runs: Close must not wait for one
	s.mu.Unlock()
	if share.FreeWorkers != 1 || share.Waiting != 1 {
		t.Fatalf("share %+v, want one free worker and one process waiting", share)
	}
}

// TestHandingProcessIsNotHeldBack checks, end to end, that a process
// whose worker went to another is served as any other once runnable: a
// child posts to its parent and waits for the answer, handing its worker to
// the parent; the answer wakes the child while the parent goes on with six
// more calls on that worker, and the child, with free workers, makes its
// next call before the parent's last.
func TestHandingProcessIsNotHeldBack(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - {name: spawn_child_process, arguments: {image: base:v0, goal: "child goal", capabilities: [{resource: "clock:now", rights: [read]}, {resource: "clock:sleep", rights: [read]}]}}
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "process:2"}}]
      - tool_calls: [{name: send_process_message, arguments: {recipient_pid: 2, body: pong}}]
`+strings.Repeat("      - tool_calls: [{name: get_current_time, arguments: {}}]\n", 6)+`
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: 2}}]
      - tool_calls: [{name: process_exit, arguments: {message: parent done}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: sleep, arguments: {seconds: 5}}]
      - tool_calls:
          - {name: send_process_message, arguments: {recipient_pid: 1, body: ping}}
          - {name: receive_process_messages, arguments: {sender: "process:1"}}
      - tool_calls: [{name: get_current_time, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {message: child done}}]
`, func(o *Options) { o.Workers = 4 })
	parent := h.spawn(append(clockGrants(), spawnGrant()))
	const child = 2
	h.run()
	for _, pid := range []int64{parent, child} {
		if info := h.info(pid); info.Status != process.Exited {
			t.Fatalf("pid %d is %s (%s), want exited", pid, info.Status, info.Reason)
		}
	}
	order := h.quantumOrder()
	nth := func(pid int64, n int) int {
		for i, p := range order {
			if p == pid {
				if n--; n == 0 {
					return i
				}
			}
		}
		t.Fatalf("pid %d made too few calls: %v", pid, order)
		return 0
	}
	if nth(child, 3) > nth(parent, 9) {
		t.Fatalf("the child's call after the answer started after the parent's last clock read: %v", order)
	}
}

// failingWaitTool is a tool of the echo image whose Invoke (or, with
// resumeFails, whose Resume) asks for a wait that cannot be: a defect in
// the quantum of the process that calls it.
func failingWaitTool(resumeFails bool) *tools.Tool {
	invalid := tools.Outcome{Block: &tools.Block{Wait: process.Wait{Kind: process.WaitTimer}}} // a timer without a time
	t := &tools.Tool{
		Name:   "slow_echo",
		Schema: schema.Object(map[string]*schema.Schema{"text": {Type: "string"}}, "text"),
		Scopes: []string{"echo"},
		Invoke: func(context.Context, tools.Syscalls, json.RawMessage) (tools.Outcome, error) { return invalid, nil },
	}
	if resumeFails {
		t.Invoke = func(context.Context, tools.Syscalls, json.RawMessage) (tools.Outcome, error) {
			return tools.Outcome{Block: &tools.Block{Wait: process.Wait{Kind: process.WaitChild, ChildPID: 2}}}, nil
		}
		t.Resume = func(context.Context, tools.Syscalls, tools.Pending) (tools.Outcome, error) { return invalid, nil }
	}
	return t
}

// echoParentRun runs an echo:v0 parent of script (turns of pid 1, then a
// base:v0 child that reads the clock and exits) and returns its pid.
func echoParentRun(t *testing.T, tool *tools.Tool, parentTurns string) (*harness, int64) {
	h, pid := echoParent(t, tool, "processes:\n  - image: echo:v0\n    turns:\n"+parentTurns+`
  - image: base:v0
    turns:
      - tool_calls: [{name: get_current_time, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {message: hi}}]
`)
	h.run()
	return h, pid
}

// echoParent opens script, whose echo:v0 image has tool, and spawns its
// first process, which may spawn base:v0 children; it returns its pid.
func echoParent(t *testing.T, tool *tools.Tool, script string, mutate ...func(*Options)) (*harness, int64) {
	h := newHarness(t, script, append([]func(*Options){func(o *Options) {
		o.Skills = testCatalog{tools: []*tools.Tool{tool}}
		o.Images = map[string]*images.Image{"echo:v0": echoImage()}
	}}, mutate...)...)
	pid, err := h.rt.Spawn(SpawnSpec{Image: "echo:v0", Goal: "g", Grants: append(clockGrants(), spawnGrant(),
		capabilities.Grant{Resource: "image:base:v0", Rights: []capabilities.Right{capabilities.Read}})})
	if err != nil {
		t.Fatal(err)
	}
	return h, pid
}

const spawnTurn = `      - tool_calls:
          - {name: spawn_child_process, arguments: {image: base:v0, goal: "child goal", capabilities: [{resource: "clock:now", rights: [read]}]}}
`

// TestHandedProcessFailsForItsOwnDefect checks that a defect in the quantum
// of a process a child's exit handed its worker to fails that process, not
// the child, and leaves nothing running.
func TestHandedProcessFailsForItsOwnDefect(t *testing.T) {
	h, parent := echoParentRun(t, failingWaitTool(false), spawnTurn+`      - tool_calls: [{name: wait_child_process, arguments: {child_pid: 2}}]
      - tool_calls: [{name: slow_echo, arguments: {text: x}}]
      - tool_calls: [{name: process_exit, arguments: {message: done}}]
`)
	if p := h.info(parent); p.Status != process.Failed || !strings.Contains(p.Reason, "internal error in a quantum") {
		t.Fatalf("parent %s (%s), want failed by its own defect", p.Status, p.Reason)
	}
	if c := h.info(2); c.Status != process.Exited {
		t.Fatalf("child %s (%s), want exited", c.Status, c.Reason)
	}
}

// TestFailedHandOffKeepsTheResult checks that a defect in the resume of a
// process a child's exit woke costs the child nothing: the exit commits
// alone, and the parent fails in its own quantum.
func TestFailedHandOffKeepsTheResult(t *testing.T) {
	h, parent := echoParentRun(t, failingWaitTool(true), spawnTurn+`      - tool_calls: [{name: slow_echo, arguments: {text: x}}]
      - tool_calls: [{name: process_exit, arguments: {message: done}}]
`)
	if c := h.info(2); c.Status != process.Exited {
		t.Fatalf("child %s (%s), want exited: a failed hand-off lost its exit", c.Status, c.Reason)
	}
	if got := h.result(2)["message"]; got != "hi" {
		t.Fatalf("child result %v", got)
	}
	if p := h.info(parent); p.Status != process.Failed || !strings.Contains(p.Reason, "internal error in a quantum") {
		t.Fatalf("parent %s (%s), want failed by its own defect", p.Status, p.Reason)
	}
}

// TestWaitForAnEndedChildEndsAtOnce has a tool block its process on a child
// that has ended already: the exit woke no one then, so the wait is woken
// as it begins, the tool's resume answers the call, and the process goes on
// to its exit instead of waiting for ever.
func TestWaitForAnEndedChildEndsAtOnce(t *testing.T) {
	lateWait := &tools.Tool{
		Name:   "slow_echo",
		Schema: schema.Object(map[string]*schema.Schema{"text": {Type: "string"}}, "text"),
		Scopes: []string{"echo"},
		Invoke: func(context.Context, tools.Syscalls, json.RawMessage) (tools.Outcome, error) {
			return tools.Outcome{Block: &tools.Block{Wait: process.Wait{Kind: process.WaitChild, ChildPID: 2}}}, nil
		},
		Resume: func(_ context.Context, sys tools.Syscalls, _ tools.Pending) (tools.Outcome, error) {
			c, err := sys.Child(2)
			if err != nil {
				return tools.Outcome{}, err
			}
			return tools.Outcome{Result: map[string]any{"child_status": string(c.Status)}}, nil
		},
	}
	h, parent := echoParentRun(t, lateWait, spawnTurn+`      - tool_calls: [{name: wait_child_process, arguments: {child_pid: 2}}]
      - tool_calls: [{name: slow_echo, arguments: {text: x}}]
      - tool_calls: [{name: process_exit, arguments: {message: done}}]
`)
	if got := h.result(parent)["message"]; got != "done" {
		t.Fatalf("parent result %v", got)
	}
	results := h.toolResults(parent)
	if late := results[len(results)-2]; late["_tool"] != "slow_echo" || late["child_status"] != string(process.Exited) {
		t.Fatalf("the late wait's answer: %v", late)
	}
}

// TestSpawnAndWaitInOneBatchKeepsTheParentsCharge checks that a parent
// which spawns a child and waits for it in one batch hands its worker to
// the child and keeps the charge of the child's calls on its budget: the
// child's start charges the parent through the record the parent's context
// is saved with, not a second copy that save would undo. Four calls take
// five synced commits: the parent's start, and four results, each with the
// next call's start (the wait's, the child's first).
func TestSpawnAndWaitInOneBatchKeepsTheParentsCharge(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - {name: spawn_child_process, arguments: {image: base:v0, goal: "child goal", capabilities: [{resource: "clock:now", rights: [read]}]}}
          - {name: wait_child_process, arguments: {child_pid: 2}}
      - tool_calls: [{name: process_exit, arguments: {message: done}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: get_current_time, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {message: hi}}]
`)
	parent := h.spawn(append(clockGrants(), spawnGrant()))
	before := h.rt.Store().Stats().SyncedCommits
	h.run()
	if n := h.rt.Store().Stats().SyncedCommits - before; n != 5 {
		t.Fatalf("four calls of a parent and its child took %d synced commits, want 5", n)
	}
	p, c := h.info(parent), h.info(2)
	if p.Status != process.Exited || c.Status != process.Exited {
		t.Fatalf("parent %s, child %s, want both exited", p.Status, c.Status)
	}
	if p.Used.LLMCalls != 2+c.Used.LLMCalls || p.Used.LLMTokens <= c.Used.LLMTokens {
		t.Fatalf("parent used %+v, child %+v: the parent's budget must carry its 2 calls and the child's", p.Used, c.Used)
	}
}

// TestContextIsNotSavedWithAnOlderRecord checks the guard behind a
// hand-off: a commit that stages a process's context with one copy of its
// record, then saves another copy, fails (errRecordCopies) and changes
// nothing, instead of saving the staged copy over the other's change.
func TestContextIsNotSavedWithAnOlderRecord(t *testing.T) {
	h := newHarness(t, "")
	pid := h.spawn(clockGrants())
	before := h.info(pid)
	err := h.rt.update(func(tx *txn) error {
		r, err := h.stageNotice(tx, pid, "staged with r")
		if err != nil {
			return err
		}
		if err := saveProc(tx, r); err != nil {
			return err
		}
		other, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		other.Used.LLMCalls++
		return saveProc(tx, other)
	})
	if !errors.Is(err, errRecordCopies) {
		t.Fatalf("update: %v, want errRecordCopies", err)
	}
	if after := h.info(pid); after.Used != before.Used || after.Status != before.Status {
		t.Fatalf("the failed commit changed pid %d: %+v, was %+v", pid, after, before)
	}
}

// TestClaimedWorkers checks the scheduler's side of a call a commit starts
// on a free worker: a claim counts as working and holds its process in
// flight; none is made with no loop running, nor when the queued processes
// want every free worker; a claim given back lands as a worker does,
// queuing its process if it became runnable meanwhile.
func TestClaimedWorkers(t *testing.T) {
	h := newHarness(t, "", func(o *Options) { o.Workers = 2 })
	s := h.rt.sched
	ctx := t.Context()
	if s.claimWorker(ctx, 1) != nil {
		t.Fatal("a worker was claimed with no loop running")
	}
	pool := &workerPool{s: s}
	s.mu.Lock()
	s.pool = pool
	s.mu.Unlock()
	if s.claimWorker(ctx, 1) != pool {
		t.Fatal("no worker claimed with two free")
	}
	s.enqueue(3)
	if s.claimWorker(ctx, 2) != nil {
		t.Fatal("a worker was claimed that the queued process wants")
	}
	s.enqueue(1) // runnable again while its claim is held
	s.release(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pool = nil
	if s.working != 0 || s.inflight[1] != 0 || !slices.Equal(s.queue, []int64{3, 1}) {
		t.Fatalf("after the release: %d working, in flight %v, queue %v; want none working, pid 1 queued after 3", s.working, s.inflight, s.queue)
	}
}

// TestClaimedRunsReuseTheirGoroutines checks that the goroutines started
// to run claimed calls wait for the next claim instead of ending: a parent
// spawning and waiting for ten children in a row, each child's first call on
// a claimed worker, starts no more of them than there are workers. (A new
// goroutine per claim grows its stack to a quantum's depth every time.)
func TestClaimedRunsReuseTheirGoroutines(t *testing.T) {
	var b strings.Builder
	b.WriteString("processes:\n  - image: base:v0\n    turns:\n")
	const children = 10
	for range children {
		b.WriteString("      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: g}}]\n")
		b.WriteString("      - tool_calls: [{name: wait_child_process, arguments: {child_pid: \"${last.pid}\"}}]\n")
	}
	b.WriteString("      - tool_calls: [{name: process_exit, arguments: {message: done}}]\n")
	for range children {
		b.WriteString("  - image: base:v0\n    turns:\n      - tool_calls: [{name: process_exit, arguments: {message: child}}]\n")
	}
	const workers = 4
	h := newHarness(t, b.String(), func(o *Options) { o.Workers = workers })
	parent := h.spawn([]capabilities.Grant{spawnGrant()})
	h.run()
	if got := h.info(parent).Status; got != process.Exited {
		t.Fatalf("parent %s, want exited", got)
	}
	s := h.rt.sched
	runs, runners := s.claimedRuns.Load(), s.claimRunners.Load()
	if runs < children {
		t.Fatalf("%d calls ran on claimed workers, want at least one for each of the %d children", runs, children)
	}
	if runners > workers {
		t.Fatalf("%d goroutines started for %d claimed calls, want at most one for each of the %d workers", runners, runs, workers)
	}
}

// TestFailedStartOfAWokenProcessGivesItsWorkerBack checks that a defect in
// the resume of a process that a commit woke and started on a claimed
// worker costs the waker nothing: the waker's result commits alone, the
// worker is given back (a claim kept would hold the run open forever), and
// the woken process fails in its own quantum. The child's message wakes the
// parent while the child goes on, its sleep ending only once the parent
// waits (the clock skips to a timer only when the runtime is idle).
func TestFailedStartOfAWokenProcessGivesItsWorkerBack(t *testing.T) {
	invalid := tools.Outcome{Block: &tools.Block{Wait: process.Wait{Kind: process.WaitTimer}}} // a timer without a time
	tool := &tools.Tool{
		Name:   "slow_echo",
		Schema: schema.Object(map[string]*schema.Schema{"text": {Type: "string"}}, "text"),
		Scopes: []string{"echo"},
		Invoke: func(context.Context, tools.Syscalls, json.RawMessage) (tools.Outcome, error) {
			return tools.Outcome{Block: &tools.Block{Wait: process.Wait{Kind: process.WaitMessage, Filter: json.RawMessage(`{}`)}}}, nil
		},
		Resume: func(context.Context, tools.Syscalls, tools.Pending) (tools.Outcome, error) { return invalid, nil },
	}
	h, parent := echoParent(t, tool, `
processes:
  - image: echo:v0
    turns:
      - tool_calls:
          - {name: spawn_child_process, arguments: {image: base:v0, goal: "child goal", capabilities: [{resource: "clock:now", rights: [read]}, {resource: "clock:sleep", rights: [read]}]}}
      - tool_calls: [{name: slow_echo, arguments: {text: x}}]
      - tool_calls: [{name: process_exit, arguments: {message: done}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: sleep, arguments: {seconds: 5}}]
      - tool_calls: [{name: send_process_message, arguments: {recipient_pid: 1, body: ping}}]
      - tool_calls: [{name: get_current_time, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {message: child done}}]
`, func(o *Options) { o.Workers = 4 })
	h.run()
	if p := h.info(parent); p.Status != process.Failed || !strings.Contains(p.Reason, "internal error in a quantum") {
		t.Fatalf("parent %s (%s), want failed by its own defect", p.Status, p.Reason)
	}
	if res := h.toolResults(2); len(res) < 2 || res[1]["ok"] != true {
		t.Fatalf("child results %v, want its message sent", res)
	}
	s := h.rt.sched
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.working != 0 || len(s.inflight) != 0 {
		t.Fatalf("after the run: %d working, in flight %v", s.working, s.inflight)
	}
}

// TestStartAfterAWakeKeepsTheWake checks that a charge through the record
// a parent's context was staged with cannot undo a later copy of that
// record: a parent spawns three children and waits for the second in one
// batch; the second's start fails it (its token budget is below its first
// call's reservation), which wakes the parent on another copy of its
// record; the third's start then charges the parent. The parent must be
// woken, not left waiting for a failed child.
func TestStartAfterAWakeKeepsTheWake(t *testing.T) {
	for _, workers := range []int{1, 4} {
		h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - {name: spawn_child_process, arguments: {image: base:v0, goal: "c1", capabilities: [{resource: "clock:now", rights: [read]}]}}
          - {name: spawn_child_process, arguments: {image: base:v0, goal: "c2", budget: {llm_tokens: 1}}}
          - {name: spawn_child_process, arguments: {image: base:v0, goal: "c3", capabilities: [{resource: "clock:now", rights: [read]}]}}
          - {name: wait_child_process, arguments: {child_pid: 3}}
      - tool_calls: [{name: process_exit, arguments: {payload: {child_status: "${last.status}"}}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: get_current_time, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {message: c1}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {message: c2}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: get_current_time, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {message: c3}}]
`, func(o *Options) { o.Workers = workers })
		parent := h.spawn(append(clockGrants(), spawnGrant()))
		h.run()
		if c := h.info(3); c.Status != process.Failed {
			t.Fatalf("%d workers: child 3 is %s, want failed at its start", workers, c.Status)
		}
		if p := h.info(parent); p.Status != process.Exited || h.result(parent)["child_status"] != "failed" {
			t.Fatalf("%d workers: parent %s (waiting on %q), result %v; want exited with its child failed", workers, p.Status, p.WaitingOn, h.result(parent))
		}
	}
}

// TestRefusedCallLeavesNoChargeOnItsAncestors checks that a call refused
// after its charge gives back the charge on an ancestor whose context the
// same commit staged: a child's approved call is resumed and started in
// its parent's commit (the parent resumes it with a signal), reaches the
// parent's record in place, and is refused. The parent's usage must be the
// same as when the child runs in a commit of its own (one worker).
func TestRefusedCallLeavesNoChargeOnItsAncestors(t *testing.T) {
	used := map[int]int64{}
	for _, workers := range []int{1, 2} {
		used[workers] = refusedApprovedCall(t, workers).ToolCalls
	}
	if used[1] != used[2] {
		t.Fatalf("the parent used %d tool calls with one worker and %d with two: a refused call's charge stayed", used[1], used[2])
	}
}

// refusedApprovedCall runs a parent whose child's call, held for approval
// and approved while the child is paused, is refused after its charge once
// the parent resumes the child; it returns the parent's usage.
func refusedApprovedCall(t *testing.T, workers int) capabilities.Budget {
	refusing := &tools.Tool{
		Name:   "slow_echo",
		Schema: schema.Object(map[string]*schema.Schema{"text": {Type: "string"}}, "text"),
		Scopes: []string{"echo"},
		Ops:    authority.RunnerOps,
		Invoke: func(_ context.Context, sys tools.Syscalls, _ json.RawMessage) (tools.Outcome, error) {
			if err := sys.Require(authority.ScopeUse, authority.Params{Scope: "echo"}); err != nil {
				return tools.Outcome{}, err
			}
			return tools.Outcome{}, tools.Errorf(tools.CodeFailed, "refused after its charge")
		},
	}
	h := newHarness(t, `
processes:
  - image: echo:v0
    turns:
      - tool_calls:
          - {name: spawn_child_process, arguments: {image: echo:v0, goal: "child", capabilities: [{resource: "scope:echo", rights: [execute], effect: ask}]}}
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
      - tool_calls: [{name: signal_child_process, arguments: {child_pid: 2, signal: pause}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
      - tool_calls: [{name: signal_child_process, arguments: {child_pid: 2, signal: resume}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
      - tool_calls: [{name: process_exit, arguments: {message: done}}]
  - image: echo:v0
    turns:
      - tool_calls: [{name: slow_echo, arguments: {text: x}}]
      - tool_calls: [{name: process_exit, arguments: {message: child done}}]
`, func(o *Options) {
		o.Workers = workers
		o.Skills = testCatalog{tools: []*tools.Tool{refusing}}
		o.Images = map[string]*images.Image{"echo:v0": echoImage()}
	})
	parent, err := h.rt.Spawn(SpawnSpec{Image: "echo:v0", Goal: "g", Grants: []capabilities.Grant{spawnGrant(),
		{Resource: "image:echo:v0", Rights: []capabilities.Right{capabilities.Read}},
		{Resource: "scope:echo", Rights: []capabilities.Right{capabilities.Execute}, Effect: capabilities.Ask}}})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	const child = 2
	if c := h.info(child); c.Status != process.Waiting || c.WaitingOn != process.WaitApproval {
		t.Fatalf("%d workers: child %s on %q, want waiting for approval", workers, c.Status, c.WaitingOn)
	}
	// The parent pauses its child (a pause it may lift, unlike the Host's).
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: parent, From: "h", Body: "pause it"}); err != nil {
		t.Fatal(err)
	}
	h.run()
	if c := h.info(child); c.Status != process.Paused {
		t.Fatalf("%d workers: child %s, want paused by its parent", workers, c.Status)
	}
	approvals, err := h.rt.Approvals()
	if err != nil || len(approvals) != 1 {
		t.Fatalf("approvals %v, %v", approvals, err)
	}
	if err := h.rt.Approve(ApprovalRef{PID: child, CallID: approvals[0].CallID}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: parent, From: "h", Body: "go"}); err != nil {
		t.Fatal(err)
	}
	h.run()
	if res := h.toolResults(child); len(res) == 0 || res[0]["ok"] != false {
		t.Fatalf("%d workers: child results %v, want the approved call refused", workers, res)
	}
	return h.info(parent).Used
}

// TestContextAtHand checks when a commit of another process's quantum may
// start a process's quantum: its context is small, or cached at its
// committed version; a large one the cache let go waits for the process's
// own start, which decodes it outside the store's write lock.
func TestContextAtHand(t *testing.T) {
	h := newHarness(t, "")
	pid := h.spawn(clockGrants())
	atHand := func() bool {
		t.Helper()
		var ok bool
		err := h.rt.update(func(tx *txn) error {
			r, err := loadProc(tx, pid)
			if err != nil {
				return err
			}
			ok, err = h.rt.contextAtHand(tx, r)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	h.rt.dropCachedContext(pid)
	if !atHand() {
		t.Fatal("a new process's small context is not at hand")
	}
	err := h.rt.update(func(tx *txn) error {
		_, err := h.stageNotice(tx, pid, strings.Repeat("x", maxContextDecodedInCommit))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !atHand() {
		t.Fatal("a large context cached by the commit that wrote it is not at hand")
	}
	h.rt.dropCachedContext(pid)
	if atHand() {
		t.Fatal("a large context the cache let go is at hand")
	}
	h.rt.prewarmContext(pid)
	if !atHand() {
		t.Fatal("a large context decoded by a prewarm is not at hand")
	}
}

// stageNotice loads pid's record and context in tx and appends a notice of
// content to the context, staged with the record it returns.
func (h *harness) stageNotice(tx *txn, pid int64, content string) (*procRecord, error) {
	r, err := loadProc(tx, pid)
	if err != nil {
		return nil, err
	}
	c, err := h.rt.loadContext(tx, r)
	if err != nil {
		return nil, err
	}
	return r, h.rt.appendEntries(tx, r, c, Entry{Role: llm.RoleUser, Kind: "notice", Content: content})
}
