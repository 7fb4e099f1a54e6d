package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libos/libos/images"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

// What a Host's code does wrong (a panic, a result JSON cannot hold, a reply
// of the wrong shape, a usage that is no count) fails the call it did it in,
// never the Host's process or the process the call was for.

// hostTool is a Host's tool, under the name echoImage's table and
// testCatalog's skill list, whose calls run invoke and whose pending actions
// run resume; runs counts both.
func hostTool(runs *atomic.Int32, invoke, resume func(sys tools.Syscalls) (tools.Outcome, error)) *tools.Tool {
	t := &tools.Tool{
		Name:   "slow_echo",
		Schema: schema.Object(map[string]*schema.Schema{"text": {Type: "string"}}, "text"),
		Scopes: []string{"echo"},
		Invoke: func(_ context.Context, sys tools.Syscalls, _ json.RawMessage) (tools.Outcome, error) {
			runs.Add(1)
			return invoke(sys)
		},
	}
	if resume != nil {
		t.Resume = func(_ context.Context, sys tools.Syscalls, _ tools.Pending) (tools.Outcome, error) {
			runs.Add(1)
			return resume(sys)
		}
	}
	return t
}

// callOnceThenExit calls slow_echo once, then exits.
func callOnceThenExit(req llm.Request) (llm.Response, error) {
	if req.Turn == 0 {
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "slow_echo", Arguments: json.RawMessage(`{"text":"x"}`)}}}, nil
	}
	return exitReply(), nil
}

func exitReply() llm.Response {
	return llm.Response{ToolCalls: []llm.ToolCall{{ID: "exit", Name: "process_exit", Arguments: json.RawMessage(`{"message":"done"}`)}}}
}

func hostToolOptions(tool *tools.Tool) func(*Options) {
	return func(o *Options) {
		o.Provider = funcProvider(callOnceThenExit)
		o.Skills = testCatalog{tools: []*tools.Tool{tool}}
		o.Images = map[string]*images.Image{"echo:v0": echoImage()}
	}
}

// runHostTool runs a process that calls tool once and exits, and returns
// the answer its call got.
func runHostTool(t *testing.T, tool *tools.Tool) (*harness, int64, map[string]any) {
	t.Helper()
	h := newHarness(t, "", hostToolOptions(tool))
	pid, err := h.rt.Spawn(SpawnSpec{Image: "echo:v0", Goal: "echo", Grants: clockGrants()})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	if info := h.info(pid); info.Status != process.Exited {
		t.Fatalf("status %s (%s), want exited", info.Status, info.Reason)
	}
	res := h.toolResults(pid)
	if len(res) != 2 || res[0]["_tool"] != "slow_echo" {
		t.Fatalf("tool results %v", res)
	}
	return h, pid, res[0]
}

// leaveObject creates the Object "left" in the caller's namespace: what a
// call refused in the end must not leave behind.
func leaveObject(sys tools.Syscalls) error {
	_, err := sys.CreateObject(objects.CreateSpec{Namespace: sys.Self().Namespace, Name: "left", Kind: "note", Payload: []byte(`1`)})
	return err
}

