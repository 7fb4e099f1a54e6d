package kernel

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/images"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/process"
)

// faultKinds are what a faulty chat-completions server does instead of
// answering well: server statuses, broken connections, a slow first byte,
// model output that is not a usable action, and answers that break the
// rules of the history the next request carries (a call without a name,
// two calls with one id) or report no usage.
var faultKinds = []string{"503", "429", "500", "529", "reset-before", "reset-mid-body", "slow", "bad-json-args", "unknown-tool",
	"text-only", "length", "empty-name", "dup-ids", "no-usage"}

// countingModel is a chat-completions server whose model reads the time as
// many times as its goal says and then exits with the count of successful
// reads. With faultRate > 0 it injects faultKinds on a seeded schedule.
type countingModel struct {
	mu        sync.Mutex
	rng       *rand.Rand
	faultRate float64
	slow      time.Duration
	calls     int
	faults    map[string]int
	spared    int // faults not made, lest they fail a process
}

func newCountingModel(t *testing.T, seed uint64, faultRate float64, slow time.Duration) (*countingModel, *httptest.Server) {
	m := &countingModel{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), faultRate: faultRate, slow: slow, faults: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(srv.Close)
	return m, srv
}

type chatMessage struct {
	Role      string            `json:"role"`
	Content   string            `json:"content"`
	Name      string            `json:"name"`
	ToolCalls []json.RawMessage `json:"tool_calls"`
}

// repliesWithoutCalls counts the assistant messages at the end of msgs,
// notices between them aside, that made no tool call.
func repliesWithoutCalls(msgs []chatMessage) int {
	n := 0
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != "assistant" {
			continue
		}
		if len(msgs[i].ToolCalls) > 0 {
			break
		}
		n++
	}
	return n
}

