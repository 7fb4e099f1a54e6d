package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/images"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
)

const approvalScript = `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: child}
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
  - image: base:v0
    turns:
      - tool_calls:
          - name: process_exit
            arguments: {message: child done}
`

// askSpawn grants spawning, but only with a Human's approval.
func askSpawn() []capabilities.Grant {
	return append(clockGrants(),
		capabilities.Grant{ID: "allow-spawn", Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}},
		capabilities.Grant{ID: "ask-spawn", Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}, Effect: capabilities.Ask})
}

func waitingApproval(t *testing.T, h *harness, pid int64) Approval {
	t.Helper()
	info := h.info(pid)
	if info.Status != process.Waiting || info.WaitingOn != process.WaitApproval {
		t.Fatalf("status %s on %q, want waiting on approval", info.Status, info.WaitingOn)
	}
	list, err := h.rt.Approvals()
	if err != nil || len(list) != 1 {
		t.Fatalf("approvals %v %v", list, err)
	}
	a := list[0]
	if a.PID != pid || a.Tool != "spawn_child_process" || a.Resource != "process:spawn" || a.GrantID != "ask-spawn" || !strings.Contains(string(a.Arguments), `"goal":"child"`) {
		t.Fatalf("approval %+v", a)
	}
	return a
}

// A call an ask grant covers waits for a Human even though an allow grant
// covers it too; the calls after it in the batch do not run. Approved, it
// runs once and the process goes on.
func TestApprovalRunsTheHeldCall(t *testing.T) {
	h := newHarness(t, approvalScript)
	pid := h.spawn(askSpawn())
	h.run()
	a := waitingApproval(t, h, pid)
	// inspect says what the Human decides: the held call's arguments and
	// the right its ask grant holds it for.
	if d, err := h.rt.Inspect(pid); err != nil || d.WaitingOn == nil || d.WaitingOn.Needs != "write on process:spawn (grant ask-spawn asks)" ||
		!strings.Contains(string(d.WaitingOn.Arguments), `"goal":"child"`) {
		t.Fatalf("inspect while held: %+v %v", d.WaitingOn, err)
	}
	res := h.toolResults(pid)
	if len(res) != 1 || res[0]["_tool"] != "get_current_time" || res[0]["cancelled"] != true {
		t.Fatalf("the batch after the held call: %v", res)
	}
	if ps, _ := h.rt.Processes(); len(ps) != 1 {
		t.Fatal("the held call ran before its approval")
	}
	if err := h.rt.Approve(ApprovalRef{PID: pid, CallID: "nonsense"}); !errors.Is(err, ErrNoApproval) || !strings.Contains(err.Error(), a.CallID) {
		t.Fatalf("approving another call: %v", err)
	}
	if err := h.rt.Approve(ApprovalRef{PID: pid, CallID: a.CallID}); err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Approve(ApprovalRef{PID: pid, CallID: a.CallID}); !errors.Is(err, ErrNoApproval) {
		t.Fatalf("approving twice: %v", err)
	}
	h.run()
	if got := h.result(pid); got["pid"] != float64(2) {
		t.Fatalf("result %v, want the spawned child", got)
	}
	if ps, _ := h.rt.Processes(); len(ps) != 2 {
		t.Fatalf("%d processes: the approved call must run exactly once", len(ps))
	}
	if list, _ := h.rt.Approvals(); len(list) != 0 {
		t.Fatalf("approvals left: %v", list)
	}
}

// Denied, the call is answered with a denied error carrying the reason and
// never runs.
func TestApprovalDenied(t *testing.T) {
	h := newHarness(t, approvalScript)
	pid := h.spawn(askSpawn())
	h.run()
	a := waitingApproval(t, h, pid)
	if err := h.rt.DenyApproval(ApprovalRef{PID: pid, CallID: a.CallID}, "not today"); err != nil {
		t.Fatal(err)
	}
	h.run()
	got := h.result(pid)
	if e, _ := got["error"].(map[string]any); got["ok"] != false || e["code"] != "denied" || !strings.Contains(e["message"].(string), "not today") {
		t.Fatalf("result %v", got)
	}
	if ps, _ := h.rt.Processes(); len(ps) != 1 {
		t.Fatal("a denied call ran")
	}
}

