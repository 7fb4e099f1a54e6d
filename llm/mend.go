package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// MissingToolName stands for the name of a tool call the model gave none: the call is kept,
// and answered as a call of a tool that does not exist.
const MissingToolName = "missing_tool_name"

// maxReportedTokens bounds each count of a reply's Usage: far above any model's window or
// output, so only a broken report reaches it, and a budget's ledger summing such reports
// never overflows.
const maxReportedTokens = math.MaxInt32

// Mend makes r, the reply to req, safe to record: its calls become history that every later
// request carries, which Request.Validate and servers hold to one id per call, a name for each
// and JSON arguments, and its usage is what budgets are charged. A reply breaking that is
// mended here, where the model's mistake can still be answered, instead of failing every
// later call:
//
//   - an empty or repeated id gets one of its own (call_<pid>_<turn>_<index>);
//   - an empty name becomes MissingToolName, answered as a call of an unknown tool;
//   - empty arguments become {}, and text that is not JSON is carried as a JSON string, which
//     the tool's schema refuses as a tool error;
//   - a negative count of Usage is 0, one past maxReportedTokens is that bound, and a reply
//     reporting no usage (both counts 0) is charged at an estimate from the sizes of req and
//     r, marked Estimated.
//
// Mending a mended reply changes nothing. The kernel mends every provider's reply.
func (r *Response) Mend(req *Request) {
	var seen map[string]bool
	if len(r.ToolCalls) > 1 {
		seen = make(map[string]bool, len(r.ToolCalls))
	}
	for i := range r.ToolCalls {
		tc := &r.ToolCalls[i]
		for n := 0; tc.ID == "" || seen[tc.ID]; n++ {
			// Some compatible servers omit ids, or repeat one in a message.
			tc.ID = fmt.Sprintf("call_%d_%d_%d", req.Process.PID, req.Turn, i)
			if n > 0 {
				tc.ID += fmt.Sprintf("_%d", n)
			}
		}
		if seen != nil {
			seen[tc.ID] = true
		}
		if strings.TrimSpace(tc.Name) == "" {
			tc.Name = MissingToolName
		}
		tc.Arguments = mendArguments(tc.Arguments)
	}
	u := &r.Usage
	u.PromptTokens = min(max(u.PromptTokens, 0), maxReportedTokens)
	u.CompletionTokens = min(max(u.CompletionTokens, 0), maxReportedTokens)
	if u.PromptTokens == 0 && u.CompletionTokens == 0 {
		// No prompt is free: a call reported at nothing would never meet a token budget.
		*u = estimatedUsage(req, r)
		u.Estimated = true
	}
}

// mendArguments makes model-written arguments valid JSON: empty means {}, and text that is
// not JSON is carried as a JSON string.
func mendArguments(raw json.RawMessage) json.RawMessage {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return json.RawMessage("{}")
	}
	if json.Valid(trimmed) {
		return trimmed
	}
	quoted, _ := json.Marshal(string(raw))
	return quoted
}
