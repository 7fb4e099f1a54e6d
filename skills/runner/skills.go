// Package runner runs the runners of admitted skill packages and reports each
// run as one libos.skill_run.v1 envelope. It resolves what both runner types
// share (the runner, the workspace, the inputs against their declarations,
// the declared environment) and hands the rest to clitool for cli-tool
// runners and to jsrunner for javascript runners.
//
// Failure codes for cli-tool runners:
//
//	invalid_request   unknown runner, bad workspace, inputs that break their
//	                  declarations, a required variable not set, input names
//	                  that normalize to nothing or collide, an argument
//	                  placeholder that cannot be filled; nothing was spawned
//	execution_failed  the command could not be spawned (not found, cwd
//	                  missing), exited non-zero (exit_code set) or was killed
//	                  by a signal it was not sent by the runtime, or the caller
//	                  cancelled the call
//	resource_limit    the timeout (or the caller's deadline) ended the call;
//	                  the process group was terminated
//	output_rejected   exit 0, but stdout cannot be a text or JSON result:
//	                  truncated past 8 MiB, not UTF-8, or held open by a
//	                  descendant beyond the runtime's reach
//	internal_failure  the runtime failed around the process (including a
//	                  descendant it could not end)
//
// javascript runners report jsrunner's codes unchanged; module_rejected also
// covers a module path or module graph refused at admission (Admit builds
// every javascript runner's graph with the resolver that runs it).
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/libos/libos/skills/runner/clitool"
	"github.com/libos/libos/skills/runner/jsrunner"
	"github.com/libos/libos/skills/skillpkg"
)

// Schema identifies the envelope format.
const Schema = "libos.skill_run.v1"

// Status is the outcome of a run.
type Status string

// The two statuses of an envelope.
const (
	StatusSealed  Status = "sealed"
	StatusFailure Status = "failure"
)

// Code classifies a failure.
type Code string

// The failure codes of an envelope.
const (
	CodeInvalidRequest  Code = "invalid_request"
	CodeModuleRejected  Code = "module_rejected"
	CodeExecutionFailed Code = "execution_failed"
	CodeResourceLimit   Code = "resource_limit"
	CodeOutputRejected  Code = "output_rejected"
	CodeInternalFailure Code = "internal_failure"
)

// Error is the error member of a failure envelope.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

// Envelope reports one run. Fields that do not apply are omitted: exit_code,
// stdout_bytes, stdout_sha256 and stderr exist only for a cli-tool process
// that was spawned (exit_code only when it exited by itself); output exists
// on success and, for a cli-tool, also on failure when stdout was complete
// UTF-8, so that raw output stays visible.
type Envelope struct {
	Schema       string          `json:"schema"`
	Status       Status          `json:"status"`
	Output       json.RawMessage `json:"output,omitempty"`
	ExitCode     *int            `json:"exit_code,omitempty"`
	StdoutBytes  *int64          `json:"stdout_bytes,omitempty"`
	StdoutSHA256 string          `json:"stdout_sha256,omitempty"`
	Stderr       *string         `json:"stderr,omitempty"`
	DurationMS   int64           `json:"duration_ms"`
	Error        *Error          `json:"error,omitempty"`
	// Metadata carries what the package declares about the run without
	// libos acting on it (skill, version, runner, catalog, artifacts,
	// examples, risk, ...) and the attempts a retry policy took.
	Metadata map[string]any `json:"metadata,omitempty"`
}

// RunOptions are the caller's side of a run.
type RunOptions struct {
	// Workspace is the workspace root (RUNX_CWD). "" means the host's
	// RUNX_CWD, else INIT_CWD, else the current directory. It must be an
	// existing folder.
	Workspace string
	// LookupEnv reads the host environment: declared variables, the
	// workspace fallbacks and the cli-tool baseline. nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// JavaScript runs javascript runners. nil means a one-worker pool started
	// for the call and closed after it; callers running many calls share a
	// pool instead. The pool re-executes the running program, which must call
	// jsrunner.MaybeRunWorker first.
	JavaScript *jsrunner.Pool
	// TempDir is where cli-tool input folders are created; "" selects
	// clitool's default.
	TempDir string
	// CLIToolSupervision selects the process that supervises a cli-tool
	// call (see clitool.Supervision). The zero value, a supervisor process,
	// is the one for a long-lived runtime; only a program that runs one call
	// and exits may choose clitool.InProcess.
	CLIToolSupervision clitool.Supervision
	// AgentAnswer, when set, answers an agent-task runner in place of a
	// model (runx's caller.answers, used by "libos skill test"): it returns
	// the output the task would have produced. Without it an agent-task
	// runner is refused: it runs as a child agent process of a runtime.
	AgentAnswer func(skill, runner string) (json.RawMessage, bool)
	// Sleep waits between retry attempts; nil means a timer that honours
	// ctx. Tests replace it.
	Sleep func(ctx context.Context, d time.Duration) error
	// Resolved, when set, is what skillpkg.ResolveInputs made of the
	// runner's inputs (a caller that checked them before the call); the
	// run uses it instead of resolving them again. Not modified.
	Resolved map[string]json.RawMessage
}

