package llm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// These tests hold the adapter to what real compatible servers answer: their
// error bodies and statuses, rate-limit headers, redirects, and answers that
// break the rules a next request must keep.

// completeAgainst answers one request with status, body and header pairs,
// through the real adapter.
func completeAgainst(t *testing.T, status int, body string, header ...string) (Response, error) {
	t.Helper()
	cs := newChatServer(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	})
	return newTestOpenAI(t, cs.srv.URL).Complete(context.Background(), simpleRequest())
}

func TestOpenAIServersRefusalsAreClassified(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   string
		want   Disposition
	}{
		{"Gemini's window", 400, `[{"error":{"code":400,"message":"The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}]`, DispositionCompact},
		{"TGI's window", 422, "{\"error\":\"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens and 200 `max_new_tokens`\",\"error_type\":\"validation\"}", DispositionCompact},
		{"a proxy's 413 page", 413, `<html><head><title>413 Request Entity Too Large</title></head><body>nginx</body></html>`, DispositionCompact},
		{"a window error as a string", 400, `{"error":"This model's maximum context length is 4096 tokens."}`, DispositionCompact},
		{"Anthropic's overload", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, DispositionRetry},
		{"Cloudflare's timeout", 524, `<html><title>524: A timeout occurred</title></html>`, DispositionRetry},
		{"Cloudflare's unknown error", 520, `<html>520</html>`, DispositionRetry},
		{"too early", 425, `{}`, DispositionRetry},
		{"DeepSeek's unknown model", 400, `{"error":{"message":"Model Not Exist","type":"invalid_request_error","code":"invalid_request_error"}}`, DispositionWaitHost},
		{"OpenRouter's unknown model", 400, `{"error":{"message":"fake-model is not a valid model ID","code":400}}`, DispositionWaitHost},
		{"Gemini's bad key", 400, `[{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT"}}]`, DispositionWaitHost},
		{"no credit", 402, `{"error":{"message":"Insufficient credits","code":402}}`, DispositionWaitHost},
		{"not implemented", 501, `{}`, DispositionFail},
		{"a bad request", 400, `{"error":{"message":"messages[1].content: expected a string","type":"invalid_request_error"}}`, DispositionFail},
	} {
		_, err := completeAgainst(t, c.status, c.body)
		if got := DispositionOf(err); got != c.want {
			t.Errorf("%s (%d): disposition %s, want %s: %v", c.name, c.status, got, c.want, err)
		}
	}
}

// A body go-openai cannot read as {"error": {...}} still gives the error the
// server's words.
func TestOpenAIErrorOfAStringKeepsTheServersWords(t *testing.T) {
	_, err := completeAgainst(t, 400, `{"error":"the request was refused for a reason of its own"}`)
	if err == nil || !strings.Contains(err.Error(), "refused for a reason of its own") {
		t.Fatalf("error %v, want the server's words", err)
	}
}

func TestOpenAIRateLimitResetHeaders(t *testing.T) {
	for _, c := range []struct {
		name   string
		header []string
		want   time.Duration
	}{
		{"retry-after-ms", []string{"Retry-After-Ms", "1500"}, 1500 * time.Millisecond},
		{"Retry-After wins", []string{"Retry-After", "7", "Retry-After-Ms", "1500"}, 7 * time.Second},
		{"the exhausted limit's reset", []string{"X-Ratelimit-Remaining-Requests", "12", "X-Ratelimit-Reset-Requests", "2s",
			"X-Ratelimit-Remaining-Tokens", "0", "X-Ratelimit-Reset-Tokens", "6m0s"}, 6 * time.Minute},
		{"only the exhausted one", []string{"X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", "20ms",
			"X-Ratelimit-Remaining-Tokens", "500", "X-Ratelimit-Reset-Tokens", "6m0s"}, 20 * time.Millisecond},
		{"the latest when none is said exhausted", []string{"X-Ratelimit-Reset-Requests", "1.5", "X-Ratelimit-Reset-Tokens", "250ms"}, 1500 * time.Millisecond},
	} {
		_, err := completeAgainst(t, 429, `{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}`, c.header...)
		var ce *CallError
		if !errors.As(err, &ce) || ce.RetryAfter != c.want || DispositionOf(err) != DispositionRetry {
			t.Errorf("%s: %#v, want RetryAfter %s", c.name, err, c.want)
		}
	}
	// Headers that say nothing usable leave the policy's own backoff.
	_, err := completeAgainst(t, 429, `{}`, "X-Ratelimit-Reset-Tokens", "soon", "Retry-After-Ms", "-5")
	var ce *CallError
	if !errors.As(err, &ce) || ce.RetryAfter != 0 {
		t.Fatalf("unusable headers: %#v, want no RetryAfter", err)
	}
}

