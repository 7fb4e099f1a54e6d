// Package ckpt holds the checkpoint tools: checkpoint_create,
// checkpoint_list, checkpoint_restore and checkpoint_fork. Each is checked
// against checkpoint:process:<root pid>: write creates, read lists, admin
// restores, execute forks.
package ckpt

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

// Tools returns the checkpoint family.
func Tools(tools.Config) []*tools.Tool {
	return []*tools.Tool{
		byPID("checkpoint_create", "Snapshot a process subtree durably (records, Objects with payloads, mailboxes, pending actions). Needs write on checkpoint:process:<pid>.",
			authority.CheckpointCreate, func(sys tools.Checkpoints, pid int64) (any, error) { return sys.CreateCheckpoint(pid) }),
		byPID("checkpoint_list", "List the checkpoints of a subtree. Needs read on checkpoint:process:<pid>.",
			authority.CheckpointList, func(sys tools.Checkpoints, pid int64) (any, error) { return sys.ListCheckpoints(pid) }),
		byID("checkpoint_restore", "Restore a quiescent subtree to a checkpoint; a process cannot restore its own subtree. External effects since are reported, not undone. Ends the batch. Needs admin on checkpoint:process:<root>, and no grant denying you a write of an Object it rewrites or removes.",
			authority.CheckpointRestore, func(sys tools.Checkpoints, id string) (any, error) { return sys.RestoreCheckpoint(id) }),
		byID("checkpoint_fork", "Fork a checkpoint into a new subtree with new pids and Objects (no pending actions, waits made runnable, no one-shot grants, no approvals, grants renamed to the fork's own resources); each forked process is a child you spawn. Ends the batch. Needs execute on checkpoint:process:<root>, write on process:spawn and read on another image, and no grant denying you a read of an Object it copies.",
			authority.CheckpointFork, func(sys tools.Checkpoints, id string) (any, error) { return sys.ForkCheckpoint(id) }),
	}
}

// ckptSys is what the checkpoint tools use: the caller's authority and the
// checkpoints.
type ckptSys interface {
	tools.Caller
	tools.Checkpoints
}

// byPID is a tool on the subtree rooted at its pid argument (default: the
// caller).
func byPID(name, desc string, op authority.Op, run func(sys tools.Checkpoints, pid int64) (any, error)) *tools.Tool {
	invoke := func(sys ckptSys, raw json.RawMessage) (tools.Outcome, error) {
		var args struct{ PID int64 }
		if err := json.Unmarshal(raw, &args); err != nil {
			return tools.Outcome{}, fmt.Errorf("%s: decode arguments: %w", name, err)
		}
		if args.PID == 0 {
			args.PID = sys.Self().PID
		}
		if err := sys.Require(op, authority.Params{PID: args.PID}); err != nil {
			return tools.Outcome{}, err
		}
		v, err := run(sys, args.PID)
		if err != nil {
			return tools.Outcome{}, err
		}
		return tools.Outcome{Result: map[string]any{"result": v}}, nil
	}
	return &tools.Tool{
		Name: name, Description: desc,
		Schema: schema.Object(map[string]*schema.Schema{"pid": {Type: "integer", Minimum: schema.Ptr(1.0), Description: "Root of the subtree (default: yourself)."}}),
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return invoke(sys, raw)
		},
	}
}

// byID is a tool on an existing checkpoint. Restore and fork reshape a
// process tree, other processes' contexts included: like a wait, each ends
// its batch, so one transaction never rewrites a tree twice.
func byID(name, desc string, op authority.Op, run func(sys tools.Checkpoints, id string) (any, error)) *tools.Tool {
	invoke := func(sys ckptSys, raw json.RawMessage) (tools.Outcome, error) {
		var args struct {
			ID string `json:"checkpoint_id"`
		}
		if err := json.Unmarshal(raw, &args); err != nil {
			return tools.Outcome{}, fmt.Errorf("%s: decode arguments: %w", name, err)
		}
		// A missing checkpoint and one the caller may not touch
		// answer alike: neither existence nor owner leaks. A call an ask
		// grant covers is held for approval (tools.Hide).
		target := fmt.Sprintf("checkpoint %q", args.ID)
		root, err := sys.CheckpointRoot(args.ID)
		if err != nil {
			if tools.AsError(err).Code != tools.CodeNotFound {
				return tools.Outcome{}, err
			}
			return tools.Outcome{}, tools.HiddenDenial(op, target)
		}
		if err := sys.Require(op, authority.Params{PID: root}); err != nil {
			return tools.Outcome{}, tools.Hide(err, op, target)
		}
		v, err := run(sys, args.ID)
		if err != nil {
			return tools.Outcome{}, err
		}
		return tools.Outcome{Result: map[string]any{"result": v}}, nil
	}
	return &tools.Tool{
		Name: name, Description: desc, EndsBatch: true,
		Schema: schema.Object(map[string]*schema.Schema{"checkpoint_id": {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(64)}}, "checkpoint_id"),
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			return invoke(sys, raw)
		},
	}
}