// Run runs the runner called runner ("" for the default one) of pkg with the
// given JSON inputs (empty means {}). It never returns an error: every
// failure is a failure envelope. Run is safe for concurrent use when the
// options' pool is.
func Run(ctx context.Context, pkg *skillpkg.Package, runner string, inputs json.RawMessage, opts RunOptions) Envelope {
	start := time.Now()
	r, err := pkg.Runner(runner)
	if err != nil {
		return failure(start, CodeInvalidRequest, err.Error())
	}
	return run(ctx, start, pkg, r, inputs, opts)
}

// RunRunner runs a specific runner of pkg, such as a bundled tool's
// (Tool.Runner).
func RunRunner(ctx context.Context, pkg *skillpkg.Package, r *skillpkg.Runner, inputs json.RawMessage, opts RunOptions) Envelope {
	return run(ctx, time.Now(), pkg, r, inputs, opts)
}

// Refused is the envelope of a package that admission refused: for a refused
// module graph (*ModuleGraphError) exactly the code and message a run of that
// runner reports, module_rejected for a refused module path, invalid_request
// otherwise.
func Refused(err error) Envelope {
	var graph *ModuleGraphError
	if errors.As(err, &graph) {
		return Envelope{Schema: Schema, Status: StatusFailure, Error: &Error{Code: Code(graph.Failure.Code), Message: graph.Failure.Message}}
	}
	code := CodeInvalidRequest
	if errors.Is(err, skillpkg.ErrModuleRefused) {
		code = CodeModuleRejected
	}
	return Envelope{Schema: Schema, Status: StatusFailure, Error: &Error{Code: code, Message: err.Error()}}
}

// ResolveWorkspace returns the absolute workspace root: explicit when given,
// else RUNX_CWD, else INIT_CWD (both read through lookup), else the current
// directory. The result must be an existing folder.
func ResolveWorkspace(explicit string, lookup func(string) (string, bool)) (string, error) {
	ws, source := explicit, "the workspace option"
	if ws == "" {
		if v, ok := lookup("RUNX_CWD"); ok && v != "" {
			ws, source = v, "RUNX_CWD"
		} else if v, ok := lookup("INIT_CWD"); ok && v != "" {
			ws, source = v, "INIT_CWD"
		} else {
			cwd, err := os.Getwd()
			if err != nil {
				return "", fmt.Errorf("workspace: reading the current directory: %w", err)
			}
			ws, source = cwd, "the current directory"
		}
	}
	abs, err := filepath.Abs(ws)
	if err != nil {
		return "", fmt.Errorf("workspace from %s: %q: %w", source, ws, err)
	}
	info, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("workspace from %s: %w", source, err)
	}
	if !info.IsDir() {
		return "", fmt.Errorf("workspace from %s: %s is not a folder", source, abs)
	}
	return abs, nil
}

func run(ctx context.Context, start time.Time, pkg *skillpkg.Package, r *skillpkg.Runner, inputs json.RawMessage, opts RunOptions) Envelope {
	meta := envelopeMetadata(pkg, r)
	attempts, denied := r.Attempts()
	if denied != "" {
		meta["retry"] = map[string]any{"max_attempts": r.Retry.MaxAttempts, "denied": denied}
	}
	var env Envelope
	for attempt := 1; ; attempt++ {
		env = runOnce(ctx, start, pkg, r, inputs, opts)
		if env.Status == StatusSealed || attempt >= attempts || !retryable(env.Error.Code) || ctx.Err() != nil {
			if attempts > 1 {
				meta["retry"] = map[string]any{"max_attempts": attempts, "attempts": attempt}
			}
			break
		}
		if r.Retry.BackoffMS > 0 {
			sleep := opts.Sleep
			if sleep == nil {
				sleep = sleepCtx
			}
			if err := sleep(ctx, time.Duration(r.Retry.BackoffMS)*time.Millisecond); err != nil {
				meta["retry"] = map[string]any{"max_attempts": attempts, "attempts": attempt}
				break
			}
		}
	}
	env.DurationMS = time.Since(start).Milliseconds()
	if len(meta) > 0 {
		env.Metadata = meta
	}
	return env
}

