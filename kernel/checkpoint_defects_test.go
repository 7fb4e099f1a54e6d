package kernel

import (
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

func oneCall(id, name, args string) llm.Response {
	return llm.Response{ToolCalls: []llm.ToolCall{{ID: id, Name: name, Arguments: json.RawMessage(args)}}}
}

func askClock() capabilities.Grant {
	return capabilities.Grant{ID: "ask-now", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Ask}
}

// lastResult is the last tool result pid saw.
func lastResult(t *testing.T, h *harness, pid int64) map[string]any {
	t.Helper()
	res := h.toolResults(pid)
	if len(res) == 0 {
		t.Fatalf("pid %d saw no result", pid)
	}
	return res[len(res)-1]
}

// A checkpoint taken by an approved call captures the record while that
// call runs, approval in force. Neither its restore nor its fork carries the
// approval: the next call under the same id is held for a Human again.
func TestRestoreAndForkCarryNoApproval(t *testing.T) {
	var restored atomic.Bool
	p := funcProvider(func(req llm.Request) (llm.Response, error) {
		switch {
		case req.Process.PID != 1 || restored.Load():
			return oneCall("c1", "get_current_time", `{}`), nil
		case req.Turn == 0:
			return oneCall("c1", "checkpoint_create", `{}`), nil
		}
		return oneCall("c2", "receive_process_messages", `{"sender":"human:h"}`), nil
	})
	h := newHarness(t, "", func(o *Options) { o.Provider = p })
	pid := h.spawn([]capabilities.Grant{
		{ID: "ask-cp", Resource: "checkpoint:process:*", Rights: []capabilities.Right{capabilities.Write}, Effect: capabilities.Ask},
		askClock(),
	})
	h.run()
	list, _ := h.rt.Approvals()
	if len(list) != 1 || list[0].Tool != "checkpoint_create" {
		t.Fatalf("approvals %+v", list)
	}
	if err := h.rt.Approve(ApprovalRef{PID: pid, CallID: list[0].CallID, ID: list[0].ID}); err != nil {
		t.Fatal(err)
	}
	h.run()
	cps, _ := h.rt.Checkpoints(pid)
	if len(cps) != 1 || h.info(pid).WaitingOn != process.WaitHuman {
		t.Fatalf("checkpoints %+v, %+v", cps, h.info(pid))
	}
	restored.Store(true)
	if _, err := h.rt.RestoreCheckpoint(cps[0].ID); err != nil {
		t.Fatal(err)
	}
	rep, err := h.rt.ForkCheckpoint(cps[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	h.rt.view(func(tx *txn) error {
		for _, p := range []int64{pid, rep.RootPID} {
			if r, _ := loadProc(tx, p); r.ApprovedCall != "" {
				t.Errorf("pid %d carries the approval of call %q", p, r.ApprovedCall)
			}
		}
		return nil
	})
	h.run()
	for _, p := range []int64{pid, rep.RootPID} {
		for _, r := range h.toolResults(p) {
			if r["_tool"] == "get_current_time" {
				t.Errorf("pid %d: get_current_time ran with no approval: %v", p, r)
			}
		}
		if info := h.info(p); info.WaitingOn != process.WaitApproval {
			t.Errorf("pid %d: %s on %q, want its get_current_time held for approval", p, info.Status, info.WaitingOn)
		}
	}
}

// A fork of a process whose wait ended before it resumed (a receive whose
// message arrived; an approved call not yet run) answers that call as not
// started, and the fork goes on: the message is unread in its mailbox, and
// its call under the held id asks a Human again.
func TestForkOfAWokenProcessAnswersItsCall(t *testing.T) {
	p := funcProvider(func(req llm.Request) (llm.Response, error) {
		switch {
		case req.Process.PID == 2 && req.Turn == 1:
			return oneCall("r2", "receive_process_messages", `{"sender":"human:h"}`), nil
		case req.Process.PID == 3 && req.Turn == 0:
			return oneCall("c1", "get_current_time", `{}`), nil
		case req.Process.PID == 4 && req.Turn == 1:
			return oneCall("c1", "get_current_time", `{}`), nil
		case req.Turn == 0:
			return oneCall("r1", "receive_process_messages", `{"sender":"human:h"}`), nil
		}
		return oneCall("w", "receive_process_messages", `{"sender":"human:nobody"}`), nil
	})
	h := newHarness(t, "", func(o *Options) { o.Provider = p })
	receiver := h.spawn(nil)
	h.run()
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: receiver, From: "h", Body: "the task"}); err != nil {
		t.Fatal(err)
	}
	fork := forkNow(t, h, receiver) // pid 2
	endsNotStarted(t, h, fork.RootPID)
	asker := h.spawn([]capabilities.Grant{askClock()}) // pid 3
	h.run()
	list, _ := h.rt.Approvals()
	if len(list) != 1 || list[0].PID != asker {
		t.Fatalf("approvals %+v", list)
	}
	if err := h.rt.Approve(ApprovalRef{PID: asker, CallID: list[0].CallID, ID: list[0].ID}); err != nil {
		t.Fatal(err)
	}
	forkAsker := forkNow(t, h, asker) // pid 4
	endsNotStarted(t, h, forkAsker.RootPID)
	h.run()
	if info := h.info(fork.RootPID); info.Status != process.Waiting {
		t.Fatalf("fork of the receiver: %s %q", info.Status, info.Reason)
	}
	var got []any
	for _, r := range h.toolResults(fork.RootPID) {
		if msgs, ok := r["messages"].([]any); ok {
			got = append(got, msgs...)
		}
	}
	if len(got) != 1 || got[0].(map[string]any)["body"] != "the task" {
		t.Fatalf("the fork's receive got %v, want the message unread at the checkpoint", got)
	}
	if info := h.info(forkAsker.RootPID); info.WaitingOn != process.WaitApproval {
		t.Fatalf("fork of the approved call: %s %q on %q, want its call held again", info.Status, info.Reason, info.WaitingOn)
	}
}

// endsNotStarted fails unless pid's context ends with a call answered
// as not started.
func endsNotStarted(t *testing.T, h *harness, pid int64) {
	t.Helper()
	c := contextOf(t, h, pid)
	if last := c.entries[len(c.entries)-1]; last.Role != llm.RoleTool || !strings.Contains(last.Content, `"cancelled":true`) {
		t.Fatalf("pid %d ends with %s %q, want its call answered as not started", pid, last.Role, last.Content)
	}
}

// A message unread at the checkpoint and read since is unread again after
// the restore, and the restored process receives it.
func TestRestoreBringsBackMessagesUnreadAtTheCheckpoint(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:other"}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:other"}}]
`)
	pid := h.spawn(nil)
	h.run()
	m, cp := messageThenCheckpoint(t, h, pid)
	h.run() // reads and acknowledges it
	if _, err := h.rt.RestoreCheckpoint(cp.ID); err != nil {
		t.Fatal(err)
	}
	h.rt.view(func(tx *txn) error {
		got, err := mailbox.Get(tx.Txn, pid, m.ID)
		if err != nil || got.Status != mailbox.StatusUnread {
			t.Errorf("after the restore %s is %s (%v), want unread", m.ID, got.Status, err)
		}
		if unread, _, _ := mailbox.Count(tx.Txn, pid); unread != 1 {
			t.Errorf("%d unread, want 1", unread)
		}
		return nil
	})
	h.run()
	received := 0
	for _, r := range h.toolResults(pid) {
		if ids, ok := r["acked_message_ids"].([]any); ok && len(ids) == 1 && ids[0] == m.ID {
			received++
		}
	}
	if info := h.info(pid); received != 1 || info.Wait == nil || !strings.Contains(string(info.Wait.Filter), "human:other") {
		t.Fatalf("the restored process received %s %d times and waits on %+v", m.ID, received, info.Wait)
	}
}

// A message unread at the checkpoint, announced and read since, is
// announced again to the restored process, whose context never told it.
func TestRestoreAnnouncesMessagesUnreadAtTheCheckpoint(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:other"}}]
      - tool_calls: [{name: read_process_messages, arguments: {}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:zz"}}]
`)
	pid := h.spawn(nil)
	h.run()
	m, cp := messageThenCheckpoint(t, h, pid)
	announced := func() bool {
		for _, e := range contextOf(t, h, pid).entries {
			if e.Kind == "notice" && strings.Contains(e.Content, m.ID) {
				return true
			}
		}
		return false
	}
	wake := func() {
		if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "other", Body: "wake"}); err != nil {
			t.Fatal(err)
		}
		h.run()
	}
	wake()
	if !announced() {
		t.Fatalf("%s was never announced", m.ID)
	}
	if _, err := h.rt.RestoreCheckpoint(cp.ID); err != nil {
		t.Fatal(err)
	}
	if announced() {
		t.Fatal("the restored context holds the announcement made after the checkpoint")
	}
	wake()
	if !announced() {
		t.Fatalf("%s, unread again, was not announced to the restored process", m.ID)
	}
}

