package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libos/libos/images"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

// Open refuses options that break a rule, naming the field, instead of
// reading a negative count as the default or a bad retry policy as "give
// up at once".
func TestOpenRefusesInvalidOptions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  Options
		field string
	}{
		{"negative workers", Options{Workers: -1}, "workers"},
		{"negative sleep maximum", Options{MaxSleepSeconds: -5}, "max_sleep_seconds"},
		{"NaN sleep maximum", Options{MaxSleepSeconds: math.NaN()}, "max_sleep_seconds"},
		{"negative retry attempts", Options{ProviderRetry: llm.RetryPolicy{Attempts: -5}}, "provider_retry"},
		{"negative backoff", Options{ProviderRetry: llm.RetryPolicy{FirstBackoff: -time.Second}}, "provider_retry"},
	} {
		dir := t.TempDir()
		rt, err := Open(dir, tc.opts)
		if err == nil {
			rt.Close()
			t.Fatalf("%s: opened", tc.name)
		}
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field) {
			t.Fatalf("%s: %v, want ErrInvalidOptions naming %s", tc.name, err, tc.field)
		}
	}
}

// A goal must be text a model can read: not blank, UTF-8, no NUL; the same
// rule for Spawn and SetGoal. RecordPIDAs follows PutMeta's key rule.
func TestHostGoalsAndKeysAreChecked(t *testing.T) {
	h := newHarness(t, "")
	for _, goal := range []string{"", "  \n\t", "bad \xff", "nul \x00 byte"} {
		if _, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: goal}); !errors.Is(err, ErrInvalidSpawn) || !strings.Contains(err.Error(), "goal") {
			t.Fatalf("spawn with goal %q: %v", goal, err)
		}
	}
	if _, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", RecordPIDAs: "a\x00b"}); !errors.Is(err, ErrInvalidSpawn) || !strings.Contains(err.Error(), "record_pid_as") {
		t.Fatalf("spawn recording its pid under a NUL key: %v", err)
	}
	if ps, _ := h.rt.Processes(); len(ps) != 0 {
		t.Fatalf("refused spawns left %d processes", len(ps))
	}
	pid, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.SetGoal(pid, "bad \xff"); err == nil || !strings.Contains(err.Error(), "goal") {
		t.Fatalf("SetGoal with invalid UTF-8: %v", err)
	}
	if _, err := h.rt.Signal(pid, SignalKill); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.SetGoal(pid, "new goal"); !errors.Is(err, ErrEnded) {
		t.Fatalf("SetGoal on an ended process: %v, want ErrEnded", err)
	}
}

// After Close every Host call answers ErrClosed, and a run Close stops
// says so too.
func TestCallsAfterCloseAnswerErrClosed(t *testing.T) {
	bp := &blockingProvider{started: make(chan struct{})}
	h := newHarness(t, "", func(o *Options) { o.Provider = bp })
	pid := h.spawn(clockGrants())
	done := make(chan error, 1)
	go func() { done <- h.rt.RunUntilIdle(context.Background()) }()
	<-bp.started
	h.rt.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("a run Close stopped: %v, want ErrClosed", err)
	}
	calls := map[string]error{}
	_, calls["Spawn"] = h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g"})
	_, calls["Processes"] = h.rt.Processes()
	_, calls["PostHumanMessage"] = h.rt.PostHumanMessage(HumanMessage{To: pid, Body: "hi"})
	_, calls["Signal"] = h.rt.Signal(pid, SignalPause)
	_, calls["Approvals"] = h.rt.Approvals()
	_, calls["EventLog"] = h.rt.EventLog(EventQuery{})
	calls["PutMeta"] = h.rt.PutMeta("k", 1)
	for name, err := range calls {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

// A process waiting on its provider for the Host asks again after the Host
// fixed it (SetProvider) and called RetryProvider, with no reopen.
func TestRetryProviderWakesHostHeldWaits(t *testing.T) {
	refusing := funcProvider(func(llm.Request) (llm.Response, error) {
		return llm.Response{}, &llm.CallError{Settlement: llm.SettlementRejected, NeedsHost: true, Permanent: true, Hint: "check the key",
			Err: errors.New("401 Unauthorized")}
	})
	h := newHarness(t, "", func(o *Options) { o.Provider = refusing })
	pid := h.spawn(clockGrants())
	h.run()
	if info := h.info(pid); info.Wait == nil || info.Wait.Kind != "provider" {
		t.Fatalf("before the fix: %+v, want a provider wait", info)
	}
	if woken, err := h.rt.RetryProvider(); err != nil || len(woken) != 1 || woken[0] != pid {
		t.Fatalf("RetryProvider with the broken provider: %v, %v", woken, err)
	}
	h.run()
	if info := h.info(pid); info.Wait == nil || info.Wait.Kind != "provider" {
		t.Fatalf("after a retry that failed again: %+v, want the provider wait back", info)
	}
	h.rt.SetProvider(funcProvider(func(llm.Request) (llm.Response, error) {
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "process_exit", Arguments: []byte(`{}`)}}}, nil
	}))
	woken, err := h.rt.RetryProvider()
	if err != nil || len(woken) != 1 {
		t.Fatalf("RetryProvider: %v, %v", woken, err)
	}
	h.run()
	if info := h.info(pid); info.Status != "exited" {
		t.Fatalf("after SetProvider and RetryProvider: %+v, want exited", info)
	}
	if woken, err := h.rt.RetryProvider(); err != nil || len(woken) != 0 {
		t.Fatalf("nothing left to retry: %v, %v", woken, err)
	}
}

