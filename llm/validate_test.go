package llm

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// realisticRequest is a request as a runtime sends it: a system prompt, a
// goal, twenty answered tool calls and a table of fifteen tools.
func realisticRequest() Request {
	msgs := []Message{{Role: RoleSystem, Content: "system"}, {Role: RoleUser, Content: "goal"}}
	for i := range 20 {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: id, Name: "read_object", Arguments: json.RawMessage(`{"oid":"0b6c1f2e-6a4d-4f7e-9c3b-2d1e0f9a8b7c","max_bytes":4096}`)}}},
			Message{Role: RoleTool, ToolCallID: id, Name: "read_object", Content: `{"ok":true}`})
	}
	var tools []ToolSchema
	for i := range 15 {
		params := `{"type":"object","properties":{` + strings.Repeat(`"field":{"type":"string","description":"a field of the tool, described at some length for the model"},`, 6) + `"last":{"type":"integer"}},"additionalProperties":false}`
		tools = append(tools, ToolSchema{Name: fmt.Sprintf("tool_%d", i), Description: "d", Parameters: json.RawMessage(params)})
	}
	return Request{Process: ProcessInfo{PID: 1, Image: "base:v0"}, Turn: 20, Messages: msgs, Tools: tools, MaxTokens: 1024}
}

func BenchmarkValidate(b *testing.B) {
	req := realisticRequest()
	b.ReportAllocs()
	for b.Loop() {
		if err := req.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

// A schema once found to be an object is remembered by its bytes, never by
// its slice: a changed schema is checked again.
func TestValidateRemembersSchemasByContent(t *testing.T) {
	req := realisticRequest()
	if err := req.Validate(); err != nil {
		t.Fatal(err)
	}
	req.Tools[3].Parameters = json.RawMessage(`["not", "an", "object"]`)
	if err := req.Validate(); err == nil || !strings.Contains(err.Error(), "tools[3].parameters") {
		t.Fatalf("a schema that is no longer an object: %v", err)
	}
	req.Messages[4].ToolCalls = nil
	req.Tools[3].Parameters = nil
	if err := req.Validate(); err == nil || !strings.Contains(err.Error(), "messages[5].tool_call_id") {
		t.Fatalf("an answer without its call: %v", err)
	}
}

// Arguments once found to be JSON are remembered by their bytes: the same
// slice changed to text that is not JSON fails, and the memo's two
// generations stay within their bound.
func TestValidateRemembersArgumentsByContent(t *testing.T) {
	req := realisticRequest()
	if err := req.Validate(); err != nil {
		t.Fatal(err)
	}
	args := req.Messages[2].ToolCalls[0].Arguments
	copy(args, `{"oid"}`)
	if err := req.Validate(); err == nil || !strings.Contains(err.Error(), "messages[2].tool_calls[0].arguments") {
		t.Fatalf("arguments changed in place to text that is not JSON: %v", err)
	}

	m := argumentMemo{limit: 640}
	for i := range 100 {
		text := []byte(fmt.Sprintf(`{"n":%d}`, i))
		if !m.valid(text) {
			t.Fatalf("%s is JSON", text)
		}
		if m.curBytes > m.limit || len(m.cur)+len(m.old) > 2*m.limit/len(`{"n":0}`) {
			t.Fatalf("memo past its bound: %d bytes, %d+%d texts", m.curBytes, len(m.cur), len(m.old))
		}
	}
	if m.valid([]byte(`{"n":`)) || m.valid([]byte(strings.Repeat(" ", 20)+"[")) {
		t.Fatal("text that is not JSON passed")
	}
	if _, kept := m.cur[`{"n":`]; kept {
		t.Fatal("text that is not JSON was remembered")
	}
	// A text of the old generation moves back when it is seen again.
	var older string
	for text := range m.old {
		if _, inCur := m.cur[text]; !inCur {
			older = text
			break
		}
	}
	if older == "" || !m.valid([]byte(older)) {
		t.Fatalf("no text only in the old generation (%d old, %d current), or it failed", len(m.old), len(m.cur))
	}
	if _, inCur := m.cur[older]; !inCur {
		t.Fatalf("%s, seen again, stayed in the old generation", older)
	}
}
