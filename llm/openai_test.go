package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// chatServer is a fake chat-completions server: each hit is answered by the next responder
// (the last one repeats), and every request body is kept for inspection.
type chatServer struct {
	t          *testing.T
	srv        *httptest.Server
	hits       atomic.Int32
	mu         sync.Mutex
	bodies     [][]byte
	headers    []http.Header
	responders []func(w http.ResponseWriter, r *http.Request, body []byte)
}

func newChatServer(t *testing.T, responders ...func(w http.ResponseWriter, r *http.Request, body []byte)) *chatServer {
	t.Helper()
	cs := &chatServer{t: t, responders: responders}
	cs.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(cs.hits.Add(1)) - 1
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		cs.mu.Lock()
		cs.bodies = append(cs.bodies, body)
		cs.headers = append(cs.headers, r.Header.Clone())
		cs.mu.Unlock()
		cs.responders[min(n, len(cs.responders)-1)](w, r, body)
	}))
	t.Cleanup(cs.srv.Close)
	return cs
}

func (cs *chatServer) body(i int) map[string]json.RawMessage {
	cs.t.Helper()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(cs.bodies[i], &m); err != nil {
		cs.t.Fatalf("request body %d is not JSON: %v", i, err)
	}
	return m
}

// replyJSON answers with status and a JSON body.
func replyJSON(status int, body string) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func textCompletion(text string) string {
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"fake-model-001",
		"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],
		"usage":{"prompt_tokens":11,"completion_tokens":3,"total_tokens":14}}`, text)
}

// recordedWaits replaces the retry sleep with a recorder so tests never sleep.
func recordedWaits(p *OpenAI) *[]time.Duration {
	var waits []time.Duration
	var mu sync.Mutex
	p.wait = func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		return ctx.Err()
	}
	return &waits
}

func newTestOpenAI(t *testing.T, baseURL string, mutate ...func(*OpenAIConfig)) *OpenAI {
	t.Helper()
	cfg := OpenAIConfig{BaseURL: baseURL + "/v1", APIKey: "sk-test", Model: "fake-model", RetryBackoff: 100 * time.Millisecond}
	for _, m := range mutate {
		m(&cfg)
	}
	p, err := NewOpenAI(cfg)
	if err != nil {
		t.Fatalf("NewOpenAI: %v", err)
	}
	return p
}

func simpleRequest() Request {
	return Request{
		Process:  ProcessInfo{PID: 4, Image: "base:v0"},
		Messages: []Message{{Role: RoleSystem, Content: "sys"}, {Role: RoleUser, Content: "hello"}},
	}
}

const strictSchema = `{"type": "object", "properties": {"timezone": {"type": "string", "description": "IANA name"}}, "required": ["timezone"], "additionalProperties": false}`
const looseSchema = `{"type":"object","properties":{"seconds":{"type":"integer","minimum":0,"maximum":60,"default":1},"reason":{"type":"string"}},"required":["reason"],"additionalProperties":false}`

func TestOpenAIMultiTurnToolUse(t *testing.T) {
	cs := newChatServer(t,
		replyJSON(200, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"fake-model-001",
			"choices":[{"index":0,"message":{"role":"assistant","content":"","tool_calls":[
				{"id":"call_abc","type":"function","function":{"name":"get_current_time","arguments":"{\"timezone\":\"UTC\"}"}},
				{"id":"call_def","type":"function","function":{"name":"sleep","arguments":"{\"reason\":\"wait\",\"seconds\":2}"}}]},
			"finish_reason":"tool_calls"}],
			"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150}}`),
		replyJSON(200, textCompletion("It is noon.")),
	)
	p := newTestOpenAI(t, cs.srv.URL)
	tools := []ToolSchema{
		{Name: "get_current_time", Description: "Read the clock.", Parameters: json.RawMessage(strictSchema)},
		{Name: "sleep", Description: "Wait.", Parameters: json.RawMessage(looseSchema)},
	}
	req := Request{
		Process:   ProcessInfo{PID: 4, Image: "base:v0", GoalOID: "g"},
		Messages:  []Message{{Role: RoleSystem, Content: "You are a process."}, {Role: RoleUser, Content: "What time is it?"}},
		Tools:     tools,
		MaxTokens: 256,
	}
	resp, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("turn 0: %v", err)
	}
	wantCalls := []ToolCall{
		{ID: "call_abc", Name: "get_current_time", Arguments: json.RawMessage(`{"timezone":"UTC"}`)},
		{ID: "call_def", Name: "sleep", Arguments: json.RawMessage(`{"reason":"wait","seconds":2}`)},
	}
	if fmt.Sprint(resp.ToolCalls) != fmt.Sprint(wantCalls) || resp.FinishReason != "tool_calls" ||
		resp.Model != "fake-model-001" || resp.Usage != (Usage{PromptTokens: 120, CompletionTokens: 30}) {
		t.Fatalf("turn 0 response = %#v", resp)
	}

	// The request as the server saw it.
	b := cs.body(0)
	assertJSONEqual(t, "model", b["model"], `"fake-model"`)
	assertJSONEqual(t, "max_tokens", b["max_tokens"], `256`)
	assertJSONEqual(t, "messages", b["messages"], `[{"role":"system","content":"You are a process."},{"role":"user","content":"What time is it?"}]`)
	var sentTools []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Strict      bool            `json:"strict"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal(b["tools"], &sentTools); err != nil || len(sentTools) != 2 {
		t.Fatalf("tools = %s (%v)", b["tools"], err)
	}
	for i, st := range sentTools {
		var want bytes.Buffer
		json.Compact(&want, tools[i].Parameters)
		if st.Type != "function" || st.Function.Name != tools[i].Name || st.Function.Description != tools[i].Description {
			t.Fatalf("tools[%d] = %+v", i, st)
		}
		// The schema arrives byte for byte (modulo insignificant whitespace), keys in order.
		if string(st.Function.Parameters) != want.String() {
			t.Fatalf("tools[%d].parameters = %s, want %s", i, st.Function.Parameters, want.String())
		}
	}
	if !sentTools[0].Function.Strict || sentTools[1].Function.Strict {
		t.Fatalf("strict flags = %v, %v; want true for the closed all-required schema only", sentTools[0].Function.Strict, sentTools[1].Function.Strict)
	}
	if got := cs.headers[0].Get("Authorization"); got != "Bearer sk-test" {
		t.Fatalf("Authorization = %q", got)
	}

	// Turn 1 sends the assistant's calls and both results back.
	req.Turn = 1
	req.Messages = append(req.Messages,
		Message{Role: RoleAssistant, ToolCalls: resp.ToolCalls},
		Message{Role: RoleTool, ToolCallID: "call_abc", Name: "get_current_time", Content: `{"now":"12:00"}`},
		Message{Role: RoleTool, ToolCallID: "call_def", Name: "sleep", Content: `{"slept":true}`},
	)
	resp, err = p.Complete(context.Background(), req)
	if err != nil {
		t.Fatalf("turn 1: %v", err)
	}
	if resp.Text != "It is noon." || len(resp.ToolCalls) != 0 || resp.FinishReason != "stop" {
		t.Fatalf("turn 1 response = %#v", resp)
	}
	assertJSONEqual(t, "turn 1 messages", cs.body(1)["messages"], `[
		{"role":"system","content":"You are a process."},
		{"role":"user","content":"What time is it?"},
		{"role":"assistant","tool_calls":[
			{"id":"call_abc","type":"function","function":{"name":"get_current_time","arguments":"{\"timezone\":\"UTC\"}"}},
			{"id":"call_def","type":"function","function":{"name":"sleep","arguments":"{\"reason\":\"wait\",\"seconds\":2}"}}]},
		{"role":"tool","content":"{\"now\":\"12:00\"}","name":"get_current_time","tool_call_id":"call_abc"},
		{"role":"tool","content":"{\"slept\":true}","name":"sleep","tool_call_id":"call_def"}]`)
	if p.Name() != "openai" || p.Model() != "fake-model" {
		t.Fatalf("Name/Model = %q/%q", p.Name(), p.Model())
	}
}

func assertJSONEqual(t *testing.T, what string, got json.RawMessage, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %s is not JSON: %v", what, got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad expectation: %v", what, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("%s = %s\nwant %s", what, gb, wb)
	}
}

func TestOpenAIRetriesServerErrorThenSucceeds(t *testing.T) {
	cs := newChatServer(t,
		replyJSON(500, `{"error":{"message":"overloaded","type":"server_error"}}`),
		replyJSON(200, textCompletion("ok")),
	)
	p := newTestOpenAI(t, cs.srv.URL, func(c *OpenAIConfig) { c.MaxRetries = 2 })
	waits := recordedWaits(p)
	resp, err := p.Complete(context.Background(), simpleRequest())
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if resp.Text != "ok" || cs.hits.Load() != 2 {
		t.Fatalf("text %q after %d hits", resp.Text, cs.hits.Load())
	}
	if len(*waits) != 1 || (*waits)[0] < 50*time.Millisecond || (*waits)[0] > 100*time.Millisecond {
		t.Fatalf("waits = %v, want one in [50ms, 100ms]", *waits)
	}
	// Both attempts sent the same request.
	if !bytes.Equal(cs.bodies[0], cs.bodies[1]) {
		t.Fatalf("retry sent a different body:\n%s\n%s", cs.bodies[0], cs.bodies[1])
	}
}

func TestOpenAIRetryAfterAndBackoffGrowth(t *testing.T) {
	cs := newChatServer(t,
		func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.Header().Set("Retry-After", "3")
			replyJSON(429, `{"error":{"message":"slow down","type":"rate_limit"}}`)(w, nil, nil)
		},
		replyJSON(503, `{"error":{"message":"unavailable"}}`),
	)
	p := newTestOpenAI(t, cs.srv.URL, func(c *OpenAIConfig) { c.MaxRetries = 3 })
	waits := recordedWaits(p)
	_, err := p.Complete(context.Background(), simpleRequest())
	var ce *CallError
	if !errors.As(err, &ce) || ce.Settlement != SettlementRejected || ce.Permanent || ce.StatusCode != 503 || ce.Attempts != 4 {
		t.Fatalf("error = %#v", err)
	}
	if cs.hits.Load() != 4 || len(*waits) != 3 {
		t.Fatalf("hits %d waits %v", cs.hits.Load(), *waits)
	}
	w := *waits
	if w[0] != 3*time.Second {
		t.Fatalf("first wait %v, want the server's Retry-After of 3s", w[0])
	}
	if w[1] < 100*time.Millisecond || w[1] > 200*time.Millisecond || w[2] < 200*time.Millisecond || w[2] > 400*time.Millisecond {
		t.Fatalf("backoff waits %v, want [100ms,200ms] then [200ms,400ms]", w[1:])
	}
	if !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("error %q does not carry the server's message", err)
	}
}

func TestOpenAIClientErrorIsPermanent(t *testing.T) {
	cs := newChatServer(t, replyJSON(400, `{"error":{"message":"Invalid schema for function 'x'","type":"invalid_request_error","param":"tools[0]"}}`))
	p := newTestOpenAI(t, cs.srv.URL)
	waits := recordedWaits(p)
	_, err := p.Complete(context.Background(), simpleRequest())
	var ce *CallError
	if !errors.As(err, &ce) || ce.Settlement != SettlementRejected || !ce.Permanent || ce.StatusCode != 400 || ce.Attempts != 1 {
		t.Fatalf("error = %#v", err)
	}
	if cs.hits.Load() != 1 || len(*waits) != 0 {
		t.Fatalf("hits %d waits %v: a 4xx must not be retried", cs.hits.Load(), *waits)
	}
	if !strings.Contains(err.Error(), "Invalid schema for function") {
		t.Fatalf("error %q does not carry the server's message", err)
	}
	// A non-JSON error body still counts as the server's answer.
	cs2 := newChatServer(t, replyJSON(404, `not found here`))
	_, err = newTestOpenAI(t, cs2.srv.URL).Complete(context.Background(), simpleRequest())
	if SettlementOf(err) != SettlementRejected || !IsPermanent(err) {
		t.Fatalf("404 with text body: %v", err)
	}
}

func TestOpenAIConnectionRefusedIsNotStarted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := newTestOpenAI(t, "http://"+addr, func(c *OpenAIConfig) { c.MaxRetries = 2 })
	waits := recordedWaits(p)
	_, err = p.Complete(context.Background(), simpleRequest())
	var ce *CallError
	if !errors.As(err, &ce) || ce.Settlement != SettlementNotStarted || ce.Permanent || !ce.Transient || ce.Attempts != 3 {
		t.Fatalf("error = %#v", err)
	}
	if len(*waits) != 2 {
		t.Fatalf("waits %v, want two retries", *waits)
	}
	if !strings.Contains(err.Error(), "refused") {
		t.Fatalf("error %q does not say the connection was refused", err)
	}
}

func TestOpenAIDNSFailureIsNotStarted(t *testing.T) {
	transport := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: "llm.invalid", IsNotFound: true}}
	}}
	p := newTestOpenAI(t, "http://llm.invalid", func(c *OpenAIConfig) {
		c.HTTPClient = &http.Client{Transport: transport}
		c.MaxRetries = -1
	})
	_, err := p.Complete(context.Background(), simpleRequest())
	var ce *CallError
	if !errors.As(err, &ce) || ce.Settlement != SettlementNotStarted || ce.Attempts != 1 {
		t.Fatalf("error = %#v", err)
	}
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) {
		t.Fatalf("error %v does not wrap the DNS error", err)
	}
}

func TestOpenAIHangPastTimeoutIsUnknown(t *testing.T) {
	release := make(chan struct{})
	cs := newChatServer(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	p := newTestOpenAI(t, cs.srv.URL, func(c *OpenAIConfig) { c.Timeout = 300 * time.Millisecond })
	waits := recordedWaits(p)
	start := time.Now()
	_, err := p.Complete(context.Background(), simpleRequest())
	elapsed := time.Since(start)
	var ce *CallError
	if !errors.As(err, &ce) || ce.Settlement != SettlementUnknown || ce.Attempts != 1 {
		t.Fatalf("error = %#v", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v does not wrap the deadline", err)
	}
	if cs.hits.Load() != 1 || len(*waits) != 0 {
		t.Fatalf("hits %d waits %v: an unknown outcome must not be retried", cs.hits.Load(), *waits)
	}
	if elapsed > 30*time.Second {
		t.Fatalf("took %v; the per-attempt timeout was not applied", elapsed)
	}
}

func TestOpenAIUnreadableAnswersAreUnknown(t *testing.T) {
	tests := []struct {
		name      string
		responder func(http.ResponseWriter, *http.Request, []byte)
		want      string
	}{
		{"malformed JSON", replyJSON(200, `{"id": "x", "choices": [`), "unreadable answer (status 200)"},
		{"not JSON at all", replyJSON(200, `<html>gateway</html>`), "unreadable answer (status 200)"},
		{"no choices", replyJSON(200, `{"id":"x","choices":[]}`), "the answer has no choices"},
		{"connection closed after the request", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}, "no answer after the request was sent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := newChatServer(t, tc.responder)
			p := newTestOpenAI(t, cs.srv.URL)
			waits := recordedWaits(p)
			_, err := p.Complete(context.Background(), simpleRequest())
			var ce *CallError
			if !errors.As(err, &ce) || ce.Settlement != SettlementUnknown || ce.Permanent {
				t.Fatalf("error = %#v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if cs.hits.Load() != 1 || len(*waits) != 0 {
				t.Fatalf("hits %d waits %v: must not retry", cs.hits.Load(), *waits)
			}
		})
	}
}

func TestOpenAICancelDuringRetryWait(t *testing.T) {
	cs := newChatServer(t, replyJSON(502, `{"error":{"message":"bad gateway"}}`))
	p := newTestOpenAI(t, cs.srv.URL, func(c *OpenAIConfig) { c.MaxRetries = 2 })
	ctx, cancel := context.WithCancel(context.Background())
	p.wait = func(ctx context.Context, d time.Duration) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	}
	_, err := p.Complete(ctx, simpleRequest())
	var ce *CallError
	if !errors.As(err, &ce) || ce.Settlement != SettlementRejected || ce.StatusCode != 502 || ce.Attempts != 1 {
		t.Fatalf("error = %#v", err)
	}
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "bad gateway") {
		t.Fatalf("error %v should name the cancellation and the last attempt", err)
	}
	// A context that is already done sends nothing.
	_, err = p.Complete(ctx, simpleRequest())
	if SettlementOf(err) != SettlementNotStarted || cs.hits.Load() != 1 {
		t.Fatalf("done context: %v after %d hits", err, cs.hits.Load())
	}
}

func TestOpenAIModelOutputNormalization(t *testing.T) {
	cs := newChatServer(t, replyJSON(200, `{"model":"","choices":[{"index":0,"message":{"role":"assistant","refusal":"I can't help with that.","tool_calls":[
		{"type":"function","function":{"name":"a","arguments":""}},
		{"id":"given","type":"function","function":{"name":"b","arguments":"{\"x\": 1,"}}]},"finish_reason":"tool_calls"}]}`))
	p := newTestOpenAI(t, cs.srv.URL)
	req := simpleRequest()
	req.Turn = 5
	resp, err := p.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text != "I can't help with that." || resp.Model != "fake-model" {
		t.Fatalf("text/model = %q/%q", resp.Text, resp.Model)
	}
	if resp.ToolCalls[0].ID != "call_4_5_0" || string(resp.ToolCalls[0].Arguments) != `{}` {
		t.Fatalf("call 0 = %+v", resp.ToolCalls[0])
	}
	if resp.ToolCalls[1].ID != "given" || string(resp.ToolCalls[1].Arguments) != `"{\"x\": 1,"` {
		t.Fatalf("call 1 = %+v", resp.ToolCalls[1])
	}
	if _, err := json.Marshal(resp); err != nil {
		t.Fatalf("response is not encodable: %v", err)
	}
}

func TestOpenAIRejectsBadRequestsWithoutSending(t *testing.T) {
	cs := newChatServer(t, replyJSON(200, textCompletion("never")))
	p := newTestOpenAI(t, cs.srv.URL)
	bad := simpleRequest()
	bad.Tools = []ToolSchema{{Name: "has space", Parameters: json.RawMessage(`{"type":"object"}`)}}
	_, err := p.Complete(context.Background(), bad)
	if !errors.Is(err, ErrInvalidRequest) || SettlementOf(err) != SettlementNotStarted || !IsPermanent(err) ||
		!strings.Contains(err.Error(), `tools[0].name: "has space" must match`) {
		t.Fatalf("bad tool name: %v", err)
	}
	bad = simpleRequest()
	bad.Messages = append(bad.Messages, Message{Role: RoleTool, ToolCallID: "nope", Content: "{}"})
	_, err = p.Complete(context.Background(), bad)
	if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "messages[2].tool_call_id") {
		t.Fatalf("orphan tool message: %v", err)
	}
	if cs.hits.Load() != 0 {
		t.Fatalf("invalid requests reached the server %d times", cs.hits.Load())
	}
}

func TestOpenAIEmptyParametersGetAnEmptyObjectSchema(t *testing.T) {
	cs := newChatServer(t, replyJSON(200, textCompletion("ok")))
	p := newTestOpenAI(t, cs.srv.URL)
	req := simpleRequest()
	req.Tools = []ToolSchema{{Name: "process_exit", Description: "Exit."}}
	if _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	assertJSONEqual(t, "tools", cs.body(0)["tools"], `[{"type":"function","function":{"name":"process_exit","description":"Exit.","parameters":{"type":"object","properties":{}}}}]`)
	if _, ok := cs.body(0)["max_completion_tokens"]; ok {
		t.Fatal("max_completion_tokens sent although MaxTokens is 0")
	}
}

// failingTransport is a RoundTripper that reports no httptrace events.
type failingTransport struct{ err error }

func (f failingTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

func TestOpenAICustomTransportClassification(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("network is unreachable")}
	p := newTestOpenAI(t, "http://example.test", func(c *OpenAIConfig) {
		c.HTTPClient = &http.Client{Transport: failingTransport{err: dial}}
		c.MaxRetries = -1
	})
	if _, err := p.Complete(context.Background(), simpleRequest()); SettlementOf(err) != SettlementNotStarted {
		t.Fatalf("dial failure through a custom transport: %v", err)
	}
	p = newTestOpenAI(t, "http://example.test", func(c *OpenAIConfig) {
		c.HTTPClient = &http.Client{Transport: failingTransport{err: errors.New("stream reset")}}
	})
	waits := recordedWaits(p)
	if _, err := p.Complete(context.Background(), simpleRequest()); SettlementOf(err) != SettlementUnknown || len(*waits) != 0 {
		t.Fatalf("opaque failure through a custom transport: %v (waits %v)", err, *waits)
	}
}

func TestOpenAIConcurrentCalls(t *testing.T) {
	cs := newChatServer(t, func(w http.ResponseWriter, _ *http.Request, body []byte) {
		var req struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		json.Unmarshal(body, &req)
		replyJSON(200, textCompletion("echo "+req.Messages[len(req.Messages)-1].Content))(w, nil, nil)
	})
	p := newTestOpenAI(t, cs.srv.URL)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req := simpleRequest()
			req.Messages[1].Content = fmt.Sprintf("m%d", i)
			resp, err := p.Complete(context.Background(), req)
			if err == nil && resp.Text != fmt.Sprintf("echo m%d", i) {
				err = fmt.Errorf("call %d got %q", i, resp.Text)
			}
			if err != nil {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestOpenAIConfig(t *testing.T) {
	t.Setenv(EnvOpenAIBaseURL, " http://localhost:8000/v1 ")
	t.Setenv(EnvOpenAIAPIKey, "sk-env")
	t.Setenv(EnvModel, "local-model")
	cfg := OpenAIConfigFromEnv()
	if cfg.BaseURL != "http://localhost:8000/v1" || cfg.APIKey != "sk-env" || cfg.Model != "local-model" {
		t.Fatalf("from env = %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("valid env config rejected: %v", err)
	}
	tests := []struct {
		name string
		cfg  OpenAIConfig
		want string
	}{
		{"missing model", OpenAIConfig{BaseURL: "http://x/v1"}, "model: required (set LIBOS_MODEL"},
		{"blank model", OpenAIConfig{BaseURL: "http://x/v1", Model: "  "}, "model: required"},
		{"relative base URL", OpenAIConfig{BaseURL: "localhost:8000", Model: "m"}, "base_url: must be an absolute http or https URL (OPENAI_BASE_URL)"},
		{"ftp base URL", OpenAIConfig{BaseURL: "ftp://x/v1", Model: "m"}, "base_url"},
		{"default URL needs a key", OpenAIConfig{Model: "m"}, "api_key: required for https://api.openai.com/v1 (set OPENAI_API_KEY)"},
		{"negative timeout", OpenAIConfig{BaseURL: "http://x", Model: "m", Timeout: -time.Second}, "timeout: must not be negative"},
		{"negative backoff", OpenAIConfig{BaseURL: "http://x", Model: "m", RetryBackoff: -1}, "retry_backoff: must not be negative"},
		{"negative max tokens", OpenAIConfig{BaseURL: "http://x", Model: "m", MaxTokens: -1}, "max_tokens: must not be negative"},
		{"unknown token field", OpenAIConfig{BaseURL: "http://x", Model: "m", MaxTokensField: "tokens"}, "max_tokens_field: must be max_tokens or max_completion_tokens"},
		{"temperature out of range", OpenAIConfig{BaseURL: "http://x", Model: "m", Temperature: ptr(float32(2.5))}, "temperature: must be 0..2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewOpenAI(tc.cfg)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewOpenAI = %v, want error containing %q", err, tc.want)
			}
		})
	}
	p, err := NewOpenAI(OpenAIConfig{Model: "m", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if p.maxRetries != 0 || p.timeout != DefaultOpenAITimeout || p.backoff != DefaultOpenAIRetryBackoff || p.cfg.BaseURL != DefaultOpenAIBaseURL {
		t.Fatalf("defaults not applied: %+v", p)
	}
}

func TestStrictEligible(t *testing.T) {
	tests := []struct {
		schema string
		want   bool
	}{
		{strictSchema, true},
		{`{"type":"object","properties":{},"additionalProperties":false}`, true},
		{`{"type":"object","properties":{"a":{"type":"array","items":{"type":"object","properties":{"b":{"type":["string","null"]}},"required":["b"],"additionalProperties":false}}},"required":["a"],"additionalProperties":false}`, true},
		{`{"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"$ref":"#/$defs/n"}]}},"required":["a"],"additionalProperties":false,"$defs":{"n":{"type":"null"}}}`, true},
		{looseSchema, false}, // optional property and range keywords
		{`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`, false},                                              // open object
		{`{"type":"object","properties":{"a":{"type":"object","properties":{}}},"required":["a"],"additionalProperties":false}`, false}, // open nested object
		{`{"type":"object","properties":{"a":{"type":"string","pattern":"x"}},"required":["a"],"additionalProperties":false}`, false},   // unsupported keyword
		{`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":{"type":"string"}}`, false},     // schema-valued additionalProperties
		{`{"type":"array","items":{"type":"string"}}`, false},                                                                           // root not an object
		{`{"type":"object","properties":{"a":{"anyOf":{"type":"string"}}},"required":["a"],"additionalProperties":false}`, false},       // malformed anyOf
		{`not json`, false},
	}
	for i, tc := range tests {
		if got := strictEligible(json.RawMessage(tc.schema)); got != tc.want {
			t.Errorf("case %d: strictEligible(%s) = %v, want %v", i, tc.schema, got, tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
