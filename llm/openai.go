package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
)

// Defaults of OpenAIConfig.
const (
	DefaultOpenAIBaseURL      = "https://api.openai.com/v1"
	DefaultOpenAITimeout      = 300 * time.Second
	DefaultOpenAIRetryBackoff = 500 * time.Millisecond
	// maxRetryDelay caps one wait between attempts, including a server's Retry-After.
	maxRetryDelay = 30 * time.Second
	// MaxAnswerBytes bounds the body of an answer the adapter reads: an answer of 128k
	// tokens is about half a MiB, and a larger body is refused instead of held in memory.
	MaxAnswerBytes = 16 << 20
)

// Environment variables read by OpenAIConfigFromEnv.
const (
	EnvOpenAIBaseURL = "OPENAI_BASE_URL"
	EnvOpenAIAPIKey  = "OPENAI_API_KEY"
	EnvModel         = "LIBOS_MODEL"
)

// OpenAIConfig configures the OpenAI-compatible adapter.
type OpenAIConfig struct {
	// BaseURL is the API root, e.g. "http://localhost:8000/v1"; empty means
	// DefaultOpenAIBaseURL. Requests go to BaseURL + "/chat/completions".
	BaseURL string
	// APIKey is sent as a bearer token when not empty. It is required for the default
	// BaseURL only: local servers often need none.
	APIKey string
	// Model is the model name sent with every request. Required.
	Model string
	// HTTPClient sends the requests; nil means a fresh client over http.DefaultTransport.
	HTTPClient *http.Client
	// MaxRetries is how many times Complete itself retries a failure that certainly had no
	// effect (not started, or a transient status), sleeping in between. 0 (the default) means
	// one attempt per Complete: the kernel retries durably, holding no worker while it backs
	// off, so in-adapter retries are for Hosts that call Complete directly.
	MaxRetries int
	// Timeout bounds each attempt; 0 means DefaultOpenAITimeout.
	Timeout time.Duration
	// MaxTokens, when > 0, caps the completion tokens of every request (a request asking for
	// fewer keeps its own).
	MaxTokens int
	// MaxTokensField names the request field that carries the token limit: "max_tokens" or
	// "max_completion_tokens". "" means max_tokens, except for models go-openai treats as
	// reasoning models, which accept only max_completion_tokens.
	MaxTokensField string
	// Temperature, when set, is sent with every request.
	Temperature *float32
	// RetryBackoff is the wait before the first retry, doubled before each further one (with
	// jitter, capped at 30s); 0 means DefaultOpenAIRetryBackoff.
	RetryBackoff time.Duration
}

// OpenAIConfigFromEnv reads OPENAI_BASE_URL, OPENAI_API_KEY and LIBOS_MODEL. It does not
// validate: the CLI overrides fields from flags first, and NewOpenAI validates the result.
func OpenAIConfigFromEnv() OpenAIConfig {
	return OpenAIConfig{
		BaseURL: strings.TrimSpace(os.Getenv(EnvOpenAIBaseURL)),
		APIKey:  strings.TrimSpace(os.Getenv(EnvOpenAIAPIKey)),
		Model:   strings.TrimSpace(os.Getenv(EnvModel)),
	}
}

// ErrInvalidConfig is wrapped by configuration errors of an adapter.
var ErrInvalidConfig = errors.New("invalid llm provider configuration")

// Validate reports the first configuration error, naming the field and its variable.
func (c OpenAIConfig) Validate() error {
	bad := func(field, rule string, args ...any) error {
		return fmt.Errorf("%w: openai: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(rule, args...))
	}
	if strings.TrimSpace(c.Model) == "" {
		return bad("model", "required (set %s or pass --model)", EnvModel)
	}
	base := c.BaseURL
	if base == "" {
		base = DefaultOpenAIBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("base_url", "must be an absolute http or https URL (%s), got %q", EnvOpenAIBaseURL, redactedURL(c.BaseURL))
	}
	if strings.TrimRight(base, "/") == DefaultOpenAIBaseURL && c.APIKey == "" {
		return bad("api_key", "required for %s (set %s)", DefaultOpenAIBaseURL, EnvOpenAIAPIKey)
	}
	if c.Timeout < 0 {
		return bad("timeout", "must not be negative (got %s)", c.Timeout)
	}
	if c.RetryBackoff < 0 {
		return bad("retry_backoff", "must not be negative (got %s)", c.RetryBackoff)
	}
	if c.MaxTokens < 0 {
		return bad("max_tokens", "must not be negative (got %d)", c.MaxTokens)
	}
	switch c.MaxTokensField {
	case "", MaxTokensFieldLegacy, MaxTokensFieldCompletion:
	default:
		return bad("max_tokens_field", "must be %s or %s (got %q)", MaxTokensFieldLegacy, MaxTokensFieldCompletion, c.MaxTokensField)
	}
	if c.Temperature != nil && (*c.Temperature < 0 || *c.Temperature > 2) {
		return bad("temperature", "must be 0..2 (got %g)", *c.Temperature)
	}
	return nil
}

// redactedURL is a URL as errors and hints show it: a password in it (sent as Basic auth)
// replaced, as url.URL.Redacted does, also when it does not parse.
func redactedURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Opaque == "" {
		return u.Redacted()
	}
	// Unparsed, or read as an opaque URL ("user:pass@host" reads as scheme "user"): what
	// comes before an @ may be a password.
	if at := strings.LastIndex(s, "@"); at >= 0 {
		return "xxxxx" + s[at:]
	}
	return s
}

// The request fields a token limit can travel in.
const (
	MaxTokensFieldLegacy     = "max_tokens"
	MaxTokensFieldCompletion = "max_completion_tokens"
)

// maxTokensField is the field the limit travels in for cfg.
func (c OpenAIConfig) maxTokensField() string {
	if c.MaxTokensField != "" {
		return c.MaxTokensField
	}
	probe := openai.ChatCompletionRequest{Model: c.Model, MaxTokens: 1}
	if errors.Is(openai.NewReasoningValidator().Validate(probe), openai.ErrReasoningModelMaxTokensDeprecated) {
		return MaxTokensFieldCompletion
	}
	return MaxTokensFieldLegacy
}