// An approval survives a reopen: approved after it, the call runs once.
func TestApprovalAcrossReopen(t *testing.T) {
	h := newHarness(t, approvalScript)
	pid := h.spawn(askSpawn())
	h.run()
	a := waitingApproval(t, h, pid)
	h.rt.Close()
	h.open(approvalScript)
	if got := waitingApproval(t, h, pid); got.CallID != a.CallID {
		t.Fatalf("after the reopen the pending call is %s, was %s", got.CallID, a.CallID)
	}
	if err := h.rt.Approve(ApprovalRef{PID: pid, CallID: a.CallID}); err != nil {
		t.Fatal(err)
	}
	h.run()
	if ps, _ := h.rt.Processes(); len(ps) != 2 || h.info(pid).Status != process.Exited {
		t.Fatalf("%d processes, root %s", len(ps), h.info(pid).Status)
	}
}

// An approved skill call runs its outside effect once.
func TestApprovedEffectRunsOnce(t *testing.T) {
	var runs atomic.Int32
	h := newHarness(t, `
processes:
  - image: echo:v0
    turns:
      - tool_calls:
          - name: slow_echo
            arguments: {text: approved}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
`, func(o *Options) {
		echo := effectTool(&runs, nil)
		echo.Ops = authority.RunnerOps
		invoke := echo.Invoke
		echo.Invoke = func(ctx context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			// As skill runners do: execute on each declared scope.
			if err := sys.Require(authority.ScopeUse, authority.Params{Scope: "echo"}); err != nil {
				return tools.Outcome{}, err
			}
			return invoke(ctx, sys, raw)
		}
		o.Skills = testCatalog{tools: []*tools.Tool{echo}}
		o.Images = map[string]*images.Image{"echo:v0": echoImage()}
	})
	grants := []capabilities.Grant{{ID: "ask-echo", Resource: "scope:echo", Rights: []capabilities.Right{capabilities.Execute}, Effect: capabilities.Ask}}
	pid, err := h.rt.Spawn(SpawnSpec{Image: "echo:v0", Goal: "echo", Grants: grants})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	list, _ := h.rt.Approvals()
	if len(list) != 1 || runs.Load() != 0 {
		t.Fatalf("approvals %v, effect runs %d", list, runs.Load())
	}
	if err := h.rt.Approve(ApprovalRef{PID: pid, CallID: list[0].CallID}); err != nil {
		t.Fatal(err)
	}
	h.run()
	if got := h.result(pid); got["echo"] != "approved" || runs.Load() != 1 {
		t.Fatalf("result %v after %d runs", got, runs.Load())
	}
}

// A grant that expires stops allowing at its time on the runtime clock.
func TestGrantExpiresOnTheRuntimeClock(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: sleep
            arguments: {seconds: 20}
      - tool_calls:
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
`)
	until := epoch.Add(10 * time.Second)
	grants := []capabilities.Grant{
		{ID: "now-10s", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, ExpiresAt: &until},
		{ID: "sleep", Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}},
	}
	pid := h.spawn(grants)
	h.run()
	res := h.toolResults(pid)
	if res[0]["ok"] != true {
		t.Fatalf("before expiry: %v", res[0])
	}
	if got := h.result(pid); got["ok"] != false || errorCode(got) != "denied" {
		t.Fatalf("after expiry: %v", got)
	}
}

// A grant that is not delegable cannot be handed to a child.
func TestNotDelegableGrant(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: child, capabilities: [{resource: "clock:now", rights: [read]}]}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
`)
	no := false
	pid := h.spawn([]capabilities.Grant{spawnGrant(),
		{ID: "mine", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, Delegable: &no}})
	h.run()
	got := h.result(pid)
	if errorCode(got) != "denied" || !strings.Contains(got["error"].(map[string]any)["message"].(string), "not delegable") {
		t.Fatalf("result %v", got)
	}
}

// An approval decided just before a crash is durable: the reopened runtime
// runs the approved call once.
func TestApprovalSurvivesACrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	onMem := func(fs vfs.FS) func(*Options) { return func(o *Options) { o.FS = fs } }
	h := &harness{t: t, dir: "/rt", clock: clock.NewFake(epoch, true)}
	h.open(approvalScript, onMem(mem))
	pid := h.spawn(askSpawn())
	h.run()
	a := waitingApproval(t, h, pid)
	if err := h.rt.Approve(ApprovalRef{PID: pid, CallID: a.CallID}); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	h.rt.Close()
	h.open(approvalScript, onMem(crashed))
	if list, _ := h.rt.Approvals(); len(list) != 0 {
		t.Fatalf("the approval was lost in the crash: %v", list)
	}
	h.run()
	if ps, _ := h.rt.Processes(); len(ps) != 2 || h.info(pid).Status != process.Exited {
		t.Fatalf("%d processes, root %s", len(ps), h.info(pid).Status)
	}
}