func objectLeft(t *testing.T, h *harness, pid int64) bool {
	t.Helper()
	ns := h.info(pid).Namespace
	err := h.rt.view(func(tx *txn) error {
		_, err := tx.Lookup(ns, "left")
		return err
	})
	if err != nil && !errors.Is(err, objects.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// toolDoneDetail is the detail of the tool.result event of pid's call id.
func toolDoneDetail(t *testing.T, h *harness, pid int64, id string) map[string]any {
	t.Helper()
	for _, ev := range loggedEvents(h) {
		if ev.Kind == EventToolDone && ev.PID == pid && ev.CallID == id {
			d, _ := ev.Detail.(map[string]any)
			return d
		}
	}
	t.Fatalf("no tool.result event of call %s", id)
	return nil
}

// loggedEvents is what OnEvent got so far.
func loggedEvents(h *harness) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

func timerBlock(sys tools.Syscalls) (tools.Outcome, error) {
	return tools.Outcome{Block: &tools.Block{Wait: process.Wait{Kind: process.WaitTimer, Until: sys.Now().Add(time.Second)}}}, nil
}

// A panic in a tool's Invoke, its outside effect or its Resume answers the
// call as failed, naming the panic; the Host's process lives on, nothing the
// call staged stays, the event log keeps the stack, and the call never runs
// again, a reopen included.
func TestHostToolPanicFailsItsCall(t *testing.T) {
	cases := []struct {
		name           string
		invoke, resume func(sys tools.Syscalls) (tools.Outcome, error)
		runs           int32
		message        string
		effectStarted  bool
		// toolCalls is the tool-call budget used: a call refused before
		// its effect started gives its charge back.
		toolCalls int64
	}{
		{name: "invoke", runs: 1, message: "tool slow_echo panicked in Invoke: tool exploded",
			invoke: func(sys tools.Syscalls) (tools.Outcome, error) {
				if err := leaveObject(sys); err != nil {
					return tools.Outcome{}, err
				}
				panic("tool exploded")
			}},
		{name: "effect", runs: 1, message: "tool slow_echo panicked in its outside effect: effect exploded", effectStarted: true, toolCalls: 1,
			invoke: func(tools.Syscalls) (tools.Outcome, error) {
				return tools.Outcome{Effect: func(context.Context) (map[string]any, error) { panic(errors.New("effect exploded")) }}, nil
			}},
		{name: "resume", runs: 2, message: "tool slow_echo panicked in Resume: resume exploded", effectStarted: true, toolCalls: 1,
			invoke: timerBlock,
			resume: func(sys tools.Syscalls) (tools.Outcome, error) {
				if err := leaveObject(sys); err != nil {
					return tools.Outcome{}, err
				}
				panic("resume exploded")
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			tool := hostTool(&runs, tc.invoke, tc.resume)
			h, pid, res := runHostTool(t, tool)
			if errorCode(res) != tools.CodeFailed || errorMessage(res) != tc.message || res["effect_started"] != tc.effectStarted {
				t.Fatalf("the call's answer: %v", res)
			}
			if objectLeft(t, h, pid) {
				t.Fatal("the panicking call's staged Object stayed")
			}
			if used := h.info(pid).Used.ToolCalls; used != tc.toolCalls {
				t.Fatalf("%d tool calls charged, want %d", used, tc.toolCalls)
			}
			stack, _ := toolDoneDetail(t, h, pid, "c1")["panic_stack"].(string)
			if !strings.Contains(stack, "host_faults_test.go") || len(stack) > maxPanicStack {
				t.Fatalf("the event's stack (%d bytes): %.300s", len(stack), stack)
			}
			h.rt.Close()
			h.open("", hostToolOptions(tool))
			h.run()
			if got := runs.Load(); got != tc.runs {
				t.Fatalf("the tool ran %d times, want %d", got, tc.runs)
			}
		})
	}
}

// A result JSON cannot hold, or one over maxToolResultBytes, answers the
// call as failed, naming why; nothing of the call stays, and the context
// holds no part of the result.
func TestUnrecordableToolResultFailsItsCall(t *testing.T) {
	huge := strings.Repeat("x", maxToolResultBytes)
	over := fmt.Sprintf("over the %d bytes a result may have", maxToolResultBytes)
	// A result that holds itself: its encoding would recurse without end.
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	looped := []any{nil}
	looped[0] = looped
	cases := []struct {
		name          string
		result        map[string]any
		effect        bool
		message       string
		effectStarted bool
	}{
		{name: "nan", result: map[string]any{"v": math.NaN()}, message: "cannot be encoded as JSON"},
		{name: "channel", result: map[string]any{"v": make(chan int)}, message: "cannot be encoded as JSON"},
		{name: "func", result: map[string]any{"v": []any{func() {}}}, message: "cannot be encoded as JSON"},
		{name: "huge", result: map[string]any{"v": huge}, message: over},
		{name: "cycle", result: cyclic, message: "nests more than"},
		{name: "cycle through a list", result: map[string]any{"v": looped}, message: "nests more than"},
		{name: "huge effect", result: map[string]any{"v": huge}, effect: true, message: over, effectStarted: true},
		{name: "nan effect", result: map[string]any{"v": math.Inf(1)}, effect: true, message: "cannot be encoded as JSON", effectStarted: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			h, pid, res := runHostTool(t, hostTool(&runs, func(sys tools.Syscalls) (tools.Outcome, error) {
				if err := leaveObject(sys); err != nil {
					return tools.Outcome{}, err
				}
				if tc.effect {
					return tools.Outcome{Effect: func(context.Context) (map[string]any, error) { return tc.result, nil }}, nil
				}
				return tools.Outcome{Result: tc.result}, nil
			}, nil))
			if errorCode(res) != tools.CodeFailed || !strings.Contains(errorMessage(res), tc.message) || res["effect_started"] != tc.effectStarted {
				t.Fatalf("the call's answer: %s", summarize(fmt.Sprint(res), 500))
			}
			// A refused Invoke leaves nothing; an effect's Invoke was
			// committed before the effect ran.
			if objectLeft(t, h, pid) != tc.effect {
				t.Fatalf("the call's staged Object stayed: %v, want %v", !tc.effect, tc.effect)
			}
			if body, _ := json.Marshal(res); len(body) > 4<<10 {
				t.Fatalf("the context holds a %d-byte answer", len(body))
			}
		})
	}
}

// A panic in the Provider's Complete fails that call with its settlement
// unknown (it may have reached the model), charged, and the process waits
// for the Host, the panic named; it is asked again only when the Host
// reopens, and says so in the log.
func TestProviderPanicWaitsForTheHost(t *testing.T) {
	var calls atomic.Int32
	var panics atomic.Bool
	panics.Store(true)
	prov := funcProvider(func(req llm.Request) (llm.Response, error) {
		calls.Add(1)
		if panics.Load() {
			panic("provider exploded")
		}
		return exitReply(), nil
	})
	opts := func(o *Options) { o.Provider = prov }
	h := newHarness(t, "", opts)
	pid := h.spawn(clockGrants())
	h.run()
	info := h.info(pid)
	if info.Status != process.Waiting || info.WaitingOn != process.WaitProvider || info.Wait.Until != (time.Time{}) ||
		!strings.Contains(info.Reason, "panicked in Complete: provider exploded") {
		t.Fatalf("after the panic: %s on %s until %v (%s)", info.Status, info.WaitingOn, info.Wait, info.Reason)
	}
	if info.Used.LLMCalls != 1 || info.Used.LLMTokens == 0 {
		t.Fatalf("used %+v: a call of unknown settlement stays charged", info.Used)
	}
	var detail map[string]any
	for _, ev := range loggedEvents(h) {
		if ev.Kind == EventProvider && ev.PID == pid {
			detail, _ = ev.Detail.(map[string]any)
		}
	}
	if detail["settlement"] != string(llm.SettlementUnknown) || detail["disposition"] != string(llm.DispositionWaitHost) {
		t.Fatalf("provider event %v", detail)
	}
	if stack, _ := detail["panic_stack"].(string); !strings.Contains(stack, "host_faults_test.go") {
		t.Fatalf("provider event's stack: %.300s", stack)
	}
	h.run()
	if calls.Load() != 1 {
		t.Fatalf("the provider was asked %d times before the Host acted", calls.Load())
	}
	panics.Store(false)
	h.rt.Close()
	h.open("", opts)
	h.run()
	if info := h.info(pid); info.Status != process.Exited || calls.Load() != 2 {
		t.Fatalf("after the reopen: %s (%s), %d calls", info.Status, info.Reason, calls.Load())
	}
	recovered := false
	for _, ev := range loggedEvents(h) {
		recovered = recovered || ev.Kind == EventRecovered && ev.PID == pid && strings.Contains(ev.Reason, "asking the provider again")
	}
	if !recovered {
		t.Fatal("the reopen asked the provider again without a word in the log")
	}
}

// A custom Provider's reply is mended as the adapters' are: a call without
// an id, a repeated id, a call without a name and arguments that are not
// JSON are answered as tool errors, and every later request is valid.
func TestCustomProviderReplyIsMended(t *testing.T) {
	var invalid []error
	prov := funcProvider(func(req llm.Request) (llm.Response, error) {
		if err := req.Validate(); err != nil {
			invalid = append(invalid, err)
		}
		switch req.Turn {
		case 0:
			return llm.Response{ToolCalls: []llm.ToolCall{
				{ID: "", Name: "get_current_time", Arguments: json.RawMessage(`{not json`)},
				{ID: "a", Name: " ", Arguments: json.RawMessage(`{}`)},
				{ID: "a", Name: "get_current_time", Arguments: json.RawMessage(` `)},
			}}, nil
		case 1:
			return exitReply(), nil
		}
		return llm.Response{}, errors.New("no turn left")
	})
	h := newHarness(t, "", func(o *Options) { o.Provider = prov })
	pid := h.spawn(clockGrants())
	h.run()
	if info := h.info(pid); info.Status != process.Exited {
		t.Fatalf("status %s (%s), want exited", info.Status, info.Reason)
	}
	if len(invalid) > 0 {
		t.Fatalf("requests after the reply: %v", invalid)
	}
	res := h.toolResults(pid)
	if len(res) != 4 || errorCode(res[0]) != tools.CodeInvalidArguments || errorCode(res[1]) != tools.CodeUnknownTool ||
		res[1]["_tool"] != llm.MissingToolName || res[2]["ok"] != true {
		t.Fatalf("tool results %v", res)
	}
}

// A Provider's usage is charged as a count: a negative report erases no
// usage charged before, a huge one is charged (not wrapped around to
// nothing), and none at all is estimated.
func TestProviderUsageIsChargedAsACount(t *testing.T) {
	calling := func(turn int) llm.Response {
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: fmt.Sprint("c", turn), Name: "get_current_time", Arguments: json.RawMessage(`{}`)}}}
	}
	cases := []struct {
		name   string
		usages []llm.Usage
		check  func(t *testing.T, info ProcessInfo)
	}{
		{name: "negative", usages: []llm.Usage{{CompletionTokens: 3_000_000}, {CompletionTokens: -3_000_000}, {CompletionTokens: 3_000_000}},
			check: func(t *testing.T, info ProcessInfo) {
				// Base's budget is 4M tokens: the second 3M goes over it.
				if info.Status != process.Failed || !strings.Contains(info.Reason, "llm_tokens") || info.Used.LLMTokens < 6_000_000 {
					t.Fatalf("%s (%s), used %d tokens", info.Status, info.Reason, info.Used.LLMTokens)
				}
			}},
		{name: "huge", usages: []llm.Usage{{PromptTokens: 1 << 62, CompletionTokens: 1 << 62}},
			check: func(t *testing.T, info ProcessInfo) {
				if info.Status != process.Failed || info.Used.LLMTokens < 2*math.MaxInt32 {
					t.Fatalf("%s (%s), used %d tokens", info.Status, info.Reason, info.Used.LLMTokens)
				}
			}},
		{name: "none", usages: []llm.Usage{{}, {}},
			check: func(t *testing.T, info ProcessInfo) {
				if info.Status != process.Exited || info.Used.LLMTokens == 0 {
					t.Fatalf("%s (%s), used %d tokens", info.Status, info.Reason, info.Used.LLMTokens)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prov := funcProvider(func(req llm.Request) (llm.Response, error) {
				if req.Turn >= len(tc.usages) {
					resp := exitReply()
					resp.Usage = llm.Usage{PromptTokens: 1}
					return resp, nil
				}
				resp := calling(req.Turn)
				resp.Usage = tc.usages[req.Turn]
				return resp, nil
			})
			h := newHarness(t, "", func(o *Options) { o.Provider = prov })
			pid := h.spawn(clockGrants())
			h.run()
			tc.check(t, h.info(pid))
			if tc.name == "none" {
				estimated := 0
				for _, ev := range loggedEvents(h) {
					if d, _ := ev.Detail.(map[string]any); ev.Kind == EventProvider && d["usage_estimated"] == true {
						estimated++
					}
				}
				if estimated != len(tc.usages) {
					t.Fatalf("%d calls' usage marked estimated, want %d", estimated, len(tc.usages))
				}
			}
		})
	}
}

