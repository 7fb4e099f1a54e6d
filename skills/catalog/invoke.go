package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/skills/runner"
	"github.com/libos/libos/skills/skillpkg"
	"github.com/libos/libos/tools"
)

// SkillAgentImage is the built-in image of the child an agent-task runner starts.
const SkillAgentImage = "skill-agent:v0"

// Bounds of what a skill tool's result carries inline; the model's context
// is not the place for megabytes of output.
const (
	// MaxInlineOutputBytes bounds the JSON of a run's output in the result,
	// an agent-task child's result included; a larger one is described
	// (bytes, SHA-256, a UTF-8 prefix).
	MaxInlineOutputBytes = 64 << 10
	// MaxInlineStderrBytes bounds the stderr a result or error carries (its tail).
	MaxInlineStderrBytes = 8 << 10
)

// runnerTool builds the catalog tool of one runner.
func (c *Catalog) runnerTool(pkg *skillpkg.Package, r *skillpkg.Runner, name, description string) (*tools.Tool, error) {
	sch, params, err := InputSchema(r)
	if err != nil {
		return nil, fmt.Errorf("skill package %s: runner %s: %w", pkg.Dir, r.Name, err)
	}
	t := &tools.Tool{
		Name:        name,
		Description: description,
		Schema:      sch,
		Parameters:  params,
		Scopes:      uniqueScopes(r),
		Ops:         authority.RunnerOps,
	}
	switch r.Type {
	case skillpkg.TypeAgentTask:
		t.EndsBatch = true
		t.Ops = authority.AgentTaskOps
		t.Invoke = func(_ context.Context, sys tools.Syscalls, args json.RawMessage) (tools.Outcome, error) {
			return startAgentTask(sys, pkg, r, args)
		}
		t.Resume = func(_ context.Context, sys tools.Syscalls, p tools.Pending) (tools.Outcome, error) {
			res, err := finishAgentTask(sys, r, p)
			if err != nil {
				return tools.Outcome{}, err
			}
			return tools.Outcome{Result: res}, nil
		}
	default:
		t.Invoke = func(_ context.Context, sys tools.Syscalls, args json.RawMessage) (tools.Outcome, error) {
			if err := authorizeScopes(sys, r); err != nil {
				return tools.Outcome{}, err
			}
			// The broker checked the advertised schema; the runner's own
			// check runs here too, so a call it would refuse is refused
			// before its effect starts (see InputSchema).
			resolved, err := skillpkg.ResolveInputs(r.Inputs, args)
			if err != nil {
				return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "runner %s: %v", r.Name, err)
			}
			inputs := append(json.RawMessage(nil), args...)
			return tools.Outcome{Effect: func(ctx context.Context) (map[string]any, error) {
				return c.run(ctx, pkg, r, inputs, resolved)
			}}, nil
		}
	}
	return t, nil
}

// authorizeScopes requires scope.use on every scope r declares.
func authorizeScopes(sys tools.Caller, r *skillpkg.Runner) error {
	for _, sc := range uniqueScopes(r) {
		p := authority.Params{Scope: sc}
		if err := sys.Require(authority.ScopeUse, p); err != nil {
			need, _ := authority.Requirements(authority.ScopeUse, p)
			return fmt.Errorf("runner %s declares scope %s and needs %s: %w", r.Name, sc, need[0], err)
		}
	}
	return nil
}

// run executes a javascript or cli-tool runner on inputs (resolved, as
// skillpkg.ResolveInputs made them) and turns its envelope into
// a tool result, or a failure envelope into a tool error with its code.
func (c *Catalog) run(ctx context.Context, pkg *skillpkg.Package, r *skillpkg.Runner, inputs json.RawMessage, resolved map[string]json.RawMessage) (map[string]any, error) {
	opts := runner.RunOptions{Workspace: c.opts.Workspace, LookupEnv: c.opts.LookupEnv, TempDir: c.opts.TempDir, Resolved: resolved}
	if r.Type == skillpkg.TypeJavaScript {
		pool, err := c.jsPool()
		if err != nil {
			return nil, &tools.Error{Code: string(runner.CodeInternalFailure), Message: err.Error(), EffectStarted: true, Err: err}
		}
		opts.JavaScript = pool
	}
	return EnvelopeResult(runner.RunRunner(ctx, pkg, r, inputs, opts))
}

