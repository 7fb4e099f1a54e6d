package kernel

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

const inspectScript = `
processes:
  - image: base:v0
    turns:
      - text: "reading the clock first"
        tool_calls: [{name: get_current_time, arguments: {timezone: UTC}}]
      - tool_calls:
          - {name: send_process_message, arguments: {recipient_pid: 1, body: "a note to self"}}
          - {name: read_process_messages, arguments: {ack: true}}
      - tool_calls: [{name: process_exit, arguments: {payload: {done: true}}}]
`

// inspectRun runs one process through a clock read, a message to itself
// read with an ACK, and an exit.
func inspectRun(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, inspectScript)
	if pid := h.spawn(clockGrants()); pid != 1 {
		t.Fatalf("pid %d", pid)
	}
	h.run()
	return h
}

func TestInspectShowsAFinishedProcess(t *testing.T) {
	h := inspectRun(t)
	d, err := h.rt.Inspect(1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != process.Exited || d.ParentPID != nil || d.Image != "base:v0" || d.Turn != 3 || d.WaitingOn != nil {
		t.Fatalf("detail %+v", d)
	}
	if string(d.Result) != `{"done":true}` || d.ResultError != "" || d.ResultOID == "" {
		t.Fatalf("result %s (%s)", d.Result, d.ResultError)
	}
	if d.Goal.OID == "" || d.Goal.Version != 1 || d.Context.OID == "" || d.Context.Entries == 0 || d.Context.EstimatedTokens == 0 {
		t.Fatalf("goal %+v context %+v", d.Goal, d.Context)
	}
	if b := d.Budgets[capabilities.BudgetToolCalls]; b.Used != 3 || b.Limit == 0 {
		t.Fatalf("tool_calls budget %+v (process_exit is not charged)", b)
	}
	if len(d.Budgets) != 5 {
		t.Fatalf("budgets %+v", d.Budgets)
	}
	var clockGrant *GrantView
	for i, g := range d.Grants {
		if g.Resource == "clock:now" {
			clockGrant = &d.Grants[i]
		}
	}
	if clockGrant == nil || !clockGrant.Delegable || clockGrant.Effect != capabilities.Allow || clockGrant.ID == "" {
		t.Fatalf("grants %+v", d.Grants)
	}
	var names []string
	for _, c := range d.RecentCalls {
		names = append(names, c.Name)
		if !c.OK || c.CallID == "" || len(c.Arguments) == 0 {
			t.Errorf("call %+v", c)
		}
	}
	if want := []string{"get_current_time", "send_process_message", "read_process_messages", "process_exit"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("recent calls %v, want %v", names, want)
	}
	if got := string(d.RecentCalls[0].Arguments); got != `{"timezone":"UTC"}` {
		t.Fatalf("arguments of the clock call %s", got)
	}
	if _, err := h.rt.Inspect(99); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("unknown pid: %v", err)
	}
}

func TestInspectKeepsTheLastCalls(t *testing.T) {
	var turns strings.Builder
	for range RecentCalls + 5 {
		turns.WriteString("      - tool_calls: [{name: get_current_time, arguments: {}}]\n")
	}
	h := newHarness(t, "processes:\n  - image: base:v0\n    turns:\n"+turns.String()+
		"      - tool_calls: [{name: process_exit, arguments: {message: done}}]\n")
	pid := h.spawn(clockGrants())
	h.run()
	d, err := h.rt.Inspect(pid)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.RecentCalls) != RecentCalls || d.RecentCalls[RecentCalls-1].Name != "process_exit" || d.RecentCalls[0].Turn != 6 {
		t.Fatalf("recent calls: %d, first %+v", len(d.RecentCalls), d.RecentCalls[0])
	}
}

