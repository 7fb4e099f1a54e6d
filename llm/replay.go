package llm

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/libos/libos/images"
)

// Replay is the deterministic Provider driven by a Script. It holds no mutable state, so it
// is safe for concurrent use, and the answer to a request depends only on the request and
// on the process's spawn index (see SpawnIndexer): a reopened runtime continues each process
// at the turn after its last recorded call.
//
// Tool call IDs are "call_<pid>_<turn>_<index>". Usage is estimated from sizes (about four
// bytes a token). FinishReason is "tool_calls" when the turn has tool calls, else "stop".
// MaxTokens is not enforced: scripted output is returned as written.
type Replay struct {
	model   string
	byImage map[string][]*compiledProcess
	spawns  SpawnIndexer
}

// SpawnIndexer tells the replay provider which script entry of its image a process follows.
// It is replay-only data, so it stays out of the Request: the Host that runs the processes
// answers it (the kernel's Runtime is one).
type SpawnIndexer interface {
	// SpawnIndex returns the 0-based index of process pid among the processes spawned with
	// its image in its process tree (a root and its descendants), in spawn order. A fork of
	// a checkpoint has the index of the process it copies.
	SpawnIndex(pid int64) (int, error)
}

// SpawnIndexFunc adapts a function to a SpawnIndexer.
type SpawnIndexFunc func(pid int64) (int, error)

// SpawnIndex returns f(pid).
func (f SpawnIndexFunc) SpawnIndex(pid int64) (int, error) { return f(pid) }

type compiledProcess struct {
	index int // position in Script.Processes
	turns []compiledTurn
}

type compiledTurn struct {
	text  string
	calls []compiledCall
	fault *ScriptFault
}

type compiledCall struct {
	name string
	args argNode
}

// NewReplay returns a Replay answering from s, choosing each process's entry by its index
// in spawns. The script is compiled: later changes to s have no effect. Invalid scripts are
// rejected with a *ScriptError.
func NewReplay(s *Script, spawns SpawnIndexer) (*Replay, error) {
	if spawns == nil {
		return nil, errors.New("replay: a SpawnIndexer is required")
	}
	r, err := compileScript(s)
	if err != nil {
		return nil, err
	}
	r.spawns = spawns
	return r, nil
}

// NewReplayFromFile loads the script at path and returns a Replay answering from it.
func NewReplayFromFile(path string, spawns SpawnIndexer) (*Replay, error) {
	s, err := LoadScript(path)
	if err != nil {
		return nil, err
	}
	return NewReplay(s, spawns)
}

func compileScript(s *Script) (*Replay, error) {
	if s == nil {
		return nil, &ScriptError{Rule: "no script"}
	}
	r := &Replay{model: "replay", byImage: map[string][]*compiledProcess{}}
	if s.Name != "" {
		r.model = "replay/" + s.Name
	}
	for i, p := range s.Processes {
		path := fmt.Sprintf("processes[%d]", i)
		if strings.TrimSpace(p.Image) == "" {
			return nil, &ScriptError{Path: path + ".image", Rule: "required"}
		}
		if _, _, err := images.ParseRef(p.Image); err != nil {
			return nil, &ScriptError{Path: path + ".image", Rule: err.Error()}
		}
		cp := &compiledProcess{index: i, turns: make([]compiledTurn, len(p.Turns))}
		for j, t := range p.Turns {
			ct := compiledTurn{text: t.Text, calls: make([]compiledCall, len(t.ToolCalls)), fault: t.Fault}
			for k, c := range t.ToolCalls {
				cpath := fmt.Sprintf("%s.turns[%d].tool_calls[%d]", path, j, k)
				if strings.TrimSpace(c.Name) == "" {
					return nil, &ScriptError{Path: cpath + ".name", Rule: "required"}
				}
				args, _, err := compileArguments(c.Arguments, cpath+".arguments")
				if err != nil {
					return nil, err
				}
				ct.calls[k] = compiledCall{name: c.Name, args: args}
			}
			cp.turns[j] = ct
		}
		r.byImage[p.Image] = append(r.byImage[p.Image], cp)
	}
	return r, nil
}

// Name returns "replay".
func (r *Replay) Name() string { return "replay" }

