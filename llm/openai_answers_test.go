package llm

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// These tests hold the adapter to answers that compatible servers give in
// shapes of their own: calls, content and errors where the chat-completions
// format puts something else, and refusals only their words explain.

// completion wraps one choice's message in a whole answer.
func completion(message, finish string) string {
	return `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":` + message +
		`,"finish_reason":"` + finish + `"}],"usage":{"prompt_tokens":5,"completion_tokens":5}}`
}

// callErr is the *CallError of err, or fails the test.
func callErr(t *testing.T, what string, err error) *CallError {
	t.Helper()
	var ce *CallError
	if !errors.As(err, &ce) {
		t.Fatalf("%s: %#v is not a *CallError", what, err)
	}
	return ce
}

// Some servers send a call's arguments as a JSON object rather than as the
// string holding it; the call is kept as if they had sent the string.
func TestOpenAIArgumentsThatAreNotAString(t *testing.T) {
	for _, c := range []struct {
		name, calls, want string
	}{
		{"an object", `{"timezone": "UTC"}`, `{"timezone":"UTC"}`},
		{"an array", `[1, 2]`, `[1,2]`},
		{"a number", `7`, `7`},
		{"null", `null`, `{}`},
	} {
		cs := newChatServer(t, replyJSON(200, completion(`{"role":"assistant","content":null,"tool_calls":[
			{"id":"c1","type":"function","function":{"name":"get_current_time","arguments":`+c.calls+`}},
			{"id":"c2","type":"function","function":{"name":"sleep","arguments":"{\"seconds\":1}"}}]}`, "tool_calls")))
		resp, err := newTestOpenAI(t, cs.srv.URL).Complete(context.Background(), simpleRequest())
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(resp.ToolCalls) != 2 || string(resp.ToolCalls[0].Arguments) != c.want || resp.ToolCalls[0].Name != "get_current_time" ||
			string(resp.ToolCalls[1].Arguments) != `{"seconds":1}` || cs.hits.Load() != 1 {
			t.Errorf("%s: calls %+v after %d hits, want the first with arguments %s", c.name, resp.ToolCalls, cs.hits.Load(), c.want)
		}
	}
}

// A 200 answer that cannot be read as a completion is described, and
// classified by what it is: a page of another server waits for the Host, an
// answer in another format too, and JSON cut short may be asked again.
func TestOpenAIUndecodableAnswers(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       Disposition
		words      []string
	}{
		{"a web page", "<!DOCTYPE html>\n<html><head><title>Open WebUI</title></head><body>" + strings.Repeat("x", 500) + "</body></html>",
			DispositionWaitHost, []string{`starts with "<!DOCTYPE html> <html><head><title>Open WebUI`, "unreadable answer (status 200)"}},
		{"plain text", "OK", DispositionWaitHost, []string{`starts with "OK"`}},
		{"another format", `{"choices":[{"message":{"role":"assistant","content":{"text":"hi"}},"finish_reason":"stop"}]}`,
			DispositionWaitHost, []string{"not a chat completion"}},
		{"JSON cut short", `{"choices":[{"message":{"role":"assistant","content":"hel`, DispositionRetry, []string{"not complete JSON"}},
		{"nothing", ``, DispositionRetry, []string{"empty"}},
	} {
		cs := newChatServer(t, replyJSON(200, c.body))
		p := newTestOpenAI(t, cs.srv.URL, func(cfg *OpenAIConfig) { cfg.MaxRetries = 2 })
		waits := recordedWaits(p)
		_, err := p.Complete(context.Background(), simpleRequest())
		ce := callErr(t, c.name, err)
		if DispositionOf(err) != c.want || ce.Settlement != SettlementUnknown || ce.StatusCode != 200 || len(*waits) != 0 {
			t.Errorf("%s: disposition %s, settlement %s, status %d, waits %v: %v", c.name, DispositionOf(err), ce.Settlement, ce.StatusCode, *waits, err)
		}
		for _, w := range c.words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
		if c.want == DispositionWaitHost && !strings.Contains(ce.Hint, cs.srv.URL+"/v1") {
			t.Errorf("%s: hint %q does not name the base URL", c.name, ce.Hint)
		}
	}
}

