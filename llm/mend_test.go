package llm

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

func TestMendMakesAReplySafeToRecord(t *testing.T) {
	req := &Request{Process: ProcessInfo{PID: 7}, Turn: 3, Messages: []Message{{Role: RoleUser, Content: "hello there"}}}
	resp := Response{ToolCalls: []ToolCall{
		{ID: "", Name: "a", Arguments: json.RawMessage(`{not json`)},
		{ID: "call_7_3_0", Name: " ", Arguments: json.RawMessage(" \n")},
		{ID: "x", Name: "b", Arguments: json.RawMessage(` {"k": 1} `)},
		{ID: "x", Name: "c", Arguments: nil},
	}, Usage: Usage{PromptTokens: -100, CompletionTokens: -5}}
	resp.Mend(req)
	want := []ToolCall{
		{ID: "call_7_3_0", Name: "a", Arguments: json.RawMessage(`"{not json"`)},
		// The model's id is the one just given to the call before it.
		{ID: "call_7_3_1", Name: MissingToolName, Arguments: json.RawMessage(`{}`)},
		{ID: "x", Name: "b", Arguments: json.RawMessage(`{"k": 1}`)},
		{ID: "call_7_3_3", Name: "c", Arguments: json.RawMessage(`{}`)},
	}
	if !reflect.DeepEqual(resp.ToolCalls, want) {
		t.Fatalf("calls %q\nwant  %q", resp.ToolCalls, want)
	}
	if u := resp.Usage; !u.Estimated || u.PromptTokens <= 0 || u.CompletionTokens <= 0 {
		t.Fatalf("usage %+v: reported as less than none, it is estimated", u)
	}
	// A history of the mended reply is a valid request.
	next := Request{Messages: []Message{{Role: RoleUser, Content: "go"}, {Role: RoleAssistant, ToolCalls: resp.ToolCalls}}}
	for _, c := range resp.ToolCalls {
		next.Messages = append(next.Messages, Message{Role: RoleTool, ToolCallID: c.ID, Content: "{}"})
	}
	if err := next.Validate(); err != nil {
		t.Fatal(err)
	}
	again := resp
	again.ToolCalls = append([]ToolCall(nil), resp.ToolCalls...)
	again.Mend(req)
	if !reflect.DeepEqual(again, resp) {
		t.Fatalf("mending again changed %+v to %+v", resp, again)
	}
}

func TestMendBoundsReportedUsage(t *testing.T) {
	req := &Request{Messages: []Message{{Role: RoleUser, Content: "hi"}}}
	for _, c := range []struct{ in, want Usage }{
		{Usage{PromptTokens: 10, CompletionTokens: 5}, Usage{PromptTokens: 10, CompletionTokens: 5}},
		{Usage{PromptTokens: 10, CompletionTokens: -5}, Usage{PromptTokens: 10}},
		{Usage{PromptTokens: 1 << 62, CompletionTokens: 1 << 62}, Usage{PromptTokens: math.MaxInt32, CompletionTokens: math.MaxInt32}},
	} {
		resp := Response{Usage: c.in}
		resp.Mend(req)
		if resp.Usage != c.want {
			t.Errorf("usage %+v mended to %+v, want %+v", c.in, resp.Usage, c.want)
		}
	}
}