func TestEventLogTypesAndPaging(t *testing.T) {
	h := inspectRun(t)
	page, err := h.rt.EventLog(EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if page.More || len(page.Entries) == 0 {
		t.Fatalf("page more=%v entries=%d", page.More, len(page.Entries))
	}
	types := map[string]int{}
	var actions []string
	for i, l := range page.Entries {
		types[l.Type]++
		if i > 0 && l.Seq < page.Entries[i-1].Seq {
			t.Fatalf("entries out of commit order at %d", i)
		}
		if l.PID != 1 || l.Time.IsZero() {
			t.Fatalf("entry %+v", l)
		}
		switch l.Type {
		case LogToolCall:
			if l.Name == "get_current_time" && string(l.Arguments) != `{"timezone":"UTC"}` {
				t.Fatalf("tool_call arguments %s", l.Arguments)
			}
		case LogToolResult:
			if len(l.Result) == 0 || l.OK == nil || l.Turn == nil {
				t.Fatalf("tool_result %+v", l)
			}
		case LogProviderCall:
			if l.Detail["attempt"] == nil || l.Detail["outcome"] == nil || l.Detail["latency_ms"] == nil || l.Detail["completion_tokens"] == nil {
				t.Fatalf("provider_call %+v", l.Detail)
			}
		case LogModelOutput:
			if l.Text != "reading the clock first" {
				t.Fatalf("model_output %q", l.Text)
			}
		case LogMessage:
			var a string
			json.Unmarshal(l.Detail["action"], &a)
			actions = append(actions, a)
		}
	}
	for _, want := range []string{LogSpawned, LogState, LogQuantum, LogProviderCall, LogModelOutput, LogToolCall, LogToolResult, LogMessage} {
		if types[want] == 0 {
			t.Errorf("no %s entry: %v", want, types)
		}
	}
	if !reflect.DeepEqual(actions, []string{"posted", "read_acked"}) {
		t.Fatalf("message actions %v", actions)
	}

	// Pages of three cover the log exactly once.
	var paged []LogEntry
	for after := uint64(0); ; {
		p, err := h.rt.EventLog(EventQuery{After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		paged = append(paged, p.Entries...)
		if !p.More {
			break
		}
		if p.LastSeq <= after {
			t.Fatalf("paging does not advance from %d", after)
		}
		after = p.LastSeq
	}
	if len(paged) != len(page.Entries) {
		t.Fatalf("paged %d entries, one page %d", len(paged), len(page.Entries))
	}
	if other, err := h.rt.EventLog(EventQuery{PID: 2}); err != nil || len(other.Entries) != 0 || other.LastSeq != page.LastSeq {
		t.Fatalf("another pid's log: %+v %v", other, err)
	}
	if late, err := h.rt.EventLog(EventQuery{After: page.LastSeq}); err != nil || len(late.Entries) != 0 {
		t.Fatalf("after the end: %+v %v", late, err)
	}
}

func TestLogEntryJSONKeepsItsDetail(t *testing.T) {
	turn := 2
	l := LogEntry{Seq: 7, PID: 3, Type: LogProviderCall, Turn: &turn, Detail: map[string]json.RawMessage{"attempt": json.RawMessage("1"), "outcome": json.RawMessage(`"completed"`)}}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"seq":7,`) || !strings.Contains(string(b), `"attempt":1`) || strings.Contains(string(b), "detail") {
		t.Fatalf("json %s", b)
	}
	var back LogEntry
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Seq != 7 || *back.Turn != 2 || string(back.Detail["outcome"]) != `"completed"` || len(back.Detail) != 2 {
		t.Fatalf("back %+v", back)
	}
}

func TestReadViewsOfAProcess(t *testing.T) {
	h := inspectRun(t)
	msgs, err := h.rt.Messages(1, false)
	if err != nil || len(msgs.Messages) != 0 || msgs.Total != 1 {
		t.Fatalf("unread: %+v %v", msgs, err)
	}
	msgs, err = h.rt.Messages(1, true)
	if err != nil || len(msgs.Messages) != 1 || msgs.Messages[0].Body != "a note to self" {
		t.Fatalf("all: %+v %v", msgs, err)
	}
	g, err := h.rt.GoalOf(1)
	if err != nil || g.Text != "test goal" || g.Version != 1 || g.Recovered {
		t.Fatalf("goal %+v %v", g, err)
	}
	c, err := h.rt.ContextOf(1)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Messages) < 3 || c.Messages[0].Role != "system" || !strings.Contains(c.Messages[0].Content, "pid 1") ||
		c.Messages[1].Content != "Goal:\ntest goal" || c.Messages[2].Content != "reading the clock first" {
		t.Fatalf("context %+v", c.Messages)
	}
	metas, err := h.rt.ObjectsOf(1)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, m := range metas {
		kinds[m.Kind] = m.OID
	}
	if kinds["goal"] == "" || kinds["llm_context"] == "" || kinds["result"] == "" {
		t.Fatalf("objects %+v", metas)
	}
	v, err := h.rt.ObjectByID(kinds["result"])
	if err != nil || string(v.Payload) != `{"done":true}` || v.PayloadError != "" {
		t.Fatalf("result object %+v %v", v, err)
	}
	if _, err := h.rt.ObjectByID("no-such-object"); !errors.Is(err, objects.ErrNotFound) && !errors.Is(err, objects.ErrInvalid) {
		t.Fatalf("unknown oid: %v", err)
	}
	for name, f := range map[string]func() error{
		"messages": func() error { _, err := h.rt.Messages(42, true); return err },
		"goal":     func() error { _, err := h.rt.GoalOf(42); return err },
		"context":  func() error { _, err := h.rt.ContextOf(42); return err },
		"objects":  func() error { _, err := h.rt.ObjectsOf(42); return err },
	} {
		if err := f(); !errors.Is(err, ErrNoProcess) || !strings.Contains(err.Error(), "42") {
			t.Errorf("%s of an unknown pid: %v", name, err)
		}
	}
}

func TestReadViewsAfterAReopen(t *testing.T) {
	h := inspectRun(t)
	h.rt.Close()
	ro, err := Open(h.dir, Options{ReadOnly: true, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	g, err := ro.GoalOf(1)
	if err != nil || g.Text != "test goal" || !g.Recovered {
		t.Fatalf("goal after a reopen: %+v %v", g, err)
	}
	d, err := ro.Inspect(1)
	if err != nil || !d.Context.Rebuilt || d.Context.Entries == 0 || len(d.RecentCalls) != 4 {
		t.Fatalf("inspect after a reopen: %+v %v", d, err)
	}
	if c, err := ro.ContextOf(1); err != nil || len(c.Messages) < 3 {
		t.Fatalf("context after a reopen: %+v %v", c, err)
	}
	if page, err := ro.EventLog(EventQuery{PID: 1}); err != nil || len(page.Entries) == 0 {
		t.Fatalf("log read-only: %v", err)
	}
	// The goal Object's payload is runtime-local: lost, and said so.
	v, err := ro.ObjectByID(d.Goal.OID)
	if err != nil || v.PayloadError == "" || v.Payload != nil || !v.Meta.PayloadLost {
		t.Fatalf("lost payload %+v %v", v, err)
	}
	if _, err := ro.Signal(1, SignalPause); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("a signal on a read-only runtime: %v", err)
	}
}

const signalScript = `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: "wait", capabilities: [{resource: "clock:sleep", rights: [read]}]}
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:x"}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:x"}}]
`

func TestHostSignals(t *testing.T) {
	h := newHarness(t, signalScript)
	root := h.spawn(append(clockGrants(), capabilities.Grant{Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}}))
	h.run()
	if h.info(2).Status != process.Waiting || h.info(root).Status != process.Waiting {
		t.Fatalf("setup: %+v %+v", h.info(root), h.info(2))
	}
	rep, err := h.rt.Signal(2, SignalPause)
	if err != nil || !rep.Changed || len(rep.Processes) != 1 || rep.Processes[0].Status != process.Paused {
		t.Fatalf("pause: %+v %v", rep, err)
	}
	if rep, err = h.rt.Signal(2, SignalPause); err != nil || rep.Changed {
		t.Fatalf("a second pause changes nothing: %+v %v", rep, err)
	}
	if rep, err = h.rt.Signal(2, SignalContinue); err != nil || !rep.Changed || rep.Processes[0].Status != process.Waiting {
		t.Fatalf("continue: %+v %v", rep, err)
	}
	if _, err := h.rt.Signal(2, "stop"); !errors.Is(err, ErrBadSignal) || !strings.Contains(err.Error(), `"stop"`) {
		t.Fatalf("unknown signal: %v", err)
	}
	if _, err := h.rt.Signal(9, SignalKill); !errors.Is(err, ErrNoProcess) {
		t.Fatalf("unknown pid: %v", err)
	}
	rep, err = h.rt.Signal(root, SignalKill)
	if err != nil || !rep.Changed || len(rep.Processes) != 2 {
		t.Fatalf("kill: %+v %v", rep, err)
	}
	for _, p := range rep.Processes {
		if p.Status != process.Killed {
			t.Fatalf("kill leaves %+v", rep.Processes)
		}
	}
	if rep, err = h.rt.Signal(root, SignalKill); err != nil || rep.Changed {
		t.Fatalf("killing the dead: %+v %v", rep, err)
	}
}