// Complete answers req with turns[req.Turn] of the script entry for req.Process.Image whose
// position is the process's spawn index. A missing entry or turn is a permanent, rejected
// CallError wrapping ErrScriptExhausted; an unresolvable reference one wrapping
// ErrScriptReference. A failed index lookup is a transient CallError: nothing was asked.
func (r *Replay) Complete(ctx context.Context, req Request) (Response, error) {
	if err := ctx.Err(); err != nil {
		return Response{}, &CallError{Settlement: SettlementNotStarted, Err: fmt.Errorf("replay: %w", err)}
	}
	if err := req.Validate(); err != nil {
		return Response{}, invalidRequest("replay", err)
	}
	if req.Process.Image == "" {
		return Response{}, invalidRequest("replay", fmt.Errorf("%w: process.image: required by the replay provider", ErrInvalidRequest))
	}
	index, err := r.spawns.SpawnIndex(req.Process.PID)
	if err != nil {
		return Response{}, &CallError{Settlement: SettlementNotStarted, Transient: true, Err: fmt.Errorf(
			"replay: spawn index of process %d: %w", req.Process.PID, err)}
	}
	if index < 0 {
		return Response{}, invalidRequest("replay", fmt.Errorf("%w: process %d: spawn index must not be negative (got %d)",
			ErrInvalidRequest, req.Process.PID, index))
	}
	entries := r.byImage[req.Process.Image]
	if index >= len(entries) {
		return Response{}, &CallError{Settlement: SettlementRejected, Permanent: true, Err: fmt.Errorf(
			"replay: %w: process %d is spawn %d of image %q but the script has %d entries for that image",
			ErrScriptExhausted, req.Process.PID, index, req.Process.Image, len(entries))}
	}
	entry := entries[index]
	if req.Turn >= len(entry.turns) {
		return Response{}, &CallError{Settlement: SettlementRejected, Permanent: true, Err: fmt.Errorf(
			"replay: %w: process %d (image %q, processes[%d]) asked for turn %d but the entry has %d turns",
			ErrScriptExhausted, req.Process.PID, req.Process.Image, entry.index, req.Turn, len(entry.turns))}
	}
	turn := &entry.turns[req.Turn]
	if turn.fault != nil && max(req.Attempt, 1) <= turn.fault.Attempts {
		return Response{}, turn.fault.err(&req)
	}
	env := refEnv{req: &req}
	resp := Response{Text: turn.text, Model: r.model, FinishReason: "stop"}
	if len(turn.calls) > 0 {
		resp.FinishReason = "tool_calls"
		resp.ToolCalls = make([]ToolCall, len(turn.calls))
		for i, c := range turn.calls {
			args, err := c.args.appendJSON(nil, &env)
			if err != nil {
				return Response{}, &CallError{Settlement: SettlementRejected, Permanent: true, Err: fmt.Errorf(
					"replay: process %d turn %d: %w", req.Process.PID, req.Turn, err)}
			}
			resp.ToolCalls[i] = ToolCall{
				ID:        fmt.Sprintf("call_%d_%d_%d", req.Process.PID, req.Turn, i),
				Name:      c.name,
				Arguments: args,
			}
		}
	}
	resp.Usage = estimatedUsage(&req, &resp)
	return resp, nil
}

// estimatedUsage estimates the tokens of req and of its answer resp from their sizes.
func estimatedUsage(req *Request, resp *Response) Usage {
	// Reasoning is generated, and billed, as completion tokens.
	completion := len(resp.Text) + len(resp.Reasoning)
	for _, c := range resp.ToolCalls {
		completion += len(c.Name) + len(c.Arguments)
	}
	return Usage{PromptTokens: estimateTokens(promptBytes(req)), CompletionTokens: estimateTokens(completion)}
}

// promptBytes is the size of everything the model would read.
func promptBytes(req *Request) int {
	n := 0
	for i := range req.Messages {
		m := &req.Messages[i]
		n += len(m.Role) + len(m.Content) + len(m.Name) + len(m.ToolCallID)
		for _, tc := range m.ToolCalls {
			n += len(tc.ID) + len(tc.Name) + len(tc.Arguments)
		}
	}
	for _, t := range req.Tools {
		n += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	return n
}

// estimateTokens rounds bytes/4 up, the usual rule of thumb for English text and JSON.
func estimateTokens(bytes int) int { return (bytes + 3) / 4 }