func (m *countingModel) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []chatMessage `json:"messages"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) < 2 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	m.calls++
	n := m.calls
	fault := ""
	if m.rng.Float64() < m.faultRate {
		fault = faultKinds[m.rng.IntN(len(faultKinds))]
		// Replies without a tool call, as many in a row as an image allows
		// (max_turns_without_tool_call), fail a process by the runtime's
		// rule, which is not what this server tests: it answers well
		// instead of making the last one. The schedule's draws stay the
		// same.
		if (fault == "text-only" || fault == "length") && repliesWithoutCalls(req.Messages) >= images.DefaultMaxTurnsWithoutToolCall-1 {
			fault = ""
			m.spared++
		} else {
			m.faults[fault]++
		}
	}
	m.mu.Unlock()

	goal, _ := strconv.Atoi(strings.TrimPrefix(req.Messages[1].Content, "Goal:\n"))
	reads := 0
	for _, msg := range req.Messages {
		if msg.Role == "tool" && msg.Name == "get_current_time" && strings.Contains(msg.Content, `"ok":true`) {
			reads++
		}
	}
	call, args := "get_current_time", `{"timezone":"UTC"}`
	if reads >= goal {
		call, args = "process_exit", fmt.Sprintf(`{"payload":{"goal":%d,"reads":%d}}`, goal, reads)
	}
	finish, text := "tool_calls", ""
	calls := 1
	switch fault {
	case "503", "429", "500", "529":
		code, _ := strconv.Atoi(fault)
		if code != 500 {
			w.Header().Set("Retry-After", "2")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, `{"error":{"message":"injected `+fault+`"}}`)
		return
	case "reset-before", "reset-mid-body":
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		if fault == "reset-mid-body" {
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{\"id\":\"x\",\"choi")
			buf.Flush()
		}
		conn.Close()
		return
	case "slow":
		time.Sleep(m.slow)
	case "bad-json-args":
		args = `{timezone: UTC`
	case "unknown-tool":
		call = "get_time"
	case "empty-name":
		call = ""
	case "dup-ids":
		// Two reads under one id, while the goal has room for both, so
		// the count ends where it would.
		if reads+2 <= goal {
			calls = 2
		}
	case "text-only":
		call, text, finish = "", "It is probably noon somewhere.", "stop"
	case "length":
		args, finish = `{"timezone": "UT`, "length"
	}
	msg := map[string]any{"role": "assistant", "content": text}
	if finish == "tool_calls" || finish == "length" {
		var toolCalls []map[string]any
		for range calls {
			toolCalls = append(toolCalls, map[string]any{"id": fmt.Sprintf("call_%d", n), "type": "function",
				"function": map[string]any{"name": call, "arguments": args}})
		}
		msg["tool_calls"] = toolCalls
	}
	resp := map[string]any{"id": "c", "object": "chat.completion", "model": "counting",
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": 5}}
	if fault == "no-usage" {
		delete(resp, "usage")
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// runCountingTree runs procs roots, each told to read the time reads times,
// against srv, and returns each root's final status and result.
func runCountingTree(t *testing.T, srv *httptest.Server, procs, reads int) map[int64]string {
	t.Helper()
	p, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "counting", Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Open(t.TempDir(), Options{Provider: p, Clock: clock.NewFake(epoch, true), Workers: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	grants := []capabilities.Grant{{Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}}}
	var pids []int64
	for i := 0; i < procs; i++ {
		pid, err := rt.Spawn(SpawnSpec{Image: "base:v0", Goal: strconv.Itoa(reads), Grants: grants})
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if err := rt.RunUntilIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for _, pid := range pids {
		info, err := rt.Process(pid)
		if err != nil {
			t.Fatal(err)
		}
		res := string(info.Status) + " " + info.Reason
		if info.Status == process.Exited {
			_, payload, err := rt.ReadObject(info.ResultOID)
			if err != nil {
				t.Fatal(err)
			}
			res = string(payload)
		}
		out[pid] = res
	}
	return out
}

// A thousand-call tree against a server that fails a fifth of the time (bad
// statuses, broken connections, timeouts, unusable model output) ends with
// the same results as against a server that never fails, and no process
// fails.
func TestProviderFaultsDoNotChangeResults(t *testing.T) {
	const procs, reads = 100, 9 // 10 calls a process
	_, clean := newCountingModel(t, 1, 0, 0)
	want := runCountingTree(t, clean, procs, reads)
	model, faulty := newCountingModel(t, 7, 0.2, 150*time.Millisecond)
	got := runCountingTree(t, faulty, procs, reads)
	for pid, w := range want {
		if w != fmt.Sprintf(`{"goal":%d,"reads":%d}`, reads, reads) {
			t.Fatalf("fault-free pid %d: %s", pid, w)
		}
		if got[pid] != w {
			t.Errorf("pid %d: %s, want %s", pid, got[pid], w)
		}
	}
	t.Logf("%d calls, faults %v, %d spared", model.calls, model.faults, model.spared)
	for _, kind := range faultKinds {
		if model.faults[kind] == 0 {
			t.Errorf("the schedule never injected %s", kind)
		}
	}
}

// windowProvider answers from a replay script, except that pid 1's request
// at turn refuseAt (and, when always, every later one) is refused as longer
// than the model's window.
type windowProvider struct {
	llm.Provider
	refuseAt int
	always   bool
	mu       sync.Mutex
	refused  int
}

func (w *windowProvider) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	w.mu.Lock()
	refuse := req.Process.PID == 1 && req.Turn >= w.refuseAt && (w.always || w.refused == 0)
	if refuse {
		w.refused++
	}
	w.mu.Unlock()
	if refuse {
		return llm.Response{}, &llm.CallError{Settlement: llm.SettlementRejected, Permanent: true, ContextTooLong: true, StatusCode: 400,
			Hint: "the prompt is longer than the model's context window", Err: fmt.Errorf("server answered 400: maximum context length exceeded")}
	}
	return w.Provider.Complete(ctx, req)
}

// A server that refuses the prompt as over its window: maintenance compacts
// the context and the call is asked again; without the authority, or when
// the server refuses again, the process fails saying the context no longer
// fits.
func TestPromptOverTheWindow(t *testing.T) {
	script := `
processes:
  - image: base:v0
    turns:
` + chattyTurns(10) + `
      - tool_calls: [{name: process_exit, arguments: {message: done}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: ` + summaryPayload + `}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: ` + summaryPayload + `}}]
`
	maintenance := capabilities.Grant{Resource: "context:maintenance", Rights: []capabilities.Right{capabilities.Execute}}
	cases := []struct {
		name   string
		grants []capabilities.Grant
		always bool
		want   process.State
		reason string
	}{
		{"compacted and asked again", append(compactionGrants(), maintenance), false, process.Exited, ""},
		{"no maintenance right", compactionGrants(), false, process.Failed, "lacks execute on context:maintenance"},
		{"refused again", append(compactionGrants(), maintenance), true, process.Failed, "refused again after maintenance"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var wp *windowProvider
			h := newHarness(t, script, func(o *Options) {
				wp = &windowProvider{Provider: o.Provider, refuseAt: 8, always: tc.always}
				o.Provider = wp
			})
			pid := h.spawn(tc.grants)
			h.run()
			info := h.info(pid)
			if info.Status != tc.want || !strings.Contains(info.Reason, tc.reason) {
				t.Fatalf("status %s (%s), want %s (%s)", info.Status, info.Reason, tc.want, tc.reason)
			}
			if tc.want == process.Failed && !strings.Contains(info.Reason, "the context no longer fits") {
				t.Fatalf("reason %q", info.Reason)
			}
			if tc.want == process.Exited {
				if c := contextOf(t, h, pid); c.generation() == 0 || wp.refused != 1 {
					t.Fatalf("generation %d after %d refusals: the context was not compacted", c.generation(), wp.refused)
				}
			}
		})
	}
}

// Each retry attempt of a process draws its own backoff: over a thousand
// processes, the draws of one process's eight attempts are independent (their
// sum is about 4 ± 0.8), so no process runs through its attempts in a small
// fraction of the backoff the policy promises, and draws are uniform.
func TestJitterDrawsEachAttemptAnew(t *testing.T) {
	short, total, n := 0, 0.0, 0
	for pid := int64(1); pid <= 1000; pid++ {
		sum := 0.0
		for attempt := 1; attempt <= 8; attempt++ {
			d := jitter(pid, 0, attempt)
			if d < 0 || d >= 1 {
				t.Fatalf("jitter(%d, 0, %d) = %v, outside [0, 1)", pid, attempt, d)
			}
			sum += d
			total += d
			n++
		}
		// Eight independent uniform draws sum below 1.5 with probability
		// about 0.0003.
		if sum < 1.5 {
			short++
		}
	}
	if short > 5 {
		t.Fatalf("%d of 1000 processes drew eight attempts summing below 1.5", short)
	}
	if mean := total / float64(n); mean < 0.47 || mean > 0.53 {
		t.Fatalf("mean draw %v, want about 0.5", mean)
	}
	if a, b := jitter(1, 0, 1), jitter(1, 0, 2); math.Abs(a-b) < 1e-3 {
		t.Fatalf("pid 1's first two attempts drew %v and %v", a, b)
	}
}

// A call reserves the tool table its request carries: the reservation is at
// least the reply's maximum and the estimate of every schema shown.
func TestReservationCountsTheToolTable(t *testing.T) {
	var shown []llm.ToolSchema
	p := funcProvider(func(req llm.Request) (llm.Response, error) {
		if shown == nil {
			shown = req.Tools
		}
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "process_exit", Arguments: json.RawMessage(`{}`)}}}, nil
	})
	h := newHarness(t, "", func(o *Options) { o.Provider = p })
	pid := h.spawn(clockGrants())
	h.run()
	tools := 0
	for _, ts := range shown {
		tools += byteEstimator{}.Estimate(ts.Name) + byteEstimator{}.Estimate(ts.Description) + byteEstimator{}.Estimate(string(ts.Parameters))
	}
	var cr callRecord
	err := h.rt.view(func(tx *txn) error {
		b, err := tx.Get(callKey(pid, 0))
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &cr)
	})
	if err != nil {
		t.Fatal(err)
	}
	im, _ := h.rt.image("base:v0")
	if tools < 1000 || cr.ReservedTokens < int64(tools+im.Context.MaxOutputTokens) {
		t.Fatalf("reserved %d tokens, want at least the tool table's %d and the reply's %d", cr.ReservedTokens, tools, im.Context.MaxOutputTokens)
	}
}

// Replies without a tool call that were all cut off at the output token
// limit fail the process naming the limit, not tool support.
func TestTextOnlyRepliesCutOffNameTheLimit(t *testing.T) {
	for _, finish := range []string{"length", "stop"} {
		p := funcProvider(func(llm.Request) (llm.Response, error) {
			return llm.Response{Text: "thinking...", FinishReason: finish}, nil
		})
		h := newHarness(t, "", func(o *Options) { o.Provider = p })
		pid := h.spawn(clockGrants())
		h.run()
		info := h.info(pid)
		cutOff := strings.Contains(info.Reason, "output token limit")
		if info.Status != process.Failed || cutOff != (finish == "length") || strings.Contains(info.Reason, "tool calling") == (finish == "length") {
			t.Fatalf("finish %s: %s (%s)", finish, info.Status, info.Reason)
		}
	}
}