// OpenAI is the Provider for servers that speak the chat-completions API. It is safe for
// concurrent use; each call is independent.
//
// Requests carry the messages with assistant tool_calls and tool messages' tool_call_id, so
// multi-turn tool use works against real servers, and every tool as a function whose
// parameters are the exact JSON Schema given. A tool is sent with strict=true only when its
// schema meets the strict-mode rules (every object closed with additionalProperties:false,
// every property required, only the keywords strict mode accepts); others are sent
// non-strict rather than altered. Requests set max_completion_tokens when MaxTokens > 0.
//
// Failures are classified:
//   - nothing reached the server (DNS failure, refused connection, request not fully
//     written): SettlementNotStarted, retried;
//   - the server answered with an error status, or with a 200 answer holding an error
//     instead of choices: SettlementRejected, retried for 429 and 5xx (or the status the
//     error names), permanent for other statuses; settings the Host can fix (key, model,
//     tool support, quota) wait for it, and a prompt over the window asks for compaction;
//   - the request was sent and then the attempt timed out or the connection broke, or the
//     answer was unreadable: SettlementUnknown, never retried by the adapter, since the call
//     may have happened; an answer that is not JSON, or not a chat completion, waits for
//     the Host.
//
// Answers are read as compatible servers give them: tool call arguments sent as a JSON
// value rather than a string, content sent as parts, a legacy function_call (one call), and
// reasoning apart from the content (Response.Reasoning). Tool call arguments the model
// produced that are not JSON are passed on as a JSON string holding the raw text, so
// Response stays encodable and the tool layer can reject the call.
type OpenAI struct {
	cfg    OpenAIConfig
	client *openai.Client
	// foldNotices is set once the server refused a user message right after
	// a tool message (orderRefused): from then on such a message ends the
	// tool result before it.
	foldNotices atomic.Bool
	// base is the base URL as errors and hints show it: no trailing slash, no password.
	base string
	// traced is true when the transport is net/http's, which reports connection and write
	// progress through httptrace; a custom RoundTripper may report nothing.
	traced     bool
	maxRetries int
	timeout    time.Duration
	backoff    time.Duration
	// tokensField is the request field of the token limit, decided once.
	tokensField string
	// wait sleeps between attempts; tests replace it to observe delays without sleeping.
	wait func(ctx context.Context, d time.Duration) error
}

// NewOpenAI validates cfg and returns the adapter.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultOpenAIBaseURL
	}
	// A copy, so that refusing redirects that change the method leaves the Host's client as
	// it was.
	httpClient := &http.Client{}
	if cfg.HTTPClient != nil {
		*httpClient = *cfg.HTTPClient
	}
	httpClient.CheckRedirect = keepMethod(httpClient.CheckRedirect)
	_, isStd := httpClient.Transport.(*http.Transport)
	stdTransport := httpClient.Transport == nil || isStd
	oc := openai.DefaultConfig(cfg.APIKey)
	oc.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	oc.HTTPClient = &recordingDoer{client: httpClient}
	p := &OpenAI{
		cfg:         cfg,
		client:      openai.NewClientWithConfig(oc),
		base:        redactedURL(oc.BaseURL),
		traced:      stdTransport,
		maxRetries:  cfg.MaxRetries,
		timeout:     cfg.Timeout,
		backoff:     cfg.RetryBackoff,
		wait:        sleepCtx,
		tokensField: cfg.maxTokensField(),
	}
	if p.maxRetries < 0 {
		p.maxRetries = 0
	}
	if p.timeout == 0 {
		p.timeout = DefaultOpenAITimeout
	}
	if p.backoff == 0 {
		p.backoff = DefaultOpenAIRetryBackoff
	}
	if err := p.libraryAccepts(); err != nil {
		return nil, err
	}
	return p, nil
}

// libraryAccepts reports settings go-openai refuses before sending anything, such as a
// temperature with a reasoning model, as a configuration error: otherwise every call of
// every process would be refused the same way. The probe is a request as buildRequest
// makes it, with one tool, as a process's requests have.
func (p *OpenAI) libraryAccepts() error {
	probe, err := p.buildRequest(&Request{Messages: []Message{{Role: RoleUser, Content: "probe"}}, MaxTokens: 1,
		Tools: []ToolSchema{{Name: "probe", Parameters: json.RawMessage(`{"type":"object"}`)}}})
	if err == nil {
		err = openai.NewReasoningValidator().Validate(probe)
	}
	if err == nil {
		return nil
	}
	field := "model"
	switch {
	case errors.Is(err, openai.ErrReasoningModelLimitationsOther), errors.Is(err, openai.ErrReasoningSamplingUnsupported):
		field = "temperature"
	case errors.Is(err, openai.ErrReasoningModelMaxTokensDeprecated):
		field = "max_tokens_field"
	}
	return fmt.Errorf("%w: openai: %s: the client library refuses requests to model %q with these settings: %w",
		ErrInvalidConfig, field, p.cfg.Model, err)
}

// keepMethod refuses to follow a redirect that would send the request again with another
// method (net/http turns a POST into a GET without a body on 301, 302 and 303, and the
// server's answer to that hides the cause); next, the Host client's own policy, or net/http's
// limit of 10 redirects, decides the rest.
func keepMethod(next func(req *http.Request, via []*http.Request) error) func(req *http.Request, via []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if len(via) > 0 && req.Method != via[0].Method {
			return http.ErrUseLastResponse
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
}

// Name returns "openai".
func (p *OpenAI) Name() string { return "openai" }

// Model returns the configured model name.
func (p *OpenAI) Model() string { return p.cfg.Model }

// Complete sends req, retrying failures that certainly had no effect.
func (p *OpenAI) Complete(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, &CallError{Settlement: SettlementNotStarted, Err: fmt.Errorf("openai: %w", err)}
	}
	if err := req.Validate(); err != nil {
		return Response{}, invalidRequest("openai", err)
	}
	chatReq, err := p.buildRequest(&req)
	if err != nil {
		return Response{}, invalidRequest("openai", err)
	}
	var last *CallError
	resent := 0 // folded resends (orderRefused), counted among the attempts
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := p.wait(ctx, p.retryDelay(attempt, last)); err != nil {
				// Every earlier attempt certainly had no effect, so the settlement stands.
				return Response{}, &CallError{
					Settlement: last.Settlement, StatusCode: last.StatusCode, Attempts: attempt,
					Err: fmt.Errorf("openai: waiting to retry: %w (last attempt: %w)", err, last.Err),
				}
			}
		}
		resp, cerr := p.attempt(ctx, &req, chatReq)
		if cerr != nil && p.orderRefused(cerr, chatReq) {
			// The refusal settled nothing: the same call goes at once in
			// the order the server takes.
			p.foldNotices.Store(true)
			if chatReq, err = p.buildRequest(&req); err != nil {
				return Response{}, invalidRequest("openai", err)
			}
			resent++
			resp, cerr = p.attempt(ctx, &req, chatReq)
		}
		if cerr == nil {
			return resp, nil
		}
		cerr.Attempts = attempt + 1 + resent
		retryable := !cerr.Permanent && cerr.Settlement != SettlementUnknown
		if !retryable || attempt >= p.maxRetries || ctx.Err() != nil {
			return Response{}, cerr
		}
		last = cerr
	}
}

