package kernel

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

func spawnGrant() capabilities.Grant {
	return capabilities.Grant{Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}}
}

const parentChildScript = `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: "child goal", capabilities: [{resource: "clock:now", rights: [read]}]}
      - tool_calls:
          - name: wait_child_process
            arguments: {child_pid: "${last.pid}"}
      - tool_calls:
          - name: process_exit
            arguments: {payload: {child_said: "${last.result.message}", child_status: "${last.status}"}}
  - image: base:v0
    turns:
      - tool_calls:
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: process_exit
            arguments: {message: "hello from ${process.pid}"}
`

func TestParentSpawnsWaitsAndReadsChildResult(t *testing.T) {
	h := newHarness(t, parentChildScript)
	pid := h.spawn(append(clockGrants(), spawnGrant()))
	h.run()
	got := h.result(pid)
	if got["child_said"] != "hello from 2" || got["child_status"] != "exited" {
		t.Fatalf("parent result = %v", got)
	}
	child := h.info(2)
	if child.ParentPID != pid || child.Status != process.Exited {
		t.Fatalf("child = %+v", child)
	}
	// The child's usage is charged to the parent too (process_exit is not
	// counted: the parent's own calls are the spawn and the wait).
	parent := h.info(pid)
	if parent.Used.Children != 1 || parent.Used.LLMCalls != child.Used.LLMCalls+3 || parent.Used.ToolCalls != child.Used.ToolCalls+2 {
		t.Fatalf("parent usage %+v, child usage %+v", parent.Used, child.Used)
	}
}

func TestChildCannotWiden(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: g, capabilities: [{resource: "clock:sleep", rights: [read]}]}
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: g, capabilities: [{resource: "clock:*", rights: [read]}]}
      - tool_calls:
          - name: process_exit
            arguments: {message: "${last.error.code}"}
`)
	pid := h.spawn([]capabilities.Grant{spawnGrant(), {Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}}})
	h.run()
	res := h.toolResults(pid)
	for i := 0; i < 2; i++ {
		e, ok := res[i]["error"].(map[string]any)
		if !ok || e["code"] != "denied" {
			t.Fatalf("spawn %d must be refused as widening: %v", i, res[i])
		}
	}
	if ps, _ := h.rt.Processes(); len(ps) != 1 {
		t.Fatalf("a refused spawn created a process: %d processes", len(ps))
	}
	if used := h.info(pid).Used.Children; used != 0 {
		t.Fatalf("a refused spawn charged the children budget: %d", used)
	}
}

func TestSpawnNeedsAuthority(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: g}
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: coding:v0, goal: g}
      - tool_calls:
          - name: process_exit
            arguments: {message: "${last.error.message}"}
`)
	pid := h.spawn(nil)
	h.run()
	res := h.toolResults(pid)
	if !strings.Contains(res[0]["error"].(map[string]any)["message"].(string), "process:spawn") {
		t.Fatalf("spawn without process:spawn: %v", res[0])
	}
	h2 := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: coding:v0, goal: g}
      - tool_calls:
          - name: process_exit
            arguments: {message: "${last.error.message}"}
`)
	pid2 := h2.spawn([]capabilities.Grant{spawnGrant()})
	h2.run()
	if got := h2.result(pid2)["message"].(string); !strings.Contains(got, "image:coding:v0") {
		t.Fatalf("spawning another image without read on it: %q", got)
	}
}

func TestKillParentKillsSubtree(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: child, capabilities: [{resource: "process:spawn", rights: [write]}]}
      - tool_calls:
          - name: receive_process_messages
            arguments: {sender: "process:2"}
      - tool_calls:
          - name: signal_child_process
            arguments: {child_pid: 2, signal: kill}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: grandchild}
      - tool_calls:
          - name: send_process_message
            arguments: {recipient_pid: 1, body: ready}
      - tool_calls:
          - name: receive_process_messages
            arguments: {}
  - image: base:v0
    turns:
      - tool_calls:
          - name: receive_process_messages
            arguments: {}
`)
	pid := h.spawn(append(clockGrants(), spawnGrant()))
	h.run()
	if got := h.result(pid); got["status"] != "killed" || got["child_pid"] != 2.0 {
		t.Fatalf("signal result = %v", got)
	}
	for _, p := range []int64{2, 3} {
		if info := h.info(p); info.Status != process.Killed {
			t.Fatalf("pid %d = %s (%s), want killed", p, info.Status, info.Reason)
		}
	}
}

func TestTerminalProcessKillsLiveDescendants(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: child}
      - tool_calls:
          - name: process_exit
            arguments: {message: bye}
  - image: base:v0
    turns:
      - tool_calls:
          - name: receive_process_messages
            arguments: {}
