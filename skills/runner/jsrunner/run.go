package jsrunner

import (
	"bytes"
	"context"
	"encoding/json"
	"time"
	"unicode/utf8"
)

// Run calls the selected export once (or once per page for a paged run)
// with inputs, a JSON object, and returns its JSON output or a Failure.
// workspace is the caller's workspace root (RUNX_CWD); it is used only to
// resolve a paged artifact. Run is safe for concurrent use.
func (p *Pool) Run(ctx context.Context, spec Spec, inputs json.RawMessage, workspace string) Result {
	start := time.Now()
	res := p.run(ctx, spec, inputs, workspace)
	res.DurationMS = time.Since(start).Milliseconds()
	if res.Err != nil {
		res.Output = nil
	}
	return res
}

func (p *Pool) run(ctx context.Context, spec Spec, inputs json.RawMessage, workspace string) Result {
	if p.closed.Load() {
		return Result{Err: failf(CodeInternalFailure, "%v", ErrPoolClosed)}
	}
	vs, f := validateSpec(spec)
	if f != nil {
		return Result{Err: f}
	}
	in, f := validateInputs(inputs)
	if f != nil {
		return Result{Err: f}
	}
	b, _, f := p.bundles.get(vs.Dir, vs.module)
	if f != nil {
		return Result{Err: f}
	}
	c := &call{bundle: b, export: vs.export, module: vs.module, env: vs.Environment, timeout: vs.timeout}
	if vs.Pages != nil {
		return p.runPaged(ctx, vs, c, in, workspace)
	}
	c.inputs = in
	r := p.invoke(ctx, c)
	if r.fail != nil {
		return Result{Err: r.fail}
	}
	return Result{Output: json.RawMessage(r.output)}
}

// validateInputs checks the per-call input rules and returns the inputs to
// send; absent inputs are an empty object.
func validateInputs(inputs json.RawMessage) ([]byte, *Failure) {
	trimmed := bytes.TrimSpace(inputs)
	if len(trimmed) == 0 {
		return []byte("{}"), nil
	}
	if len(inputs) > MaxInputBytes {
		return nil, failf(CodeInvalidRequest, "inputs: %d bytes is more than the %d-byte (4 MiB) limit", len(inputs), MaxInputBytes)
	}
	if trimmed[0] != '{' {
		return nil, failf(CodeInvalidRequest, "inputs: must be a JSON object")
	}
	if !json.Valid(trimmed) {
		return nil, failf(CodeInvalidRequest, "inputs: not valid JSON")
	}
	if !utf8.Valid(trimmed) {
		return nil, failf(CodeInvalidRequest, "inputs: not valid UTF-8")
	}
	return trimmed, nil
}