// orderRefused reports whether cerr is a server's refusal of a user message
// right after a tool message, which chatReq holds: the runtime's notices
// (a reply cut off, messages arrived) follow a batch's tool results, and
// Mistral's API ("Unexpected role 'user' after role 'tool'") and the chat
// templates that hold roles to alternate refuse that order, where most
// servers take it.
func (p *OpenAI) orderRefused(cerr *CallError, chatReq openai.ChatCompletionRequest) bool {
	// Not gated on foldNotices: a call built before another call set it
	// went out unfolded, and its refusal deserves the same resend; a
	// folded request never holds the order, so it is never resent.
	if cerr.Settlement != SettlementRejected || cerr.StatusCode != http.StatusBadRequest && cerr.StatusCode != http.StatusUnprocessableEntity {
		return false
	}
	words := strings.ToLower(cerr.Error())
	if !strings.Contains(words, "after role 'tool'") && !strings.Contains(words, "roles must alternate") {
		return false
	}
	for i := 1; i < len(chatReq.Messages); i++ {
		if chatReq.Messages[i].Role == string(RoleUser) && chatReq.Messages[i-1].Role == string(RoleTool) {
			return true
		}
	}
	return false
}

// retryDelay is the wait before the given attempt (1 = first retry): exponential backoff
// with jitter in [d/2, d], raised to a server's Retry-After, capped at maxRetryDelay.
func (p *OpenAI) retryDelay(attempt int, last *CallError) time.Duration {
	d := p.backoff
	for i := 1; i < attempt && d < maxRetryDelay; i++ {
		d *= 2
	}
	d = min(d, maxRetryDelay)
	d = d/2 + rand.N(d/2+1)
	var ra *retryAfterError
	if errors.As(last, &ra) && ra.after > d {
		d = min(ra.after, maxRetryDelay)
	}
	return d
}