// A model may use a call id again on a later turn. A decision given with the
// hold's ID decides that hold only: repeated after the hold was answered, it
// is refused instead of deciding the later call the operator never saw.
func TestApprovalIDBindsTheDecisionToOneHold(t *testing.T) {
	spawn := func(goal string) llm.Response {
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "spawn_child_process",
			Arguments: json.RawMessage(`{"image":"base:v0","goal":"` + goal + `"}`)}}}
	}
	p := funcProvider(func(req llm.Request) (llm.Response, error) {
		if req.Process.PID != 1 {
			return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "process_exit", Arguments: json.RawMessage(`{}`)}}}, nil
		}
		switch req.Turn {
		case 0:
			return spawn("harmless"), nil
		case 1:
			return spawn("the one the operator never saw"), nil
		}
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "process_exit", Arguments: json.RawMessage(`{}`)}}}, nil
	})
	h := newHarness(t, "", func(o *Options) { o.Provider = p })
	pid := h.spawn(askSpawn())
	h.run()
	list, err := h.rt.Approvals()
	if err != nil || len(list) != 1 || list[0].ID == "" || !strings.Contains(string(list[0].Arguments), "harmless") {
		t.Fatalf("approvals %+v, %v", list, err)
	}
	seen := list[0]
	ref := ApprovalRef{PID: pid, CallID: seen.CallID, ID: seen.ID}
	if err := h.rt.Approve(ref); err != nil {
		t.Fatal(err)
	}
	h.run()
	list, _ = h.rt.Approvals()
	if len(list) != 1 || list[0].CallID != seen.CallID || list[0].ID == seen.ID {
		t.Fatalf("the second hold under the same call id: %+v", list)
	}
	err = h.rt.Approve(ref)
	if !errors.Is(err, ErrNoApproval) || !strings.Contains(err.Error(), "answered already") || !strings.Contains(err.Error(), list[0].ID) {
		t.Fatalf("a repeated decision: %v, want it refused naming the hold that waits now", err)
	}
	if err := h.rt.DenyApproval(ref, "again"); !errors.Is(err, ErrNoApproval) {
		t.Fatalf("a repeated deny: %v", err)
	}
	if ps, _ := h.rt.Processes(); len(ps) != 2 {
		t.Fatalf("%d processes: only the approved child may exist", len(ps))
	}
	// The new hold is decided with its own ID.
	if err := h.rt.DenyApproval(ApprovalRef{PID: pid, CallID: list[0].CallID, ID: list[0].ID}, "no"); err != nil {
		t.Fatal(err)
	}
}

// A deny reason the model would read is bounded and must be text: a reason
// over the bound, or not UTF-8, is refused by name and decides nothing; the
// hold still waits and takes a valid decision afterwards.
func TestDenyReasonIsBounded(t *testing.T) {
	p := funcProvider(func(req llm.Request) (llm.Response, error) {
		if req.Turn == 0 {
			return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "spawn_child_process",
				Arguments: json.RawMessage(`{"image":"base:v0","goal":"g"}`)}}}, nil
		}
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c2", Name: "process_exit", Arguments: json.RawMessage(`{}`)}}}, nil
	})
	h := newHarness(t, "", func(o *Options) { o.Provider = p })
	pid := h.spawn(askSpawn())
	h.run()
	list, err := h.rt.Approvals()
	if err != nil || len(list) != 1 {
		t.Fatalf("approvals %+v, %v", list, err)
	}
	ref := ApprovalRef{PID: pid, CallID: list[0].CallID, ID: list[0].ID}
	for _, reason := range []string{strings.Repeat("é", MaxDenyReasonChars+1), "bad \xff byte"} {
		if err := h.rt.DenyApproval(ref, reason); !errors.Is(err, ErrInvalidDecision) || !strings.Contains(err.Error(), "reason") {
			t.Fatalf("deny with a %d-byte reason: %v, want ErrInvalidDecision naming reason", len(reason), err)
		}
	}
	if list, _ := h.rt.Approvals(); len(list) != 1 || list[0].ID != ref.ID {
		t.Fatalf("after refused decisions: %+v, want the hold still waiting", list)
	}
	if err := h.rt.DenyApproval(ref, strings.Repeat("é", MaxDenyReasonChars)); err != nil {
		t.Fatalf("a reason at the bound: %v", err)
	}
}