`)
	pid := h.spawn([]capabilities.Grant{spawnGrant()})
	h.run()
	h.result(pid)
	if info := h.info(2); info.Status != process.Killed || !strings.Contains(info.Reason, "ancestor pid 1") {
		t.Fatalf("child of an exited parent: %+v", info)
	}
}

func TestOnlyDirectParentMayWaitOrSignal(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: wait_child_process
            arguments: {child_pid: 1}
      - tool_calls:
          - name: signal_child_process
            arguments: {child_pid: 99, signal: kill}
      - tool_calls:
          - name: send_process_message
            arguments: {recipient_pid: 42, body: hi}
      - tool_calls:
          - name: process_exit
            arguments: {}
`)
	pid := h.spawn(nil)
	h.run()
	res := h.toolResults(pid)
	for i := 0; i < 3; i++ {
		if res[i]["error"].(map[string]any)["code"] != "denied" {
			t.Fatalf("call %d must be denied: %v", i, res[i])
		}
	}
	if st := h.info(pid).Status; st != process.Exited {
		t.Fatalf("status %s", st)
	}
}

func TestMessagesBetweenParentAndChild(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: child}
      - tool_calls:
          - name: receive_process_messages
            arguments: {sender: "process:2"}
      - tool_calls:
          - name: send_process_message
            arguments: {recipient_pid: 2, body: "thanks", correlation_id: "${last.messages.0.correlation_id}"}
      - tool_calls:
          - name: wait_child_process
            arguments: {child_pid: 2}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last.result}"}
  - image: base:v0
    turns:
      - tool_calls:
          - name: send_process_message
            arguments: {recipient_pid: 1, body: "report", subject: "done", correlation_id: "c-7"}
      - tool_calls:
          - name: receive_process_messages
            arguments: {correlation_id: "c-7"}
      - tool_calls:
          - name: process_exit
            arguments: {payload: {got: "${last.messages.0.body}", from: "${last.messages.0.sender}", acked: "${last.acked_message_ids}"}}
`)
	pid := h.spawn([]capabilities.Grant{spawnGrant()})
	h.run()
	got := h.result(pid)
	if got["got"] != "thanks" || got["from"] != "process:1" || len(got["acked"].([]any)) != 1 {
		t.Fatalf("result = %v", got)
	}
}

const gatedScript = `
processes:
  - image: coding:v0
    turns:
      - tool_calls:
          - name: process_exit
            arguments: {}
      - tool_calls:
          - name: receive_process_messages
            arguments: {sender: "human:alice"}
      - tool_calls:
          - name: process_exit
            arguments: {}
      - tool_calls:
          - name: process_exit
            arguments:
              review_token: stale-token
              completion_evidence:
                goal_oid: "${process.goal_oid}"
                reviewed_message_ids: ["${last.completion_review.acknowledged_human_message_ids.0}"]
                acceptance_checks:
                  - requirement: do the goal
                    source_refs: ["${process.goal_oid}", "${last.completion_review.acknowledged_human_message_ids.0}"]
                    status: completed
                    evidence_tool_calls: [receive_process_messages]
                    evidence_summary: read the follow-up
                final_verification: [receive_process_messages]
      - tool_calls:
          - name: process_exit
            arguments:
              review_token: "${last.completion_review.review_token}"
              message: all done
              completion_evidence:
                goal_oid: "${process.goal_oid}"
                reviewed_message_ids: ["${last.completion_review.acknowledged_human_message_ids.0}"]
                acceptance_checks:
                  - requirement: do the goal
                    source_refs: ["${process.goal_oid}", "${last.completion_review.acknowledged_human_message_ids.0}"]
                    status: completed
                    evidence_tool_calls: [receive_process_messages]
                    evidence_summary: read the follow-up from alice
                final_verification: [receive_process_messages]
