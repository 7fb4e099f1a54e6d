package kernel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/images"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

// effectTool is a skill tool whose outside effect counts its runs and calls
// during, when set, while it runs.
func effectTool(runs *atomic.Int32, during func()) *tools.Tool {
	return &tools.Tool{
		Name:   "slow_echo",
		Schema: schema.Object(map[string]*schema.Schema{"text": {Type: "string"}}, "text"),
		Scopes: []string{"echo"},
		Invoke: func(_ context.Context, _ tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			var args struct{ Text string }
			if err := json.Unmarshal(raw, &args); err != nil {
				return tools.Outcome{}, err
			}
			return tools.Outcome{Effect: func(context.Context) (map[string]any, error) {
				runs.Add(1)
				if during != nil {
					during()
				}
				return map[string]any{"echo": args.Text}, nil
			}}, nil
		},
	}
}

func echoImage() *images.Image {
	return &images.Image{Name: "echo", Version: "v0", SystemPrompt: "test", Tools: []string{images.BuiltinTools, "slow_echo"},
		CompletionGate: images.GateOnePhase, ToolProjection: images.ProjectionAll}
}

// A call refused before it starts, then a call with an outside effect in the
// same batch: the effect's result is recorded and the process goes on.
const refusedThenEffectScript = `
processes:
  - image: echo:v0
    turns:
      - tool_calls:
          - name: get_current_time
            arguments: {timezone: Not/AZone}
          - name: slow_echo
            arguments: {text: hello}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
`

func TestRefusedCallThenEffectInOneBatch(t *testing.T) {
	var runs atomic.Int32
	h := newHarness(t, refusedThenEffectScript, func(o *Options) {
		o.Skills = testCatalog{tools: []*tools.Tool{effectTool(&runs, nil)}}
		o.Images = map[string]*images.Image{"echo:v0": echoImage()}
	})
	pid, err := h.rt.Spawn(SpawnSpec{Image: "echo:v0", Goal: "echo", Grants: clockGrants()})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	if got := h.result(pid); got["echo"] != "hello" {
		t.Fatalf("result %v, want the effect's result", got)
	}
	res := h.toolResults(pid)
	if len(res) != 3 || res[0]["ok"] != false || res[1]["echo"] != "hello" {
		t.Fatalf("tool results %v", res)
	}
	if runs.Load() != 1 {
		t.Fatalf("effect ran %d times", runs.Load())
	}
}

// effectOn is the options of a runtime on fs whose echo:v0 image has
// effectTool, counting its runs and calling during while it runs.
func effectOn(fs vfs.FS, runs *atomic.Int32, during func()) func(*Options) {
	return func(o *Options) {
		o.FS = fs
		o.Skills = testCatalog{tools: []*tools.Tool{effectTool(runs, during)}}
		o.Images = map[string]*images.Image{"echo:v0": echoImage()}
	}
}

// effectCrash runs script's echo:v0 process in h, on a crashable file
// system, and crashes while its outside effect runs (after during, when
// set); it then reopens h's runtime on what the crash left. with adds
// options to both opens. It returns the process and the effect's runs.
func effectCrash(t *testing.T, h *harness, script string, during func(pid int64), with func(*Options)) (int64, *atomic.Int32) {
	t.Helper()
	mem := vfs.NewCrashableMem()
	var crashed *vfs.MemFS
	var runs atomic.Int32
	var pid int64
	opts := func(fs vfs.FS, during func()) func(*Options) {
		return func(o *Options) {
			effectOn(fs, &runs, during)(o)
			if with != nil {
				with(o)
			}
		}
	}
	h.open(script, opts(mem, func() {
		if during != nil {
			during(pid)
		}
		crashed = mem.CrashClone(vfs.CrashCloneCfg{})
	}))
	var err error
	if pid, err = h.rt.Spawn(SpawnSpec{Image: "echo:v0", Goal: "echo", Grants: clockGrants()}); err != nil {
		t.Fatal(err)
	}
	h.run()
	h.rt.Close()
	if crashed == nil {
		t.Fatal("the effect never ran")
	}
	h.open(script, opts(crashed, nil))
	return pid, &runs
}