// A fork names its own namespaces and Objects wherever the subtree's grants
// named the subtree's: a forked child holding its parent's namespace holds
// the forked parent's, and cannot write into the original.
func TestForkGrantsNameTheForksOwnResources(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: create_object, arguments: {name: notes, payload: "n"}}]
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: child, capabilities: [{resource: "object_namespace:proc-1", rights: [read, write]}, {resource: "object:${last.oid}", rights: [read]}, {resource: "checkpoint:process:1", rights: [read]}]}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
      - tool_calls: [{name: create_object, arguments: {namespace: "proc-1", name: "from-fork", payload: "x"}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
`, func(o *Options) { o.Workers = 1 })
	pid := h.spawn([]capabilities.Grant{spawnGrant(),
		{Resource: "object:*", Rights: []capabilities.Right{capabilities.Read}},
		{Resource: "checkpoint:process:*", Rights: []capabilities.Right{capabilities.Read}}})
	h.run()
	const child = 2
	if h.info(child).Status != process.Waiting {
		t.Fatalf("child %+v", h.info(child))
	}
	notes, _ := objectPayload(t, h, pid, "notes")
	rep := forkNow(t, h, pid)
	fparent, fchild := rep.PIDs[pid], rep.PIDs[child]
	forkNotes, _ := objectPayload(t, h, fparent, "notes")
	h.rt.view(func(tx *txn) error {
		r, err := loadProc(tx, fchild)
		if err != nil {
			return err
		}
		var got []string
		for _, g := range r.Grants {
			got = append(got, g.Resource)
		}
		all := strings.Join(got, " ")
		for _, want := range []string{"object_namespace:" + Namespace(fparent), "object:" + forkNotes.OID, "checkpoint:process:" + itoa(fparent)} {
			if !strings.Contains(all+" ", want+" ") {
				t.Errorf("the forked child's grants %v lack %s", got, want)
			}
		}
		for _, source := range []string{"object_namespace:proc-1", "object:" + notes.OID, "checkpoint:process:1"} {
			if strings.Contains(all+" ", source+" ") {
				t.Errorf("the forked child's grants %v still name the source's %s", got, source)
			}
		}
		return nil
	})
	h.run()
	metas, _ := h.rt.ObjectsOf(pid)
	for _, m := range metas {
		if m.Name == "from-fork" {
			t.Fatalf("the forked child (pid %d) created %s in the source's namespace %s", fchild, m.OID, m.Namespace)
		}
	}
	if r := lastResult(t, h, fchild); r["_tool"] != "create_object" || r["ok"] != false {
		t.Fatalf("the forked child's write into the source's namespace: %v", r)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// A call held for approval at the checkpoint and denied since never ran:
// the restore holds it for a Human again, and an approval then runs it once.
func TestRestoreHoldsADeniedCallAgain(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: get_current_time, arguments: {}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
`)
	pid := h.spawn([]capabilities.Grant{askClock()})
	h.run()
	list, _ := h.rt.Approvals()
	if len(list) != 1 {
		t.Fatalf("approvals %v", list)
	}
	cp, err := h.rt.CreateCheckpoint(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.rt.DenyApproval(ApprovalRef{PID: pid, CallID: list[0].CallID, ID: list[0].ID}, "no"); err != nil {
		t.Fatal(err)
	}
	h.run()
	if r := lastResult(t, h, pid); r["ok"] != false || r["effect_started"] != false {
		t.Fatalf("the denial: %v", r)
	}
	if _, err := h.rt.RestoreCheckpoint(cp.ID); err != nil {
		t.Fatal(err)
	}
	again, _ := h.rt.Approvals()
	if len(again) != 1 || again[0].CallID != list[0].CallID || h.toolResults(pid) != nil {
		t.Fatalf("after the restore: approvals %+v, results %v; want the call held again, unanswered", again, h.toolResults(pid))
	}
	if err := h.rt.Approve(ApprovalRef{PID: pid, CallID: again[0].CallID, ID: again[0].ID}); err != nil {
		t.Fatal(err)
	}
	h.run()
	if res := h.toolResults(pid); len(res) != 1 || res[0]["_tool"] != "get_current_time" || res[0]["ok"] != true {
		t.Fatalf("after the approval: %v", res)
	}
}

// A checkpoint taken while a compaction's compressor runs: the restore
// rewrites the context as a new version with the same entries, and the
// restored compaction completes on it.
func TestRestoreMidCompactionCompletes(t *testing.T) {
	h, pid, cpID := checkpointedMidCompaction(t)
	if _, err := h.rt.RestoreCheckpoint(cpID); err != nil {
		t.Fatal(err)
	}
	h.run()
	var results []map[string]any
	for _, r := range h.toolResults(pid) {
		if r["_tool"] == compactToolName {
			results = append(results, r)
		}
	}
	if len(results) != 1 || results[0]["compacted"] != true {
		t.Fatalf("the restored compaction: %v", results)
	}
	if c := contextOf(t, h, pid); c.entries[0].Kind != "summary" {
		t.Fatalf("the context after the restored compaction starts with %s %q", c.entries[0].Role, c.entries[0].Kind)
	}
}

// An Object whose runtime-local payload the checkpoint found lost (a reopen
// came before it) is lost again after a restore, not left with what was
// written since.
func TestRestoreLosesAPayloadTheCheckpointFoundLost(t *testing.T) {
	script := `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: create_object, arguments: {name: notes, payload: "a"}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
      - tool_calls: [{name: write_object, arguments: {oid: "${last.messages.0.body}", expected_version: 1, payload: "written after the checkpoint"}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:other"}}]
`
	h := newHarness(t, script)
	pid := h.spawn(nil)
	h.run()
	h.rt.Close()
	h.open(script)
	var oid string
	h.rt.view(func(tx *txn) error {
		m, err := tx.Lookup(Namespace(pid), "notes")
		oid = m.OID
		return err
	})
	cp, err := h.rt.CreateCheckpoint(pid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "h", Body: oid}); err != nil {
		t.Fatal(err)
	}
	h.run()
	if _, payload, err := h.rt.ReadObject(oid); err != nil || string(payload) != `"written after the checkpoint"` {
		t.Fatalf("before the restore: %q, %v", payload, err)
	}
	if _, err := h.rt.RestoreCheckpoint(cp.ID); err != nil {
		t.Fatal(err)
	}
	m, payload, err := h.rt.ReadObject(oid)
	if !errors.Is(err, objects.ErrPayloadLost) || !m.PayloadLost || payload != nil {
		t.Fatalf("after the restore: %+v %q %v, want the payload lost", m, payload, err)
	}
}