// EnvelopeResult renders a run's envelope as a tool result: status, output
// (bounded by MaxInlineOutputBytes), exit_code, stdout_bytes, stdout_sha256,
// stderr (its tail, bounded by MaxInlineStderrBytes) and duration_ms, each
// only when the envelope has it. A failure envelope becomes a *tools.Error
// whose code is the envelope's failure code and whose message adds the exit
// code and the stderr tail.
func EnvelopeResult(env runner.Envelope) (map[string]any, error) {
	if env.Status != runner.StatusSealed {
		code, msg := string(runner.CodeInternalFailure), "the run failed without an error"
		if env.Error != nil {
			code, msg = string(env.Error.Code), env.Error.Message
		}
		if env.ExitCode != nil {
			msg += fmt.Sprintf(" (exit code %d)", *env.ExitCode)
		}
		if env.Stderr != nil && *env.Stderr != "" {
			msg += "; stderr: " + tail(*env.Stderr, MaxInlineStderrBytes)
		}
		return nil, &tools.Error{Code: code, Message: msg, EffectStarted: true}
	}
	out := map[string]any{"status": string(env.Status), "duration_ms": env.DurationMS}
	if env.Output != nil {
		putBounded(out, "output", env.Output)
	}
	if env.ExitCode != nil {
		out["exit_code"] = *env.ExitCode
	}
	if env.StdoutBytes != nil {
		out["stdout_bytes"] = *env.StdoutBytes
	}
	if env.StdoutSHA256 != "" {
		out["stdout_sha256"] = env.StdoutSHA256
	}
	if env.Stderr != nil {
		out["stderr"] = tail(*env.Stderr, MaxInlineStderrBytes)
	}
	return out, nil
}

// putBounded puts data under key in out when it is JSON of at most
// MaxInlineOutputBytes; otherwise it describes it: key_truncated (whether
// it is longer than that), key_bytes, key_sha256 and key_prefix (a UTF-8
// prefix of at most that many bytes).
func putBounded(out map[string]any, key string, data []byte) {
	if len(data) <= MaxInlineOutputBytes && json.Valid(data) {
		out[key] = json.RawMessage(data)
		return
	}
	sum := sha256.Sum256(data)
	out[key+"_truncated"] = len(data) > MaxInlineOutputBytes
	out[key+"_bytes"] = len(data)
	out[key+"_sha256"] = hex.EncodeToString(sum[:])
	out[key+"_prefix"] = head(string(data), MaxInlineOutputBytes)
}

// head returns at most n bytes of s, never splitting a UTF-8 sequence.
func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// tail returns at most the last n bytes of s, never splitting a UTF-8 sequence.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

// agentTaskData is kept with the pending wait of an agent-task call.
type agentTaskData struct {
	ChildPID int64  `json:"child_pid"`
	Skill    string `json:"skill"`
	Runner   string `json:"runner"`
}

// agentSpawner is what starting an agent task uses.
type agentSpawner interface {
	tools.Caller
	tools.ProcessTree
}

// handedDownScope is the grant of scope an agent-task child gets: execute
// on it, no wider than the caller's grant that allows it: an ask stays an
// ask (the Human approved starting the task, not each effect of the
// child's), its expiry is kept, and a one-shot hands down one use (the one
// this call's own check reserved: the kernel moves it to the child).
func handedDownScope(sys tools.Caller, scope string) capabilities.Grant {
	g := capabilities.Grant{Resource: capabilities.ScopeResource(scope), Rights: []capabilities.Right{capabilities.Execute}, Effect: capabilities.Allow}
	held, ok := sys.Holding(authority.ScopeUse, authority.Params{Scope: scope})
	if !ok {
		// The kernel's widening check names what is missing.
		return g
	}
	g.Effect, g.ExpiresAt = held.Effect, held.ExpiresAt
	if held.UsesRemaining != nil {
		one := 1
		g.UsesRemaining = &one
	}
	return g
}

