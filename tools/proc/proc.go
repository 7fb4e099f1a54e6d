// Package proc holds the process-tree tools: spawn_child_process,
// wait_child_process and signal_child_process.
package proc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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

// budgetSchema bounds each field at 1: a budget of 0 reads as "no limit
// of its own" (capabilities.Budget.Min keeps the image's), so accepting 0
// would let {children: 0} spawn as many children as the image allows.
var budgetSchema = schema.Object(map[string]*schema.Schema{
	"tool_calls":   budgetField("tool calls"),
	"llm_calls":    budgetField("LLM calls"),
	"llm_tokens":   budgetField("LLM tokens"),
	"children":     budgetField("children spawned"),
	"wall_seconds": budgetField("seconds of wall time"),
})

func budgetField(what string) *schema.Schema {
	return &schema.Schema{Type: "integer", Minimum: schema.Ptr(1.0),
		Description: "At most this many " + what + " (at least 1); a limit lower than the image's replaces it, and an omitted field keeps the image's."}
}

func spawnChild() *tools.Tool {
	rights := []any{"read", "write", "materialize", "execute", "admin"}
	return &tools.Tool{
		Name: "spawn_child_process",
		Description: "Start a child process with an image and a goal. Needs write on process:spawn, and read on image:<name>:<version> when the image " +
			"differs from yours. capabilities hands down grants you hold (attenuation only: never wider than yours); the child starts with exactly " +
			"those plus rights on its own namespace. budget lowers the child's limits (each field at least 1; an omitted one keeps the image's limit); its usage is " +
			"charged to you and every ancestor too. Returns pid and goal_oid.",
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

// grantArgs is one capabilities[i] as the schema states it. expires_at is
// kept as text and parsed here, so that a malformed time is refused naming
// its field rather than failing the decode of every argument.
type grantArgs struct {
	Resource      string               `json:"resource"`
	Rights        []capabilities.Right `json:"rights"`
	Effect        capabilities.Effect  `json:"effect"`
	UsesRemaining *int                 `json:"uses_remaining"`
	ExpiresAt     *string              `json:"expires_at"`
	Delegable     *bool                `json:"delegable"`
}

// grant turns capabilities[i] into the grant it requests, named c<i+1>.
func (a grantArgs) grant(i int) (capabilities.Grant, error) {
	g := capabilities.Grant{ID: fmt.Sprintf("c%d", i+1), Resource: a.Resource, Rights: a.Rights, Effect: a.Effect,
		UsesRemaining: a.UsesRemaining, Delegable: a.Delegable}
	if g.Effect == "" {
		g.Effect = capabilities.Allow // as a grant decodes
	}
	if a.ExpiresAt != nil {
		var t time.Time
		// UnmarshalText is the strict RFC 3339 a grant's JSON decodes with.
		if err := t.UnmarshalText([]byte(*a.ExpiresAt)); err != nil {
			rule := fmt.Sprintf("must be an RFC 3339 time such as \"2026-01-02T15:04:05Z\" (date, T, time, then Z or an offset such as +08:00), got %q", *a.ExpiresAt)
			var pe *time.ParseError
			if errors.As(err, &pe) && pe.Message != "" {
				rule += pe.Message // which part is out of range
			}
			return capabilities.Grant{}, &schema.FieldError{Field: fmt.Sprintf("capabilities[%d].expires_at", i), Rule: rule}
		}
		g.ExpiresAt = &t
	}
	if err := capabilities.ValidateGrant(g); err != nil {
		return capabilities.Grant{}, fmt.Errorf("capabilities[%d]: %v", i, err)
	}
	return g, nil
}

func spawn(sys spawner, raw json.RawMessage) (tools.Outcome, error) {
	var args struct {
		Image        string              `json:"image"`
		Goal         string              `json:"goal"`
		Capabilities []grantArgs         `json:"capabilities"`
		Budget       capabilities.Budget `json:"budget"`
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return tools.Outcome{}, fmt.Errorf("spawn_child_process: decode arguments: %w", err)
	}
	img, err := sys.ImageOf(args.Image)
	if err != nil {
		return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "image: %v", err)
	}
	var grants []capabilities.Grant
	for i, a := range args.Capabilities {
		g, err := a.grant(i)
		if err != nil {
			return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "%w", err)
		}
		grants = append(grants, g)
	}
	if err := sys.Require(authority.ProcessSpawn, authority.Params{Image: img.Ref, OwnImage: sys.Self().Image}); err != nil {
		return tools.Outcome{}, err
	}
	child, err := sys.SpawnChild(tools.ChildSpec{Image: img.Ref, Goal: args.Goal, Grants: grants, Budget: args.Budget})
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
			"the child runs. When ready: status, result_oid and the result itself when it is small and you may read it (your direct child's result needs " +
			"no grant unless one denies it); otherwise result_bytes, and result_withheld saying why it is not shown: denied (result_readable=false), " +
			"or a grant that asks, whose approval read_object on result_oid requests.",
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

// waiter is what wait_child_process uses: the child, its result Object,
// and the caller's authority to read it.
type waiter interface {
	tools.Caller
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
		return ready(sys, child)
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
	return ready(sys, child)
}

// ready answers a wait on an ended child.
func ready(sys waiter, child tools.ChildStatus) (tools.Outcome, error) {
	out, err := readyResult(sys, child)
	if err != nil {
		return tools.Outcome{}, err
	}
	return tools.Outcome{Result: out}, nil
}

// readyResult describes an ended child, inlining a small result only when
// the caller may read it: the inline is a read of the Object, decided as
// read_object's is (a direct child's result needs no grant, a deny refuses
// it). A result that asks for approval is not inlined rather than holding
// the wait for a Human: read_object on result_oid asks.
func readyResult(sys waiter, child tools.ChildStatus) (map[string]any, error) {
	out := map[string]any{"ready": true, "child_pid": child.PID, "status": string(child.Status), "result_oid": nil}
	if child.Reason != "" {
		out["reason"] = child.Reason
	}
	if child.ResultOID == "" {
		return out, nil
	}
	out["result_oid"] = child.ResultOID
	meta, payload, err := sys.ReadObject(child.ResultOID)
	if err != nil {
		out["result_unavailable"] = err.Error()
		return out, nil
	}
	inline := len(payload) <= MaxInlineResultBytes && json.Valid(payload)
	p := authority.Params{OID: child.ResultOID, Namespace: meta.Namespace}
	if !inline {
		// Nothing is shown, so nothing is read: a one-shot grant keeps its
		// use for the read through result_oid.
		if g, ok := sys.Holding(authority.ObjectRead, p); ok && g.OneShot() {
			out["result_bytes"] = meta.PayloadBytes
			return out, nil
		}
	}
	shown, err := tools.ShowResult(sys, out, child.ResultOID, meta.Namespace, meta.PayloadBytes)
	if err != nil {
		return nil, err
	}
	if !shown {
		return out, nil
	}
	if inline {
		out["result"] = json.RawMessage(payload)
	} else {
		out["result_bytes"] = meta.PayloadBytes
	}
	return out, nil
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
