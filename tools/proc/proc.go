// Package proc holds the process-tree tools: spawn_child_process,
// wait_child_process and signal_child_process.
package proc

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

// MaxInlineResultBytes bounds a child's result returned inline by
// wait_child_process; larger results are read through result_oid.
const MaxInlineResultBytes = 16 * 1024

// Tools returns the process-tree family.
func Tools(tools.Config) []*tools.Tool {
	return []*tools.Tool{spawnChild(), waitChild(), signalChild()}
}

var budgetSchema = schema.Object(map[string]*schema.Schema{
	"tool_calls":   {Type: "integer", Minimum: schema.Ptr(0.0)},
	"llm_calls":    {Type: "integer", Minimum: schema.Ptr(0.0)},
	"llm_tokens":   {Type: "integer", Minimum: schema.Ptr(0.0)},
	"children":     {Type: "integer", Minimum: schema.Ptr(0.0)},
	"wall_seconds": {Type: "integer", Minimum: schema.Ptr(0.0)},
})

func spawnChild() *tools.Tool {
	rights := []any{"read", "write", "materialize", "execute", "admin"}
	return &tools.Tool{
		Name: "spawn_child_process",
		Description: "Start a child process with an image and a goal. Needs write on process:spawn, and read on image:<name>:<version> when the image " +
			"differs from yours. capabilities hands down grants you hold (attenuation only: never wider than yours); the child starts with exactly " +
			"those plus rights on its own namespace. budget lowers the child's limits; its usage is charged to you and every ancestor too. Returns pid and goal_oid.",
		Schema: schema.Object(map[string]*schema.Schema{
			"image": {Type: "string", MinLength: schema.Ptr(3), MaxLength: schema.Ptr(129), Description: "Image reference name:version."},
			"goal":  {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(64000), Description: "The child's goal; it becomes the child's goal Object."},
			"capabilities": {Type: "array", MaxItems: schema.Ptr(64), Items: schema.Object(map[string]*schema.Schema{
				"resource":       {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(512)},
				"rights":         {Type: "array", MinItems: schema.Ptr(1), MaxItems: schema.Ptr(5), Items: &schema.Schema{Type: "string", Enum: rights}},
				"effect":         {Type: "string", Enum: []any{"allow", "ask", "deny"}, Default: "allow", Description: "ask: the child's calls that need it wait for a Human's approval."},
				"uses_remaining": {Type: "integer", Minimum: schema.Ptr(0.0)},
				"expires_at":     {Type: "string", MinLength: schema.Ptr(20), MaxLength: schema.Ptr(40), Description: "RFC 3339 time the grant ends (no later than yours)."},
				"delegable":      {Type: "boolean", Description: "false: the child cannot hand it further down."},
			}, "resource", "rights")},
			"budget": budgetSchema,
		}, "image", "goal"),
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return spawn(sys, raw)
		},
	}
}

// spawner is what spawn_child_process uses: the caller's authority and image,
// and the tree the child joins.
type spawner interface {
	tools.Caller
	tools.ProcessTree
}

func spawn(sys spawner, raw json.RawMessage) (tools.Outcome, error) {
	var args struct {
		Image        string               `json:"image"`
		Goal         string               `json:"goal"`
		Capabilities []capabilities.Grant `json:"capabilities"`
		Budget       capabilities.Budget  `json:"budget"`
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return tools.Outcome{}, fmt.Errorf("spawn_child_process: decode arguments: %w", err)
	}
	img, err := sys.ImageOf(args.Image)
	if err != nil {
		return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "image: %v", err)
	}
	for i := range args.Capabilities {
		args.Capabilities[i].ID = fmt.Sprintf("c%d", i+1)
		if err := capabilities.ValidateGrant(args.Capabilities[i]); err != nil {
			return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "capabilities[%d]: %v", i, err)
		}
	}
	if err := sys.Require(authority.ProcessSpawn, authority.Params{Image: img.Ref, OwnImage: sys.Self().Image}); err != nil {
		return tools.Outcome{}, err
	}
	child, err := sys.SpawnChild(tools.ChildSpec{Image: img.Ref, Goal: args.Goal, Grants: args.Capabilities, Budget: args.Budget})
	if err != nil {
		return tools.Outcome{}, err
	}
	return tools.Outcome{Result: map[string]any{"pid": child.PID, "goal_oid": child.GoalOID, "image": child.Image}}, nil
}