// A 200 answer that is an error (OpenRouter reports a failure that came
// during generation so) keeps the server's words and is classified by the
// code it carries, as the same status would be.
func TestOpenAIErrorAnsweredWith200(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       Disposition
		transient  bool
		words      string
	}{
		{"an upstream failure", `{"error":{"code":502,"message":"Provider returned error: upstream overloaded"},"user_id":"u"}`,
			DispositionRetry, true, "error 502: Provider returned error: upstream overloaded"},
		{"a window", `{"error":{"code":400,"message":"This endpoint's maximum context length is 8192 tokens. However, you requested about 9000 tokens."}}`,
			DispositionCompact, false, "maximum context length"},
		{"a bad key", `{"error":{"code":401,"message":"No auth credentials found"}}`, DispositionWaitHost, false, "No auth credentials found"},
		{"a window without a code", `{"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, DispositionCompact, false, "prompt is too long"},
		{"no code", `{"error":{"message":"something went wrong","type":"server_error"}}`, DispositionRetry, false, "something went wrong"},
		{"a string", `{"error":"the backend is restarting"}`, DispositionRetry, false, "the backend is restarting"},
		// Words that would name a bad model or key under a 400 decide
		// nothing without a status.
		{"loose words", `{"error":{"message":"upstream timeout: invalid model response","code":"server_error"}}`, DispositionRetry, false, "invalid model response"},
		{"loose key words", `{"error":{"message":"invalid api key cache, retry"}}`, DispositionRetry, false, "invalid api key cache"},
	} {
		cs := newChatServer(t, replyJSON(200, c.body))
		p := newTestOpenAI(t, cs.srv.URL, func(cfg *OpenAIConfig) { cfg.MaxRetries = 2 })
		recordedWaits(p)
		_, err := p.Complete(context.Background(), simpleRequest())
		ce := callErr(t, c.name, err)
		// The adapter asks again what may succeed later, and only that.
		hits := int32(1)
		if c.want == DispositionRetry {
			hits = 3
		}
		if DispositionOf(err) != c.want || ce.Transient != c.transient || ce.Settlement != SettlementRejected || ce.StatusCode != 200 || cs.hits.Load() != hits {
			t.Errorf("%s: disposition %s, transient %v, settlement %s, status %d, %d hits: %v", c.name, DispositionOf(err), ce.Transient, ce.Settlement, ce.StatusCode, cs.hits.Load(), err)
		}
		if !strings.Contains(err.Error(), c.words) || strings.Contains(err.Error(), "no choices") {
			t.Errorf("%s: %q does not carry the server's words %q", c.name, err, c.words)
		}
	}
	// A transient one is asked again until it succeeds, as a 502 would be.
	cs := newChatServer(t, replyJSON(200, `{"error":{"code":502,"message":"Provider returned error"}}`), replyJSON(200, textCompletion("ok")))
	p := newTestOpenAI(t, cs.srv.URL, func(cfg *OpenAIConfig) { cfg.MaxRetries = 1 })
	recordedWaits(p)
	if resp, err := p.Complete(context.Background(), simpleRequest()); err != nil || resp.Text != "ok" || cs.hits.Load() != 2 {
		t.Fatalf("retried: %+v, %v after %d hits", resp, err, cs.hits.Load())
	}
	// An answer with no choices and no error says what it was.
	_, err := completeAgainst(t, 200, `{"id":"x","object":"chat.completion","choices":[]}`)
	if ce := callErr(t, "no choices", err); ce.Settlement != SettlementUnknown || DispositionOf(err) != DispositionRetry ||
		!strings.Contains(err.Error(), `no choices (it starts with "{\"id\":\"x\"`) {
		t.Fatalf("no choices: %v", err)
	}
}

// A server or model that cannot call tools is the Host's to fix (another
// model, or the server's flags), and the hint says so rather than blaming
// the base URL.
func TestOpenAINoToolSupportWaitsForTheHost(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   string
		hint   string
	}{
		{"vLLM without a tool parser", 400, `{"object":"error","message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set","type":"BadRequestError","param":null,"code":400}`, "--enable-auto-tool-choice"},
		{"Ollama's model", 400, `{"error":{"message":"registry.ollama.ai/library/gemma:2b does not support tools","type":"api_error","param":null,"code":null}}`, "tool"},
		{"OpenRouter's routing", 404, `{"error":{"message":"No endpoints found that support tool use. To learn more about provider routing, visit: https://openrouter.ai/docs/provider-routing","code":404}}`, "tool"},
		{"Azure's deployment", 404, `{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."}}`, "deployment"},
	} {
		_, err := completeAgainst(t, c.status, c.body)
		ce := callErr(t, c.name, err)
		if DispositionOf(err) != DispositionWaitHost || !strings.Contains(ce.Hint, c.hint) || !strings.Contains(ce.Hint, EnvModel) ||
			strings.Contains(ce.Hint, "usually ends in /v1") {
			t.Errorf("%s: disposition %s, hint %q: %v", c.name, DispositionOf(err), ce.Hint, err)
		}
	}
}