// A redirect that would turn the POST into a GET is not followed: the Host is
// asked to fix the base URL, and the server sees no GET. One that keeps the
// method (307) is followed.
func TestOpenAIRedirects(t *testing.T) {
	var methods []string
	cs := newChatServer(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		http.Redirect(w, r, "/elsewhere/v1/chat/completions", http.StatusMovedPermanently)
	})
	cs.srv.Config.Handler = func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			methods = append(methods, r.Method+" "+r.URL.Path)
			if strings.HasPrefix(r.URL.Path, "/elsewhere/") {
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
			next.ServeHTTP(w, r)
		})
	}(cs.srv.Config.Handler)
	_, err := newTestOpenAI(t, cs.srv.URL).Complete(context.Background(), simpleRequest())
	var ce *CallError
	if !errors.As(err, &ce) || DispositionOf(err) != DispositionWaitHost || ce.Settlement != SettlementRejected ||
		ce.StatusCode != http.StatusMovedPermanently || !strings.Contains(ce.Hint, "/elsewhere/v1/chat/completions") {
		t.Fatalf("301: %#v", err)
	}
	if len(methods) != 1 {
		t.Fatalf("requests %v, want the POST alone", methods)
	}

	moved := newChatServer(t, replyJSON(200, textCompletion("moved")))
	front := newChatServer(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		http.Redirect(w, r, moved.srv.URL+"/v1/chat/completions", http.StatusTemporaryRedirect)
	})
	resp, err := newTestOpenAI(t, front.srv.URL).Complete(context.Background(), simpleRequest())
	if err != nil || resp.Text != "moved" || moved.hits.Load() != 1 {
		t.Fatalf("307: %+v, %v (hits %d)", resp, err, moved.hits.Load())
	}
	// The Host's client keeps its own redirect policy, and is not changed.
	calls := 0
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { calls++; return http.ErrUseLastResponse }}
	p := newTestOpenAI(t, front.srv.URL, func(c *OpenAIConfig) { c.HTTPClient = client })
	if _, err := p.Complete(context.Background(), simpleRequest()); DispositionOf(err) != DispositionWaitHost || calls != 1 {
		t.Fatalf("the Host's policy: %v, called %d times", err, calls)
	}
	if _, err := p.Complete(context.Background(), simpleRequest()); err == nil || calls != 2 {
		t.Fatalf("the Host's policy again: %v, called %d times", err, calls)
	}
}

// An answer whose calls repeat an id or lack a name is mended, so that the
// next request, which carries them as history, stays valid.
func TestOpenAIAnswerBreakingHistoryIsMended(t *testing.T) {
	for name, calls := range map[string]string{
		"repeated ids": `[{"id":"edit:0","type":"function","function":{"name":"a","arguments":"{}"}},{"id":"edit:0","type":"function","function":{"name":"a","arguments":"{}"}},{"id":"call_4_0_1","type":"function","function":{"name":"a","arguments":"{}"}}]`,
		"no name":      `[{"id":"c1","type":"function","function":{"name":"","arguments":"{}"}},{"id":"","type":"function","function":{"name":"  ","arguments":"{}"}}]`,
	} {
		resp, err := completeAgainst(t, 200, `{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":`+calls+`},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":5}}`)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		next := simpleRequest()
		next.Messages = append(next.Messages, Message{Role: RoleAssistant, ToolCalls: resp.ToolCalls})
		for _, c := range resp.ToolCalls {
			next.Messages = append(next.Messages, Message{Role: RoleTool, ToolCallID: c.ID, Name: c.Name, Content: `{}`})
		}
		if err := next.Validate(); err != nil {
			t.Errorf("%s: the next request is refused: %v (calls %+v)", name, err, resp.ToolCalls)
		}
	}
	resp, _ := completeAgainst(t, 200, `{"choices":[{"message":{"tool_calls":[{"id":"c1","type":"function","function":{"name":"","arguments":"{}"}},{"id":"c1","type":"function","function":{"name":"b","arguments":"{}"}}]}}],"usage":{"prompt_tokens":5}}`)
	if len(resp.ToolCalls) != 2 || resp.ToolCalls[0].ID != "c1" || resp.ToolCalls[0].Name != MissingToolName ||
		resp.ToolCalls[1].ID == "c1" || resp.ToolCalls[1].Name != "b" {
		t.Fatalf("calls %+v: the first keeps its id and gets the placeholder name, the second a new id", resp.ToolCalls)
	}
}

