package kernel

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/process"
)

// approveHeld approves pid's one held call, which must be tool's, and runs
// the runtime until it is idle again.
func approveHeld(t *testing.T, h *harness, pid int64, tool string) {
	t.Helper()
	info := h.info(pid)
	if info.Status != process.Waiting || info.WaitingOn != process.WaitApproval {
		t.Fatalf("pid %d: status %s on %q (%s), want %s held for approval; results %v", pid, info.Status, info.WaitingOn, info.Reason, tool, h.toolResults(pid))
	}
	list, err := h.rt.Approvals()
	if err != nil || len(list) != 1 || list[0].Tool != tool {
		t.Fatalf("approvals %+v %v, want one of %s", list, err, tool)
	}
	if err := h.rt.Approve(ApprovalRef{PID: pid, CallID: list[0].CallID, ID: list[0].ID}); err != nil {
		t.Fatal(err)
	}
	h.run()
}

// The README's example: with --ask 'object_namespace:*=write' every write
// to an Object waits for a Human, a write_object to an existing Object as
// much as the create_object that made it; neither is answered as a missing
// Object.
func TestAskGrantHoldsObjectWrites(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: create_object
            arguments: {name: notes, payload: {v: 1}}
      - tool_calls:
          - name: write_object
            arguments: {oid: "${last.oid}", expected_version: 1, payload: {v: 2}}
      - tool_calls:
          - name: read_object
            arguments: {oid: "${last.oid}"}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
`)
	pid := h.spawn(append(clockGrants(),
		capabilities.Grant{ID: "read-all", Resource: "object_namespace:*", Rights: []capabilities.Right{capabilities.Read}},
		capabilities.Grant{ID: "ask-write", Resource: "object_namespace:*", Rights: []capabilities.Right{capabilities.Write}, Effect: capabilities.Ask}))
	h.run()
	approveHeld(t, h, pid, "create_object")
	approveHeld(t, h, pid, "write_object")
	got := h.result(pid)
	if got["version"] != float64(2) || got["payload"].(map[string]any)["v"] != float64(2) {
		t.Fatalf("result %v, want the Object at version 2", got)
	}
}

// A read an ask grant covers waits for a Human too, by oid and as
// process_exit's result_oid; the payload read back is the one written, <, >
// and & included, with its digest over those bytes.
func TestAskGrantHoldsObjectReads(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: create_object
            arguments: {name: r, payload: "a&b<c>", durable: true}
      - tool_calls:
          - name: read_object
            arguments: {oid: "${last.oid}"}
      - tool_calls:
          - name: process_exit
            arguments: {result_oid: "${last.oid}"}
`)
	pid := h.spawn(append(clockGrants(),
		capabilities.Grant{ID: "ask-read", Resource: "object_namespace:*", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Ask}))
	h.run()
	approveHeld(t, h, pid, "create_object")
	approveHeld(t, h, pid, "read_object")
	approveHeld(t, h, pid, "process_exit")
	info := h.info(pid)
	if info.Status != process.Exited {
		t.Fatalf("status %s (%s)", info.Status, info.Reason)
	}
	meta, payload, err := h.rt.ReadObject(info.ResultOID)
	sum := sha256.Sum256([]byte(`"a&b<c>"`))
	if err != nil || string(payload) != `"a&b<c>"` || meta.PayloadSHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("result %s (sha256 %s), %v; want \"a&b<c>\"", payload, meta.PayloadSHA256, err)
	}
	res := h.toolResults(pid)
	if len(res) < 2 || res[1]["_tool"] != "read_object" || res[1]["ok"] != true || strings.Contains(string(payload), `\u0026`) {
		t.Fatalf("results %v", res)
	}
}
