package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestSettlementOf(t *testing.T) {
	notStarted := &CallError{Settlement: SettlementNotStarted, Err: errors.New("refused")}
	tests := []struct {
		name string
		err  error
		want Settlement
	}{
		{"nil is completed", nil, SettlementCompleted},
		{"call error", notStarted, SettlementNotStarted},
		{"wrapped call error", fmt.Errorf("quantum 3: %w", &CallError{Settlement: SettlementRejected}), SettlementRejected},
		{"call error without settlement", &CallError{}, SettlementUnknown},
		{"plain error", errors.New("boom"), SettlementUnknown},
	}
	for _, tc := range tests {
		if got := SettlementOf(tc.err); got != tc.want {
			t.Errorf("%s: SettlementOf = %q, want %q", tc.name, got, tc.want)
		}
	}
	if IsPermanent(errors.New("x")) || IsPermanent(notStarted) || !IsPermanent(fmt.Errorf("w: %w", &CallError{Permanent: true})) {
		t.Error("IsPermanent misclassifies")
	}
}

func TestCallErrorMessageAndUnwrap(t *testing.T) {
	cause := errors.New("connection refused")
	err := &CallError{Settlement: SettlementNotStarted, Err: cause}
	if !errors.Is(err, cause) {
		t.Fatal("CallError does not unwrap to its cause")
	}
	if got := err.Error(); got != "llm call not_started (retryable): connection refused" {
		t.Fatalf("Error() = %q", got)
	}
	err = &CallError{Settlement: SettlementRejected, Permanent: true}
	if got := err.Error(); got != "llm call rejected (permanent): <nil>" {
		t.Fatalf("Error() = %q", got)
	}
}