`

func TestGatedExitReview(t *testing.T) {
	h := newHarness(t, gatedScript)
	pid, err := h.rt.Spawn(SpawnSpec{Image: "coding:v0", Goal: "fix the bug"})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	info := h.info(pid)
	if info.Status != process.Waiting || info.Wait.Kind != process.WaitHuman {
		t.Fatalf("after the bare probe the process waits for a Human: %+v", info)
	}
	res := h.toolResults(pid)
	first := res[0]
	if first["status"] != "completion_review_required" {
		t.Fatalf("bare probe: %v", first)
	}
	token1 := first["completion_review"].(map[string]any)["review_token"].(string)
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "alice", Body: "also update the docs"}); err != nil {
		t.Fatal(err)
	}
	h.run()
	got := h.result(pid)
	if got["message"] != "all done" {
		t.Fatalf("result = %v", got)
	}
	res = h.toolResults(pid)
	probe2 := res[2]["completion_review"].(map[string]any)
	if probe2["review_token"] == token1 || probe2["acknowledged_human_message_count"] != 1.0 {
		t.Fatalf("the ACK must change the token: %v", probe2)
	}
	stale := res[3]
	if stale["status"] != "completion_review_required" {
		t.Fatalf("a stale token must be refused: %v", stale)
	}
	errs := fmt.Sprint(stale["completion_review"].(map[string]any)["validation_errors"])
	if !strings.Contains(errs, "review_token") {
		t.Fatalf("validation errors must name the token: %s", errs)
	}
	if res[4]["status"] != "exited" {
		t.Fatalf("final submission: %v", res[4])
	}
	var stored []byte
	h.rt.view(func(tx *txn) error {
		stored, _ = tx.Get(evidenceKey(pid))
		return nil
	})
	if len(stored) == 0 {
		t.Fatal("the passing evidence is recorded with the exit")
	}
}

func TestUnreadHumanMessageBlocksExit(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: coding:v0
    turns:
      - tool_calls:
          - name: process_exit
            arguments: {}
      - tool_calls:
          - name: process_exit
            arguments: {}
`)
	pid, _ := h.rt.Spawn(SpawnSpec{Image: "coding:v0", Goal: "g"})
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "bob", Body: "wait"}); err != nil {
		t.Fatal(err)
	}
	h.run()
	res := h.toolResults(pid)
	review := res[0]["completion_review"].(map[string]any)
	if ids := review["unread_human_message_ids"].([]any); len(ids) != 1 {
		t.Fatalf("the review lists the unread message: %v", review)
	}
	if st := h.info(pid).Status; st == process.Exited {
		t.Fatal("a gated process exited with an unread Human message")
	}
}

func TestPostValidationChangesNothing(t *testing.T) {
	h := newHarness(t, "")
	pid := h.spawn(nil)
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, Body: strings.Repeat("x", 32001)}); err == nil {
		t.Fatal("an oversized body must be refused")
	}
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: 99, Body: "hi"}); err == nil {
		t.Fatal("posting to a missing process must fail")
	}
	h.rt.view(func(tx *txn) error {
		unread, total, err := mailbox.Count(tx.Txn, pid)
		if err != nil || unread != 0 || total != 0 {
			t.Fatalf("refused posts left messages: %d/%d %v", unread, total, err)
		}
		return nil
	})
}

// TestReceivePostRace races a blocking receive against a concurrent post:
// the message is returned or wakes the waiter, never lost or acked twice.
func TestReceivePostRace(t *testing.T) {
	script := `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: receive_process_messages
            arguments: {}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last.acked_message_ids}"}
`
	for i := 0; i < 25; i++ {
		h := newHarness(t, script)
		pid := h.spawn(nil)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "racer", Body: "hello"}); err != nil {
				t.Error(err)
			}
		}()
		// Run concurrently with the post; if the post lands after the run went
		// idle, run again: the wake is durable.
		if err := h.rt.RunUntilIdle(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		h.run()
		got := h.info(pid)
		if got.Status != process.Exited {
			t.Fatalf("iteration %d: %+v", i, got)
		}
		h.rt.view(func(tx *txn) error {
			unread, total, _ := mailbox.Count(tx.Txn, pid)
			if unread != 0 || total != 1 {
				t.Errorf("iteration %d: unread %d total %d", i, unread, total)
			}
			return nil
		})
		h.rt.Close()
	}
}

func TestPauseAndResumeChild(t *testing.T) {
	// Whether the child blocks on its receive before or after the pause, it
	// is paused when the parent waits, and the message sent meanwhile does
	// not make it run.
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: child}}]
      - tool_calls: [{name: signal_child_process, arguments: {child_pid: 2, signal: pause}}]
      - tool_calls: [{name: send_process_message, arguments: {recipient_pid: 2, body: go}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
      - tool_calls: [{name: signal_child_process, arguments: {child_pid: 2, signal: resume}}]
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: 2}}]
      - tool_calls: [{name: process_exit, arguments: {payload: "${last.status}"}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {message: "${last.messages.0.body}"}}]