// A Host's own tool (Options.Tools) is shown to the images that name it and
// runs through the same broker as the built-ins.
func TestHostToolsJoinTheBroker(t *testing.T) {
	var runs atomic.Int32
	h := newHarness(t, refusedThenEffectScript, func(o *Options) {
		o.Tools = []*tools.Tool{effectTool(&runs, nil)}
		o.Images = map[string]*images.Image{"echo:v0": echoImage()}
	})
	pid, err := h.rt.Spawn(SpawnSpec{Image: "echo:v0", Goal: "echo", Grants: clockGrants()})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	if got := h.result(pid); got["echo"] != "hello" || runs.Load() != 1 {
		t.Fatalf("result %v after %d runs, want the Host tool's result once", got, runs.Load())
	}
	// One name, one tool: a Host tool may not take a built-in's name.
	clash := effectTool(&runs, nil)
	clash.Name = "sleep"
	if _, err := Open(t.TempDir(), Options{Tools: []*tools.Tool{clash}}); err == nil || !strings.Contains(err.Error(), "sleep") {
		t.Fatalf("a Host tool named as a built-in: %v", err)
	}
}

// A runtime reopened without an image its live processes run holds them on
// a wait for the Host, naming the image, instead of failing them for good;
// reopened with it, they run on.
func TestReopenWithoutAnImageHoldsItsProcesses(t *testing.T) {
	exit := funcProvider(func(llm.Request) (llm.Response, error) {
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "process_exit", Arguments: []byte(`{}`)}}}, nil
	})
	plain := &images.Image{Name: "plain", Version: "v0", SystemPrompt: "test", Tools: []string{images.BuiltinTools},
		CompletionGate: images.GateOnePhase, ToolProjection: images.ProjectionAll}
	withImage := func(o *Options) { o.Provider, o.Images = exit, map[string]*images.Image{"plain:v0": plain} }
	h := newHarness(t, "", withImage)
	pid, err := h.rt.Spawn(SpawnSpec{Image: "plain:v0", Goal: "g"})
	if err != nil {
		t.Fatal(err)
	}
	h.rt.Close()
	h.open("", func(o *Options) { o.Provider = exit })
	h.run()
	info := h.info(pid)
	if info.Status != "waiting" || info.Wait == nil || !strings.Contains(info.Wait.Reason, "plain:v0") {
		t.Fatalf("without its image: %+v, want a wait naming the image", info)
	}
	h.rt.Close()
	h.open("", withImage)
	h.run()
	if info := h.info(pid); info.Status != "exited" {
		t.Fatalf("reopened with its image: %+v, want exited", info)
	}
}