// The crash variant: the runtime dies while the effect runs. The reopened
// runtime answers the call as settlement_unknown, never re-runs it, and the
// refused call keeps its single answer.
func TestRefusedCallThenEffectCrash(t *testing.T) {
	h := &harness{t: t, dir: t.TempDir(), clock: clock.NewFake(epoch, true)}
	pid, runs := effectCrash(t, h, refusedThenEffectScript, nil, nil)
	h.run()
	if info := h.info(pid); info.Status != process.Exited {
		t.Fatalf("after reopen: %s (%s)", info.Status, info.Reason)
	}
	res := h.toolResults(pid)
	if len(res) != 3 || res[0]["ok"] != false {
		t.Fatalf("tool results %v", res)
	}
	if e, _ := res[1]["error"].(map[string]any); e["code"] != tools.CodeSettlementUnknown || res[1]["effect_started"] != true {
		t.Fatalf("effect call after the crash: %v", res[1])
	}
	if runs.Load() != 1 {
		t.Fatalf("effect ran %d times", runs.Load())
	}
}

// A process killed while its outside effect runs, then a crash before the
// effect's result is recorded: the reopened runtime answers the call as
// settlement_unknown on the killed process, never re-runs it, and keeps it
// killed; it does so without the process's image, which the Host no longer
// configures.
func TestKilledDuringEffectThenCrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var crashed *vfs.MemFS
	var runs atomic.Int32
	var pid int64
	h := &harness{t: t, dir: t.TempDir(), clock: clock.NewFake(epoch, true)}
	h.open(refusedThenEffectScript, effectOn(mem, &runs, func() {
		if err := h.rt.Kill(pid, "host"); err != nil {
			t.Error(err)
		}
		crashed = mem.CrashClone(vfs.CrashCloneCfg{})
	}))
	var err error
	pid, err = h.rt.Spawn(SpawnSpec{Image: "echo:v0", Goal: "echo", Grants: clockGrants()})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	h.rt.Close()
	if crashed == nil {
		t.Fatal("the effect never ran")
	}
	h.open(refusedThenEffectScript, func(o *Options) { o.FS = crashed })
	h.run()
	if info := h.info(pid); info.Status != process.Killed {
		t.Fatalf("after reopen: %s (%s), want killed", info.Status, info.Reason)
	}
	res := h.toolResults(pid)
	if len(res) != 2 {
		t.Fatalf("tool results %v, want the refused call's and the effect's", res)
	}
	if e, _ := res[1]["error"].(map[string]any); e["code"] != tools.CodeSettlementUnknown || res[1]["effect_started"] != true {
		t.Fatalf("effect call after the crash: %v", res[1])
	}
	if runs.Load() != 1 {
		t.Fatalf("effect ran %d times", runs.Load())
	}
	if live := livePIDs(t, h); len(live) != 0 {
		t.Fatalf("live index after recovery: %v, want the killed process gone from it", live)
	}
}

// A process killed while its outside effect runs, then checkpointed and
// restored (or forked) before the effect returns: the restored process (or
// the fork) has the call answered as started with an unknown settlement, as
// a crash would, and the effect's late result changes nothing.
func TestRestoreOfAProcessKilledDuringItsEffect(t *testing.T) {
	for _, fork := range []bool{false, true} {
		var runs atomic.Int32
		var pid, answered int64
		var h *harness
		h = newHarness(t, refusedThenEffectScript, func(o *Options) {
			o.Skills = testCatalog{tools: []*tools.Tool{effectTool(&runs, func() {
				if err := h.rt.Kill(pid, "host"); err != nil {
					t.Error(err)
				}
				cp, err := h.rt.CreateCheckpoint(pid)
				if err != nil {
					t.Error(err)
					return
				}
				if !fork {
					answered = pid
					_, err = h.rt.RestoreCheckpoint(cp.ID)
				} else {
					var rep ForkReport
					rep, err = h.rt.ForkCheckpoint(cp.ID)
					answered = rep.PIDs[pid]
				}
				if err != nil {
					t.Error(err)
				}
			})}}
			o.Images = map[string]*images.Image{"echo:v0": echoImage()}
		})
		var err error
		pid, err = h.rt.Spawn(SpawnSpec{Image: "echo:v0", Goal: "echo", Grants: clockGrants()})
		if err != nil {
			t.Fatal(err)
		}
		h.run()
		res := h.toolResults(answered)
		if len(res) < 2 {
			t.Fatalf("fork %v: pid %d's tool results %v: the effect ran %d times and its call must be answered", fork, answered, res, runs.Load())
		}
		if e, _ := res[1]["error"].(map[string]any); e["code"] != tools.CodeSettlementUnknown || res[1]["effect_started"] != true {
			t.Fatalf("fork %v: the effect call after the checkpoint: %v", fork, res[1])
		}
	}
}

