package kernel

import (
	"context"
	"sync"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
)

// A pause asked for while a provider call runs takes effect when the call
// fails, too: the retry waits for the pause to be lifted instead of going
// out after the backoff.
func TestPauseRequestedDuringAFailedCallHolds(t *testing.T) {
	var h *harness
	var once sync.Once
	hook := withHook(func(h *harness, req llm.Request) {
		once.Do(func() {
			if _, err := h.rt.Signal(req.Process.PID, SignalPause); err != nil {
				h.t.Errorf("pause: %v", err)
			}
		})
	}, &h)
	h = newHarness(t, `
processes:
  - image: base:v0
    turns:
      - fault: {status: 503}
        tool_calls: [{name: process_exit, arguments: {message: "ran after a pause"}}]
`, hook)
	pid := h.spawn(nil)
	if err := h.rt.RunReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.run()
	if info := h.info(pid); info.Status != process.Paused {
		t.Fatalf("after the failed call: %s (%s), want paused", info.Status, info.Reason)
	}
	if _, err := h.rt.Signal(pid, SignalContinue); err != nil {
		t.Fatal(err)
	}
	h.run()
	if info := h.info(pid); info.Status != process.Exited {
		t.Fatalf("after continue: %s (%s)", info.Status, info.Reason)
	}
}

// A pause the Host put on a child is the Host's to lift: the parent's
// resume is refused, and the child stays paused until the Host continues it.
func TestParentCannotLiftTheHostsPause(t *testing.T) {
	var h *harness
	hook := withHook(func(h *harness, req llm.Request) {
		if req.Process.PID == 1 && req.Turn == 2 {
			if _, err := h.rt.Signal(2, SignalPause); err != nil {
				h.t.Errorf("Host pause of 2: %v", err)
			}
		}
	}, &h)
	h = newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: c}}]
      - tool_calls: [{name: read_process_messages, arguments: {}}]
      - tool_calls: [{name: signal_child_process, arguments: {child_pid: 2, signal: resume}}]
      - tool_calls: [{name: signal_child_process, arguments: {child_pid: 2, signal: pause}}]
      - tool_calls: [{name: send_process_message, arguments: {recipient_pid: 2, body: go}}]
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: 2}}]
      - tool_calls: [{name: process_exit, arguments: {message: done}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {message: "ran although the Host paused me"}}]
`, hook)
	h.spawn([]capabilities.Grant{spawnGrant()})
	h.run()
	res := h.toolResults(1)
	if errorCode(res[2]) != tools.CodeDenied {
		t.Fatalf("the parent's resume of a child the Host paused: %v", res[2])
	}
	if res[3]["ok"] != true {
		t.Fatalf("the parent's own pause: %v", res[3])
	}
	if info := h.info(2); info.Status != process.Paused {
		t.Fatalf("the child: %s, want paused", info.Status)
	}
	if d, err := h.rt.Inspect(2); err != nil || !d.HostHold {
		t.Fatalf("inspect shows no Host hold: %+v %v", d, err)
	}
	if _, err := h.rt.Signal(2, SignalContinue); err != nil {
		t.Fatal(err)
	}
	h.run()
	if info := h.info(2); info.Status != process.Exited {
		t.Fatalf("the child after the Host's continue: %s (%s)", info.Status, info.Reason)
	}
}

// The descendants a kill ends are let go as the killed process is: what
// the runtime keeps in memory for them (here the spawn index the replay
// provider asked for) is released.
func TestKilledDescendantsAreLetGo(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: c}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:nobody"}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:nobody"}}]
`)
	root := h.spawn([]capabilities.Grant{spawnGrant()})
	h.run()
	if _, ok := h.rt.spawnIndexes.Load(int64(2)); !ok {
		t.Fatal("the child's spawn index is not kept before the kill")
	}
	if _, err := h.rt.Signal(root, SignalKill); err != nil {
		t.Fatal(err)
	}
	if info := h.info(2); info.Status != process.Killed {
		t.Fatalf("the child: %s", info.Status)
	}
	if _, ok := h.rt.spawnIndexes.Load(int64(2)); ok {
		t.Fatal("a killed descendant's spawn index is still kept")
	}
}