type waitArgs struct {
	ChildPID int64 `json:"child_pid"`
	Block    bool  `json:"block"`
}

func waitChild() *tools.Tool {
	return &tools.Tool{
		Name: "wait_child_process",
		Description: "Wait for a direct child to end. block=true (default) waits durably without holding a worker; block=false returns ready=false while " +
			"the child runs. When ready: status, result_oid (readable by you) and the result itself when it is small.",
		Schema: schema.Object(map[string]*schema.Schema{
			"child_pid": {Type: "integer", Minimum: schema.Ptr(1.0)},
			"block":     {Type: "boolean", Default: true},
		}, "child_pid"),
		EndsBatch: true,
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return startWait(sys, raw)
		},
		Resume: func(_ context.Context, sys tools.Syscalls, p tools.Pending) (tools.Outcome, error) {
			return endWait(sys, p)
		},
	}
}

// waiter is what wait_child_process uses: the child, and its result Object.
type waiter interface {
	tools.ProcessTree
	tools.ObjectStore
}

func startWait(sys waiter, raw json.RawMessage) (tools.Outcome, error) {
	var args waitArgs
	if err := json.Unmarshal(raw, &args); err != nil {
		return tools.Outcome{}, fmt.Errorf("wait_child_process: decode arguments: %w", err)
	}
	child, err := sys.Child(args.ChildPID)
	if err != nil {
		return tools.Outcome{}, err
	}
	if child.Status.Terminal() {
		return tools.Outcome{Result: readyResult(sys, child)}, nil
	}
	if !args.Block {
		return tools.Outcome{Result: map[string]any{"ready": false, "child_pid": child.PID, "status": string(child.Status)}}, nil
	}
	return tools.Outcome{Block: &tools.Block{Wait: process.Wait{Kind: process.WaitChild, ChildPID: child.PID}, Data: raw}}, nil
}

func endWait(sys waiter, p tools.Pending) (tools.Outcome, error) {
	var args waitArgs
	if err := json.Unmarshal(p.Data, &args); err != nil {
		return tools.Outcome{}, fmt.Errorf("wait_child_process: decode pending action %s: %w", p.ID, err)
	}
	child, err := sys.Child(args.ChildPID)
	if err != nil {
		return tools.Outcome{}, err
	}
	if !child.Status.Terminal() {
		return tools.Outcome{Result: map[string]any{"ready": false, "child_pid": child.PID, "status": string(child.Status)}}, nil
	}
	return tools.Outcome{Result: readyResult(sys, child)}, nil
}

// readyResult describes an ended child, inlining a small readable result.
func readyResult(sys tools.ObjectStore, child tools.ChildStatus) map[string]any {
	out := map[string]any{"ready": true, "child_pid": child.PID, "status": string(child.Status), "result_oid": nil}
	if child.Reason != "" {
		out["reason"] = child.Reason
	}
	if child.ResultOID == "" {
		return out
	}
	out["result_oid"] = child.ResultOID
	meta, payload, err := sys.ReadObject(child.ResultOID)
	switch {
	case err != nil:
		out["result_unavailable"] = err.Error()
	case len(payload) <= MaxInlineResultBytes && json.Valid(payload):
		out["result"] = json.RawMessage(payload)
	default:
		out["result_bytes"] = meta.PayloadBytes
	}
	return out
}

func signalChild() *tools.Tool {
	return &tools.Tool{
		Name:        "signal_child_process",
		Description: "Signal a direct child: kill ends it and all its descendants; pause and resume stop and continue its scheduling.",
		Schema: schema.Object(map[string]*schema.Schema{
			"child_pid": {Type: "integer", Minimum: schema.Ptr(1.0)},
			"signal":    {Type: "string", Enum: []any{"kill", "pause", "resume"}},
		}, "child_pid", "signal"),
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return signal(sys, raw)
		},
	}
}

func signal(sys tools.ProcessTree, raw json.RawMessage) (tools.Outcome, error) {
	var args struct {
		ChildPID int64  `json:"child_pid"`
		Signal   string `json:"signal"`
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return tools.Outcome{}, fmt.Errorf("signal_child_process: decode arguments: %w", err)
	}
	child, err := sys.SignalChild(args.ChildPID, args.Signal)
	if err != nil {
		return tools.Outcome{}, err
	}
	return tools.Outcome{Result: map[string]any{"child_pid": child.PID, "signal": args.Signal, "status": string(child.Status)}}, nil
}
