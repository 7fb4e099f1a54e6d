package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
)

// Validate checks the structural rules every provider relies on and that real
// chat-completions servers enforce, so that a malformed conversation fails the same way
// against the replay provider as against a real server. The error wraps ErrInvalidRequest
// and names the offending field.
//
// Rules: counters are not negative; there is at least one message; roles are known; only
// assistant messages carry tool calls, each with an id, a name and JSON arguments; only tool
// messages carry tool_call_id, which must answer a call of the preceding assistant message
// exactly once; every assistant tool call is answered before the next non-tool message and
// before the end; tool names are non-empty
// and unique and their parameters, when given, are a JSON object.
func (r *Request) Validate() error {
	bad := func(field, rule string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidRequest, field, fmt.Sprintf(rule, args...))
	}
	if r.Process.PID < 0 {
		return bad("process.pid", "must not be negative (got %d)", r.Process.PID)
	}
	if r.Turn < 0 {
		return bad("turn", "must not be negative (got %d)", r.Turn)
	}
	if r.MaxTokens < 0 {
		return bad("max_tokens", "must not be negative (got %d)", r.MaxTokens)
	}
	if len(r.Messages) == 0 {
		return bad("messages", "at least one message is required")
	}
	// unanswered holds the ids of the latest assistant message's calls not
	// yet answered. An id answered already is looked for only when a tool
	// message answers none of them: a request is validated at every call,
	// over its whole history, and the usual one is valid.
	unanswered := make([]string, 0, 8)
	for i, m := range r.Messages {
		// Named only when it is reported.
		field := lazyField{"messages", i}
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		default:
			return bad(field.String()+".role", "must be system, user, assistant or tool (got %q)", m.Role)
		}
		if m.Role != RoleTool && len(unanswered) > 0 {
			return bad(field.String(), "tool call %s of an earlier assistant message has no tool message answering it", slices.Min(unanswered))
		}
		if m.Role != RoleAssistant && len(m.ToolCalls) > 0 {
			return bad(field.String()+".tool_calls", "only assistant messages carry tool calls")
		}
		if m.Role != RoleTool && m.ToolCallID != "" {
			return bad(field.String()+".tool_call_id", "only tool messages carry tool_call_id")
		}
		switch m.Role {
		case RoleAssistant:
			for j, tc := range m.ToolCalls {
				cf := func() string { return fmt.Sprintf("%s.tool_calls[%d]", field, j) }
				if tc.ID == "" {
					return bad(cf()+".id", "required")
				}
				if slices.Contains(unanswered, tc.ID) {
					return bad(cf()+".id", "duplicate id %q in one message", tc.ID)
				}
				if tc.Name == "" {
					return bad(cf()+".name", "required")
				}
				if len(bytes.TrimSpace(tc.Arguments)) > 0 && !validArguments.valid(tc.Arguments) {
					return bad(cf()+".arguments", "must be valid JSON")
				}
				unanswered = append(unanswered, tc.ID)
			}
		case RoleTool:
			if m.ToolCallID == "" {
				return bad(field.String()+".tool_call_id", "required for role tool")
			}
			j := slices.Index(unanswered, m.ToolCallID)
			if j < 0 {
				if calledBefore(r.Messages[:i], m.ToolCallID) {
					return bad(field.String()+".tool_call_id", "tool call %q is already answered", m.ToolCallID)
				}
				return bad(field.String()+".tool_call_id", "%q answers no tool call of the preceding assistant message", m.ToolCallID)
			}
			unanswered = slices.Delete(unanswered, j, j+1)
		}
	}
	if len(unanswered) > 0 {
		return bad("messages", "tool call %s of the last assistant message has no tool message answering it", slices.Min(unanswered))
	}
	dup := duplicateTool(r.Tools)
	for i, t := range r.Tools {
		field := lazyField{"tools", i}
		if t.Name == "" {
			return bad(field.String()+".name", "required")
		}
		if i == dup {
			return bad(field.String()+".name", "duplicate tool name %q", t.Name)
		}
		if len(bytes.TrimSpace(t.Parameters)) > 0 && !knownSchemaObject(t.Parameters) {
			return bad(field.String()+".parameters", "must be a JSON Schema object")
		}
	}
	return nil
}