// A refused wait started nothing, so it does not end the batch: the calls
// after it run.
func TestRefusedWaitDoesNotEndBatch(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: sleep
            arguments: {seconds: 5}
          - name: wait_child_process
            arguments: {child_pid: 99}
          - name: sleep
            arguments: {seconds: -1}
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
`)
	// clock:now only: the first sleep has no authority.
	pid := h.spawn(clockGrants()[:1])
	h.run()
	res := h.toolResults(pid)
	if len(res) != 5 {
		t.Fatalf("tool results %v", res)
	}
	for i, code := range []string{"denied", "", "invalid_arguments"} {
		if res[i]["ok"] != false || res[i]["effect_started"] != false || (code != "" && errorCode(res[i]) != code) {
			t.Fatalf("call %d: %v", i, res[i])
		}
	}
	if got := h.result(pid); got["timezone"] != "UTC" {
		t.Fatalf("the call after refused waits did not run: %v", got)
	}
	if !h.clock.Now().Equal(epoch) {
		t.Fatalf("a refused sleep waited: clock at %v", h.clock.Now())
	}
}

// process_exit is never refused for the tool-call budget: a process that
// spent its last tool call can still report its result.
func TestExitAtToolCallBudget(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last.timezone}"}
`)
	pid, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", Grants: clockGrants(), Budget: capabilities.Budget{ToolCalls: 1}})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	info := h.info(pid)
	if info.Status != process.Exited {
		t.Fatalf("status %s (%s), want exited", info.Status, info.Reason)
	}
	if info.Used.ToolCalls != 1 {
		t.Fatalf("tool calls used %d, want 1 (process_exit is not counted)", info.Used.ToolCalls)
	}
}

// With retention off, a reopen loses the history; a result produced after
// the reopen (a blocking receive answered by a new message) still reaches
// the model as a tool result of its call.
func TestResultAfterReopenWithoutRetentionReachesModel(t *testing.T) {
	const script = `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: receive_process_messages
            arguments: {block: true}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last.messages.0.body}"}
`
	noRetention := func(o *Options) { o.DisableFullIO = true }
	h := newHarness(t, script, noRetention)
	pid := h.spawn(nil)
	h.run()
	if st := h.info(pid).Status; st != process.Waiting {
		t.Fatalf("status %s, want waiting on the receive", st)
	}
	h.rt.Close()
	h.open(script, noRetention)
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "ana", Body: "after the reopen"}); err != nil {
		t.Fatal(err)
	}
	h.run()
	info := h.info(pid)
	if info.Status != process.Exited {
		t.Fatalf("status %s (%s), want exited", info.Status, info.Reason)
	}
	var got string
	if _, payload, err := h.rt.ReadObject(info.ResultOID); err != nil || json.Unmarshal(payload, &got) != nil || got != "after the reopen" {
		t.Fatalf("result %q (%v)", payload, err)
	}
}

// funcProvider answers each request with a function of it.
type funcProvider func(req llm.Request) (llm.Response, error)

func (funcProvider) Name() string { return "func" }
func (f funcProvider) Complete(_ context.Context, req llm.Request) (llm.Response, error) {
	return f(req)
}

