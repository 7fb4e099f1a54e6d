package kernel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/process"
)

// greeter is a Host's own model: an llm.Provider. On its first turn it
// waits for a message from ana; then it exits with a reply to her.
type greeter struct{}

func (greeter) Name() string { return "greeter" }

func (greeter) Complete(_ context.Context, req llm.Request) (llm.Response, error) {
	id := fmt.Sprintf("call_%d_%d", req.Process.PID, req.Turn)
	if req.Turn == 0 {
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: id, Name: "receive_process_messages",
			Arguments: json.RawMessage(`{"sender": "human:ana"}`)}}}, nil
	}
	// The answer of receive_process_messages holds the messages.
	var got struct {
		Messages []struct{ Body string } `json:"messages"`
	}
	for _, m := range req.Messages {
		if m.Role == llm.RoleTool && m.Name == "receive_process_messages" {
			json.Unmarshal([]byte(m.Content), &got)
		}
	}
	if len(got.Messages) == 0 {
		return llm.Response{}, &llm.CallError{Settlement: llm.SettlementRejected, Permanent: true, Err: fmt.Errorf("no message")}
	}
	args, _ := json.Marshal(map[string]any{"payload": map[string]string{"reply": "hello, " + got.Messages[0].Body}})
	return llm.Response{ToolCalls: []llm.ToolCall{{ID: id, Name: "process_exit", Arguments: args}}}, nil
}