// retryAfterError carries a server's Retry-After hint with a rejected attempt.
type retryAfterError struct {
	after time.Duration
	err   error
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// toolNamePattern is the tool name rule of the chat-completions API.
// Compiled on first use: compiling at package init taxes every libos start.
var toolNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`) })

// buildRequest maps req to the chat-completions request.
func (p *OpenAI) buildRequest(req *Request) (openai.ChatCompletionRequest, error) {
	out := openai.ChatCompletionRequest{
		Model:    p.cfg.Model,
		Messages: make([]openai.ChatCompletionMessage, 0, len(req.Messages)),
	}
	limit := req.MaxTokens
	if p.cfg.MaxTokens > 0 && (limit == 0 || limit > p.cfg.MaxTokens) {
		limit = p.cfg.MaxTokens
	}
	if p.tokensField == MaxTokensFieldCompletion {
		out.MaxCompletionTokens = limit
	} else {
		out.MaxTokens = limit
	}
	if p.cfg.Temperature != nil {
		out.Temperature = *p.cfg.Temperature
		if out.Temperature == 0 {
			// go-openai omits a zero temperature; a tiny one means the same to servers.
			out.Temperature = math.SmallestNonzeroFloat32
		}
	}
	for _, m := range req.Messages {
		if n := len(out.Messages); p.foldNotices.Load() && m.Role == RoleUser && n > 0 && out.Messages[n-1].Role == string(RoleTool) {
			// A server that refuses a user message after a tool message
			// (see orderRefused) gets the runtime's notice at the end of the
			// last result instead.
			out.Messages[n-1].Content += "\n\n" + m.Content
			continue
		}
		msg := openai.ChatCompletionMessage{Role: string(m.Role), Content: m.Content}
		switch m.Role {
		case RoleAssistant:
			for _, tc := range m.ToolCalls {
				args := string(bytes.TrimSpace(tc.Arguments))
				if args == "" {
					args = "{}"
				}
				msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{
					ID:       tc.ID,
					Type:     openai.ToolTypeFunction,
					Function: openai.FunctionCall{Name: tc.Name, Arguments: args},
				})
			}
		case RoleTool:
			msg.ToolCallID = m.ToolCallID
			msg.Name = m.Name
		}
		out.Messages = append(out.Messages, msg)
	}
	for i, t := range req.Tools {
		if !toolNamePattern().MatchString(t.Name) {
			return out, fmt.Errorf("%w: tools[%d].name: %q must match %s for chat-completions servers",
				ErrInvalidRequest, i, t.Name, toolNamePattern())
		}
		params := json.RawMessage(bytes.TrimSpace(t.Parameters))
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out.Tools = append(out.Tools, openai.Tool{
			Type: openai.ToolTypeFunction,
			Function: &openai.FunctionDefinition{
				Name:        t.Name,
				Description: t.Description,
				Strict:      strictEligible(params),
				Parameters:  params,
			},
		})
	}
	return out, nil
}

// attemptKey keys the attemptRecord in a request's context.
type attemptKey struct{}

// attemptRecord observes one HTTP attempt: whether a connection was sought and obtained,
// whether the request was written, and the status the server answered with.
type attemptRecord struct {
	mu         sync.Mutex
	doerCalled bool
	getConn    bool
	gotConn    bool
	writeState int // 0: not finished, 1: written, 2: write failed
	status     int
	header     http.Header
	// body is a 2xx answer as it came, read whole (bodyRead) before go-openai decodes it:
	// what go-openai cannot read, or reads as an answer without choices, is read again here.
	body     []byte
	bodyRead bool
}

func (r *attemptRecord) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GetConn: func(string) {
			// Each connection attempt (a transport retry, a redirect) starts afresh.
			r.mu.Lock()
			r.getConn, r.gotConn, r.writeState = true, false, 0
			r.mu.Unlock()
		},
		GotConn: func(httptrace.GotConnInfo) {
			r.mu.Lock()
			r.gotConn = true
			r.writeState = 0 // a transport-level retry starts a new write
			r.mu.Unlock()
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			r.mu.Lock()
			if info.Err == nil {
				r.writeState = 1
			} else {
				r.writeState = 2
			}
			r.mu.Unlock()
		},
	}
}

// recordingDoer is the go-openai HTTP client: it tells the attemptRecord of the request's
// context what the server answered and, for a 2xx answer, its body; turns a redirect it did
// not follow into an error; and bounds the body it hands on to MaxAnswerBytes.
type recordingDoer struct{ client *http.Client }

func (d *recordingDoer) Do(req *http.Request) (*http.Response, error) {
	rec, _ := req.Context().Value(attemptKey{}).(*attemptRecord)
	if rec != nil {
		rec.mu.Lock()
		rec.doerCalled = true
		rec.mu.Unlock()
	}
	resp, err := d.client.Do(req)
	if resp == nil {
		return resp, err
	}
	if rec != nil {
		rec.mu.Lock()
		rec.status, rec.header = resp.StatusCode, resp.Header
		rec.mu.Unlock()
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		// go-openai would read a redirect's body as an answer.
		_ = resp.Body.Close()
		// The address it names may hold the base URL's password: it is shown redacted.
		return nil, &redirectError{status: resp.StatusCode, location: redactedURL(resp.Header.Get("Location"))}
	}
	resp.Body = http.MaxBytesReader(nil, resp.Body, MaxAnswerBytes)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// go-openai reads an error status's body itself, and keeps it.
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if rerr != nil {
		return nil, rerr
	}
	if rec != nil {
		rec.mu.Lock()
		rec.body, rec.bodyRead = body, true
		rec.mu.Unlock()
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, err
}

// redirectError is a redirect the adapter did not follow (keepMethod).
type redirectError struct {
	status   int
	location string
}

func (e *redirectError) Error() string {
	return fmt.Sprintf("server answered %d %s, redirecting to %q", e.status, http.StatusText(e.status), e.location)
}

// attempt makes one HTTP call and classifies its failure.
func (p *OpenAI) attempt(ctx context.Context, req *Request, chatReq openai.ChatCompletionRequest) (Response, *CallError) {
	rec := &attemptRecord{}
	actx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	actx = context.WithValue(actx, attemptKey{}, rec)
	actx = httptrace.WithClientTrace(actx, rec.trace())

	resp, err := p.client.CreateChatCompletion(actx, chatReq)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if err == nil {
		return p.answer(req, &resp, rec, rec.body)
	}
	var redirect *redirectError
	var tooLarge *http.MaxBytesError
	switch {
	case !rec.doerCalled:
		// Refused by the client library before anything was sent: the request is valid
		// (Validate), so the settings are what it cannot send.
		return Response{}, &CallError{Settlement: SettlementNotStarted, NeedsHost: true,
			Hint: fmt.Sprintf("the client library refuses requests to model %q: check %s / --model and the provider settings", p.cfg.Model, EnvModel),
			Err:  fmt.Errorf("openai: %w", err)}
	case errors.As(err, &redirect):
		// The server did not run the call; it names another address for it.
		return Response{}, &CallError{Settlement: SettlementRejected, StatusCode: redirect.status, NeedsHost: true,
			Hint: fmt.Sprintf("the server redirects to %q: set %s / --base-url to the address it names", redirect.location, EnvOpenAIBaseURL),
			Err:  fmt.Errorf("openai: %w", err)}
	case rec.status >= 400:
		return Response{}, p.statusError(rec.status, rec.header, err)
	case errors.As(err, &tooLarge):
		return Response{}, &CallError{Settlement: SettlementUnknown, StatusCode: rec.status, Transient: true,
			Err: fmt.Errorf("openai: the answer (status %d) is larger than %d bytes: %w", rec.status, tooLarge.Limit, err)}
	case rec.bodyRead:
		return p.undecodable(req, rec, err)
	case rec.status != 0:
		return Response{}, &CallError{Settlement: SettlementUnknown, StatusCode: rec.status,
			Err: fmt.Errorf("openai: unreadable answer (status %d): %w", rec.status, err)}
	}
	// No answer. Whether the server could have acted depends on how far the request got.
	notStarted := false
	switch {
	case rec.gotConn:
		// An incompletely written request cannot be acted on; a written one may have been.
		notStarted = rec.writeState == 2
	case rec.getConn:
		// The transport looked for a connection and never got one.
		notStarted = true
	case p.traced:
		// net/http reports GetConn before connecting: it gave up before trying.
		notStarted = true
	default:
		// A transport without tracing: only a dial or DNS failure proves nothing was sent.
		notStarted = isDialError(err)
	}
	if notStarted {
		return Response{}, &CallError{Settlement: SettlementNotStarted, Transient: true, Err: fmt.Errorf("openai: request not sent: %w", err)}
	}
	// The server may have run the call, but a model call has no outside effect: asking again
	// is safe, and the kernel charges the lost attempt at its reservation.
	return Response{}, &CallError{Settlement: SettlementUnknown, Transient: true, Err: fmt.Errorf("openai: no answer after the request was sent: %w", err)}
}

// statusError classifies an error status the server answered with, keeping one shortened
// copy of what it said.
func (p *OpenAI) statusError(status int, header http.Header, err error) *CallError {
	detail, words := serverDetail(err, p.cfg.APIKey)
	return p.refusal(status, status, header, &statusErr{status: status, detail: detail}, words)
}

// refusal classifies a refusal by the status the server meant (0 when it gave none) and by
// its words; answered is the HTTP status it came with, which differs from status for an
// error sent as a 200 answer. What a status does not settle, the words do: servers answer
// an unknown model, a bad key or a prompt over the window with 400 as often as with their
// own statuses.
func (p *OpenAI) refusal(answered, status int, header http.Header, err error, words string) *CallError {
	ce := &CallError{
		Settlement: SettlementRejected,
		StatusCode: answered,
		Transient:  transientStatus(status),
		Err:        err,
	}
	// Without a status, only the words can say that asking again is useless.
	ce.Permanent = status != 0 && !ce.Transient
	lower := strings.ToLower(words)
	// Words are read where the status leaves the cause open: the statuses most servers
	// refuse a request with, and none.
	refused := status == 0 || status == http.StatusBadRequest || status == http.StatusUnprocessableEntity
	modelHint := fmt.Sprintf("model %q not found at %s: check %s / --model", p.cfg.Model, p.base, EnvModel)
	keyHint := "authentication failed: check " + EnvOpenAIAPIKey
	payHint := "the account cannot pay for the call: add credit, or check " + EnvOpenAIAPIKey
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		ce.NeedsHost, ce.Hint = true, keyHint
	case status == http.StatusPaymentRequired:
		ce.NeedsHost, ce.Hint = true, payHint
	case (status == http.StatusTooManyRequests || status == 0) && strings.Contains(lower, "insufficient_quota"):
		// OpenAI's exhausted quota is a 429 that waiting does not end. Only its code is
		// read: Gemini says "exceeded your current quota" of a per-minute limit too.
		ce.NeedsHost, ce.Hint = true, payHint
	case status == http.StatusRequestEntityTooLarge:
		// Often a proxy's limit on the body, answered with its own page: a smaller
		// context is the remedy either way.
		ce.ContextTooLong, ce.Hint = true, "the request is larger than the server accepts"
	case refused && contextTooLong(lower):
		if hint, ok := completionLimitTooLarge(lower); ok {
			ce.NeedsHost, ce.Hint = true, hint
		} else {
			ce.ContextTooLong, ce.Hint = true, "the prompt is longer than the model's context window"
		}
	case (refused || status == http.StatusNotFound) && noToolSupport(lower):
		ce.NeedsHost, ce.Hint = true, fmt.Sprintf("model %q cannot call tools on this server: choose a model that can (%s / --model), "+
			"or enable tool calling on the server (vLLM: --enable-auto-tool-choice and --tool-call-parser)", p.cfg.Model, EnvModel)
	case status == http.StatusNotFound && (strings.Contains(lower, "deploymentnotfound") ||
		strings.Contains(lower, "deployment") && strings.Contains(lower, "does not exist")):
		ce.NeedsHost, ce.Hint = true, fmt.Sprintf("no deployment %q at %s: with Azure OpenAI the model is a deployment's name: check %s / --model and the base URL",
			p.cfg.Model, p.base, EnvModel)
	case status == http.StatusNotFound && strings.Contains(lower, "model"):
		ce.NeedsHost, ce.Hint = true, modelHint
	case status == http.StatusNotFound:
		ce.NeedsHost, ce.Hint = true, fmt.Sprintf("no chat-completions endpoint at %s: the base URL usually ends in /v1", p.base)
	// An unknown model's words and a bad key's are loose ("invalid model
	// response" is an upstream's hiccup): without a status to back them, as
	// an error inside a 200 answer may come, they decide nothing.
	case refused && status != 0 && unknownModel(lower):
		ce.NeedsHost, ce.Hint = true, modelHint
	case status == http.StatusBadRequest && badKey(lower):
		ce.NeedsHost, ce.Hint = true, keyHint
	}
	if ce.NeedsHost || ce.ContextTooLong {
		// The same request would be refused the same way, whatever the status said.
		ce.Transient, ce.Permanent = false, true
	}
	if after, ok := retryAfterOf(header, time.Now()); ok && ce.Transient {
		ce.RetryAfter = after
		ce.Err = &retryAfterError{after: after, err: ce.Err}
	}
	return ce
}

// retryAfterOf reads when a server said to ask again: Retry-After (seconds or an HTTP
// date), else retry-after-ms, else the latest reset among the x-ratelimit limits it says
// are exhausted (all of those it gives a reset for when it says none is), each a duration
// such as "6m0s" or "20ms", or seconds.
func retryAfterOf(h http.Header, now time.Time) (time.Duration, bool) {
	if after, ok := ParseRetryAfter(h.Get("Retry-After"), now); ok {
		return after, true
	}
	if ms, err := strconv.ParseFloat(strings.TrimSpace(h.Get("Retry-After-Ms")), 64); err == nil && ms >= 0 && !math.IsInf(ms, 0) {
		return time.Duration(min(ms, float64(maxRetryAfter/time.Millisecond)) * float64(time.Millisecond)), true
	}
	var exhausted, latest time.Duration
	found, foundExhausted := false, false
	for _, limit := range []string{"requests", "tokens"} {
		reset, ok := parseReset(h.Get("X-Ratelimit-Reset-" + limit))
		if !ok {
			continue
		}
		found, latest = true, max(latest, reset)
		if strings.TrimSpace(h.Get("X-Ratelimit-Remaining-"+limit)) == "0" {
			foundExhausted, exhausted = true, max(exhausted, reset)
		}
	}
	switch {
	case foundExhausted:
		return exhausted, true
	case found:
		return latest, true
	}
	return 0, false
}

// parseReset reads an x-ratelimit reset: a Go duration ("1m30s", "250ms") or seconds.
func parseReset(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return min(d, maxRetryAfter), true
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil && secs >= 0 && !math.IsInf(secs, 0) {
		return time.Duration(min(secs, maxRetryAfter.Seconds()) * float64(time.Second)), true
	}
	return 0, false
}

// statusErr is an error status with what the server said, shortened.
type statusErr struct {
	status int
	detail string
	// inAnswer marks an error a server sent as the body of a 2xx answer; code is the status
	// it named, or 0.
	inAnswer bool
	code     int
}

func (e *statusErr) Error() string {
	msg := fmt.Sprintf("openai: server answered %d %s", e.status, http.StatusText(e.status))
	switch {
	case e.inAnswer && e.code != 0:
		msg += fmt.Sprintf(" with error %d", e.code)
	case e.inAnswer:
		msg += " with an error"
	}
	if e.detail == "" {
		return msg
	}
	return msg + ": " + e.detail
}

// maxDetail bounds the server's words kept in an error: an HTML error page is shown once, short.
const maxDetail = 300

// maxPrefix bounds the start of an unreadable answer shown to say what it was.
const maxPrefix = 80

// minRedactedKey is the shortest API key taken out of what a server says:
// a shorter one could stand for ordinary words.
const minRedactedKey = 8

// serverDetail extracts the server's message from a go-openai error, whitespace collapsed,
// apiKey taken out and shortened, and the words a refusal is classified by: the message,
// the error's code and type, or the whole body. Servers echo a rejected key ("Invalid API
// key: sk-..."), and what they say is logged and shown: the key never is.
func serverDetail(err error, apiKey string) (detail, words string) {
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.As(err, &apiErr) && apiErr.Message != "":
		detail, words = apiErr.Message, apiErr.Type
		if apiErr.Code != nil {
			words += " " + fmt.Sprint(apiErr.Code)
		}
	case errors.As(err, &reqErr) && len(reqErr.Body) > 0:
		// A body go-openai could not read as {"error": {...}}: what the server said is
		// its message, or the body itself (an HTML page).
		detail, words = bodyMessage(reqErr.Body), string(reqErr.Body)
	default:
		detail = err.Error()
	}
	return shorten(redactKey(detail, apiKey), maxDetail), strings.Join(strings.Fields(detail), " ") + " " + words
}

// bodyMessage is the message of an error body in the forms go-openai does not read:
// {"error": "..."}, vLLM's {"message": "..."}, FastAPI's {"detail": "..."}; else the body.
// The string is decoded, so that what it holds (a key included) reads as sent.
func bodyMessage(body []byte) string {
	var members map[string]json.RawMessage
	if json.Unmarshal(body, &members) == nil {
		for _, key := range []string{"error", "message", "detail"} {
			var s string
			if json.Unmarshal(members[key], &s) == nil && strings.TrimSpace(s) != "" {
				return s
			}
		}
	}
	return string(body)
}

// redactKey takes apiKey out of s, also as JSON escapes it: encoding/json's escapes, and
// "\/" for "/", which PHP and some gateways write.
func redactKey(s, apiKey string) string {
	if len(apiKey) < minRedactedKey {
		return s
	}
	forms := []string{apiKey, strings.ReplaceAll(apiKey, "/", `\/`)}
	if quoted, err := json.Marshal(apiKey); err == nil {
		forms = append(forms, string(quoted[1:len(quoted)-1]))
	}
	for _, form := range forms {
		s = strings.ReplaceAll(s, form, "[the API key]")
	}
	return s
}

// shorten collapses the whitespace of s and cuts it to at most limit bytes, on a rune's start.
func shorten(s string, limit int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// prefix is how an unreadable answer starts, short and without the key, to say what it was.
func (p *OpenAI) prefix(body []byte) string {
	// Redacted whole before the cut, so that no part of a key is left at its end.
	s := redactKey(string(body), p.cfg.APIKey)
	return shorten(s[:min(len(s), 4*maxPrefix)], maxPrefix)
}

// contextTooLong reports whether a refusal's words say the prompt exceeds the window, as
// OpenAI, vLLM, llama.cpp, Ollama, Gemini, TGI and Anthropic phrase it.
func contextTooLong(lower string) bool {
	if containsAny(lower, "context_length_exceeded", "maximum context length", "context length", "context window",
		"too many tokens", "prompt is too long", "exceeds the available context", "input is too long",
		"exceeds the maximum number of tokens", "exceed context limit") {
		return true
	}
	// TGI: "`inputs` tokens + `max_new_tokens` must be <= 4096", and "`inputs` must have
	// less than 4095 tokens".
	return strings.Contains(lower, "max_new_tokens") && strings.Contains(lower, "must be <=") ||
		strings.Contains(lower, "must have less than") && strings.Contains(lower, "tokens")
}

// windowSplit is a refusal's account of the window, in the words of vLLM (older and newer),
// Anthropic and TGI: which submatches hold the prompt's tokens, the completion limit and
// the window.
type windowSplit struct {
	re                         *regexp.Regexp
	prompt, completion, window int
}

// windowSplits are compiled on first use, as toolNamePattern is.
var windowSplits = sync.OnceValue(func() []windowSplit {
	return []windowSplit{
		{regexp.MustCompile(`maximum context length is (\d+) tokens\. however, you requested \d+ tokens \((\d+) in the messages, (\d+) in the completion\)`), 2, 3, 1},
		{regexp.MustCompile(`is too large: (\d+)\. this model's maximum context length is (\d+) tokens and your request has (\d+) input tokens`), 3, 1, 2},
		{regexp.MustCompile("exceed context limit: (\\d+) \\+ (\\d+) > (\\d+)"), 1, 2, 3},
		{regexp.MustCompile("must be <= (\\d+)\\. given: (\\d+) `inputs` tokens and (\\d+) `max_new_tokens`"), 2, 3, 1},
	}
})

