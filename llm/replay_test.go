package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixtureSpawns are the spawn indexes of the fixture's processes: pid 100008 is
// the second base:v0 spawn, pid 100012 the third; any other pid is its image's first.
var fixtureSpawns = SpawnIndexFunc(func(pid int64) (int, error) { return map[int64]int{100008: 1, 100012: 2}[pid], nil })

// firstSpawns makes every process the first spawn of its image.
var firstSpawns = SpawnIndexFunc(func(int64) (int, error) { return 0, nil })

func fixtureReplay(t testing.TB) *Replay {
	t.Helper()
	r, err := NewReplayFromFile(filepath.Join("..", "testdata", "replay", "llm_basic.yaml"), fixtureSpawns)
	if err != nil {
		t.Fatalf("NewReplayFromFile: %v", err)
	}
	return r
}

func replayFrom(t testing.TB, yaml string) *Replay {
	t.Helper()
	s, err := ParseScript([]byte(yaml))
	if err != nil {
		t.Fatalf("ParseScript: %v", err)
	}
	r, err := NewReplay(s, firstSpawns)
	if err != nil {
		t.Fatalf("NewReplay: %v", err)
	}
	return r
}

// conversation builds a valid message list whose last tool result is result (if not empty).
func conversation(result string) []Message {
	msgs := []Message{{Role: RoleSystem, Content: "You are a process."}, {Role: RoleUser, Content: "Goal: test."}}
	if result != "" {
		msgs = append(msgs,
			Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "probe", Arguments: json.RawMessage(`{}`)}}},
			Message{Role: RoleTool, ToolCallID: "c1", Name: "probe", Content: result},
		)
	}
	return msgs
}

func TestReplayFixtureConversation(t *testing.T) {
	r := fixtureReplay(t)
	proc := ProcessInfo{PID: 7, Image: "base:v0", GoalOID: "goal-123"}
	ctx := context.Background()

	resp, err := r.Complete(ctx, Request{Process: proc, Turn: 0, Messages: conversation("")})
	if err != nil {
		t.Fatalf("turn 0: %v", err)
	}
	want0 := Response{
		Text:         "Checking the time first.",
		ToolCalls:    []ToolCall{{ID: "call_7_0_0", Name: "get_current_time", Arguments: json.RawMessage(`{"timezone":"UTC"}`)}},
		FinishReason: "tool_calls",
		Model:        "replay/llm-basic",
		Usage:        resp.Usage,
	}
	if !reflect.DeepEqual(resp, want0) {
		t.Fatalf("turn 0 = %#v\nwant %#v", resp, want0)
	}
	if resp.Usage.PromptTokens <= 0 || resp.Usage.CompletionTokens <= 0 {
		t.Fatalf("usage = %+v, want positive estimates", resp.Usage)
	}

	resp, err = r.Complete(ctx, Request{Process: proc, Turn: 1, Messages: conversation(`{"now": "2024-05-01T12:00:00Z", "unix": 1714564800}`)})
	if err != nil {
		t.Fatalf("turn 1: %v", err)
	}
	wantArgs := `{"at":"2024-05-01T12:00:00Z","literal":"${not.a.reference}","owner":7,"title":"note for goal-123"}`
	if len(resp.ToolCalls) != 1 || string(resp.ToolCalls[0].Arguments) != wantArgs || resp.ToolCalls[0].ID != "call_7_1_0" {
		t.Fatalf("turn 1 tool calls = %s", toolCallsString(resp.ToolCalls))
	}

	resp, err = r.Complete(ctx, Request{Process: proc, Turn: 2, Messages: conversation(`{"note": {"oid": "obj-9", "version": 1}}`)})
	if err != nil {
		t.Fatalf("turn 2: %v", err)
	}
	if resp.Text != "Done." || string(resp.ToolCalls[0].Arguments) != `{"result":{"ok":true,"wrote":"obj-9"}}` {
		t.Fatalf("turn 2 = %q %s", resp.Text, toolCallsString(resp.ToolCalls))
	}

	// The second process spawned with base:v0 takes the second base:v0 entry.
	resp, err = r.Complete(ctx, Request{Process: ProcessInfo{PID: 100008, Image: "base:v0"}, Messages: conversation("")})
	if err != nil {
		t.Fatalf("second base process: %v", err)
	}
	if resp.Text != "The second base process answers without tools." || resp.ToolCalls != nil || resp.FinishReason != "stop" {
		t.Fatalf("second base process = %#v", resp)
	}

	// Another image has its own spawn index sequence.
	resp, err = r.Complete(ctx, Request{Process: ProcessInfo{PID: 9, Image: "worker:v1"}, Messages: conversation("")})
	if err != nil {
		t.Fatalf("worker: %v", err)
	}
	if got := string(resp.ToolCalls[0].Arguments); got != `{"args":[1,2.5,"three",null,true],"image":"worker:v1"}` {
		t.Fatalf("worker arguments = %s", got)
	}
}