// Settling usage never wraps around: a charge past the most an int64 holds
// stays there, and a refund stops at 0.
func TestSettleUsedSaturates(t *testing.T) {
	for _, c := range []struct{ used, delta, want int64 }{
		{10, 5, 15},
		{10, -15, 0},
		{math.MaxInt64 - 1, 5, math.MaxInt64},
		{1 << 62, 1 << 62, math.MaxInt64},
		{math.MaxInt64, math.MinInt64, 0},
	} {
		if got := settleUsed(c.used, c.delta); got != c.want {
			t.Errorf("settleUsed(%d, %d) = %d, want %d", c.used, c.delta, got, c.want)
		}
	}
}

// compactingTool is a Host tool that starts a compaction and, resumed when
// its compressor ended, applies it; panicAt says where it panics instead of
// ending well ("invoke": after starting, "resume": after applying).
func compactingTool(panicAt string) *tools.Tool {
	return &tools.Tool{
		Name:   "host_compact",
		Schema: schema.Object(map[string]*schema.Schema{}),
		Invoke: func(_ context.Context, sys tools.Syscalls, _ json.RawMessage) (tools.Outcome, error) {
			out, err := sys.StartCompaction(tools.CompactionRequest{TargetTokens: 256, PreserveRecentEntries: 2, MaxChunks: 1})
			if err == nil && panicAt == "invoke" {
				panic("a defect after the compaction started")
			}
			return out, err
		},
		Resume: func(_ context.Context, sys tools.Syscalls, p tools.Pending) (tools.Outcome, error) {
			if _, err := sys.ResumeCompaction(p); err != nil {
				return tools.Outcome{}, err
			}
			panic("a defect after the writeback")
		},
	}
}