// completionLimitTooLarge reads a refusal over the window that counts its parts, and gives
// a hint when the completion limit is what does not fit: it takes half the window or more,
// and the prompt alone fits. Compaction would then have to keep the context under what the
// limit leaves, every time; lowering the limit is the remedy. A refusal without the counts
// is left to compaction.
func completionLimitTooLarge(lower string) (string, bool) {
	for _, ws := range windowSplits() {
		m := ws.re.FindStringSubmatch(lower)
		if m == nil {
			continue
		}
		prompt, err1 := strconv.Atoi(m[ws.prompt])
		completion, err2 := strconv.Atoi(m[ws.completion])
		window, err3 := strconv.Atoi(m[ws.window])
		if err1 != nil || err2 != nil || err3 != nil || prompt >= window || completion*2 < window {
			return "", false
		}
		return fmt.Sprintf("the completion limit of %d tokens takes half or more of the model's %d-token window, and the prompt (%d tokens) "+
			"fits without it: lower --max-tokens (or the image's context.max_output_tokens), or serve the model with a larger window",
			completion, window, prompt), true
	}
	return "", false
}

// noToolSupport reports whether a refusal's words say the model or the server cannot call
// tools, as vLLM (started without a tool parser), Ollama and OpenRouter phrase it.
func noToolSupport(lower string) bool {
	return containsAny(lower, "does not support tools", "support tool use", "tool choice requires", "enable-auto-tool-choice")
}

