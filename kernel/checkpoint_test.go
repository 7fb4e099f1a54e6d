package kernel

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

const checkpointScript = `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: create_object, arguments: {name: notes, payload: {v: "a"}}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
      - tool_calls: [{name: read_object, arguments: {namespace: "proc-1", name: notes}}]
      - tool_calls: [{name: write_object, arguments: {oid: "${last.oid}", expected_version: 1, payload: {v: "b"}}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:other"}}]
      - tool_calls: [{name: get_current_time, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {message: "${last.timezone}"}}]
`

func objectPayload(t *testing.T, h *harness, pid int64, name string) (objects.Meta, string) {
	t.Helper()
	var meta objects.Meta
	var payload []byte
	err := h.rt.view(func(tx *txn) error {
		m, err := tx.Lookup(Namespace(pid), name)
		if err != nil {
			return err
		}
		meta, payload, err = tx.Read(m.OID)
		return err
	})
	if err != nil {
		t.Fatalf("object %s of pid %d: %v", name, pid, err)
	}
	return meta, string(payload)
}

func TestCheckpointRestore(t *testing.T) {
	h := newHarness(t, checkpointScript)
	one := 2
	pid := h.spawn([]capabilities.Grant{{Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, UsesRemaining: &one}})
	h.run() // waits for human:h with notes at version 1
	cp, err := h.rt.CreateCheckpoint(pid)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Objects < 3 || len(cp.PIDs) != 1 {
		t.Fatalf("checkpoint %+v", cp)
	}
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "h", Body: "go on"}); err != nil {
		t.Fatal(err)
	}
	h.run() // writes notes v2 and waits for human:other
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "bystander", Body: "unread"}); err != nil {
		t.Fatal(err)
	}
	if m, p := objectPayload(t, h, pid, "notes"); m.Version != 2 || p != `{"v":"b"}` {
		t.Fatalf("before restore: v%d %s", m.Version, p)
	}
	ctxBefore := contextOf(t, h, pid)
	var genBefore uint64
	h.rt.view(func(tx *txn) error {
		r, _ := loadProc(tx, pid)
		genBefore = r.Gen
		return nil
	})
	rep, err := h.rt.RestoreCheckpoint(cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	if m, p := objectPayload(t, h, pid, "notes"); m.Version != 3 || p != `{"v":"a"}` {
		t.Fatalf("after restore the payload is the checkpoint's at a newer version: v%d %s", m.Version, p)
	}
	var tools []string
	for _, e := range rep.EffectsSince {
		tools = append(tools, e.Tool)
	}
	if got := strings.Join(tools, ","); !strings.Contains(got, "write_object") || rep.SupersededMessages != 1 {
		t.Fatalf("report %+v", rep)
	}
	after := h.info(pid)
	if after.Status != process.Waiting || after.Wait.Kind != process.WaitHuman {
		t.Fatalf("restored process: %+v", after)
	}
	c := contextOf(t, h, pid)
	if c.generation() <= ctxBefore.generation() || len(c.entries) >= len(ctxBefore.entries) {
		t.Fatalf("context after restore: generation %d (was %d), %d entries (was %d)", c.generation(), ctxBefore.generation(), len(c.entries), len(ctxBefore.entries))
	}
	h.rt.view(func(tx *txn) error {
		r, _ := loadProc(tx, pid)
		if r.Gen <= genBefore {
			t.Errorf("generation fence did not advance: %d", r.Gen)
		}
		unread, total, _ := mailbox.Count(tx.Txn, pid)
		if unread != 0 || total != 2 {
			t.Errorf("mailbox after restore: unread %d total %d", unread, total)
		}
		return nil
	})
	// The restored process waits for human:h again and continues from there;
	// its next call re-reads and replays nothing by itself.
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "h", Body: "again"}); err != nil {
		t.Fatal(err)
	}
	h.run()
}

func TestCheckpointRestoreNeverRegainsOneShots(t *testing.T) {
	two, zero := 2, 0
	cap := []capabilities.Grant{{ID: "g", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, UsesRemaining: &two}}
	now := []capabilities.Grant{{ID: "g", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, UsesRemaining: &zero}}
	got := neverRegain(cap, now)
	if *got[0].UsesRemaining != 0 || *cap[0].UsesRemaining != 2 {
		t.Fatalf("one-shot after restore: %d", *got[0].UsesRemaining)
	}
}