// A Host tool that panics after it started or applied a compaction keeps
// none of it: the context is as it was, no job is left running, so the next
// compaction runs, and a reopen rebuilds the context the process had.
func TestPanicAfterACompactionStepKeepsNoneOfIt(t *testing.T) {
	for _, at := range []string{"invoke", "resume"} {
		t.Run(at, func(t *testing.T) {
			im := &images.Image{Name: "hc", Version: "v0", SystemPrompt: "test", Tools: []string{images.BuiltinTools, "host_compact"},
				CompletionGate: images.GateOnePhase, ToolProjection: images.ProjectionAll,
				Context: images.ContextConfig{Object: true, WindowTokens: 128000, MaxOutputTokens: 4096}}
			h := newHarness(t, `
processes:
  - image: hc:v0
    turns:
`+chattyTurns(4)+`
      - tool_calls: [{name: host_compact, arguments: {}}]
      - tool_calls: [{name: compact_process_context, arguments: {target_tokens: 256, preserve_recent_entries: 1, max_chunks: 1, force: true}}]
      - tool_calls: [{name: process_exit, arguments: {payload: "${last}"}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: `+summaryPayload+`}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: `+summaryPayload+`}}]
`, func(o *Options) {
				o.Tools = []*tools.Tool{compactingTool(at)}
				o.Images = map[string]*images.Image{"hc:v0": im}
			})
			pid, err := h.rt.Spawn(SpawnSpec{Image: "hc:v0", Goal: "g", Grants: compactionGrants()})
			if err != nil {
				t.Fatal(err)
			}
			h.run()
			var host, compact map[string]any
			for _, r := range h.toolResults(pid) {
				switch r["_tool"] {
				case "host_compact":
					host = r
				case "compact_process_context":
					compact = r
				}
			}
			if errorCode(host) != tools.CodeFailed || !strings.Contains(errorMessage(host), "panicked") {
				t.Fatalf("the panicking tool's answer: %v", host)
			}
			if compact["ok"] != true {
				t.Fatalf("the compaction after it: %v, want it to run", compact)
			}
			// One compaction applied: the model's own.
			if c := contextOf(t, h, pid); c.generation() != 1 {
				t.Fatalf("context generation %d, want 1 (the panicking step's compaction kept?)", c.generation())
			}
			h.rt.Close()
			h.open("")
			if c := contextOf(t, h, pid); len(c.entries) == 0 || c.entries[0].Kind != "summary" {
				t.Fatalf("rebuilt after a reopen: %d entries, want the model's compaction's summary first", len(c.entries))
			}
		})
	}
}