// unknownModel reports whether a refusal's words say the model is unknown or cannot serve
// these requests, as DeepSeek, OpenRouter and compatible servers phrase it.
func unknownModel(lower string) bool {
	return containsAny(lower, "model_not_found", "model not exist", "model does not exist", "model not found",
		"not a valid model", "unknown model", "no such model", "invalid model")
}

// badKey reports whether a refusal's words blame the API key, as Gemini and compatible
// servers phrase it when they answer 400 rather than 401.
func badKey(lower string) bool {
	return containsAny(lower, "api key not valid", "invalid api key", "incorrect api key", "api_key_invalid", "invalid_api_key")
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// isDialError reports whether err comes from failing to connect.
func isDialError(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// answer maps an answer go-openai read; body is the answer as it came. An answer without
// choices is unusable although the call happened: unknown rather than rejected, unless it
// carries an error instead (as OpenRouter reports a failure during generation), which is
// classified as the status it names would be.
func (p *OpenAI) answer(req *Request, resp *openai.ChatCompletionResponse, rec *attemptRecord, body []byte) (Response, *CallError) {
	if len(resp.Choices) > 0 {
		return p.mapResponse(req, resp, body), nil
	}
	if apiErr := errorInAnswer(body); apiErr != nil {
		detail, words := serverDetail(apiErr, p.cfg.APIKey)
		code := 0
		switch c := apiErr.Code.(type) {
		case int:
			code = c
		case string:
			code, _ = strconv.Atoi(c)
		}
		if code < 400 || code > 599 {
			// Not a status: the words alone classify it.
			code = 0
		}
		return Response{}, p.refusal(rec.status, code, rec.header,
			&statusErr{status: rec.status, detail: detail, inAnswer: true, code: code}, words)
	}
	return Response{}, &CallError{Settlement: SettlementUnknown, StatusCode: rec.status,
		Err: fmt.Errorf("openai: the answer has no choices (it starts with %q)", p.prefix(body))}
}

// errorInAnswer is the error an answer carries in place of a completion, {"error": {...}}
// as go-openai reads an error status's body, or {"error": "..."}; nil when it has none.
func errorInAnswer(body []byte) *openai.APIError {
	var answer struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &answer) != nil || len(answer.Error) == 0 || string(answer.Error) == "null" {
		return nil
	}
	var apiErr openai.APIError
	if err := json.Unmarshal(answer.Error, &apiErr); err == nil && apiErr.Message != "" {
		return &apiErr
	}
	var text string
	if json.Unmarshal(answer.Error, &text) != nil {
		text = string(answer.Error)
	}
	return &openai.APIError{Message: text}
}

// undecodable answers for a 2xx answer go-openai could not read. Calls whose arguments came
// as JSON values rather than as the string holding them are read again with the values
// re-encoded. Otherwise the answer is described by what it is: one that is not JSON, or is
// JSON of another shape, comes from a server that does not speak chat completions at this
// address and would come the same every time, so the Host is asked; empty or incomplete
// JSON may be a transfer that broke, and may be asked again.
func (p *OpenAI) undecodable(req *Request, rec *attemptRecord, err error) (Response, *CallError) {
	body := bytes.TrimSpace(rec.body)
	ce := &CallError{Settlement: SettlementUnknown, StatusCode: rec.status}
	switch {
	case len(body) == 0:
		ce.Err = fmt.Errorf("openai: unreadable answer (status %d): the body is empty: %w", rec.status, err)
	case body[0] != '{' && body[0] != '[':
		start := p.prefix(body)
		ce.NeedsHost = true
		ce.Hint = fmt.Sprintf("the server at %s answers with something other than JSON (it starts with %q): check %s / --base-url: the API root usually ends in /v1",
			p.base, start, EnvOpenAIBaseURL)
		ce.Err = fmt.Errorf("openai: unreadable answer (status %d): not JSON; it starts with %q: %w", rec.status, start, err)
	case !json.Valid(body):
		ce.Err = fmt.Errorf("openai: unreadable answer (status %d): not complete JSON (%d bytes): %w", rec.status, len(body), err)
	default:
		if mended, ok := stringifyArguments(body); ok {
			var resp openai.ChatCompletionResponse
			if json.Unmarshal(mended, &resp) == nil {
				return p.answer(req, &resp, rec, mended)
			}
		}
		ce.NeedsHost = true
		ce.Hint = fmt.Sprintf("the server at %s answers in a format other than chat completions: check %s / --base-url names an OpenAI-compatible API",
			p.base, EnvOpenAIBaseURL)
		ce.Err = fmt.Errorf("openai: unreadable answer (status %d): not a chat completion: %w", rec.status, err)
	}
	return Response{}, ce
}

// stringifyArguments re-encodes the arguments of each call (tool_calls, and a legacy
// function_call) that a server sent as a JSON value, an object mostly, as the string the
// format holds there. It reports whether it changed anything; other members keep their
// values.
func stringifyArguments(body []byte) ([]byte, bool) {
	stringify := func(v json.RawMessage) (json.RawMessage, bool) {
		if len(v) == 0 || v[0] == '"' || string(v) == "null" {
			return v, false
		}
		var compact bytes.Buffer
		if json.Compact(&compact, v) != nil {
			return v, false
		}
		s, err := json.Marshal(compact.String())
		return s, err == nil
	}
	arguments := func(v json.RawMessage) (json.RawMessage, bool) { return editMember(v, "arguments", stringify) }
	call := func(v json.RawMessage) (json.RawMessage, bool) { return editMember(v, "function", arguments) }
	message := func(v json.RawMessage) (json.RawMessage, bool) {
		v, calls := editMember(v, "tool_calls", func(v json.RawMessage) (json.RawMessage, bool) { return editEach(v, call) })
		v, legacy := editMember(v, "function_call", arguments)
		return v, calls || legacy
	}
	choice := func(v json.RawMessage) (json.RawMessage, bool) { return editMember(v, "message", message) }
	return editMember(body, "choices", func(v json.RawMessage) (json.RawMessage, bool) { return editEach(v, choice) })
}

// editMember applies edit to the member key of the JSON object v, if it has one, and
// reports whether that changed v.
func editMember(v json.RawMessage, key string, edit func(json.RawMessage) (json.RawMessage, bool)) (json.RawMessage, bool) {
	var members map[string]json.RawMessage
	if json.Unmarshal(v, &members) != nil {
		return v, false
	}
	member, ok := members[key]
	if !ok {
		return v, false
	}
	if members[key], ok = edit(member); !ok {
		return v, false
	}
	out, err := json.Marshal(members)
	if err != nil {
		return v, false
	}
	return out, true
}

// editEach applies edit to each element of the JSON array v, and reports whether that
// changed v.
func editEach(v json.RawMessage, edit func(json.RawMessage) (json.RawMessage, bool)) (json.RawMessage, bool) {
	var elems []json.RawMessage
	if json.Unmarshal(v, &elems) != nil {
		return v, false
	}
	changed := false
	for i := range elems {
		var c bool
		elems[i], c = edit(elems[i])
		changed = changed || c
	}
	if !changed {
		return v, false
	}
	out, err := json.Marshal(elems)
	if err != nil {
		return v, false
	}
	return out, true
}

// mapResponse converts an answer with choices; body is the answer as it came.
func (p *OpenAI) mapResponse(req *Request, resp *openai.ChatCompletionResponse, body []byte) Response {
	choice := resp.Choices[0]
	out := Response{
		Text:         choice.Message.Content,
		FinishReason: string(choice.FinishReason),
		Model:        resp.Model,
		Usage:        Usage{PromptTokens: resp.Usage.PromptTokens, CompletionTokens: resp.Usage.CompletionTokens},
		Reasoning:    choice.Message.ReasoningContent,
	}
	if out.Text == "" {
		// Content sent as parts, which go-openai keeps apart.
		out.Text = partsText(choice.Message.MultiContent)
	}
	if out.Text == "" && choice.Message.Refusal != "" {
		out.Text = choice.Message.Refusal
	}
	if out.Reasoning == "" {
		out.Reasoning = reasoningIn(body)
	}
	if out.Model == "" {
		out.Model = p.cfg.Model
	}
	calls := choice.Message.ToolCalls
	if fc := choice.Message.FunctionCall; len(calls) == 0 && fc != nil && (strings.TrimSpace(fc.Name) != "" || strings.TrimSpace(fc.Arguments) != "") {
		// The legacy form of one call, which some servers still answer with.
		calls = []openai.ToolCall{{Type: openai.ToolTypeFunction, Function: *fc}}
	}
	for _, tc := range calls {
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: json.RawMessage(tc.Function.Arguments)})
	}
	// The kernel mends every provider's reply; the adapter's other callers get a reply as safe,
	// and mending it again changes nothing.
	out.Mend(req)
	return out
}