func TestRestoreRefusesARunningSubtree(t *testing.T) {
	var h *harness
	var restoreErr error
	var cpID string
	hook := func(h *harness, req llm.Request) {
		if req.Turn == 1 {
			_, restoreErr = h.rt.RestoreCheckpoint(cpID)
		}
	}
	h = newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
`, withHook(hook, &h))
	pid := h.spawn(nil)
	h.run()
	cp, err := h.rt.CreateCheckpoint(pid)
	if err != nil {
		t.Fatal(err)
	}
	cpID = cp.ID
	h.rt.PostHumanMessage(HumanMessage{To: pid, Body: "x"})
	h.run()
	if !errors.Is(restoreErr, ErrNotQuiescent) {
		t.Fatalf("restore during a quantum: %v", restoreErr)
	}
}

func TestCheckpointFork(t *testing.T) {
	h := newHarness(t, checkpointScript)
	one := 1
	pid := h.spawn([]capabilities.Grant{
		{Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}},
		{Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}, UsesRemaining: &one},
	})
	h.run()
	rep := forkNow(t, h, pid)
	fork := rep.PIDs[pid]
	if fork == pid || rep.RootPID != fork {
		t.Fatalf("fork report %+v", rep)
	}
	info := h.info(fork)
	orig := h.info(pid)
	if info.Status != process.Runnable || info.GoalOID == orig.GoalOID || info.Namespace != Namespace(fork) || info.ParentPID != 0 {
		t.Fatalf("fork %+v", info)
	}
	if _, p := objectPayload(t, h, fork, "notes"); p != `{"v":"a"}` {
		t.Fatalf("forked notes %s", p)
	}
	h.rt.view(func(tx *txn) error {
		r, _ := loadProc(tx, fork)
		for _, g := range r.Grants {
			if g.UsesRemaining != nil {
				t.Errorf("a one-shot grant was copied: %+v", g)
			}
		}
		if r.ResumePending != "" || r.Wait != nil {
			t.Errorf("fork keeps a pending action: %+v", r)
		}
		return nil
	})
	// The forked process's interrupted wait is answered, so its context is a
	// valid conversation; it then runs on (replay continues at its turn).
	c := contextOf(t, h, fork)
	last := c.entries[len(c.entries)-1]
	var res map[string]any
	json.Unmarshal([]byte(last.Content), &res)
	if last.Role != llm.RoleTool || res["cancelled"] != true {
		t.Fatalf("forked wait answer: %+v", last)
	}
}

func TestCheckpointKeepsPayloadsAcrossReopen(t *testing.T) {
	h := newHarness(t, checkpointScript)
	pid := h.spawn(clockGrants())
	h.run()
	cp, err := h.rt.CreateCheckpoint(pid)
	if err != nil {
		t.Fatal(err)
	}
	h.rt.Close()
	h.open("")
	if _, _, err := h.rt.ReadObject(h.info(pid).GoalOID); !errors.Is(err, objects.ErrPayloadLost) {
		t.Fatalf("goal payload after reopen: %v", err)
	}
	if _, err := h.rt.RestoreCheckpoint(cp.ID); err != nil {
		t.Fatal(err)
	}
	if _, p := objectPayload(t, h, pid, "notes"); p != `{"v":"a"}` {
		t.Fatalf("restored notes %s", p)
	}
	if _, payload, err := h.rt.ReadObject(h.info(pid).GoalOID); err != nil || string(payload) != "test goal" {
		t.Fatalf("restored goal %q %v", payload, err)
	}
}

func TestLostGoalFailsReviewClosedUntilRestated(t *testing.T) {
	script := `
processes:
  - image: coding:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:x"}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:x"}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
`
	h := newHarness(t, script, func(o *Options) { o.DisableFullIO = true })
	pid, err := h.rt.Spawn(SpawnSpec{Image: "coding:v0", Goal: "original goal"})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	h.rt.Close()
	h.open(script, func(o *Options) { o.DisableFullIO = true })
	h.rt.PostHumanMessage(HumanMessage{To: pid, From: "x", Body: "probe now"})
	h.run()
	res := h.toolResults(pid)
	probe := res[len(res)-1]
	if e, ok := probe["error"].(map[string]any); !ok || !strings.Contains(e["message"].(string), "libos goal set") {
		t.Fatalf("review with a lost goal must fail closed naming the remedy: %v", probe)
	}
	meta, err := h.rt.SetGoal(pid, "restated goal")
	if err != nil || meta.Version != 2 {
		t.Fatalf("SetGoal: %+v %v", meta, err)
	}
	h.rt.PostHumanMessage(HumanMessage{To: pid, From: "x", Body: "probe again"})
	h.run()
	res = h.toolResults(pid)
	last := res[len(res)-1]
	review, ok := last["completion_review"].(map[string]any)
	if !ok || review["goal"].(map[string]any)["version"] != 2.0 {
		t.Fatalf("review after the goal was restated: %v", last)
	}
}

func TestCheckpointToolsNeedTheirRights(t *testing.T) {
	script := `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: child}}]
      - tool_calls: [{name: checkpoint_create, arguments: {pid: "${last.pid}"}}]
      - tool_calls: [{name: checkpoint_list, arguments: {pid: 2}}]
      - tool_calls: [{name: checkpoint_restore, arguments: {checkpoint_id: "${last.result.0.id}"}}]
      - tool_calls: [{name: checkpoint_fork, arguments: {checkpoint_id: "cp-1"}}]
      - tool_calls: [{name: checkpoint_restore, arguments: {checkpoint_id: "cp-1"}}]
      - tool_calls: [{name: process_exit, arguments: {payload: "${last}"}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {}}]
`
	// One worker: the child's first quantum never overlaps the parent's
	// restore, which a running child would refuse.
	h := newHarness(t, script, func(o *Options) { o.Workers = 1 })
	all := capabilities.Grant{Resource: "checkpoint:process:*", Rights: []capabilities.Right{capabilities.Read, capabilities.Write, capabilities.Admin, capabilities.Execute}}
	pid := h.spawn([]capabilities.Grant{spawnGrant(), all})
	h.run()
	res := h.toolResults(pid)
	for i, name := range []string{"spawn", "create", "list", "restore", "fork", "restore again"} {
		if res[i]["ok"] != true {
			t.Fatalf("%s: %v", name, res[i])
		}
	}
	if h.info(pid).Status != process.Exited {
		t.Fatal("the parent must exit")
	}

	// Without the checkpoint right nothing is created.
	h2 := newHarness(t, script)
	pid2 := h2.spawn([]capabilities.Grant{spawnGrant(), {Resource: "checkpoint:process:*", Rights: []capabilities.Right{capabilities.Read}}})
	h2.run()
	res2 := h2.toolResults(pid2)
	if e, ok := res2[1]["error"].(map[string]any); !ok || e["code"] != "denied" || !strings.Contains(e["message"].(string), "checkpoint:process:2") {
		t.Fatalf("create without write: %v", res2[1])
	}
	if cps, _ := h2.rt.Checkpoints(0); len(cps) != 0 {
		t.Fatal("a denied create made a checkpoint")
	}
}