// An outside effect the Host's stop interrupts (it gave up when its context
// ended) is answered as after a crash: its settlement is unknown, the calls
// after it never start, and the process runs on at the next run.
func TestEffectCutShortByAStopIsOfUnknownSettlement(t *testing.T) {
	started := make(chan struct{}, 1)
	waiting := &tools.Tool{
		Name:   "slow_echo",
		Schema: schema.Object(map[string]*schema.Schema{"text": {Type: "string"}}, "text"),
		Scopes: []string{"echo"},
		Invoke: func(context.Context, tools.Syscalls, json.RawMessage) (tools.Outcome, error) {
			return tools.Outcome{Effect: func(ctx context.Context) (map[string]any, error) {
				started <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			}}, nil
		},
	}
	script := `
processes:
  - image: echo:v0
    turns:
      - tool_calls:
          - {name: slow_echo, arguments: {text: a}}
          - {name: get_current_time, arguments: {}}
      - tool_calls: [{name: process_exit, arguments: {}}]
`
	h := newHarness(t, script, func(o *Options) {
		o.Tools = []*tools.Tool{waiting}
		o.Images = map[string]*images.Image{"echo:v0": echoImage()}
	})
	pid, err := h.rt.Spawn(SpawnSpec{Image: "echo:v0", Goal: "echo", Grants: clockGrants()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.rt.RunUntilIdle(ctx) }()
	<-started
	cancel()
	<-done
	res := h.toolResults(pid)
	if len(res) != 2 {
		t.Fatalf("results %v", res)
	}
	if e, _ := res[0]["error"].(map[string]any); e["code"] != tools.CodeSettlementUnknown || res[0]["effect_started"] != true {
		t.Fatalf("the interrupted effect: %v, want settlement_unknown", res[0])
	}
	if res[1]["cancelled"] != true || res[1]["effect_started"] != false {
		t.Fatalf("the call after it: %v, want not started", res[1])
	}
	if info := h.info(pid); info.Status != "runnable" {
		t.Fatalf("after the stop: %+v, want runnable", info)
	}
	h.run()
	if info := h.info(pid); info.Status != "exited" {
		t.Fatalf("after the next run: %+v", info)
	}
}

// A goal a checkpoint's restore wrote again (a new version of the same
// text) is recovered from retained evidence after a reopen, as the version
// the evidence names is.
func TestRestoredGoalIsRecoveredAfterAReopen(t *testing.T) {
	script := `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {}}]
`
	h := newHarness(t, script)
	pid, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "the original goal"})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	cp, err := h.rt.CreateCheckpoint(pid)
	if err != nil {
		t.Fatal(err)
	}
	h.rt.Close()
	h.open(script)
	if _, err := h.rt.RestoreCheckpoint(cp.ID); err != nil {
		t.Fatal(err)
	}
	h.rt.Close()
	h.open(script)
	g, err := h.rt.GoalOf(pid)
	if err != nil || g.Text != "the original goal" || !g.Recovered || g.Version < 2 {
		t.Fatalf("goal after a restore and a reopen: %+v, %v", g, err)
	}
}

// A Human message says something: an empty or blank body is refused by
// name, whichever way it comes (control socket, HTTP API, Go), and posts
// nothing.
func TestBlankHumanMessageIsRefused(t *testing.T) {
	h := newHarness(t, "")
	pid := h.spawn(clockGrants())
	for _, body := range []string{"", " \n\t"} {
		if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "ana", Body: body}); !errors.Is(err, mailbox.ErrInvalid) || !strings.Contains(err.Error(), "body") {
			t.Fatalf("body %q: %v", body, err)
		}
	}
	if page, err := h.rt.Messages(pid, true); err != nil || len(page.Messages) != 0 {
		t.Fatalf("messages after refused posts: %+v, %v", page, err)
	}
}

// A reply that arrives after the Host stopped the run starts no outside
// effect: its call is answered as not started (it never ran), and the
// process goes on at the next run.
func TestNoEffectStartsAfterAStop(t *testing.T) {
	var runs atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	p := funcProvider(func(req llm.Request) (llm.Response, error) {
		if req.Turn == 0 {
			cancel() // the Host stops the run while the call is out
			return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "slow_echo", Arguments: json.RawMessage(`{"text":"x"}`)}}}, nil
		}
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c2", Name: "process_exit", Arguments: json.RawMessage(`{}`)}}}, nil
	})
	h := newHarness(t, "", func(o *Options) {
		effectOn(nil, &runs, nil)(o)
		o.FS, o.Provider = nil, p
	})
	pid, err := h.rt.Spawn(SpawnSpec{Image: "echo:v0", Goal: "echo", Grants: clockGrants()})
	if err != nil {
		t.Fatal(err)
	}
	_ = h.rt.RunUntilIdle(ctx)
	res := h.toolResults(pid)
	if len(res) != 1 || res[0]["cancelled"] != true || res[0]["effect_started"] != false || runs.Load() != 0 {
		t.Fatalf("after the stop: results %v, %d runs; want the call answered not started and run never", res, runs.Load())
	}
	if info := h.info(pid); info.Status != "runnable" {
		t.Fatalf("after the stop: %+v, want runnable", info)
	}
	h.run()
	if info := h.info(pid); info.Status != "exited" || runs.Load() != 0 {
		t.Fatalf("after the next run: %+v, %d runs", info, runs.Load())
	}
}