// partsText joins the text of content parts, one part a line.
func partsText(parts []openai.ChatMessagePart) string {
	var texts []string
	for _, part := range parts {
		if part.Text != "" {
			texts = append(texts, part.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// reasoningIn reads the first choice's "reasoning", the field OpenRouter and newer vLLM
// put the model's reasoning in (go-openai reads only reasoning_content), or "".
func reasoningIn(body []byte) string {
	if !bytes.Contains(body, []byte(`"reasoning"`)) {
		return ""
	}
	var answer struct {
		Choices []struct {
			Message struct {
				Reasoning json.RawMessage `json:"reasoning"`
			} `json:"message"`
		} `json:"choices"`
	}
	var text string
	if json.Unmarshal(body, &answer) != nil || len(answer.Choices) == 0 ||
		json.Unmarshal(answer.Choices[0].Message.Reasoning, &text) != nil {
		return ""
	}
	return text
}

// strictKeywords are the JSON Schema keywords strict mode accepts.
var strictKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "const": true, "description": true, "title": true,
	"anyOf": true, "$ref": true, "$defs": true, "definitions": true,
}

// strictEligible reports whether a parameters schema can be sent with strict=true unchanged.
func strictEligible(schema json.RawMessage) bool {
	var root map[string]any
	if err := json.Unmarshal(schema, &root); err != nil {
		return false
	}
	if root["type"] != "object" {
		return false
	}
	return strictNode(root, 0)
}

func strictNode(node map[string]any, depth int) bool {
	if depth > 32 {
		return false
	}
	for k := range node {
		if !strictKeywords[k] {
			return false
		}
	}
	sub := func(v any) bool {
		m, ok := v.(map[string]any)
		return ok && strictNode(m, depth+1)
	}
	if props, has := node["properties"]; has || node["type"] == "object" {
		pm, ok := props.(map[string]any)
		if has && !ok {
			return false
		}
		if ap, ok := node["additionalProperties"].(bool); !ok || ap {
			return false
		}
		req, _ := node["required"].([]any)
		required := map[string]bool{}
		for _, r := range req {
			if s, ok := r.(string); ok {
				required[s] = true
			}
		}
		for name, ps := range pm {
			if !required[name] || !sub(ps) {
				return false
			}
		}
	}
	if items, has := node["items"]; has && !sub(items) {
		return false
	}
	if anyOf, has := node["anyOf"]; has {
		list, ok := anyOf.([]any)
		if !ok {
			return false
		}
		for _, v := range list {
			if !sub(v) {
				return false
			}
		}
	}
	for _, defsKey := range []string{"$defs", "definitions"} {
		if defs, has := node[defsKey]; has {
			dm, ok := defs.(map[string]any)
			if !ok {
				return false
			}
			for _, v := range dm {
				if !sub(v) {
					return false
				}
			}
		}
	}
	return true
}