`)
	pid := h.spawn(append(clockGrants(), spawnGrant()))
	h.run()
	child := h.info(2)
	if child.Status != process.Paused || child.Turn > 1 {
		t.Fatalf("a paused child runs no quantum: %+v", child)
	}
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "h", Body: "resume it"}); err != nil {
		t.Fatal(err)
	}
	h.run()
	if got := h.info(pid); got.Status != process.Exited {
		t.Fatalf("parent %+v", got)
	}
	if child := h.info(2); child.Status != process.Exited {
		t.Fatalf("resumed child %+v", child)
	}
}

// runWithMessageDuringTurn1 runs a process whose second response holds two
// create_object calls, posting m while the model produces that response;
// rest is the rest of its turns.
func runWithMessageDuringTurn1(t *testing.T, m HumanMessage, rest string) (*harness, int64) {
	t.Helper()
	var h *harness
	var once sync.Once
	hook := func(h *harness, req llm.Request) {
		if req.Turn == 1 {
			once.Do(func() {
				m.To = req.Process.PID
				if _, err := h.rt.PostHumanMessage(m); err != nil {
					panic(err)
				}
			})
		}
	}
	h = newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: get_current_time, arguments: {}}]
      - tool_calls:
          - name: create_object
            arguments: {name: a, payload: 1}
          - name: create_object
            arguments: {name: b, payload: 2}
`+rest, withHook(hook, &h))
	pid := h.spawn(clockGrants())
	h.run()
	return h, pid
}

func TestInterruptStopsTheBatch(t *testing.T) {
	h, pid := runWithMessageDuringTurn1(t, HumanMessage{From: "boss", Body: "stop everything", Interrupt: true}, `
      - tool_calls: [{name: read_process_messages, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {message: "${last.messages.0.body}"}}]
`)
	res := h.toolResults(pid)
	if res[1]["cancelled"] != true || res[2]["cancelled"] != true {
		t.Fatalf("an interrupt arriving during the model call stops the batch before its first call: %v / %v", res[1], res[2])
	}
	var delivered bool
	for _, e := range contextOf(t, h, pid).entries {
		delivered = delivered || (e.Kind == "notice" && strings.Contains(e.Content, "stop everything"))
	}
	if !delivered {
		t.Fatal("the interrupt's content must be delivered in a notice")
	}
	h.rt.view(func(tx *txn) error {
		if _, err := tx.Lookup(Namespace(pid), "a"); !errors.Is(err, objects.ErrNotFound) {
			t.Fatal("a call after the interrupt ran")
		}
		return nil
	})
	if got := h.result(pid); got["message"] != "stop everything" {
		t.Fatalf("result %v", got)
	}
}

func TestNormalMessageEndsBatchAfterACall(t *testing.T) {
	h, pid := runWithMessageDuringTurn1(t, HumanMessage{From: "ana", Body: "fyi"}, `
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
	res := h.toolResults(pid)
	if res[1]["ok"] != true || res[2]["cancelled"] != true {
		t.Fatalf("a normal message lets the current call run and ends the batch after it: %v / %v", res[1], res[2])
	}
}

// A parent reads its direct child's result through the result_oid
// wait_child_process names, with no grant on the child's namespace; a
// grandchild's result stays out of its reach, and a deny grant refuses the
// child's as any other Object.
func TestParentReadsItsChildsResult(t *testing.T) {
	script := `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: g, capabilities: [{resource: "process:spawn", rights: [write]}]}}]
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: "${last.pid}"}}]
      - tool_calls: [{name: read_object, arguments: {oid: "${last.result_oid}"}}]
      - tool_calls: [{name: read_object, arguments: {oid: "${last.payload.grandchild_result}"}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: g}}]
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: "${last.pid}"}}]
      - tool_calls: [{name: process_exit, arguments: {payload: {grandchild_result: "${last.result_oid}"}}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: {deep: true}}}]
`
	h := newHarness(t, script)
	pid := h.spawn([]capabilities.Grant{spawnGrant()})
	h.run()
	res := h.toolResults(pid)
	if len(res) < 4 {
		t.Fatalf("results %v", res)
	}
	if res[2]["ok"] != true || !strings.Contains(fmt.Sprint(res[2]["payload"]), "grandchild_result") {
		t.Fatalf("the child's result: %v", res[2])
	}
	if res[3]["ok"] != false {
		t.Fatalf("the grandchild's result read by its grandparent: %v", res[3])
	}
	d, err := h.rt.Inspect(pid)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range d.RecentCalls {
		if c.Name == "read_object" && c.OK && fmt.Sprint(c.Authority) == "[allowed: the result of direct child pid 2]" {
			found = true
		}
	}
	if !found {
		t.Fatalf("no read_object allowed by the rule in %+v", d.RecentCalls)
	}

	h2 := newHarness(t, script)
	pid2 := h2.spawn([]capabilities.Grant{spawnGrant(), {ID: "no-child-data", Resource: "object_namespace:proc-2", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Deny}})
	h2.run()
	if res := h2.toolResults(pid2); len(res) < 3 || res[2]["ok"] != false {
		t.Fatalf("a deny grant on the child's namespace: %v", res)
	}
}
