package kernel

import (
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/process"
)

// A process may read but never plainly write the Objects the runtime owns
// (its context, its goal): that would let it edit its own acceptance goal
// or break its context's compare-and-swap.
func TestKernelOwnedObjectsAreNotWritable(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: read_object, arguments: {namespace: "proc-1", name: "llm_context:1"}}]
      - tool_calls: [{name: write_object, arguments: {oid: "${last.oid}", expected_version: "${last.version}", payload: {entries: []}}}]
      - tool_calls: [{name: write_object, arguments: {oid: "${process.goal_oid}", expected_version: 1, payload: "an easier goal"}}]
      - tool_calls: [{name: create_object, arguments: {name: fake, kind: goal, payload: "x"}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
	pid := h.spawn(nil)
	h.run()
	if st := h.info(pid).Status; st != process.Exited {
		t.Fatalf("status %s", st)
	}
	res := h.toolResults(pid)
	for i := 1; i <= 3; i++ {
		if e, ok := res[i]["error"].(map[string]any); !ok || e["code"] != "denied" {
			t.Fatalf("call %d must be denied: %v", i, res[i])
		}
	}
	if _, payload, _ := h.rt.ReadObject(h.info(pid).GoalOID); string(payload) != "test goal" {
		t.Fatalf("goal changed: %q", payload)
	}
}

// A call refused after it reserved a one-shot gives the use back.
func TestRefusedCallKeepsItsOneShot(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: coding:v0, goal: g}}]
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: g}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
	one := 1
	pid := h.spawn([]capabilities.Grant{{Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}, UsesRemaining: &one}})
	h.run()
	res := h.toolResults(pid)
	if res[0]["ok"] != false || res[1]["ok"] != true {
		t.Fatalf("the refused spawn must not use the one-shot: %v / %v", res[0], res[1])
	}
	// The parent's usage includes its child's; whether the child ran before
	// the parent's exit killed it varies, so count the parent's own calls.
	used, child := h.info(pid).Used, h.info(2).Used
	// process_exit is not counted: the successful spawn is the only call.
	if used.ToolCalls-child.ToolCalls != 1 || used.Children != 1 {
		t.Fatalf("a refused call is not charged: parent %+v, child %+v", used, child)
	}
}

// Every compaction stage needs the spawn right: a one-shot covers one stage.
func TestEveryCompactionStageNeedsAuthority(t *testing.T) {
	h := newHarness(t, failingCompactionScript())
	one := 1
	grants := append(clockGrants(),
		capabilities.Grant{Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}, UsesRemaining: &one},
		capabilities.Grant{Resource: "image:context-compressor:v0", Rights: []capabilities.Right{capabilities.Read}})
	pid := h.spawn(grants)
	before := contextOf(t, h, pid)
	h.run()
	checkFailedJob(t, h, pid, before, "process:spawn")
	if ps, _ := h.rt.Processes(); len(ps) != 2 {
		t.Fatalf("one compressor only: %d processes", len(ps))
	}
}

// An exit is irreversible: a restore leaves a process that ended since the
// checkpoint ended.
func TestRestoreKeepsEndedProcessesEnded(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {message: done}}]
`)
	pid := h.spawn(nil)
	h.run()
	cp, err := h.rt.CreateCheckpoint(pid)
	if err != nil {
		t.Fatal(err)
	}
	h.rt.PostHumanMessage(HumanMessage{To: pid, Body: "go"})
	h.run()
	rep, err := h.rt.RestoreCheckpoint(cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info := h.info(pid); info.Status != process.Exited || len(rep.KeptTerminal) != 1 {
		t.Fatalf("after restore: %+v, report %+v", info, rep)
	}
	if got := h.result(pid); got["message"] != "done" {
		t.Fatalf("result %v", got)
	}
	if len(rep.Restored) != 0 || !strings.Contains(rep.Checkpoint, "cp-") {
		t.Fatalf("report %+v", rep)
	}
}

// One-shot uses handed to a child move from the parent: they are not copied.
func TestHandedDownOneShotsMove(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: a, capabilities: [{resource: "clock:sleep", rights: [read], uses_remaining: 1}]}}]
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: b, capabilities: [{resource: "clock:sleep", rights: [read], uses_remaining: 1}]}}]
      - tool_calls: [{name: sleep, arguments: {seconds: 1}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
	one := 1
	pid := h.spawn([]capabilities.Grant{spawnGrant(), {Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}, UsesRemaining: &one}})
	h.run()
	res := h.toolResults(pid)
	if res[0]["ok"] != true {
		t.Fatalf("first hand-down: %v", res[0])
	}
	for i := 1; i <= 2; i++ {
		if e, ok := res[i]["error"].(map[string]any); !ok || e["code"] != "denied" {
			t.Fatalf("call %d: the one use went to the first child: %v", i, res[i])
		}
	}
}

// Probing OIDs without authority cannot tell which exist.
func TestMissingObjectsLookDeniedWithoutAuthority(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: read_object, arguments: {oid: "8a1f6c1e-0000-4000-8000-000000000000"}}]
      - tool_calls: [{name: process_exit, arguments: {message: "${last.error.code}"}}]
`)
	pid := h.spawn(nil)
	h.run()
	if got := h.result(pid)["message"]; got != "denied" {
		t.Fatalf("a missing Object without authority: %v", got)
	}
	h2 := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: read_object, arguments: {oid: "8a1f6c1e-0000-4000-8000-000000000000"}}]
      - tool_calls: [{name: process_exit, arguments: {message: "${last.error.code}"}}]
`)
	pid2 := h2.spawn([]capabilities.Grant{{Resource: "object:*", Rights: []capabilities.Right{capabilities.Read}}})
	h2.run()
	if got := h2.result(pid2)["message"]; got != "not_found" {
		t.Fatalf("a missing Object with authority: %v", got)
	}
}
