// Package llm is the Host's boundary to a language model.
//
// A Provider takes a Request (the process's messages, the exact tool schemas it may call and
// limits) and returns a Response (text, tool calls, usage). Two adapters live here:
//
//   - OpenAI (NewOpenAI): any server that speaks the chat-completions API, through the
//     github.com/sashabaranov/go-openai client. Retries and per-attempt timeouts belong to it.
//   - Replay (NewReplay, LoadScript, ParseScript): a deterministic provider driven by a YAML
//     script, used by tests and the offline demo. Its format is documented on Script.
//
// A failed call is reported as a *CallError whose Settlement says what is known about its
// effect at the provider, so the kernel can tell "nothing happened" from "it may have happened".
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Role is the author of a Message.
type Role string

// The roles a Message may have.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of a conversation as the model sees it.
type Message struct {
	Role       Role       `json:"role"`
	Content    string     `json:"content,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`   // assistant messages
	ToolCallID string     `json:"tool_call_id,omitempty"` // tool messages: which call this answers
	Name       string     `json:"name,omitempty"`         // tool messages: the tool's name
}

// ToolCall is one call the model asked for. Arguments is valid JSON once the reply is mended
// (Response.Mend): normally an object, or a JSON string carrying text that was not JSON.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ToolSchema describes one tool the model may call. Parameters is the exact JSON Schema
// object of its arguments and is sent to the model unchanged.
type ToolSchema struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// ProcessInfo identifies the process a Request is made for.
type ProcessInfo struct {
	PID int64
	// ParentPID is 0 for a root process.
	ParentPID int64
	Image     string
	GoalOID   string
}

// Request is one provider call.
type Request struct {
	Process ProcessInfo
	// Turn is the 0-based count of this process's previous provider calls. It is durable and
	// continues after a reopen.
	Turn int
	// Attempt is the 1-based attempt of this request: a request asked again after a failure
	// keeps its Turn and counts up here (0 means the caller does not count attempts).
	Attempt int
	// Messages starts with the system prompt. Tool results are role "tool" messages whose
	// Content is the JSON result object exactly as the model sees it.
	Messages  []Message
	Tools     []ToolSchema
	MaxTokens int // 0 = provider default
}

// Usage is the token accounting of one call.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// Estimated is set when the provider reported no usage and the counts
	// are estimated from the sizes of the request and the answer, so that
	// a server that reports none still has its calls charged.
	Estimated bool
}

// Response is the model's answer to one Request.
type Response struct {
	Text      string
	ToolCalls []ToolCall
	Usage     Usage
	// FinishReason is the server's, as it gave it: "stop", "tool_calls", "length" (cut at
	// the token limit), "content_filter" (cut or withheld by the provider's filter), or "".
	FinishReason string
	Model        string
	// Reasoning is the model's reasoning when the server returns it apart from the answer
	// (reasoning_content, or reasoning), or "". It is not part of Text and no request sends
	// it back; a caller may log it or ignore it.
	Reasoning string
}

// Provider is a model the Host supplies to the kernel.
//
// Implementations must be safe for concurrent use by many goroutines: the kernel runs quanta
// for different processes in parallel. Complete does not retain or modify req after it
// returns. Every error Complete returns is a *CallError (possibly wrapped) so that
// SettlementOf can classify it; any other error counts as a call of unknown settlement that
// may be asked again (DispositionOf).
//
// Complete must return soon after ctx is done: the kernel runs it with no lock held but
// cannot interrupt it, and the runtime's Close and RunUntilIdle wait for every call in
// flight, so a call that ignores ctx holds them up for as long as it runs.
//
// A Provider need not mend what a model answers: the kernel applies Response.Mend to every
// reply before it records it, so a call without an id or with one the reply repeats, a call
// without a name, and arguments that are empty or not JSON are answered to the model as tool
// errors instead of failing its process. Usage may be left zero when the server reports
// none: the call is then charged at an estimate (Usage.Estimated); a negative count counts
// as 0, and an absurdly large one is bounded.
//
// A panic in Complete fails that call with its settlement unknown (the request may have
// reached the model), and the process waits for the Host, its reason naming the panic; the
// stack is in the provider.call event.
type Provider interface {
	Complete(ctx context.Context, req Request) (Response, error)
	Name() string // "replay", "openai"
}