// A refused 10 MiB argument does not stay in the context: the next request
// carries a short description of it, and the process goes on.
func TestRefusedOversizedArgumentIsTruncated(t *testing.T) {
	huge, _ := json.Marshal(map[string]string{"timezone": strings.Repeat("x", 10<<20)})
	var lastRequestBytes int
	p := funcProvider(func(req llm.Request) (llm.Response, error) {
		b, _ := json.Marshal(req.Messages)
		lastRequestBytes = len(b)
		if req.Turn == 0 {
			return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "get_current_time", Arguments: huge}}}, nil
		}
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c2", Name: "process_exit", Arguments: json.RawMessage(`{"message":"done"}`)}}}, nil
	})
	h := newHarness(t, "", func(o *Options) { o.Provider = p })
	pid := h.spawn(clockGrants())
	h.run()
	if info := h.info(pid); info.Status != process.Exited {
		t.Fatalf("status %s (%s), want exited", info.Status, info.Reason)
	}
	if lastRequestBytes > 64<<10 {
		t.Fatalf("the second request is %d bytes: the refused argument stayed in the context", lastRequestBytes)
	}
	res := h.toolResults(pid)
	if errorCode(res[0]) != tools.CodeInvalidArguments {
		t.Fatalf("the oversized call: %v", res[0])
	}
}

// A killed process's sleep timer does not keep an otherwise idle runtime
// running: with a clock that never moves on its own, RunUntilIdle returns
// as soon as the root has exited.
func TestKilledSleeperDoesNotHoldTheRun(t *testing.T) {
	const script = `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: sleep, capabilities: [{resource: "clock:sleep", rights: [read]}]}
      - tool_calls:
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: signal_child_process
            arguments: {child_pid: 2, signal: kill}
          - name: process_exit
            arguments: {message: done}
  - image: base:v0
    turns:
      - tool_calls:
          - name: sleep
            arguments: {seconds: 60}
`
	h := &harness{t: t, dir: t.TempDir(), clock: clock.NewFake(epoch, false)}
	h.open(script)
	pid := h.spawn(append(clockGrants(), spawnGrant()))
	done := make(chan error, 1)
	go func() { done <- h.rt.RunUntilIdle(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("RunUntilIdle still runs for the killed child's timer")
	}
	if st := h.info(pid).Status; st != process.Exited {
		t.Fatalf("root %s", st)
	}
	if st := h.info(2).Status; st != process.Killed {
		t.Fatalf("child %s", st)
	}
}

// A checkpoint a process creates in the same batch as an outside effect
// holds that effect's result: restoring it never answers the effect again
// as not started.
func TestCheckpointInABatchHoldsTheEffectResult(t *testing.T) {
	const script = `
processes:
  - image: echo:v0
    turns:
      - tool_calls:
          - name: slow_echo
            arguments: {text: hello}
          - name: checkpoint_create
            arguments: {}
      - tool_calls:
          - name: receive_process_messages
            arguments: {block: true}
      - tool_calls:
          - name: process_exit
            arguments: {message: done}
`
	var runs atomic.Int32
	h := newHarness(t, script, func(o *Options) {
		o.Skills = testCatalog{tools: []*tools.Tool{effectTool(&runs, nil)}}
		o.Images = map[string]*images.Image{"echo:v0": echoImage()}
	})
	grants := append(clockGrants(), capabilities.Grant{Resource: "checkpoint:process:1", Rights: []capabilities.Right{capabilities.Write}})
	pid, err := h.rt.Spawn(SpawnSpec{Image: "echo:v0", Goal: "echo", Grants: grants})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	cps, err := h.rt.Checkpoints(pid)
	if err != nil || len(cps) != 1 {
		t.Fatalf("checkpoints %v %v", cps, err)
	}
	if _, err := h.rt.RestoreCheckpoint(cps[0].ID); err != nil {
		t.Fatal(err)
	}
	echoes := 0
	for _, res := range h.toolResults(pid) {
		if res["_tool"] == "slow_echo" {
			echoes++
			if res["echo"] != "hello" {
				t.Fatalf("after the restore the effect reads %v", res)
			}
		}
	}
	if echoes != 1 || runs.Load() != 1 {
		t.Fatalf("the effect was answered %d times and ran %d times", echoes, runs.Load())
	}
}

// A goal the Host restates between two calls is the goal of the next call,
// though the calls before it reused the goal they read.
func TestRestatedGoalReachesTheNextCall(t *testing.T) {
	var goals []string
	var h *harness
	var pid int64
	p := funcProvider(func(req llm.Request) (llm.Response, error) {
		goals = append(goals, req.Messages[1].Content)
		switch req.Turn {
		case 0:
		case 1:
			if _, err := h.rt.SetGoal(pid, "second"); err != nil {
				return llm.Response{}, err
			}
		default:
			return llm.Response{ToolCalls: []llm.ToolCall{{ID: "x", Name: "process_exit", Arguments: json.RawMessage(`{}`)}}}, nil
		}
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: fmt.Sprint("t", req.Turn), Name: "get_current_time", Arguments: json.RawMessage(`{}`)}}}, nil
	})
	h = newHarness(t, "", func(o *Options) { o.Provider = p })
	var err error
	pid, err = h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "first", Grants: clockGrants()})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	if info := h.info(pid); info.Status != process.Exited {
		t.Fatalf("status %s (%s), want exited", info.Status, info.Reason)
	}
	want := []string{"Goal:\nfirst", "Goal:\nfirst", "Goal:\nsecond"}
	if !slices.Equal(goals, want) {
		t.Fatalf("goals of the calls: %q, want %q", goals, want)
	}
}