// A server that reports no usage has its call charged at an estimate.
func TestOpenAIMissingUsageIsEstimated(t *testing.T) {
	resp, err := completeAgainst(t, 200, `{"choices":[{"message":{"content":"`+strings.Repeat("word ", 2000)+`"},"finish_reason":"stop"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Usage.Estimated || resp.Usage.CompletionTokens != 2500 || resp.Usage.PromptTokens == 0 {
		t.Fatalf("usage %+v, want an estimate of 2,500 completion tokens and some prompt", resp.Usage)
	}
	resp, err = completeAgainst(t, 200, textCompletion("hi"))
	if err != nil || resp.Usage != (Usage{PromptTokens: 11, CompletionTokens: 3}) {
		t.Fatalf("reported usage: %+v, %v", resp.Usage, err)
	}
}

// Settings go-openai refuses before sending are a configuration error when
// the adapter is made, and any it refuses later make the process wait for
// the Host rather than fail.
func TestOpenAISettingsTheLibraryRefuses(t *testing.T) {
	temp := float32(0.2)
	for _, c := range []struct {
		name, field string
		mutate      func(*OpenAIConfig)
	}{
		{"a temperature with a reasoning model", "temperature", func(c *OpenAIConfig) { c.Model, c.Temperature = "o3-mini", &temp }},
		{"a zero temperature, sent as a tiny one", "temperature", func(c *OpenAIConfig) { zero := float32(0); c.Model, c.Temperature = "o4-mini", &zero }},
		{"max_tokens with a reasoning model", "max_tokens_field", func(c *OpenAIConfig) { c.Model, c.MaxTokensField = "o1", MaxTokensFieldLegacy }},
	} {
		cfg := OpenAIConfig{BaseURL: "http://127.0.0.1:1/v1", Model: "m"}
		c.mutate(&cfg)
		_, err := NewOpenAI(cfg)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.field+":") {
			t.Errorf("%s: %v, want a configuration error naming %s", c.name, err, c.field)
		}
	}
	if _, err := NewOpenAI(OpenAIConfig{BaseURL: "http://127.0.0.1:1/v1", Model: "o3-mini"}); err != nil {
		t.Fatalf("a reasoning model with default settings: %v", err)
	}
	// A refusal the probe cannot foresee: a request that go-openai will not send.
	p := newTestOpenAI(t, "http://127.0.0.1:1")
	p.cfg.Model = "o3-mini"
	p.tokensField = MaxTokensFieldLegacy
	req := simpleRequest()
	req.MaxTokens = 10
	chatReq, err := p.buildRequest(&req)
	if err != nil {
		t.Fatal(err)
	}
	chatReq.Model = "o3-mini"
	_, cerr := p.attempt(context.Background(), &req, chatReq)
	if cerr == nil || DispositionOf(cerr) != DispositionWaitHost || cerr.Settlement != SettlementNotStarted || cerr.Hint == "" {
		t.Fatalf("a request the library refuses: %#v", cerr)
	}
}

// An answer larger than MaxAnswerBytes is refused without being held whole,
// as an answer of unknown settlement that may be asked again.
func TestOpenAIAnswerTooLarge(t *testing.T) {
	cs := newChatServer(t, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.WriteHeader(200)
		io.WriteString(w, `{"choices":[{"message":{"content":"`)
		chunk := strings.Repeat("a", 1<<20)
		for range MaxAnswerBytes>>20 + 1 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		io.WriteString(w, `"},"finish_reason":"stop"}]}`)
	})
	_, err := newTestOpenAI(t, cs.srv.URL).Complete(context.Background(), simpleRequest())
	var ce *CallError
	if !errors.As(err, &ce) || ce.Settlement != SettlementUnknown || DispositionOf(err) != DispositionRetry ||
		!strings.Contains(err.Error(), "larger than") {
		t.Fatalf("%#v", err)
	}
}

// A server that echoes the rejected key does not get it into the error,
// which the event log, ps and stderr show.
func TestOpenAIServerEchoingTheKeyIsRedacted(t *testing.T) {
	const key = "sk-review-SECRET-0123456789"
	cs := newChatServer(t, replyJSON(401, `{"error":{"message":"Invalid API key: `+key+`"}}`))
	_, err := newTestOpenAI(t, cs.srv.URL, func(c *OpenAIConfig) { c.APIKey = key }).Complete(context.Background(), simpleRequest())
	if err == nil || strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "Invalid API key: [the API key]") {
		t.Fatalf("error %v", err)
	}
}