// duplicateTool returns the index of the first tool whose name an earlier
// tool has, or -1. A set built at every call costs more than comparing the
// names of a table of up to tinyToolTable tools with each other, or than
// sorting a copy of them, on the stack, up to smallToolTable; only a table
// with a duplicate is walked again to find it.
func duplicateTool(tools []ToolSchema) int {
	if len(tools) <= tinyToolTable {
		for i, t := range tools {
			for _, earlier := range tools[:i] {
				if earlier.Name == t.Name {
					return i
				}
			}
		}
		return -1
	}
	if len(tools) <= smallToolTable {
		var room [smallToolTable]string
		names := room[:0]
		for _, t := range tools {
			names = append(names, t.Name)
		}
		slices.Sort(names)
		if !hasAdjacentEqual(names) {
			return -1
		}
	}
	seen := make(map[string]bool, len(tools))
	for i, t := range tools {
		if seen[t.Name] {
			return i
		}
		seen[t.Name] = true
	}
	return -1
}

func hasAdjacentEqual(sorted []string) bool {
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return true
		}
	}
	return false
}

// tinyToolTable and smallToolTable are the sizes of tool tables up to which
// duplicateTool compares names with each other, or sorts them, instead of
// building a set.
const (
	tinyToolTable  = 16
	smallToolTable = 64
)

// calledBefore reports whether an assistant message of msgs made a call
// with id.
func calledBefore(msgs []Message, id string) bool {
	for _, m := range msgs {
		for _, tc := range m.ToolCalls {
			if tc.ID == id {
				return true
			}
		}
	}
	return false
}

// lazyField is a field path built only when an error names it.
type lazyField struct {
	list  string
	index int
}

func (f lazyField) String() string { return fmt.Sprintf("%s[%d]", f.list, f.index) }

// schemaObjects remembers tool parameter schemas already found to be JSON
// objects: a runtime sends the same few tables with every request, and
// scanning each schema again on every call costs more than the lookup.
var schemaObjects = struct {
	sync.RWMutex
	seen map[string]struct{}
}{seen: map[string]struct{}{}}

// maxSchemaObjects bounds what schemaObjects holds; past it, schemas are
// scanned every time.
const maxSchemaObjects = 4096

func knownSchemaObject(raw []byte) bool {
	schemaObjects.RLock()
	_, ok := schemaObjects.seen[string(raw)]
	schemaObjects.RUnlock()
	if ok {
		return true
	}
	if !isJSONObject(raw) {
		return false
	}
	schemaObjects.Lock()
	if len(schemaObjects.seen) < maxSchemaObjects {
		schemaObjects.seen[string(raw)] = struct{}{}
	}
	schemaObjects.Unlock()
	return true
}

// validArguments remembers tool-call arguments found to be JSON, by their
// bytes. A request carries its whole history and is validated at every call,
// so without it each call scans every earlier call's arguments again: the
// largest cost of a long conversation's validation. Looking text up costs a
// hash and a comparison, a fraction of the scan.
var validArguments = argumentMemo{limit: 1 << 20}

// argumentMemo holds two generations of remembered texts, each of up to
// limit bytes: when the current one is full it becomes the old one, and a
// text found in the old one moves back, so what the calls of live
// conversations repeat stays while memory is bounded. Texts over limit/64
// bytes are scanned every time.
type argumentMemo struct {
	mu       sync.Mutex
	limit    int
	cur, old map[string]struct{}
	curBytes int
}

func (m *argumentMemo) valid(args []byte) bool {
	if len(args) > m.limit/64 {
		return json.Valid(args)
	}
	// The text kept is always a copy that was itself found valid, or found
	// among valid ones: args is a caller's buffer.
	m.mu.Lock()
	_, ok := m.cur[string(args)]
	if !ok {
		if _, ok = m.old[string(args)]; ok {
			text := string(args)
			if _, ok = m.old[text]; ok {
				m.keepLocked(text)
			}
		}
	}
	m.mu.Unlock()
	if ok {
		return true
	}
	own := bytes.Clone(args)
	if !json.Valid(own) {
		return false
	}
	m.mu.Lock()
	m.keepLocked(string(own))
	m.mu.Unlock()
	return true
}

func (m *argumentMemo) keepLocked(text string) {
	if m.cur == nil || m.curBytes+len(text) > m.limit {
		m.old, m.cur, m.curBytes = m.cur, make(map[string]struct{}), 0
	}
	m.cur[text] = struct{}{}
	m.curBytes += len(text)
}

// isJSONObject reports whether raw is one valid JSON object.
func isJSONObject(raw []byte) bool {
	trimmed := bytes.TrimSpace(raw)
	return len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(trimmed)
}

// invalidRequest wraps a validation failure as the not-started, permanent CallError that
// adapters return for it.
func invalidRequest(adapter string, err error) *CallError {
	return &CallError{
		Settlement: SettlementNotStarted,
		Permanent:  true,
		Err:        fmt.Errorf("%s: %w", adapter, err),
	}
}