// retryable reports whether a failure may be retried: runs that failed or
// ran out of time; never a request refused before it ran, whose answer a
// second attempt could not change.
func retryable(c Code) bool {
	return c == CodeExecutionFailed || c == CodeResourceLimit
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// envelopeMetadata is what the package declares about the runner that the
// envelope carries as it is.
func envelopeMetadata(pkg *skillpkg.Package, r *skillpkg.Runner) map[string]any {
	meta := map[string]any{"skill": pkg.Skill.Name, "runner": r.Name, "runner_type": string(r.Type)}
	if m := pkg.Manifest; m != nil {
		if m.Version != "" {
			meta["version"] = m.Version
		}
		if m.Catalog != nil {
			meta["catalog"] = m.Catalog
		}
	}
	for k, v := range r.Metadata {
		if k == "retry" {
			continue // reported with the attempts taken
		}
		meta[k] = v
	}
	if r.Agent != "" {
		meta["agent"] = r.Agent
	}
	if r.Task != "" {
		meta["task"] = r.Task
	}
	return meta
}

func runOnce(ctx context.Context, start time.Time, pkg *skillpkg.Package, r *skillpkg.Runner, inputs json.RawMessage, opts RunOptions) Envelope {
	if !r.Type.Supported() {
		return failure(start, CodeInvalidRequest, fmt.Sprintf("runner type %q is not supported", r.Type))
	}
	if r.Credential != "" {
		return failure(start, CodeInvalidRequest, fmt.Sprintf("runner %s declares credential %q; libos delivers no credentials to runners", r.Name, r.Credential))
	}
	lookup := opts.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	workspace, err := ResolveWorkspace(opts.Workspace, lookup)
	if err != nil {
		return failure(start, CodeInvalidRequest, err.Error())
	}
	resolved := opts.Resolved
	if resolved == nil {
		if resolved, err = skillpkg.ResolveInputs(r.Inputs, inputs); err != nil {
			return failure(start, CodeInvalidRequest, fmt.Sprintf("runner %s: %v", r.Name, err))
		}
	}
	env, err := skillpkg.ResolveEnvironment(r.Environment, lookup)
	if err != nil {
		return failure(start, CodeInvalidRequest, fmt.Sprintf("runner %s: %v", r.Name, err))
	}
	var out Envelope
	switch r.Type {
	case skillpkg.TypeCLITool:
		call := clitool.CallFor(pkg, r)
		call.Workspace = workspace
		call.Inputs = resolved
		call.Environment = env
		call.LookupEnv = lookup
		call.TempDir = opts.TempDir
		call.Supervision = opts.CLIToolSupervision
		out = cliEnvelope(ctx, clitool.Run(ctx, call))
	case skillpkg.TypeJavaScript:
		out = runJavaScript(ctx, start, pkg, r, resolved, env, workspace, opts.JavaScript)
	case skillpkg.TypeAgentTask:
		answer, ok := json.RawMessage(nil), false
		if opts.AgentAnswer != nil {
			answer, ok = opts.AgentAnswer(pkg.Skill.Name, r.Name)
		}
		if !ok {
			return failure(start, CodeInvalidRequest, fmt.Sprintf("runner %s: %s runners run as child agent processes, not through skill run", r.Name, r.Type))
		}
		out = Envelope{Schema: Schema, Status: StatusSealed, Output: answer}
	}
	if out.Status == StatusSealed {
		if err := CheckOutputs(r, out.Output); err != nil {
			out.Status = StatusFailure
			out.Error = &Error{Code: CodeOutputRejected, Message: fmt.Sprintf("runner %s: %v", r.Name, err)}
		}
	}
	return out
}

// CheckOutputs validates a sealed result against the runner's declared
// outputs: the result must be a JSON object holding every declared output
// with its declared type and schema. Members the runner does not declare
// are allowed. A runner that declares no outputs accepts any result.
func CheckOutputs(r *skillpkg.Runner, output json.RawMessage) error {
	if len(r.OutputDecls) == 0 {
		return nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(output, &members); err != nil || members == nil {
		return fmt.Errorf("the result must be a JSON object holding the declared outputs (%s)", outputNames(r))
	}
	for _, o := range r.OutputDecls {
		v, ok := members[o.Name]
		if !ok {
			return fmt.Errorf("output %q is declared but missing from the result", o.Name)
		}
		if err := skillpkg.CheckType(o.Type, v); err != nil {
			return fmt.Errorf("output %q %v", o.Name, err)
		}
		if o.Schema != nil {
			if err := o.Schema.Validate(v); err != nil {
				return fmt.Errorf("output %q breaks its schema: %v", o.Name, err)
			}
		}
	}
	return nil
}

func outputNames(r *skillpkg.Runner) string {
	names := make([]string, len(r.OutputDecls))
	for i, o := range r.OutputDecls {
		names[i] = o.Name
	}
	return strings.Join(names, ", ")
}

func failure(start time.Time, code Code, message string) Envelope {
	return Envelope{
		Schema:     Schema,
		Status:     StatusFailure,
		DurationMS: time.Since(start).Milliseconds(),
		Error:      &Error{Code: code, Message: message},
	}
}

// cliEnvelope maps a cli-tool result onto the envelope (see the package
// comment for the codes).
func cliEnvelope(ctx context.Context, res clitool.Result) Envelope {
	env := Envelope{Schema: Schema, Status: StatusSealed, Output: res.Output, DurationMS: res.Duration.Milliseconds()}
	if res.Started {
		if res.Exited {
			code := res.ExitCode
			env.ExitCode = &code
		}
		n := res.Stdout.Bytes
		env.StdoutBytes = &n
		env.StdoutSHA256 = res.Stdout.SHA256Hex()
		// Invalid bytes would be replaced silently by the JSON encoder; doing
		// it here keeps the envelope honest about what it shows.
		stderr := strings.ToValidUTF8(string(res.Stderr.Retained), "\uFFFD")
		if res.Stderr.Truncated {
			// The cut is the runtime's: say so where the text stops, so a
			// reader never takes a prefix for the whole stream.
			stderr += fmt.Sprintf("\n[%d bytes of stderr omitted]", res.Stderr.Bytes-int64(len(res.Stderr.Retained)))
		}
		env.Stderr = &stderr
	}
	if res.Err == nil {
		return env
	}
	env.Status = StatusFailure
	env.Error = &Error{Code: cliCode(ctx, res.Err), Message: res.Err.Error()}
	return env
}

func cliCode(ctx context.Context, err error) Code {
	switch {
	case errors.Is(err, clitool.ErrInvalidRequest):
		return CodeInvalidRequest
	case errors.Is(err, clitool.ErrTimeout):
		return CodeResourceLimit
	case errors.Is(err, clitool.ErrAborted):
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return CodeResourceLimit
		}
		return CodeExecutionFailed
	case errors.Is(err, clitool.ErrSpawn), errors.Is(err, clitool.ErrExitStatus):
		return CodeExecutionFailed
	case errors.Is(err, clitool.ErrOutputRejected):
		return CodeOutputRejected
	}
	return CodeInternalFailure
}

func runJavaScript(ctx context.Context, start time.Time, pkg *skillpkg.Package, r *skillpkg.Runner, inputs map[string]json.RawMessage, env map[string]string, workspace string, pool *jsrunner.Pool) Envelope {
	raw, err := skillpkg.EncodeInputs(inputs)
	if err != nil {
		return failure(start, CodeInvalidRequest, err.Error())
	}
	spec := jsrunner.Spec{
		Dir:         pkg.Dir,
		Module:      r.Module,
		Export:      r.Export,
		Environment: env,
		Timeout:     r.Timeout,
	}
	if r.Pages != nil {
		spec.Pages = &jsrunner.PagesSpec{
			PathFrom:      r.Pages.PathFrom,
			PathScopeFrom: r.Pages.PathScopeFrom,
			MediaType:     r.Pages.MediaType,
			Framing:       r.Pages.Framing,
			PageBytes:     r.Pages.PageBytes,
		}
	}
	if pool == nil {
		own, err := jsrunner.NewPool(jsrunner.PoolOptions{Workers: 1})
		if err != nil {
			return failure(start, CodeInternalFailure, fmt.Sprintf("starting a javascript worker: %v", err))
		}
		defer own.Close()
		pool = own
	}
	res := pool.Run(ctx, spec, raw, workspace)
	out := Envelope{Schema: Schema, Status: StatusSealed, Output: res.Output, DurationMS: res.DurationMS}
	if res.Err != nil {
		out.Status = StatusFailure
		out.Output = nil
		out.Error = &Error{Code: Code(res.Err.Code), Message: res.Err.Message}
	}
	return out
}
