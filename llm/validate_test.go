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