// startAgentTask checks the runner's scopes and the right to spawn, then
// starts the child whose tool table is the runner's allowed_tools and
// process_exit (holding execute on the runner's scopes, handed down from the
// caller, and a wall budget of the runner's timeout_seconds when declared)
// and makes the caller wait for it. The kernel refuses a table name that
// does not resolve before the child exists, so no provider call happens.
func startAgentTask(sys agentSpawner, pkg *skillpkg.Package, r *skillpkg.Runner, args json.RawMessage) (tools.Outcome, error) {
	if err := authorizeScopes(sys, r); err != nil {
		return tools.Outcome{}, err
	}
	if err := sys.Require(authority.AgentTaskSpawn, authority.Params{}); err != nil {
		return tools.Outcome{}, err
	}
	inputs, err := skillpkg.ResolveInputs(r.Inputs, args)
	if err != nil {
		return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "runner %s: %v", r.Name, err)
	}
	encoded, err := skillpkg.EncodeInputs(inputs)
	if err != nil {
		return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "runner %s: %v", r.Name, err)
	}
	// The child may use exactly the scopes its runner declared, and only
	// as far as the caller holds them (the kernel refuses any widening).
	scopes := uniqueScopes(r)
	grants := make([]capabilities.Grant, len(scopes))
	for i, sc := range scopes {
		grants[i] = handedDownScope(sys, sc)
	}
	// A declared timeout bounds the child's wall time (whole seconds,
	// rounded up); without one the image's default applies.
	var budget capabilities.Budget
	if r.Timeout > 0 {
		budget.WallSeconds = int64((r.Timeout + time.Second - 1) / time.Second)
	}
	child, err := sys.SpawnChild(tools.ChildSpec{
		Image:     SkillAgentImage,
		Goal:      agentGoal(pkg, r, encoded),
		Grants:    grants,
		Budget:    budget,
		ToolTable: agentTools(r),
		Scopes:    scopes,
	})
	if err != nil {
		return tools.Outcome{}, err
	}
	data, err := json.Marshal(agentTaskData{ChildPID: child.PID, Skill: pkg.Skill.Name, Runner: r.Name})
	if err != nil {
		return tools.Outcome{}, fmt.Errorf("agent-task %s: encode pending data: %w", r.Name, err)
	}
	wait := process.Wait{Kind: process.WaitChild, ChildPID: child.PID}
	if r.Timeout > 0 {
		// The timeout is terminal: the wait ends then if the child has not,
		// and finishAgentTask ends the child.
		wait.Until = sys.Now().Add(r.Timeout)
	}
	return tools.Outcome{Block: &tools.Block{Wait: wait, Data: data}}, nil
}

