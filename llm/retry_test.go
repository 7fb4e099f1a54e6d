package llm

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestRetryPolicyBackoff(t *testing.T) {
	p := RetryPolicy{}.WithDefaults()
	if p.Attempts != 8 || p.FirstBackoff != time.Second || p.MaxBackoff != time.Minute {
		t.Fatalf("defaults %+v", p)
	}
	// Full jitter: the draw scales the ceiling, which doubles up to the maximum.
	for failed, ceiling := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 7: time.Minute, 30: time.Minute} {
		if got := p.Backoff(failed, 0, 0.5); got != ceiling/2 {
			t.Errorf("backoff after %d failures at u=0.5: %s, want %s", failed, got, ceiling/2)
		}
		if got := p.Backoff(failed, 0, 0); got != 0 {
			t.Errorf("backoff at u=0: %s", got)
		}
	}
	// A server's Retry-After wins, capped at the maximum.
	if got := p.Backoff(1, 3*time.Second, 0.1); got != 3*time.Second {
		t.Errorf("retry-after: %s", got)
	}
	if got := p.Backoff(1, time.Hour, 0.1); got != time.Minute {
		t.Errorf("retry-after over the cap: %s", got)
	}
	for _, bad := range []RetryPolicy{{Attempts: -1}, {Attempts: 1001}, {FirstBackoff: -1}, {MaxBackoff: 25 * time.Hour}} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := map[string]time.Duration{
		"7":                             7 * time.Second,
		" 0 ":                           0,
		"Sun, 01 Mar 2026 12:00:30 GMT": 30 * time.Second,
		"Sun, 01 Mar 2026 11:00:00 GMT": 0, // a date in the past: no wait
	}
	for v, want := range cases {
		if got, ok := ParseRetryAfter(v, now); !ok || got != want {
			t.Errorf("%q: %s %v, want %s", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "-3", "soon"} {
		if _, ok := ParseRetryAfter(v, now); ok {
			t.Errorf("%q parsed", v)
		}
	}
}

// Every status and failure class maps to what the kernel does about it.
func TestOpenAIFailureDispositions(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   string
		want   Disposition
		hint   string
	}{
		{"rate limited", 429, `{"error":{"message":"slow down"}}`, DispositionRetry, ""},
		{"request timeout", 408, `{"error":{"message":"timeout"}}`, DispositionRetry, ""},
		{"conflict", 409, `{"error":{"message":"busy"}}`, DispositionRetry, ""},
		{"server error", 500, `{"error":{"message":"boom"}}`, DispositionRetry, ""},
		{"bad gateway", 502, `<html><body>bad gateway</body></html>`, DispositionRetry, ""},
		{"unavailable", 503, `{"error":{"message":"loading model"}}`, DispositionRetry, ""},
		{"gateway timeout", 504, ``, DispositionRetry, ""},
		{"bad key", 401, `{"error":{"message":"Incorrect API key provided"}}`, DispositionWaitHost, "authentication failed: check OPENAI_API_KEY"},
		{"forbidden", 403, `{"error":{"message":"no access"}}`, DispositionWaitHost, "authentication failed"},
		{"unknown model", 404, `{"error":{"message":"The model 'gpt-x' does not exist","code":"model_not_found"}}`, DispositionWaitHost, `model "fake-model" not found at`},
		{"wrong base URL", 404, `404 page not found`, DispositionWaitHost, "no chat-completions endpoint at"},
		{"window", 400, `{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}`, DispositionCompact, "context window"},
		{"llama.cpp window", 400, `{"error":{"message":"the request exceeds the available context size"}}`, DispositionCompact, ""},
		{"bad schema", 400, `{"error":{"message":"Invalid schema for function 'x'"}}`, DispositionFail, ""},
		{"unprocessable", 422, `{"detail":"tools are not supported"}`, DispositionFail, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := newChatServer(t, replyJSON(tc.status, tc.body))
			_, err := newTestOpenAI(t, cs.srv.URL).Complete(context.Background(), simpleRequest())
			var ce *CallError
			if !errors.As(err, &ce) || ce.StatusCode != tc.status || cs.hits.Load() != 1 {
				t.Fatalf("error %v after %d hits", err, cs.hits.Load())
			}
			if got := DispositionOf(err); got != tc.want {
				t.Fatalf("disposition %s, want %s (%v)", got, tc.want, err)
			}
			if !strings.Contains(ce.Hint, tc.hint) {
				t.Fatalf("hint %q, want it to contain %q", ce.Hint, tc.hint)
			}
		})
	}
}