// A Host that reuses the grant values it spawned with changes nothing the
// process holds: the record owns its grants.
func TestSpawnOwnsTheHostsGrants(t *testing.T) {
	p := funcProvider(func(req llm.Request) (llm.Response, error) {
		if req.Turn >= 3 {
			return llm.Response{ToolCalls: []llm.ToolCall{{ID: "x", Name: "process_exit", Arguments: json.RawMessage(`{}`)}}}, nil
		}
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: fmt.Sprint("t", req.Turn), Name: "get_current_time", Arguments: json.RawMessage(`{}`)}}}, nil
	})
	h := newHarness(t, "", func(o *Options) { o.Provider = p })
	h.rt.records.check = false // as in production: the check would fail first
	uses := 1
	grants := []capabilities.Grant{{Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, UsesRemaining: &uses}}
	pid, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", Grants: grants})
	if err != nil {
		t.Fatal(err)
	}
	uses = 1000 // the Host reuses its value for another spawn
	h.run()
	ok := 0
	for _, ev := range h.events {
		if ev.Kind == EventToolDone && ev.PID == pid && ev.Tool == "get_current_time" && ev.OK != nil && *ev.OK {
			ok++
		}
	}
	if ok != 1 {
		t.Fatalf("a one-shot of 1 use allowed %d calls", ok)
	}
}

// A call prepared before its commit is used only for the same call: the same
// id with another tool or other arguments is prepared again in the commit.
func TestPreparedCallsServeOnlyTheirOwnCall(t *testing.T) {
	h := newHarness(t, "")
	k := h.rt
	shanghai := json.RawMessage(`{"timezone":"Asia/Shanghai"}`)
	pre := k.prepareCalls([]llm.ToolCall{
		{ID: "c1", Name: "get_current_time", Arguments: shanghai},
		{ID: "c2", Name: "no_such_tool", Arguments: json.RawMessage(`{}`)},
	})
	if _, kept := pre["c2"]; kept || len(pre) != 1 {
		t.Fatalf("prepared %v: a refused call is made again in the commit, not kept", pre)
	}
	tx := &txn{prepared: pre}
	for _, call := range []llm.ToolCall{
		{ID: "c1", Name: "get_current_time", Arguments: slices.Clone(shanghai)},
		{ID: "c1", Name: "get_current_time", Arguments: json.RawMessage(`{}`)},
		{ID: "c1", Name: "sleep", Arguments: slices.Clone(shanghai)},
		{ID: "c2", Name: "no_such_tool", Arguments: json.RawMessage(`{}`)},
	} {
		wantTool, wantArgs, wantErr := k.broker.Prepare(call.Name, call.Arguments)
		gotTool, gotArgs, gotErr := k.prepare(tx, call)
		if gotTool != wantTool || !bytes.Equal(gotArgs, wantArgs) || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("%s %s: prepared %v %s %v, want %v %s %v", call.Name, call.Arguments, gotTool, gotArgs, gotErr, wantTool, wantArgs, wantErr)
		}
	}
	if _, args, _ := k.prepare(tx, llm.ToolCall{ID: "c1", Name: "get_current_time", Arguments: shanghai}); &args[0] != &pre["c1"].args[0] {
		t.Fatal("the call prepared before the commit was prepared again")
	}
}
