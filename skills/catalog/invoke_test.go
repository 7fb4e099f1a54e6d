package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/process"
	"github.com/libos/libos/skills/catalog"
	"github.com/libos/libos/skills/runner"
	"github.com/libos/libos/tools"
)

// runEffect invokes a runner tool and runs its outside effect.
func runEffect(t *testing.T, tl *tools.Tool, sys tools.Syscalls, raw string) (map[string]any, error) {
	t.Helper()
	out, err := call(t, tl, sys, raw)
	if err != nil {
		t.Fatalf("%s: invoke: %v", tl.Name, err)
	}
	if out.Effect == nil || out.Result != nil || out.Block != nil || out.Exit != nil {
		t.Fatalf("%s: a runner call must be an outside effect, got %+v", tl.Name, out)
	}
	return out.Effect(context.Background())
}

func outputOf(t *testing.T, res map[string]any) string {
	t.Helper()
	raw, ok := res["output"].(json.RawMessage)
	if !ok {
		t.Fatalf("no output in %v", res)
	}
	return canonical(t, raw)
}

func TestCLIToolRunnerChecksScopesThenRuns(t *testing.T) {
	c := loadAgent(t)
	echo := toolByName(t, c.Tools(), "echo")

	// Without the grant nothing runs: the refusal comes from Invoke.
	denied := &fakeSys{}
	out, err := call(t, echo, denied, `{"text": "hi"}`)
	if !errors.Is(err, tools.ErrDenied) || out.Effect != nil {
		t.Fatalf("without scope:echo.use: %+v %v", out, err)
	}
	if !slices.Equal(denied.authorized, []string{"execute scope:echo.use"}) {
		t.Fatalf("authorized %v", denied.authorized)
	}

	sys := &fakeSys{grants: map[string]bool{"execute scope:echo.use": true}}
	res, err := runEffect(t, echo, sys, `{"text": "hi", "tags": ["a"]}`)
	if err != nil {
		t.Fatal(err)
	}
	// cat returns the input object the runner received: defaults applied.
	if got := outputOf(t, res); got != `{"tags":["a"],"text":"hi","times":1}` {
		t.Fatalf("output %s", got)
	}
	if res["status"] != "sealed" || res["exit_code"] != 0 || res["stderr"] != "" || len(res["stdout_sha256"].(string)) != 64 || res["stdout_bytes"] != int64(len(`{"tags":["a"],"text":"hi","times":1}`)) {
		t.Fatalf("result %v", res)
	}
	if _, ok := res["duration_ms"].(int64); !ok {
		t.Fatalf("duration_ms %T", res["duration_ms"])
	}

	// A runner without inputs takes any object and needs no grant.
	res, err = runEffect(t, toolByName(t, c.Tools(), "echo_raw"), &fakeSys{}, `{"free": {"form": [1, 2]}}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := outputOf(t, res); got != `{"free":{"form":[1,2]}}` {
		t.Fatalf("raw output %s", got)
	}
}

func TestFailureEnvelopeBecomesToolError(t *testing.T) {
	root := t.TempDir()
	writePackage(t, root, "fails", skillMD("fails"), `runners:
  exit7:
    default: true
    type: cli-tool
    command: sh
    args: ["-c", "echo broken pipe dream >&2; exit 7"]
  missing:
    type: cli-tool
    command: libos-no-such-command-anywhere
  slow:
    type: cli-tool
    command: sleep
    args: ["5"]
    timeout_seconds: 0.2
`, nil)
	c, err := catalog.LoadCatalog([]string{root}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = runEffect(t, toolByName(t, c.Tools(), "fails"), &fakeSys{}, `{}`)
	te := wantToolError(t, err, string(runner.CodeExecutionFailed), "exit code 7", "stderr: broken pipe dream")
	if !te.EffectStarted {
		t.Fatal("a failed run started its effect")
	}
	_, err = runEffect(t, toolByName(t, c.Tools(), "fails_missing"), &fakeSys{}, `{}`)
	wantToolError(t, err, string(runner.CodeExecutionFailed), "libos-no-such-command-anywhere")
	_, err = runEffect(t, toolByName(t, c.Tools(), "fails_slow"), &fakeSys{}, `{}`)
	wantToolError(t, err, string(runner.CodeResourceLimit))
}

func TestJavaScriptRunnerAndBundledTool(t *testing.T) {
	c := loadAgent(t)
	res, err := runEffect(t, toolByName(t, c.Tools(), "tally"), &fakeSys{}, `{"text": "the quick  brown fox jumps", "min_length": 4}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := outputOf(t, res); got != `{"longest":"quick","words":3}` || res["status"] != "sealed" {
		t.Fatalf("tally %v", res)
	}
	if _, has := res["exit_code"]; has {
		t.Fatalf("a javascript run has no exit code: %v", res)
	}
	res, err = runEffect(t, toolByName(t, c.Tools(), "text_upper"), &fakeSys{}, `{"text": "shout"}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := outputOf(t, res); got != `{"text":"SHOUT"}` {
		t.Fatalf("text_upper %s", got)
	}
	// After Close the pool is gone and the call fails, reporting why.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = runEffect(t, toolByName(t, c.Tools(), "tally"), &fakeSys{}, `{"text": "x"}`)
	wantToolError(t, err, string(runner.CodeInternalFailure), "closed")
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestEnvelopeResultBounds(t *testing.T) {
	big := `"` + strings.Repeat("€", catalog.MaxInlineOutputBytes/3+10) + `"`
	stderr := strings.Repeat("é", catalog.MaxInlineStderrBytes) + "END"
	res, err := catalog.EnvelopeResult(runner.Envelope{Status: runner.StatusSealed, Output: json.RawMessage(big), Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	prefix := res["output_prefix"].(string)
	if res["output_truncated"] != true || res["output_bytes"] != len(big) || len(prefix) > catalog.MaxInlineOutputBytes || !strings.HasPrefix(big, prefix) || len(res["output_sha256"].(string)) != 64 {
		t.Fatalf("large output: truncated %v bytes %v prefix %d", res["output_truncated"], res["output_bytes"], len(prefix))
	}
	if _, has := res["output"]; has {
		t.Fatal("a large output is not inlined")
	}
	tailStr := res["stderr"].(string)
	if len(tailStr) > catalog.MaxInlineStderrBytes || !strings.HasSuffix(tailStr, "END") || !strings.HasPrefix(tailStr, "é") {
		t.Fatalf("stderr tail of %d bytes must end the stream on a rune boundary", len(tailStr))
	}

	code := 3
	_, err = catalog.EnvelopeResult(runner.Envelope{Status: runner.StatusFailure, ExitCode: &code, Error: &runner.Error{Code: runner.CodeOutputRejected, Message: "stdout was truncated"}})
	te := wantToolError(t, err, "output_rejected", "stdout was truncated (exit code 3)")
	if !te.EffectStarted {
		t.Fatal("failure envelopes started their effect")
	}
}

func TestAgentTaskSpawnsChildWithExactTable(t *testing.T) {
	c := loadAgent(t)
	delegate := toolByName(t, c.Tools(), "delegate")

	// Scopes first, then the right to spawn; nothing is spawned on refusal.
	for _, grants := range []map[string]bool{
		{"write process:spawn": true},
		{"execute scope:delegate.run": true},
	} {
		sys := &fakeSys{grants: grants}
		if _, err := call(t, delegate, sys, `{"question": "why?"}`); !errors.Is(err, tools.ErrDenied) || len(sys.spawned) != 0 {
			t.Fatalf("grants %v: %v, spawned %d", grants, err, len(sys.spawned))
		}
	}

	sys := &fakeSys{grants: map[string]bool{"execute scope:delegate.run": true, "write process:spawn": true}}
	if _, err := call(t, delegate, sys, `{}`); err == nil || !strings.Contains(err.Error(), "question: required") {
		t.Fatalf("missing input: %v", err)
	}
	out, err := call(t, delegate, sys, `{"question": "what time is it?"}`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sys.authorized, []string{"execute scope:delegate.run", "write process:spawn"}) {
		t.Fatalf("authorized %v", sys.authorized)
	}
	if len(sys.spawned) != 1 {
		t.Fatalf("spawned %d children", len(sys.spawned))
	}
	spec := sys.spawned[0]
	if spec.Image != catalog.SkillAgentImage || !slices.Equal(spec.ToolTable, []string{"get_current_time", "process_exit", "echo"}) || !slices.Equal(spec.Scopes, []string{"delegate.run"}) {
		t.Fatalf("child spec %+v", spec)
	}
	if spec.Budget.WallSeconds != 91 {
		t.Fatalf("timeout_seconds 90.5 must bound the child's wall time to 91 s, got %+v", spec.Budget)
	}
	if len(spec.Grants) != 1 || spec.Grants[0].Resource != "scope:delegate.run" || !slices.Equal(spec.Grants[0].Rights, []capabilities.Right{capabilities.Execute}) {
		t.Fatalf("child grants %+v", spec.Grants)
	}
	for _, part := range []string{"skill delegate", "The child reads the clock once", "answer (string)", `{"question":"what time is it?"}`} {
		if !strings.Contains(spec.Goal, part) {
			t.Fatalf("goal lacks %q:\n%s", part, spec.Goal)
		}
	}
	if out.Block == nil || out.Block.Wait.Kind != process.WaitChild || out.Block.Wait.ChildPID != 7 {
		t.Fatalf("outcome %+v", out)
	}

	// Resume reports the ended child with its result, which the caller may
	// read (the fake knows no rule for a direct child's result: a grant).
	sys.child = tools.ChildStatus{PID: 7, Status: process.Exited, ResultOID: "r1"}
	sys.objects = map[string][]byte{"r1": []byte(`{"answer":"noon"}`)}
	sys.grants["read object:r1"] = true
	res, err := delegate.Resume(context.Background(), sys, tools.Pending{ID: "p1", Data: out.Block.Data})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Result
	if r["status"] != "exited" || r["child_pid"] != int64(7) || r["result_oid"] != "r1" || canonical(t, r["result"].(json.RawMessage)) != `{"answer":"noon"}` {
		t.Fatalf("resume %v", r)
	}
	// A result is inlined up to the bound of any runner's output, and
	// described past it.
	answer := strings.Repeat("x", catalog.MaxInlineOutputBytes-20)
	sys.objects["r1"] = []byte(`{"answer":"` + answer + `"}`)
	res, err = delegate.Resume(context.Background(), sys, tools.Pending{ID: "p1", Data: out.Block.Data})
	if err != nil || len(res.Result["result"].(json.RawMessage)) != len(sys.objects["r1"]) {
		t.Fatalf("result under the bound: %v", err)
	}
	big := []byte(`{"answer":"` + answer + strings.Repeat("y", 100) + `"}`)
	sys.objects["r1"] = big
	res, err = delegate.Resume(context.Background(), sys, tools.Pending{ID: "p1", Data: out.Block.Data})
	if err != nil || res.Result["result"] != nil || res.Result["result_truncated"] != true || res.Result["result_bytes"] != len(big) ||
		!strings.HasPrefix(string(big), res.Result["result_prefix"].(string)) || len(res.Result["result_sha256"].(string)) != 64 {
		t.Fatalf("large result: %v", err)
	}
	// A result the caller may not read is checked against the outputs but
	// not shown.
	delete(sys.grants, "read object:r1")
	sys.objects["r1"] = []byte(`{"answer":"secret"}`)
	res, err = delegate.Resume(context.Background(), sys, tools.Pending{ID: "p1", Data: out.Block.Data})
	if shown, _ := json.Marshal(res.Result); err != nil || res.Result["result_readable"] != false || strings.Contains(string(shown), "secret") {
		t.Fatalf("a result its caller is denied: %s %v", shown, err)
	}
	// A result that breaks the declared outputs, or none at all, is refused.
	for _, tc := range []struct{ result, want string }{
		{`{"answer":42,"junk":true}`, `output "answer" must be a string, got number`},
		{`"noon"`, "must be a JSON object holding the declared outputs (answer)"},
		{"", "exited without a result"},
	} {
		sys.child = tools.ChildStatus{PID: 7, Status: process.Exited}
		if tc.result != "" {
			sys.child.ResultOID = "r1"
			sys.objects["r1"] = []byte(tc.result)
		}
		_, err = delegate.Resume(context.Background(), sys, tools.Pending{ID: "p1", Data: out.Block.Data})
		if te := wantToolError(t, err, string(runner.CodeOutputRejected), "agent-task default of skill delegate: child pid 7", tc.want); !te.EffectStarted {
			t.Fatalf("%s: the child ran", tc.result)
		}
	}
	// A child that did not exit fails the call, naming how it ended.
	sys.child = tools.ChildStatus{PID: 7, Status: process.Failed, Reason: "budget exhausted"}
	_, err = delegate.Resume(context.Background(), sys, tools.Pending{ID: "p1", Data: out.Block.Data})
	wantToolError(t, err, tools.CodeFailed, "child pid 7 ended failed: budget exhausted")

	// The kernel's refusal of the table (before the child exists) is the
	// call's error.
	sys.spawnErr = tools.Errorf(tools.CodeInvalidArguments, "allowed_tools[1]: %q does not resolve in the tool catalog", "no_such_tool")
	_, err = call(t, delegate, sys, `{"question": "q"}`)
	wantToolError(t, err, tools.CodeInvalidArguments, "allowed_tools[1]")
}