// An HTML error page appears once in the error, shortened, whitespace collapsed.
func TestOpenAIErrorBodyShownOnceShortened(t *testing.T) {
	page := "<html>\n<head><title>503 Service Temporarily Unavailable</title></head>\n<body>" + strings.Repeat("<p>nginx</p>\n", 200) + "</body></html>"
	cs := newChatServer(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(503)
		w.Write([]byte(page))
	})
	_, err := newTestOpenAI(t, cs.srv.URL).Complete(context.Background(), simpleRequest())
	msg := err.Error()
	if n := strings.Count(msg, "Service Temporarily Unavailable"); n != 1 {
		t.Fatalf("the page title appears %d times in %q", n, msg)
	}
	if len(msg) > 600 || strings.Contains(msg, "\n") {
		t.Fatalf("error not shortened (%d bytes): %q", len(msg), msg)
	}
	var ce *CallError
	if !errors.As(err, &ce) || ce.RetryAfter != 5*time.Second || !ce.Transient {
		t.Fatalf("retry-after not carried: %#v", err)
	}
}

func TestOpenAIRequestSettings(t *testing.T) {
	cs := newChatServer(t, replyJSON(200, textCompletion("ok")))
	req := simpleRequest()
	req.MaxTokens = 4096
	// No key: no Authorization header. A cap below the request's limit wins.
	p := newTestOpenAI(t, cs.srv.URL, func(c *OpenAIConfig) {
		c.APIKey, c.MaxTokens, c.Temperature = "", 1000, ptr(float32(0.2))
	})
	if _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if h := cs.headers[0].Get("Authorization"); h != "" {
		t.Fatalf("Authorization %q sent without a key", h)
	}
	b := cs.body(0)
	assertJSONEqual(t, "max_tokens", b["max_tokens"], `1000`)
	if _, has := b["max_completion_tokens"]; has {
		t.Fatal("both token fields sent")
	}
	assertJSONEqual(t, "temperature", b["temperature"], `0.2`)

	// Reasoning models take max_completion_tokens; the flag can force either.
	for _, tc := range []struct{ model, field, want string }{
		{"o3-mini", "", "max_completion_tokens"},
		{"gpt-5-nano", "", "max_completion_tokens"},
		{"qwen2.5-7b", "", "max_tokens"},
		{"qwen2.5-7b", "max_completion_tokens", "max_completion_tokens"},
	} {
		cs := newChatServer(t, replyJSON(200, textCompletion("ok")))
		p := newTestOpenAI(t, cs.srv.URL, func(c *OpenAIConfig) { c.Model, c.MaxTokensField = tc.model, tc.field })
		if _, err := p.Complete(context.Background(), req); err != nil {
			t.Fatalf("%s: %v", tc.model, err)
		}
		if _, has := cs.body(0)[tc.want]; !has {
			t.Fatalf("%s with field %q: %s not sent", tc.model, tc.field, tc.want)
		}
	}
}