func toolCallsString(calls []ToolCall) string {
	var parts []string
	for _, c := range calls {
		parts = append(parts, fmt.Sprintf("%s %s %s", c.ID, c.Name, c.Arguments))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

func TestReplaySubstitution(t *testing.T) {
	last := `{"pid": 4242, "ok": true, "none": null, "ratio": 0.25, "name": "child", "big": 12345678901234567890,
		"items": [{"id": "a"}, {"id": "b", "tags": ["x", "y"]}], "obj": {"k": [1, 2]}, "html": "<b>&</b>", "10": "ten"}`
	tests := []struct {
		name string
		args string // YAML flow mapping
		want string // rendered JSON
	}{
		{"exact reference keeps integer type", `{pid: "${last.pid}"}`, `{"pid":4242}`},
		{"exact reference keeps boolean", `{ok: "${last.ok}"}`, `{"ok":true}`},
		{"exact reference keeps null", `{n: "${last.none}"}`, `{"n":null}`},
		{"exact reference keeps float text", `{r: "${last.ratio}"}`, `{"r":0.25}`},
		{"large integer stays exact", `{b: "${last.big}"}`, `{"b":12345678901234567890}`},
		{"exact reference to object", `{o: "${last.obj}"}`, `{"o":{"k":[1,2]}}`},
		{"exact reference to array element", `{id: "${last.items.1.id}"}`, `{"id":"b"}`},
		{"nested array index", `{t: "${last.items.1.tags.0}"}`, `{"t":"x"}`},
		{"whole result", `{all: "${last}"}`, `{"all":{"10":"ten","big":12345678901234567890,"html":"<b>&</b>","items":[{"id":"a"},{"id":"b","tags":["x","y"]}],"name":"child","none":null,"obj":{"k":[1,2]},"ok":true,"pid":4242,"ratio":0.25}}`},
		{"digit key indexes an object", `{v: "${last.10}"}`, `{"v":"ten"}`},
		{"embedded string is raw", `{s: "child=${last.name}!"}`, `{"s":"child=child!"}`},
		{"embedded number", `{s: "pid ${last.pid}"}`, `{"s":"pid 4242"}`},
		{"embedded null and bool", `{s: "${last.none}/${last.ok}"}`, `{"s":"null/true"}`},
		{"embedded object is compact JSON", `{s: "obj=${last.obj}"}`, `{"s":"obj={\"k\":[1,2]}"}`},
		{"embedded HTML stays readable", `{s: "h=${last.html}"}`, `{"s":"h=<b>&</b>"}`},
		{"process facts", `{p: "${process.pid}", g: "${process.goal_oid}", i: "${process.image}", s: "${process.pid}-${process.goal_oid}", pp: "${process.parent_pid}"}`, `{"g":"goal-1","i":"img:v0","p":31,"pp":30,"s":"31-goal-1"}`},
		{"escape", `{s: "$${last.pid} costs $$5 and $${"}`, `{"s":"${last.pid} costs $$5 and ${"}`},
		{"escape next to reference", `{s: "$${x}${last.pid}"}`, `{"s":"${x}4242"}`},
		{"lone dollar and brace", `{s: "$ { } $}"}`, `{"s":"$ { } $}"}`},
		{"references deep inside", `{a: [{b: ["${last.items.0.id}", 1]}], c: {d: {e: "${last.pid}"}}}`, `{"a":[{"b":["a",1]}],"c":{"d":{"e":4242}}}`},
		{"keys are literal", `{"${last.pid}": 1}`, `{"${last.pid}":1}`},
		{"no arguments", `{}`, `{}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := replayFrom(t, "processes: [{image: 'img:v0', turns: [{tool_calls: [{name: t, arguments: "+tc.args+"}]}]}]")
			resp, err := r.Complete(context.Background(), Request{
				Process:  ProcessInfo{PID: 31, ParentPID: 30, Image: "img:v0", GoalOID: "goal-1"},
				Messages: conversation(last),
			})
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if got := string(resp.ToolCalls[0].Arguments); got != tc.want {
				t.Fatalf("arguments = %s\nwant        %s", got, tc.want)
			}
			if !json.Valid(resp.ToolCalls[0].Arguments) {
				t.Fatalf("arguments are not valid JSON: %s", resp.ToolCalls[0].Arguments)
			}
		})
	}
}

func TestReplayUsesLastToolMessage(t *testing.T) {
	r := replayFrom(t, "processes: [{image: a:v0, turns: [{tool_calls: [{name: t, arguments: {v: '${last.v}'}}]}]}]")
	msgs := []Message{
		{Role: RoleUser, Content: "go"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "x1", Name: "t"}, {ID: "x2", Name: "t"}}},
		{Role: RoleTool, ToolCallID: "x1", Content: `{"v": "first"}`},
		{Role: RoleTool, ToolCallID: "x2", Content: `{"v": "second"}`},
		{Role: RoleUser, Content: "a later human message does not hide the tool result"},
	}
	resp, err := r.Complete(context.Background(), Request{Process: ProcessInfo{PID: 1, Image: "a:v0"}, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(resp.ToolCalls[0].Arguments); got != `{"v":"second"}` {
		t.Fatalf("arguments = %s", got)
	}
}

func TestReplayReferenceErrors(t *testing.T) {
	tests := []struct {
		name   string
		arg    string
		msgs   []Message
		goal   string
		reason string
	}{
		{"missing key", "${last.nope}", conversation(`{"a": 1}`), "g", `${last.nope} in processes[0].turns[0].tool_calls[0].arguments.x: field "nope" not found in the object at last`},
		{"missing nested key", "${last.a.b}", conversation(`{"a": {"c": 1}}`), "g", `field "b" not found in the object at last.a`},
		{"index out of range", "${last.list.2}", conversation(`{"list": [1, 2]}`), "g", "index 2 is out of range: the array at last.list has 2 elements"},
		{"non-decimal index", "${last.list.first}", conversation(`{"list": [1]}`), "g", `"first" is not a decimal index into the array at last.list`},
		{"signed index", "${last.list.+0}", conversation(`{"list": [1]}`), "g", `"+0" is not a decimal index`},
		{"path into a scalar", "${last.a.b}", conversation(`{"a": 5}`), "g", `cannot take "b" of the number at last.a`},
		{"no tool result yet", "${last.a}", conversation(""), "g", "there is no tool result yet"},
		{"tool result not JSON", "${last.a}", conversation("plain text"), "g", "the last tool result (messages[3]) is not JSON"},
		{"tool result with trailing data", "${last.a}", conversation(`{"a":1} {"b":2}`), "g", "trailing data"},
		{"embedded missing key", "id=${last.nope}", conversation(`{"a": 1}`), "g", `${last.nope} in processes[0].turns[0].tool_calls[0].arguments.x`},
		{"no goal object", "${process.goal_oid}", conversation(""), "", "${process.goal_oid} in processes[0].turns[0].tool_calls[0].arguments.x: the process has no goal object"},
		{"a root has no parent", "${process.parent_pid}", conversation(""), "g", "the process is a root: it has no parent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := replayFrom(t, fmt.Sprintf("processes: [{image: a:v0, turns: [{tool_calls: [{name: t, arguments: {x: %q}}]}]}]", tc.arg))
			_, err := r.Complete(context.Background(), Request{Process: ProcessInfo{PID: 3, Image: "a:v0", GoalOID: tc.goal}, Messages: tc.msgs})
			if !errors.Is(err, ErrScriptReference) {
				t.Fatalf("error = %v, want ErrScriptReference", err)
			}
			var ce *CallError
			if !errors.As(err, &ce) || !ce.Permanent || ce.Settlement != SettlementRejected {
				t.Fatalf("error = %#v, want a permanent rejected CallError", err)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("error %q does not contain %q", err.Error(), tc.reason)
			}
		})
	}
}

// TestReplaySpawnIndexer: the entry comes from the Host's index, never from
// the request; a Host without an index is refused at construction, a failed
// lookup asks nothing and may be retried, a negative index is refused.
func TestReplaySpawnIndexer(t *testing.T) {
	s, err := LoadScript(filepath.Join("..", "testdata", "replay", "llm_basic.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewReplay(s, nil); err == nil {
		t.Fatal("NewReplay accepted a nil SpawnIndexer")
	}
	lookupFailed := errors.New("store closed")
	r, err := NewReplay(s, SpawnIndexFunc(func(pid int64) (int, error) {
		switch pid {
		case 1:
			return 0, lookupFailed
		case 2:
			return -1, nil
		}
		return 1, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	complete := func(pid int64) (Response, error) {
		return r.Complete(context.Background(), Request{Process: ProcessInfo{PID: pid, Image: "base:v0"}, Messages: conversation("")})
	}
	resp, err := complete(3)
	if err != nil || resp.Text != "The second base process answers without tools." {
		t.Fatalf("pid 3 (index 1) = %#v, %v; want the second base:v0 entry", resp, err)
	}
	var ce *CallError
	if _, err := complete(1); !errors.Is(err, lookupFailed) || !errors.As(err, &ce) || !ce.Transient || ce.Settlement != SettlementNotStarted {
		t.Fatalf("failed lookup = %#v, want a transient not-started CallError wrapping the lookup's error", err)
	}
	if _, err := complete(2); !errors.Is(err, ErrInvalidRequest) || !errors.As(err, &ce) || !ce.Permanent {
		t.Fatalf("negative index = %v, want a permanent invalid request", err)
	}
}

func TestReplayExhausted(t *testing.T) {
	r := fixtureReplay(t)
	tests := []struct {
		name string
		proc ProcessInfo
		turn int
		want []string
	}{
		{"turn past the end", ProcessInfo{PID: 7, Image: "base:v0"}, 3, []string{"replay script exhausted", "process 7", `image "base:v0"`, "turn 3", "has 3 turns"}},
		{"spawn index past the entries", ProcessInfo{PID: 100012, Image: "base:v0"}, 0, []string{"replay script exhausted", "process 100012", `image "base:v0"`, "2 entries"}},
		{"unknown image", ProcessInfo{PID: 5, Image: "other:v0"}, 0, []string{"replay script exhausted", "process 5", `image "other:v0"`, "0 entries"}},
		{"entry without turns", ProcessInfo{PID: 9, Image: "worker:v1"}, 1, []string{"replay script exhausted", "has 1 turns"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Complete(context.Background(), Request{Process: tc.proc, Turn: tc.turn, Messages: conversation("")})
			if !errors.Is(err, ErrScriptExhausted) {
				t.Fatalf("error = %v, want ErrScriptExhausted", err)
			}
			var ce *CallError
			if !errors.As(err, &ce) || !ce.Permanent || ce.Settlement != SettlementRejected || SettlementOf(err) != SettlementRejected {
				t.Fatalf("error = %#v, want permanent rejected CallError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not contain %q", err.Error(), w)
				}
			}
		})
	}
}

func TestReplayIsStatelessAcrossInstancesAndOrder(t *testing.T) {
	path := filepath.Join("..", "testdata", "replay", "llm_basic.yaml")
	proc := ProcessInfo{PID: 7, Image: "base:v0", GoalOID: "goal-123"}
	req := Request{Process: proc, Turn: 2, Messages: conversation(`{"note": {"oid": "n1"}}`)}

	first, err := fixtureReplay(t).Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	// A fresh provider (as after a reopen) answers turn 2 without having seen turns 0 and 1.
	again, err := NewReplayFromFile(path, fixtureSpawns)
	if err != nil {
		t.Fatal(err)
	}
	second, err := again.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("answers differ:\n%#v\n%#v", first, second)
	}
	// The returned arguments are the caller's: changing them does not change later answers.
	second.ToolCalls[0].Arguments[0] = 'X'
	third, err := again.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, third) {
		t.Fatalf("answer changed after the caller modified a response: %#v", third)
	}
}

func TestReplayConcurrentUse(t *testing.T) {
	r := fixtureReplay(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				pid := int64(g*1000 + i)
				resp, err := r.Complete(context.Background(), Request{
					Process:  ProcessInfo{PID: pid, Image: "base:v0", GoalOID: fmt.Sprintf("goal-%d", g)},
					Turn:     1,
					Messages: conversation(fmt.Sprintf(`{"now": "t%d"}`, i)),
				})
				if err != nil {
					errs <- err
					return
				}
				want := fmt.Sprintf(`{"at":"t%d","literal":"${not.a.reference}","owner":%d,"title":"note for goal-%d"}`, i, pid, g)
				if got := string(resp.ToolCalls[0].Arguments); got != want {
					errs <- fmt.Errorf("got %s want %s", got, want)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestReplayRejectsBadRequests(t *testing.T) {
	r := fixtureReplay(t)
	_, err := r.Complete(context.Background(), Request{Process: ProcessInfo{PID: 1}, Messages: conversation("")})
	if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "process.image: required by the replay provider") {
		t.Fatalf("missing image: %v", err)
	}
	_, err = r.Complete(context.Background(), Request{Process: ProcessInfo{PID: 1, Image: "base:v0"}, Turn: -1, Messages: conversation("")})
	if !errors.Is(err, ErrInvalidRequest) || SettlementOf(err) != SettlementNotStarted || !IsPermanent(err) {
		t.Fatalf("negative turn: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = r.Complete(ctx, Request{Process: ProcessInfo{PID: 1, Image: "base:v0"}, Messages: conversation("")})
	if !errors.Is(err, context.Canceled) || SettlementOf(err) != SettlementNotStarted || IsPermanent(err) {
		t.Fatalf("cancelled context: %v", err)
	}
	if r.Name() != "replay" {
		t.Fatalf("Name = %q", r.Name())
	}
}

func TestReplayWithoutNameReportsPlainModel(t *testing.T) {
	r := replayFrom(t, "processes: [{image: a:v0, turns: [{text: hi}]}]")
	resp, err := r.Complete(context.Background(), Request{Process: ProcessInfo{Image: "a:v0"}, Messages: conversation("")})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Model != "replay" || resp.Text != "hi" || resp.Usage.CompletionTokens != 1 {
		t.Fatalf("response = %#v", resp)
	}
}

// BenchmarkReplayComplete measures one call whose arguments substitute from the previous
// tool result and the process facts.
func BenchmarkReplayComplete(b *testing.B) {
	r := fixtureReplay(b)
	req := Request{
		Process:  ProcessInfo{PID: 7, Image: "base:v0", GoalOID: "goal-123"},
		Turn:     1,
		Messages: conversation(`{"now": "2024-05-01T12:00:00Z", "unix": 1714564800, "zone": "UTC"}`),
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := r.Complete(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/call")
}

// A scripted fault answers the first attempts of its turn as the server
// would, then the turn's reply; the script round-trips with it.
func TestReplayScriptedFault(t *testing.T) {
	s, err := ParseScript([]byte(`
processes:
  - image: base:v0
    turns:
      - fault: {status: 503, attempts: 2, retry_after: 3}
        tool_calls: [{name: process_exit, arguments: {message: done}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReplay(s, firstSpawns)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Process: ProcessInfo{PID: 1, Image: "base:v0"}, Messages: []Message{{Role: RoleSystem, Content: "s"}}}
	for attempt := 1; attempt <= 2; attempt++ {
		req.Attempt = attempt
		_, err := r.Complete(context.Background(), req)
		var ce *CallError
		if !errors.As(err, &ce) || ce.StatusCode != 503 || !ce.Transient || ce.RetryAfter != 3*time.Second || DispositionOf(err) != DispositionRetry {
			t.Fatalf("attempt %d: %#v", attempt, err)
		}
	}
	req.Attempt = 3
	if resp, err := r.Complete(context.Background(), req); err != nil || len(resp.ToolCalls) != 1 {
		t.Fatalf("attempt 3: %v %v", resp, err)
	}
	out, err := MarshalScript(s)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseScript(out)
	if err != nil || *again.Processes[0].Turns[0].Fault != *s.Processes[0].Turns[0].Fault {
		t.Fatalf("round trip: %v\n%s", err, out)
	}
	for _, bad := range []string{`{status: 418}`, `{attempts: 1}`, `{status: 503, attempts: 0}`, `{status: 503, extra: 1}`} {
		_, err := ParseScript([]byte("processes:\n  - image: base:v0\n    turns:\n      - fault: " + bad + "\n"))
		if !errors.Is(err, ErrScriptInvalid) || !strings.Contains(err.Error(), "fault") {
			t.Errorf("fault %s: %v", bad, err)
		}
	}
}
