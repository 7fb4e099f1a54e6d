package kernel

import (
	"fmt"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/process"
)

// secretChildScript: the root spawns child 2, waits for it, then reads the
// result_oid the wait names and ends with what it read; the child ends
// with a secret.
const secretChildScript = `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: g}}]
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: "${last.pid}"}}]
      - tool_calls: [{name: read_object, arguments: {oid: "${last.result_oid}"}}]
      - tool_calls: [{name: process_exit, arguments: {payload: {read: "${last.payload.secret}"}}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: {secret: s3cret}}}]
`

// childResultRead is a grant on the reading of child 2's result.
func childResultRead(id string, effect capabilities.Effect) capabilities.Grant {
	return capabilities.Grant{ID: id, Resource: "object_namespace:proc-2", Rights: []capabilities.Right{capabilities.Read}, Effect: effect}
}

// waitResult is the root's wait_child_process result, which must have
// answered (not been held) with the child ready.
func waitResult(t *testing.T, h *harness, pid int64) map[string]any {
	t.Helper()
	res := h.toolResults(pid)
	if len(res) < 2 || res[1]["_tool"] != "wait_child_process" || res[1]["ok"] != true || res[1]["ready"] != true {
		t.Fatalf("results %v, want a ready wait second", res)
	}
	return res[1]
}

// Without a grant, the wait inlines the direct child's result, as
// read_object reads it: the behaviour a deny or an ask changes below.
func TestProcToolWaitInlinesAReadableResult(t *testing.T) {
	h := newHarness(t, secretChildScript)
	pid := h.spawn([]capabilities.Grant{spawnGrant()})
	h.run()
	w := waitResult(t, h, pid)
	if fmt.Sprint(w["result"]) != "map[secret:s3cret]" || w["result_withheld"] != nil || w["result_readable"] != nil {
		t.Fatalf("wait %v", w)
	}
	if got := h.result(pid); got["read"] != "s3cret" {
		t.Fatalf("root result %v", got)
	}
}

// A parent denied its child's result is not shown it by the wait: the
// wait names result_oid and its size and says it is not readable, as
// read_object on it is refused.
func TestProcToolWaitWithholdsADeniedResult(t *testing.T) {
	h := newHarness(t, secretChildScript)
	pid := h.spawn([]capabilities.Grant{spawnGrant(), childResultRead("no-child-results", capabilities.Deny)})
	h.run()
	w := waitResult(t, h, pid)
	if _, shown := w["result"]; shown || strings.Contains(fmt.Sprint(h.toolResults(pid)), "s3cret") {
		t.Fatalf("the denied result was shown: %v", h.toolResults(pid))
	}
	if w["result_oid"] == nil || w["result_bytes"] != float64(len(`{"secret":"s3cret"}`)) || w["result_readable"] != false ||
		!strings.Contains(fmt.Sprint(w["result_withheld"]), "no-child-results") {
		t.Fatalf("wait %v", w)
	}
	if res := h.toolResults(pid); len(res) < 3 || res[2]["_tool"] != "read_object" || res[2]["ok"] != false {
		t.Fatalf("read_object of the denied result: %v", res)
	}
}

// An ask grant on the child's result does not turn the wait into an
// approval hold: the wait answers without the result and says why, and
// the read_object that follows is the call held for a Human.
func TestProcToolWaitDoesNotHoldForAnAskedResult(t *testing.T) {
	h := newHarness(t, secretChildScript)
	pid := h.spawn([]capabilities.Grant{spawnGrant(), childResultRead("ask-child-results", capabilities.Ask)})
	h.run()
	w := waitResult(t, h, pid)
	if _, shown := w["result"]; shown || w["result_oid"] == nil || w["result_bytes"] == nil ||
		!strings.Contains(fmt.Sprint(w["result_withheld"]), "approval") || !strings.Contains(fmt.Sprint(w["result_withheld"]), "ask-child-results") {
		t.Fatalf("wait %v", w)
	}
	info := h.info(pid)
	list, err := h.rt.Approvals()
	if info.Status != process.Waiting || info.WaitingOn != process.WaitApproval || err != nil || len(list) != 1 || list[0].Tool != "read_object" {
		t.Fatalf("status %s on %q, approvals %+v %v: want read_object held", info.Status, info.WaitingOn, list, err)
	}
	if err := h.rt.Approve(ApprovalRef{PID: pid, CallID: list[0].CallID, ID: list[0].ID}); err != nil {
		t.Fatal(err)
	}
	h.run()
	if got := h.result(pid); got["read"] != "s3cret" {
		t.Fatalf("root result after the approved read: %v", got)
	}
}

// A budget field of 0 would mean no limit of the child's own, so
// {children: 0} is refused naming the field instead of letting the child
// spawn as many children as its image allows.
func TestProcToolSpawnRefusesAZeroBudget(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: g, budget: {children: 0}}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
	pid := h.spawn([]capabilities.Grant{spawnGrant()})
	h.run()
	res := h.toolResults(pid)
	e, _ := res[0]["error"].(map[string]any)
	if res[0]["ok"] != false || e["code"] != "invalid_arguments" || !strings.Contains(fmt.Sprint(e["message"]), "budget.children") {
		t.Fatalf("spawn with budget {children: 0}: %v", res[0])
	}
	if u := h.info(pid).Used; u.Children != 0 {
		t.Fatalf("a child was spawned: used %+v", u)
	}
}

// A malformed expires_at is refused as invalid_arguments naming
// capabilities[i].expires_at and the RFC 3339 rule, not failed as a decode.
func TestProcToolSpawnRefusesAMalformedExpiry(t *testing.T) {
	for _, at := range []string{"tomorrow at noon, UTC", "2026-13-45T99:00:00Z"} {
		h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: g, capabilities: [{resource: "clock:now", rights: [read], expires_at: "`+at+`"}]}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
		pid := h.spawn(append(clockGrants(), spawnGrant()))
		h.run()
		res := h.toolResults(pid)
		e, _ := res[0]["error"].(map[string]any)
		if msg := fmt.Sprint(e["message"]); res[0]["ok"] != false || e["code"] != "invalid_arguments" ||
			!strings.Contains(msg, "capabilities[0].expires_at") || !strings.Contains(msg, "RFC 3339") {
			t.Fatalf("expires_at %q: %v", at, res[0])
		}
	}
}