// A user message right after tool results (the runtime's notices) goes as
// it is to a server that takes it; one that refuses it (Mistral's API:
// "Unexpected role 'user' after role 'tool'") gets the same call again at
// once with the notices at the end of the last tool result, and every later
// call so.
func TestOpenAIUserMessageAfterAToolMessage(t *testing.T) {
	mistral := func(w http.ResponseWriter, _ *http.Request, body []byte) {
		var req struct {
			Messages []struct{ Role string } `json:"messages"`
		}
		_ = json.Unmarshal(body, &req)
		for i := 1; i < len(req.Messages); i++ {
			if req.Messages[i].Role == "user" && req.Messages[i-1].Role == "tool" {
				replyJSON(400, `{"object":"error","message":"Unexpected role 'user' after role 'tool'","type":"invalid_request_message_order"}`)(w, nil, nil)
				return
			}
		}
		replyJSON(200, textCompletion("ok"))(w, nil, nil)
	}
	req := simpleRequest()
	req.Messages = append(req.Messages,
		Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "get_current_time", Arguments: json.RawMessage(`{}`)}}},
		Message{Role: RoleTool, ToolCallID: "c1", Name: "get_current_time", Content: `{"ok":true}`},
		Message{Role: RoleUser, Content: "(runtime notice) your reply was cut off"},
		Message{Role: RoleUser, Content: "(runtime notice) new messages"})
	type sent struct {
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	decode := func(b []byte) sent {
		var s sent
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	// A server that takes the order gets it as it is.
	plain := newChatServer(t, replyJSON(200, textCompletion("ok")))
	if _, err := newTestOpenAI(t, plain.srv.URL).Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got := decode(plain.bodies[0]); len(got.Messages) != 6 || got.Messages[4].Role != "user" || got.Messages[3].Content != `{"ok":true}` {
		t.Fatalf("sent to a server that takes the order: %+v", got.Messages)
	}

	cs := newChatServer(t, mistral, mistral, mistral)
	p := newTestOpenAI(t, cs.srv.URL)
	recordedWaits(p)
	if _, err := p.Complete(context.Background(), req); err != nil {
		t.Fatalf("a notice after a tool result: %v", err)
	}
	if cs.hits.Load() != 2 {
		t.Fatalf("%d requests, want the refused one and its resend", cs.hits.Load())
	}
	got := decode(cs.bodies[1])
	last := got.Messages[len(got.Messages)-1]
	if last.Role != "tool" || !strings.HasPrefix(last.Content, `{"ok":true}`) || !strings.Contains(last.Content, "cut off") || !strings.HasSuffix(last.Content, "new messages") {
		t.Fatalf("last message resent: %+v", last)
	}
	if first := got.Messages[1]; first.Role != "user" || first.Content != "hello" {
		t.Fatalf("the first user message: %+v", first)
	}
	// Later calls go in the order the server takes from the start.
	if _, err := p.Complete(context.Background(), req); err != nil || cs.hits.Load() != 3 {
		t.Fatalf("a later call: %v after %d requests", err, cs.hits.Load())
	}
}

// A call built before another call found the server refusing the order
// went out unfolded: its own refusal is resent folded too, however late it
// comes. The resend counts among the call's attempts.
func TestOpenAIOrderRefusalResentWhateverCameFirst(t *testing.T) {
	refusal := replyJSON(400, `{"object":"error","message":"Unexpected role 'user' after role 'tool'"}`)
	cs := newChatServer(t, refusal, replyJSON(503, `{"error":{"message":"overloaded"}}`))
	p := newTestOpenAI(t, cs.srv.URL, func(c *OpenAIConfig) { c.MaxRetries = 0 })
	recordedWaits(p)
	req := simpleRequest()
	req.Messages = append(req.Messages,
		Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "get_current_time", Arguments: json.RawMessage(`{}`)}}},
		Message{Role: RoleTool, ToolCallID: "c1", Name: "get_current_time", Content: `{"ok":true}`},
		Message{Role: RoleUser, Content: "(runtime notice) new messages"})
	unfolded, err := p.buildRequest(&req)
	if err != nil {
		t.Fatal(err)
	}
	p.foldNotices.Store(true) // another call found out first
	ce := &CallError{Settlement: SettlementRejected, StatusCode: 400, Err: errors.New("Unexpected role 'user' after role 'tool'")}
	if !p.orderRefused(ce, unfolded) {
		t.Fatal("a refusal of a request built unfolded is not resent once the flag is set")
	}
	folded, _ := p.buildRequest(&req)
	if p.orderRefused(ce, folded) {
		t.Fatal("a folded request would be resent")
	}
	p.foldNotices.Store(false)
	_, err = p.Complete(context.Background(), req)
	var got *CallError
	if !errors.As(err, &got) || got.Attempts != 2 || cs.hits.Load() != 2 {
		t.Fatalf("a refused order, then a 503: %v (attempts %d, %d requests), want 2 attempts", err, got.Attempts, cs.hits.Load())
	}
}