// A Host embeds the kernel: it opens a runtime directory with its own
// model, starts a process with grants, runs it until it waits for a person,
// posts that person's message, and reads the result.
func Example() {
	dir, err := os.MkdirTemp("", "libos-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	rt, err := kernel.Open(dir, kernel.Options{Provider: greeter{}})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	pid, err := rt.Spawn(kernel.SpawnSpec{
		Image: "base:v0",
		Goal:  "greet whoever writes to you",
		Grants: []capabilities.Grant{
			{Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// Idle: every process has ended or waits for something only the Host can bring.
	if err := rt.RunUntilIdle(ctx); err != nil {
		log.Fatal(err)
	}
	info, err := rt.Process(pid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Status, "on", info.WaitingOn)

	if _, err := rt.PostHumanMessage(kernel.HumanMessage{To: pid, From: "ana", Body: "ana"}); err != nil {
		log.Fatal(err)
	}
	if err := rt.RunUntilIdle(ctx); err != nil {
		log.Fatal(err)
	}
	info, err = rt.Process(pid)
	if err != nil {
		log.Fatal(err)
	}
	_, result, err := rt.ReadObject(info.ResultOID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Status, string(result))
	// Output:
	// waiting on human
	// exited {"reply":"hello, ana"}
}

// The README's embedding snippet is Example's body, so it cannot rot.
func TestReadmeEmbeddingIsTheExample(t *testing.T) {
	src, err := os.ReadFile("hostapi_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	start := strings.Index(s, "func Example() {\n") + len("func Example() {\n")
	end := start + strings.Index(s[start:], "\t// Output:")
	var body strings.Builder
	for _, line := range strings.SplitAfter(s[start:end], "\n") {
		body.WriteString(strings.TrimPrefix(line, "\t"))
	}
	if !strings.Contains(string(readme), "```go\n"+body.String()+"```") {
		t.Fatalf("README.md's embedding snippet must be Example's body (kernel/hostapi_test.go), verbatim:\n%s", body.String())
	}
}

// approvalScript: the root spawns a child, a call its ask grant holds, and
// waits for it; the child exits.
const approvalScript = `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: "say hello"}
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: wait_child_process
            arguments: {child_pid: "${last.pid}"}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
  - image: base:v0
    turns:
      - tool_calls:
          - name: process_exit
            arguments: {message: child done}
`

// InspectWithArguments answers what Inspect answers, whichever arguments
// the Host already knows.
func TestInspectWithArgumentsIsInspect(t *testing.T) {
	rt, err := kernel.Open(t.TempDir(), kernel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	script, err := llm.ParseScript([]byte(approvalScript))
	if err != nil {
		t.Fatal(err)
	}
	p, err := llm.NewReplay(script, rt)
	if err != nil {
		t.Fatal(err)
	}
	rt.SetProvider(p)
	write := []capabilities.Right{capabilities.Write}
	pid, err := rt.Spawn(kernel.SpawnSpec{Image: "base:v0", Goal: "delegate", Grants: []capabilities.Grant{
		{Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}},
		{ID: "allow-spawn", Resource: "process:spawn", Rights: write},
		{ID: "ask-spawn", Resource: "process:spawn", Rights: write, Effect: capabilities.Ask},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := rt.RunUntilIdle(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := rt.Approvals()
	if err != nil || len(list) != 1 {
		t.Fatalf("approvals %v %v", list, err)
	}
	if err := rt.Approve(kernel.ApprovalRef{PID: pid, CallID: list[0].CallID}); err != nil {
		t.Fatal(err)
	}
	if err := rt.RunUntilIdle(ctx); err != nil {
		t.Fatal(err)
	}
	want, err := rt.Inspect(pid)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.RecentCalls) < 3 || want.Status != "exited" {
		t.Fatalf("%s, recent calls %+v", want.Status, want.RecentCalls)
	}
	all := map[kernel.CallKey]json.RawMessage{}
	for _, c := range want.RecentCalls {
		all[kernel.CallKey{Turn: c.Turn, CallID: c.CallID}] = c.Arguments
	}
	for name, known := range map[string]func(kernel.CallKey) (json.RawMessage, bool){
		"none": func(kernel.CallKey) (json.RawMessage, bool) { return nil, false },
		"all":  func(k kernel.CallKey) (json.RawMessage, bool) { a, ok := all[k]; return a, ok },
		"one": func(k kernel.CallKey) (json.RawMessage, bool) {
			if k.CallID != want.RecentCalls[0].CallID {
				return nil, false
			}
			return all[k], true
		},
	} {
		got, err := rt.InspectWithArguments(pid, known)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s known: %+v %v\nwant %+v", name, got, err, want)
		}
	}
	if _, err := rt.InspectWithArguments(99, nil); err == nil {
		t.Fatal("no error for a missing pid")
	}
}

// A pause requested of a running process changes no state until its
// quantum ends, so the log says so with a signal entry; withdrawing it
// says so too, and the process then goes on.
func TestPauseOfARunningProcessIsLogged(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var signals []kernel.Event
	p := blockingProvider{entered: entered, release: release}
	rt, err := kernel.Open(t.TempDir(), kernel.Options{Provider: p, Clock: clock.NewFake(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC), true),
		OnEvent: func(ev kernel.Event) {
			if ev.Kind == kernel.EventSignal {
				mu.Lock()
				signals = append(signals, ev)
				mu.Unlock()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	pid, err := rt.Spawn(kernel.SpawnSpec{Image: "base:v0", Goal: "g"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rt.RunUntilIdle(context.Background()) }()
	<-entered
	if _, err := rt.Signal(pid, kernel.SignalPause); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Signal(pid, kernel.SignalPause); err != nil { // asked again: one entry
		t.Fatal(err)
	}
	if _, err := rt.Signal(pid, kernel.SignalContinue); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(signals) != 2 || signals[0].PID != pid || !strings.Contains(signals[0].Reason, "pause requested") ||
		!strings.Contains(signals[1].Reason, "withdrawn") {
		t.Fatalf("signal events %+v", signals)
	}
	if info, _ := rt.Process(pid); info.Status != process.Exited {
		t.Fatalf("after the withdrawn pause: %s", info.Status)
	}
	page, err := rt.EventLog(kernel.EventQuery{PID: pid})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range page.Entries {
		if l.Type == kernel.LogSignal {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d signal entries in the log, want 2", n)
	}
}

// blockingProvider exits at once, after signalling entered and waiting for
// release on its first call.
type blockingProvider struct{ entered, release chan struct{} }

func (blockingProvider) Name() string { return "blocking" }
func (b blockingProvider) Complete(_ context.Context, req llm.Request) (llm.Response, error) {
	if req.Turn == 0 {
		b.entered <- struct{}{}
		<-b.release
	}
	return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "process_exit", Arguments: json.RawMessage(`{}`)}}}, nil
}