// forkNow checkpoints pid's subtree and forks the checkpoint at once.
func forkNow(t *testing.T, h *harness, pid int64) ForkReport {
	t.Helper()
	cp, err := h.rt.CreateCheckpoint(pid)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := h.rt.ForkCheckpoint(cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// A fork of a process mid-compaction holds the job as failed, not running:
// its compressor is the source's, and a running job would refuse the fork's
// own compactions as conflicting for good.
func TestForkHoldsARunningCompactionAsFailed(t *testing.T) {
	h, _, cpID := checkpointedMidCompaction(t)
	rep, err := h.rt.ForkCheckpoint(cpID)
	if err != nil {
		t.Fatal(err)
	}
	fork := rep.RootPID
	h.rt.view(func(tx *txn) error {
		r, err := loadProc(tx, fork)
		if err != nil {
			return err
		}
		_, job, err := loadJob(tx, r)
		if err != nil || job.State != "failed" || !strings.Contains(job.Error, "forked") {
			t.Fatalf("the fork's job: %+v %v", job, err)
		}
		return nil
	})
}

// checkpointedMidCompaction runs pid 1 through a one-stage compaction,
// checkpointing its subtree while the compressor's call is made, and then
// to a wait for a message that never comes; it returns the checkpoint.
func checkpointedMidCompaction(t *testing.T) (*harness, int64, string) {
	t.Helper()
	var h *harness
	var cpID atomic.Value
	hook := func(h *harness, req llm.Request) {
		if req.Process.Image == compressorImage && cpID.Load() == nil {
			cp, err := h.rt.CreateCheckpoint(1)
			if err != nil {
				t.Error(err)
			}
			cpID.Store(cp.ID)
		}
	}
	h = newHarness(t, `
processes:
  - image: base:v0
    turns:
`+chattyTurns(4)+`
      - tool_calls: [{name: compact_process_context, arguments: {target_tokens: 256, preserve_recent_entries: 2, max_chunks: 1}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: `+summaryPayload+`}}]
`, withHook(hook, &h))
	pid := h.spawn(compactionGrants())
	h.run()
	id, _ := cpID.Load().(string)
	if id == "" {
		t.Fatal("no checkpoint was taken while the compressor ran")
	}
	return h, pid, id
}

// messageThenCheckpoint posts a Human message to pid, then checkpoints its
// subtree: the message is unread at the checkpoint.
func messageThenCheckpoint(t *testing.T, h *harness, pid int64) (mailbox.Message, Checkpoint) {
	t.Helper()
	m, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "h", Body: "the task"})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := h.rt.CreateCheckpoint(pid)
	if err != nil {
		t.Fatal(err)
	}
	return m, cp
}

// A restore's state event says what the restored process waits on, as
// every other state event does.
func TestRestoreStateEventNamesTheWait(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
`)
	pid := h.spawn(nil)
	h.run()
	cp, err := h.rt.CreateCheckpoint(pid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.RestoreCheckpoint(cp.ID); err != nil {
		t.Fatal(err)
	}
	var restored Event
	h.mu.Lock()
	for _, ev := range h.events {
		if ev.Kind == EventState && strings.HasPrefix(ev.Reason, "restored from") {
			restored = ev
		}
	}
	h.mu.Unlock()
	if restored.To != string(process.Waiting) || restored.Wait != string(process.WaitHuman) {
		t.Fatalf("the restore's state event %+v, want waiting on %s", restored, process.WaitHuman)
	}
}