// Refusals of a prompt over the window in the words of TGI and of
// Anthropic's compatible API make the context fit; one where the completion
// limit takes at least half the window, so that the messages alone fit it,
// asks the Host to lower the limit instead.
func TestOpenAIWindowRefusals(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   string
		want   Disposition
	}{
		{"TGI's input limit", 422, "{\"error\":\"Input validation error: `inputs` must have less than 4095 tokens. Given: 5000\",\"error_type\":\"validation\"}", DispositionCompact},
		{"Anthropic's limit", 400, "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"input length and `max_tokens` exceed context limit: 197626 + 8192 > 200000, decrease input length or `max_tokens` and try again\"}}", DispositionCompact},
		{"vLLM, messages over the window", 400, `{"object":"error","message":"This model's maximum context length is 8192 tokens. However, you requested 9000 tokens (8800 in the messages, 200 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`, DispositionCompact},
		{"vLLM, a small completion limit", 400, `{"object":"error","message":"This model's maximum context length is 131072 tokens. However, you requested 135000 tokens (130904 in the messages, 4096 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`, DispositionCompact},
		{"vLLM, a completion limit of half the window", 400, `{"object":"error","message":"This model's maximum context length is 8192 tokens. However, you requested 8500 tokens (4404 in the messages, 4096 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`, DispositionWaitHost},
		{"vLLM's newer words", 400, `{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 6000. This model's maximum context length is 8192 tokens and your request has 3000 input tokens (6000 > 8192 - 3000).","type":"BadRequestError","param":null,"code":400}}`, DispositionWaitHost},
	} {
		_, err := completeAgainst(t, c.status, c.body)
		ce := callErr(t, c.name, err)
		if DispositionOf(err) != c.want {
			t.Errorf("%s: disposition %s, want %s: %v", c.name, DispositionOf(err), c.want, err)
		}
		if c.want == DispositionWaitHost && !strings.Contains(ce.Hint, "--max-tokens") {
			t.Errorf("%s: hint %q does not point at --max-tokens", c.name, ce.Hint)
		}
	}
}