// agentGoal is the child's goal: the skill's manual, then the call's inputs.
func agentGoal(pkg *skillpkg.Package, r *skillpkg.Runner, inputs json.RawMessage) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are running the %s runner of the skill %s.\n\n", r.Name, pkg.Skill.Name)
	if r.Agent != "" {
		fmt.Fprintf(&b, "Your role: %s.\n", r.Agent)
	}
	if r.Task != "" {
		// runx's task names a "### `task`" section of the manual, which
		// the manual below holds in full.
		fmt.Fprintf(&b, "Your task: %s (see its section of the manual below).\n", r.Task)
	}
	if r.Agent != "" || r.Task != "" {
		b.WriteString("\n")
	}
	if m := strings.TrimSpace(pkg.Manual); m != "" {
		b.WriteString("Skill manual:\n\n")
		b.WriteString(m)
		b.WriteString("\n\n")
	}
	if len(r.Outputs) > 0 {
		names := make([]string, 0, len(r.Outputs))
		for n := range r.Outputs {
			names = append(names, n)
		}
		sort.Strings(names)
		b.WriteString("Finish with process_exit and a payload object holding:")
		for _, n := range names {
			fmt.Fprintf(&b, " %s (%s)", n, r.Outputs[n])
		}
		b.WriteString(".\n")
		for _, o := range r.OutputDecls {
			if o.Schema != nil {
				fmt.Fprintf(&b, "%s must match this JSON Schema: %s\n", o.Name, o.Schema.Raw)
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("Inputs of this call (JSON):\n")
	b.Write(inputs)
	b.WriteString("\n")
	return b.String()
}

// agentWaiter is what finishing an agent task uses.
type agentWaiter interface {
	tools.Caller
	tools.ProcessTree
	tools.ObjectStore
}

// finishAgentTask reports the ended child: its status and result. A child
// that did not exit makes the call fail, naming its status and reason; a
// result that breaks the runner's declared outputs (or is missing when it
// declares some) is refused as output_rejected, by the check skill test
// applies. The result is inlined up to MaxInlineOutputBytes, as any
// runner's output is, so the caller need not read the child's result Object
// (which, as its direct child's, it may).
func finishAgentTask(sys agentWaiter, r *skillpkg.Runner, p tools.Pending) (map[string]any, error) {
	var d agentTaskData
	if err := json.Unmarshal(p.Data, &d); err != nil {
		return nil, fmt.Errorf("agent-task: decode pending action %s: %w", p.ID, err)
	}
	child, err := sys.Child(d.ChildPID)
	if err != nil {
		return nil, err
	}
	switch {
	case !child.Status.Terminal():
		// Only the deadline of the runner's timeout ends the wait first; a
		// timeout is a resource limit, as a cli-tool or javascript run's is.
		if _, err := sys.SignalChild(child.PID, "kill"); err != nil {
			return nil, fmt.Errorf("agent-task %s: end child pid %d past its timeout: %w", d.Runner, child.PID, err)
		}
		return nil, &tools.Error{Code: string(runner.CodeResourceLimit), EffectStarted: true, Message: fmt.Sprintf(
			"agent-task %s of skill %s: child pid %d ran past the runner's timeout_seconds of %g and was killed", d.Runner, d.Skill, child.PID, r.Timeout.Seconds())}
	case child.Status != process.Exited:
		return nil, tools.Errorf(tools.CodeFailed, "agent-task %s of skill %s: child pid %d ended %s: %s", d.Runner, d.Skill, child.PID, child.Status, child.Reason)
	}
	rejected := func(format string, a ...any) error {
		err := fmt.Errorf(format, a...)
		return &tools.Error{Code: string(runner.CodeOutputRejected), EffectStarted: true, Err: errors.Unwrap(err),
			Message: fmt.Sprintf("agent-task %s of skill %s: child pid %d: %v", d.Runner, d.Skill, child.PID, err)}
	}
	out := map[string]any{"status": string(child.Status), "child_pid": child.PID, "skill": d.Skill, "runner": d.Runner, "result_oid": nil}
	var payload []byte
	var meta objects.Meta
	if child.ResultOID != "" {
		out["result_oid"] = child.ResultOID
		meta, payload, err = sys.ReadObject(child.ResultOID)
		switch {
		case err != nil && len(r.OutputDecls) > 0:
			return nil, rejected("result %s cannot be read to check the declared outputs: %w", child.ResultOID, err)
		case err != nil:
			out["result_unavailable"] = err.Error()
			return out, nil
		}
	}
	if err := runner.CheckOutputs(r, payload); err != nil {
		if child.ResultOID == "" {
			return nil, rejected("exited without a result: %w", err)
		}
		return nil, rejected("%w", err)
	}
	if child.ResultOID == "" {
		return out, nil
	}
	// The declared outputs are the runtime's to check; showing the result
	// is the caller's read of it, as wait_child_process's is.
	shown, err := tools.ShowResult(sys, out, child.ResultOID, meta.Namespace, len(payload))
	if err != nil {
		return nil, err
	}
	if shown {
		putBounded(out, "result", payload)
	}
	return out, nil
}
