package kernel

import (
	"fmt"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/process"
)

// compactionResult is the result of pid's compact_process_context call.
func compactionResult(t *testing.T, h *harness, pid int64) map[string]any {
	t.Helper()
	for _, r := range h.toolResults(pid) {
		if r["_tool"] == compactToolName {
			return r
		}
	}
	t.Fatalf("pid %d made no compaction call", pid)
	return nil
}

const oneStageCompaction = `
processes:
  - image: base:v0
    turns:
` + "%s" + `
      - tool_calls: [{name: compact_process_context, arguments: {target_tokens: %d, preserve_recent_entries: 1, max_chunks: 1}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: %s}}]
`

// A compaction an ask grant covers is held for a Human, and once approved
// runs, each of its checks allowed by the approval: it was held again
// forever (an ask on the job's namespace), or refused as needing an
// approval nobody was asked for (an ask on the stage's spawn right).
func TestCompactionHeldForApprovalRuns(t *testing.T) {
	for _, ask := range []capabilities.Grant{
		{ID: "ask-ns", Resource: "object_namespace:proc-1", Rights: []capabilities.Right{capabilities.Write}, Effect: capabilities.Ask},
		{ID: "ask-spawn", Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}, Effect: capabilities.Ask},
	} {
		t.Run(ask.ID, func(t *testing.T) {
			h := newHarness(t, fmt.Sprintf(oneStageCompaction, chattyTurns(3), 256, summaryPayload))
			grants := []capabilities.Grant{ask}
			for _, g := range compactionGrants() {
				if g.Resource != ask.Resource {
					grants = append(grants, g)
				}
			}
			pid := h.spawn(grants)
			h.run()
			list, err := h.rt.Approvals()
			if err != nil || len(list) != 1 || list[0].Tool != compactToolName || list[0].GrantID != ask.ID {
				t.Fatalf("held: %+v %v, want the compaction held by %s", list, err, ask.ID)
			}
			if err := h.rt.Approve(ApprovalRef{PID: pid, CallID: list[0].CallID, ID: list[0].ID}); err != nil {
				t.Fatal(err)
			}
			h.run()
			if list, _ := h.rt.Approvals(); len(list) != 0 {
				t.Fatalf("held again after the approval: %+v", list)
			}
			if res := compactionResult(t, h, pid); res["compacted"] != true {
				t.Fatalf("the approved compaction: %v", res)
			}
			if info := h.info(pid); info.Status != process.Exited {
				t.Fatalf("status %s: %s", info.Status, info.Reason)
			}
		})
	}
}

// A later stage that cannot start takes nothing: its one-shot spawn use,
// reserved before the image right was refused, is given back with the
// failed job.
func TestCompactionStageRefusedTakesNoUse(t *testing.T) {
	two, one := 2, 1
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
`+chattyTurns(4)+`
      - tool_calls: [{name: compact_process_context, arguments: {target_tokens: 256, preserve_recent_entries: 2, max_chunks: 2}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: `+summaryPayload+`}}]
`)
	pid := h.spawn(append(clockGrants(),
		capabilities.Grant{ID: "spawn2", Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}, UsesRemaining: &two},
		capabilities.Grant{ID: "img1", Resource: "image:context-compressor:v0", Rights: []capabilities.Right{capabilities.Read}, UsesRemaining: &one}))
	h.run()
	res := compactionResult(t, h, pid)
	if errorCode(res) != "failed" || !strings.Contains(errorMessage(res), "stage 2") {
		t.Fatalf("the compaction: %v, want its second stage refused", res)
	}
	h.rt.view(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		for _, g := range r.Grants {
			if g.ID == "spawn2" && (g.UsesRemaining == nil || *g.UsesRemaining != 1) {
				t.Errorf("spawn uses left %v after one compressor, want 1", *g.UsesRemaining)
			}
		}
		return nil
	})
}

// The no-op reports the context version a read-back finds: the one its
// own commit writes, unchanged by the compaction.
func TestCompactionNoOpReportsTheVersionRead(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: compact_process_context, arguments: {}}]
      - tool_calls: [{name: read_object, arguments: {namespace: "proc-1", name: "llm_context:1"}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
	pid := h.spawn(nil)
	h.run()
	res := h.toolResults(pid)
	if res[0]["compacted"] != false || res[0]["old_version"] != res[0]["new_version"] || res[0]["new_version"] != res[1]["version"] {
		t.Fatalf("no-op %v, then the read %v: want equal versions, the read's", res[0], res[1])
	}
}

// A context exactly at target_tokens is not under it: the call compacts.
func TestCompactionAtTheTargetCompacts(t *testing.T) {
	probe := newHarness(t, fmt.Sprintf(oneStageCompaction, chattyTurns(12), 9999, summaryPayload))
	pid := probe.spawn(compactionGrants())
	probe.run()
	first := compactionResult(t, probe, pid)
	tokens := int(first["source_tokens"].(float64))
	if first["compacted"] != false || tokens < 1000 || tokens > 9999 {
		t.Fatalf("probe: %v", first)
	}
	// The same number of digits: the same context, at its own size.
	h := newHarness(t, fmt.Sprintf(oneStageCompaction, chattyTurns(12), tokens, summaryPayload))
	pid = h.spawn(compactionGrants())
	h.run()
	if res := compactionResult(t, h, pid); res["compacted"] != true || int(res["source_tokens"].(float64)) != tokens {
		t.Fatalf("target %d, the context's size: %v", tokens, res)
	}
}

// A summary that would grow the context is refused as invalid output, and
// the context stays as it was.
func TestCompactionRefusesASummaryLargerThanItsSource(t *testing.T) {
	big := `{goal: "` + strings.Repeat("x", 40000) + `", constraints: [], user_preferences: [], completed: [], pending: [], key_references: [], recent_decisions: [], risks: [], uncertainties: [], next_steps: []}`
	h := newHarness(t, fmt.Sprintf(oneStageCompaction, chattyTurns(3), 256, big))
	pid := h.spawn(compactionGrants())
	h.run()
	res := compactionResult(t, h, pid)
	if errorCode(res) != "failed" || !strings.Contains(errorMessage(res), "is not smaller than") {
		t.Fatalf("a summary larger than its source: %v", res)
	}
	for _, e := range contextOf(t, h, pid).entries {
		if e.Kind == "summary" {
			t.Fatalf("the context took the summary: %+v", e)
		}
	}
}

// A call with nothing before it says so, and does not blame the tail it
// was asked to keep.
func TestCompactionOfAnEmptyContextSaysSo(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: compact_process_context, arguments: {force: true, preserve_recent_entries: 0, max_chunks: 1}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
	pid := h.spawn(compactionGrants())
	h.run()
	if res := compactionResult(t, h, pid); errorMessage(res) != "nothing to compact: the context holds no entries before this call" {
		t.Fatalf("a forced compaction of nothing: %v", res)
	}
}