// Settlement says what is known about a failed call's effect at the provider.
type Settlement string

const (
	// SettlementNotStarted: the request never reached the provider; nothing happened.
	SettlementNotStarted Settlement = "not_started"
	// SettlementUnknown: the request may have been processed (for example the connection
	// broke after it was sent). Retrying could duplicate the call.
	SettlementUnknown Settlement = "unknown"
	// SettlementRejected: the server answered with an error; no output was produced.
	SettlementRejected Settlement = "rejected"
	// SettlementCompleted is what SettlementOf reports for a nil error.
	SettlementCompleted Settlement = "completed"
)

// ErrInvalidRequest is wrapped by errors reporting a malformed Request. Such a call is not
// started and is permanent.
var ErrInvalidRequest = errors.New("invalid llm request")

// ErrScriptExhausted is wrapped by the replay provider's error when the script has no entry
// for the process or no turn left for it.
var ErrScriptExhausted = errors.New("replay script exhausted")

// ErrScriptReference is wrapped by the replay provider's error when a ${...} reference in a
// tool call's arguments cannot be resolved; the message names the reference.
var ErrScriptReference = errors.New("replay script reference cannot be resolved")

// ErrScriptInvalid is wrapped by every error that rejects a replay script while loading it.
var ErrScriptInvalid = errors.New("invalid replay script")

// CallError is the error a Provider returns for a failed call.
type CallError struct {
	Settlement Settlement
	// Permanent means repeating the same request will fail the same way.
	Permanent bool
	// Transient means the same request may well succeed later: nothing
	// reached the server, no answer came in time, or the server answered a
	// status that says "not now" (408, 409, 425, 429, and 5xx but 501 and
	// 505).
	Transient bool
	// RetryAfter is when the server said to ask again (Retry-After,
	// retry-after-ms, or the reset of an exhausted x-ratelimit limit), or 0.
	RetryAfter time.Duration
	// NeedsHost means the settings are wrong (a bad key, an unknown model, a
	// wrong base URL): asking again unchanged cannot succeed. Hint says what
	// to fix.
	NeedsHost bool
	// ContextTooLong means the server refused the prompt as longer than the
	// model's context window.
	ContextTooLong bool
	// Hint is a short remedy for an operator, or "".
	Hint string
	// StatusCode is the HTTP status the server answered with, or 0.
	StatusCode int
	// Attempts is how many attempts the adapter made (0 when none was made).
	Attempts int
	Err      error
}

// Error describes the failure and its settlement.
func (e *CallError) Error() string {
	kind := "retryable"
	switch {
	case e.Transient:
		kind = "transient"
	case e.Permanent:
		kind = "permanent"
	}
	msg := "<nil>"
	if e.Err != nil {
		msg = e.Err.Error()
	}
	return fmt.Sprintf("llm call %s (%s): %s", e.Settlement, kind, msg)
}

// Unwrap returns the underlying error.
func (e *CallError) Unwrap() error { return e.Err }

// SettlementOf classifies err: the Settlement of the *CallError in its chain, or
// SettlementUnknown for any other error, since nothing proves such a call did not happen.
// A nil error is SettlementCompleted.
func SettlementOf(err error) Settlement {
	if err == nil {
		return SettlementCompleted
	}
	var ce *CallError
	if errors.As(err, &ce) && ce.Settlement != "" {
		return ce.Settlement
	}
	return SettlementUnknown
}

// IsPermanent reports whether err is a *CallError marked Permanent.
func IsPermanent(err error) bool {
	var ce *CallError
	return errors.As(err, &ce) && ce.Permanent
}