// An exhausted quota is answered 429, but waiting does not refill it: the
// Host is asked at once, without attempts spent on it.
func TestOpenAIExhaustedQuotaWaitsForTheHost(t *testing.T) {
	cs := newChatServer(t, replyJSON(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`))
	p := newTestOpenAI(t, cs.srv.URL, func(cfg *OpenAIConfig) { cfg.MaxRetries = 3 })
	waits := recordedWaits(p)
	_, err := p.Complete(context.Background(), simpleRequest())
	ce := callErr(t, "quota", err)
	if DispositionOf(err) != DispositionWaitHost || ce.Transient || ce.Hint == "" || cs.hits.Load() != 1 || len(*waits) != 0 {
		t.Fatalf("disposition %s, transient %v, hint %q, %d hits: %v", DispositionOf(err), ce.Transient, ce.Hint, cs.hits.Load(), err)
	}
	// An ordinary rate limit is still waited out.
	if _, err := completeAgainst(t, 429, `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`); DispositionOf(err) != DispositionRetry {
		t.Fatalf("rate limit: %v", err)
	}
}

// Text sent as content parts is kept, reasoning is kept apart from it, a
// legacy function_call is one tool call, and a filtered answer says so.
func TestOpenAIAnswerShapes(t *testing.T) {
	resp, err := completeAgainst(t, 200, completion(`{"role":"assistant","content":[{"type":"text","text":"I will read"},{"type":"image_url","image_url":{"url":"data:,"}},{"type":"text","text":"the clock."}]}`, "stop"))
	if err != nil || resp.Text != "I will read\nthe clock." {
		t.Errorf("content parts: %q, %v", resp.Text, err)
	}
	resp, err = completeAgainst(t, 200, completion(`{"role":"assistant","content":null,"reasoning_content":"Let me think about the zone."}`, "length"))
	if err != nil || resp.Reasoning != "Let me think about the zone." || resp.Text != "" || resp.FinishReason != "length" {
		t.Errorf("reasoning_content: %+v, %v", resp, err)
	}
	resp, err = completeAgainst(t, 200, completion(`{"role":"assistant","content":"It is noon.","reasoning":"The clock said 12:00."}`, "stop"))
	if err != nil || resp.Reasoning != "The clock said 12:00." || resp.Text != "It is noon." {
		t.Errorf("reasoning: %+v, %v", resp, err)
	}
	for name, call := range map[string]string{
		"a string":  `{"name":"sleep","arguments":"{\"seconds\":1}"}`,
		"an object": `{"name":"sleep","arguments":{"seconds":1}}`,
	} {
		resp, err = completeAgainst(t, 200, completion(`{"role":"assistant","content":null,"function_call":`+call+`}`, "function_call"))
		if err != nil || len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "sleep" || string(resp.ToolCalls[0].Arguments) != `{"seconds":1}` ||
			resp.ToolCalls[0].ID != "call_4_0_0" {
			t.Errorf("function_call with arguments as %s: %+v, %v", name, resp.ToolCalls, err)
		}
	}
	// tool_calls win over a function_call beside them.
	resp, err = completeAgainst(t, 200, completion(`{"role":"assistant","function_call":{"name":"old","arguments":"{}"},"tool_calls":[{"id":"c1","type":"function","function":{"name":"new","arguments":"{}"}}]}`, "tool_calls"))
	if err != nil || len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "new" {
		t.Errorf("both: %+v, %v", resp.ToolCalls, err)
	}
	resp, err = completeAgainst(t, 200, completion(`{"role":"assistant","content":null}`, "content_filter"))
	if err != nil || resp.FinishReason != "content_filter" {
		t.Errorf("content_filter: %+v, %v", resp, err)
	}
	if _, err := json.Marshal(resp); err != nil {
		t.Fatal(err)
	}
}

// A password in the base URL (sent as Basic auth) never reaches an error or
// a hint.
func TestOpenAIBaseURLPasswordIsRedacted(t *testing.T) {
	const password = "hunter2-proxy-pass"
	for _, c := range []struct {
		name   string
		status int
		body   string
	}{
		{"no endpoint", 404, `{"detail":"Not Found"}`},
		{"unknown model", 404, `{"error":{"message":"model \"m\" not found"}}`},
		{"a web page", 200, `<html>front page</html>`},
	} {
		cs := newChatServer(t, replyJSON(c.status, c.body))
		withPassword := strings.Replace(cs.srv.URL, "http://", "http://admin:"+password+"@", 1)
		_, err := newTestOpenAI(t, withPassword).Complete(context.Background(), simpleRequest())
		ce := callErr(t, c.name, err)
		if cs.headers[0].Get("Authorization") == "" || DispositionOf(err) != DispositionWaitHost ||
			strings.Contains(ce.Hint+err.Error(), password) || !strings.Contains(ce.Hint, "admin:xxxxx@") {
			t.Errorf("%s: hint %q, error %v", c.name, ce.Hint, err)
		}
	}
	_, err := NewOpenAI(OpenAIConfig{BaseURL: "admin:" + password + "@localhost:8000/v1", Model: "m"})
	if !errors.Is(err, ErrInvalidConfig) || strings.Contains(err.Error(), password) {
		t.Fatalf("a base URL without a scheme: %v", err)
	}
	// A redirect to an address with it is shown without it.
	cs := newChatServer(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		http.Redirect(w, r, "http://admin:"+password+"@elsewhere.test/v1/chat/completions", http.StatusMovedPermanently)
	})
	_, err = newTestOpenAI(t, cs.srv.URL).Complete(context.Background(), simpleRequest())
	if ce := callErr(t, "redirect", err); strings.Contains(ce.Hint+err.Error(), password) || !strings.Contains(ce.Hint, "admin:xxxxx@elsewhere.test") {
		t.Fatalf("redirect: hint %q, error %v", ce.Hint, err)
	}
	// net/http takes it out of its own errors.
	_, err = newTestOpenAI(t, "http://admin:"+password+"@127.0.0.1:1").Complete(context.Background(), simpleRequest())
	if err == nil || strings.Contains(err.Error(), password) {
		t.Fatalf("no connection: %v", err)
	}
}

// A key the server echoes JSON-escaped is taken out of what it said too.
func TestOpenAIEscapedEchoOfTheKeyIsRedacted(t *testing.T) {
	const key = "gw-AbC/dEf+GhI/jKl0123"
	escaped := strings.ReplaceAll(key, "/", `\/`)
	for _, body := range []string{
		`{"error":"invalid token ` + escaped + `"}`,
		`{"error":{"detail":"invalid token ` + escaped + `"}}`,
		`{"error":{"message":"invalid token ` + escaped + `"}}`,
		`{"message":"invalid token ` + escaped + `"}`,
		`<html>invalid token ` + escaped + `</html>`,
	} {
		cs := newChatServer(t, replyJSON(401, body))
		_, err := newTestOpenAI(t, cs.srv.URL, func(cfg *OpenAIConfig) { cfg.APIKey = key }).Complete(context.Background(), simpleRequest())
		if err == nil || strings.Contains(err.Error(), key) || strings.Contains(err.Error(), escaped) || !strings.Contains(err.Error(), "invalid token [the API key]") {
			t.Errorf("%s: %v", body, err)
		}
	}
}