func TestRequestValidate(t *testing.T) {
	call := func(id string) ToolCall { return ToolCall{ID: id, Name: "t", Arguments: json.RawMessage(`{}`)} }
	base := func() Request {
		return Request{
			Process: ProcessInfo{PID: 1, Image: "base:v0"},
			Messages: []Message{
				{Role: RoleSystem, Content: "s"},
				{Role: RoleUser, Content: "u"},
				{Role: RoleAssistant, ToolCalls: []ToolCall{call("a"), call("b")}},
				{Role: RoleTool, ToolCallID: "b", Content: "{}"},
				{Role: RoleTool, ToolCallID: "a", Content: "{}"},
				{Role: RoleAssistant, Content: "done"},
			},
			Tools: []ToolSchema{{Name: "t", Parameters: json.RawMessage(` {"type":"object"} `)}, {Name: "u"}},
		}
	}
	if err := (func() *Request { r := base(); return &r })().Validate(); err != nil {
		t.Fatalf("valid request rejected: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(r *Request)
		want   string
	}{
		{"negative pid", func(r *Request) { r.Process.PID = -1 }, "process.pid: must not be negative"},
		{"negative turn", func(r *Request) { r.Turn = -1 }, "turn: must not be negative"},
		{"negative max tokens", func(r *Request) { r.MaxTokens = -5 }, "max_tokens: must not be negative"},
		{"no messages", func(r *Request) { r.Messages = nil }, "messages: at least one message is required"},
		{"unknown role", func(r *Request) { r.Messages[1].Role = "developer" }, `messages[1].role: must be system, user, assistant or tool (got "developer")`},
		{"tool calls on a user message", func(r *Request) { r.Messages[1].ToolCalls = []ToolCall{call("x")} }, "messages[1].tool_calls: only assistant messages carry tool calls"},
		{"tool_call_id on a user message", func(r *Request) { r.Messages[1].ToolCallID = "a" }, "messages[1].tool_call_id: only tool messages carry tool_call_id"},
		{"call without id", func(r *Request) { r.Messages[2].ToolCalls[1].ID = "" }, "messages[2].tool_calls[1].id: required"},
		{"duplicate call id", func(r *Request) { r.Messages[2].ToolCalls[1].ID = "a" }, `messages[2].tool_calls[1].id: duplicate id "a"`},
		{"call without name", func(r *Request) { r.Messages[2].ToolCalls[0].Name = "" }, "messages[2].tool_calls[0].name: required"},
		{"call arguments not JSON", func(r *Request) { r.Messages[2].ToolCalls[0].Arguments = json.RawMessage(`{x}`) }, "messages[2].tool_calls[0].arguments: must be valid JSON"},
		{"tool message without id", func(r *Request) { r.Messages[3].ToolCallID = "" }, "messages[3].tool_call_id: required for role tool"},
		{"tool message answering nothing", func(r *Request) { r.Messages[3].ToolCallID = "zzz" }, `messages[3].tool_call_id: "zzz" answers no tool call of the preceding assistant message`},
		{"tool message answering twice", func(r *Request) { r.Messages[4].ToolCallID = "b" }, `messages[4].tool_call_id: tool call "b" is already answered`},
		{"unanswered call before a new message", func(r *Request) { r.Messages = append(r.Messages[:4], r.Messages[5]) }, "messages[4]: tool call a of an earlier assistant message has no tool message answering it"},
		{"unanswered call at the end", func(r *Request) { r.Messages = r.Messages[:3] }, "messages: tool call a of the last assistant message has no tool message answering it"},
		{"tool without name", func(r *Request) { r.Tools[1].Name = "" }, "tools[1].name: required"},
		{"duplicate tool", func(r *Request) { r.Tools[1].Name = "t" }, `tools[1].name: duplicate tool name "t"`},
		{"duplicate tool in a table sorted to find it", func(r *Request) {
			for i := len(r.Tools); i <= tinyToolTable+1; i++ {
				r.Tools = append(r.Tools, ToolSchema{Name: fmt.Sprintf("tool%d", i)})
			}
			r.Tools = append(r.Tools, ToolSchema{Name: "tool5"})
		}, fmt.Sprintf(`tools[%d].name: duplicate tool name "tool5"`, tinyToolTable+2)},
		{"duplicate tool in a large table", func(r *Request) {
			for i := len(r.Tools); i <= smallToolTable+1; i++ {
				r.Tools = append(r.Tools, ToolSchema{Name: fmt.Sprintf("tool%d", i)})
			}
			r.Tools = append(r.Tools, ToolSchema{Name: "tool7"})
		}, fmt.Sprintf(`tools[%d].name: duplicate tool name "tool7"`, smallToolTable+2)},
		{"parameters not an object", func(r *Request) { r.Tools[0].Parameters = json.RawMessage(`["a"]`) }, "tools[0].parameters: must be a JSON Schema object"},
		{"parameters not JSON", func(r *Request) { r.Tools[0].Parameters = json.RawMessage(`{"type":`) }, "tools[0].parameters: must be a JSON Schema object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			tc.mutate(&r)
			err := r.Validate()
			if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want error containing %q", err, tc.want)
			}
		})
	}
}

// TestDuplicateToolAtEveryTableSize checks duplicateTool on each side of
// the sizes where it changes method: a table without a duplicate passes,
// and of two duplicated names, the one whose second use comes first is
// reported, whichever sorts first.
func TestDuplicateToolAtEveryTableSize(t *testing.T) {
	for _, n := range []int{0, 1, 2, tinyToolTable - 1, tinyToolTable, tinyToolTable + 1, smallToolTable - 1, smallToolTable, smallToolTable + 1, 200} {
		tools := make([]ToolSchema, n)
		for i := range tools {
			tools[i].Name = fmt.Sprintf("t%03d", n-i) // descending: sorting moves every name
		}
		if got := duplicateTool(tools); got != -1 {
			t.Errorf("%d distinct tools: duplicate at %d, want none", n, got)
		}
		if n < 4 {
			continue
		}
		// The first name (it sorts last) repeats at n-2, the second at n-1.
		tools[n-2].Name = tools[0].Name
		tools[n-1].Name = tools[1].Name
		if got := duplicateTool(tools); got != n-2 {
			t.Errorf("%d tools: duplicate at %d, want %d", n, got, n-2)
		}
	}
}
