package proc

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/toolstest"
)

func newTree(grants ...capabilities.Grant) *toolstest.Syscalls {
	s := toolstest.New(1, grants...)
	s.Proc.Image = "base:v0"
	return s
}

func spawnRight() capabilities.Grant {
	return capabilities.Grant{ID: "spawn", Resource: capabilities.ProcessSpawn, Rights: []capabilities.Right{capabilities.Write}}
}

func TestSpawnNeedsAuthorityAndValidGrants(t *testing.T) {
	sys := newTree()
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", `{"image":"base:v0","goal":"g"}`); e == nil || e.Code != tools.CodeDenied {
		t.Fatalf("without process:spawn: %v", e)
	}
	sys.Grants = []capabilities.Grant{spawnRight()}
	// Another image needs read on it.
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", `{"image":"coding:v0","goal":"g"}`); e == nil || !strings.Contains(e.Message, "image:coding:v0") {
		t.Fatalf("another image without read on it: %v", e)
	}
	bad := `{"image":"base:v0","goal":"g","capabilities":[{"resource":"clock:now","rights":["read"],"effect":"ask","uses_remaining":1}]}`
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", bad); e == nil || e.Code != tools.CodeInvalidArguments || !strings.Contains(e.Message, "capabilities[0]") {
		t.Fatalf("a one-shot ask grant: %v", e)
	}
	if len(sys.Spawned) != 0 {
		t.Fatal("a refused spawn reached the kernel")
	}
	ok := `{"image":"base:v0","goal":"g","capabilities":[{"resource":"clock:now","rights":["read"],"effect":"ask","delegable":false,"expires_at":"2026-01-01T01:00:00Z"}],"budget":{"tool_calls":5}}`
	out, e := toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", ok)
	if e != nil || out.Result["pid"] != int64(2) {
		t.Fatalf("spawn: %v %v", out.Result, e)
	}
	g := sys.Spawned[0].Grants[0]
	if g.Effect != capabilities.Ask || g.CanDelegate() || g.ExpiresAt == nil || sys.Spawned[0].Budget.ToolCalls != 5 {
		t.Fatalf("handed down %+v, budget %+v", g, sys.Spawned[0].Budget)
	}
}

// childResults stands in for the kernel's rule that a parent reads its
// direct child's result without a grant (kernel/syscalls.go, childResult),
// which toolstest's Require does not know: read on the child's namespace.
func childResults(pid int64) capabilities.Grant {
	return capabilities.Grant{ID: "child-results", Resource: fmt.Sprintf("object_namespace:proc-%d", pid), Rights: []capabilities.Right{capabilities.Read}}
}

func TestWaitBlocksUntilTheChildEnds(t *testing.T) {
	sys := newTree(spawnRight(), childResults(2))
	toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", `{"image":"base:v0","goal":"g"}`)
	out, e := toolstest.Call(Tools(tools.Config{}), sys, "wait_child_process", `{"child_pid":2,"block":false}`)
	if e != nil || out.Result["ready"] != false {
		t.Fatalf("non-blocking wait on a running child: %v %v", out.Result, e)
	}
	out, e = toolstest.Call(Tools(tools.Config{}), sys, "wait_child_process", `{"child_pid":2}`)
	if e != nil || out.Block == nil || out.Block.Wait.Kind != process.WaitChild || out.Block.Wait.ChildPID != 2 {
		t.Fatalf("blocking wait: %+v %v", out, e)
	}
	// The child ends with a small result: the resumed wait inlines it.
	res := sys.Put("proc-2", "result", []byte(`{"answer":42}`))
	sys.Children[2].Status, sys.Children[2].ResultOID = process.Exited, res.OID
	var waitTool *tools.Tool
	for _, tl := range Tools(tools.Config{}) {
		if tl.Name == "wait_child_process" {
			waitTool = tl
		}
	}
	out, err := waitTool.Resume(t.Context(), sys, tools.Pending{ID: "p", Data: []byte(`{"child_pid":2,"block":true}`)})
	if err != nil || out.Result["ready"] != true || string(out.Result["result"].(json.RawMessage)) != `{"answer":42}` {
		t.Fatalf("resumed wait: %v %v", out.Result, err)
	}
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "wait_child_process", `{"child_pid":9}`); e == nil || e.Code != tools.CodeDenied {
		t.Fatalf("wait on a stranger: %v", e)
	}
}

func TestSignalArguments(t *testing.T) {
	sys := newTree(spawnRight())
	toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", `{"image":"base:v0","goal":"g"}`)
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "signal_child_process", `{"child_pid":2,"signal":"stop"}`); e == nil || e.Code != tools.CodeInvalidArguments {
		t.Fatalf("unknown signal: %v", e)
	}
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "signal_child_process", `{"child_pid":2,"signal":"pause"}`); e != nil || len(sys.Signals) != 1 {
		t.Fatalf("pause: %v", e)
	}
}

// A signal reaches only a direct child and answers with its new status; a
// kill of an ended child leaves it as it ended.
func TestSignalStates(t *testing.T) {
	sys := newTree(spawnRight())
	toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", `{"image":"base:v0","goal":"g"}`)
	for _, c := range []struct{ signal, status string }{{"pause", "paused"}, {"resume", "runnable"}, {"kill", "killed"}, {"resume", "killed"}} {
		out, e := toolstest.Call(Tools(tools.Config{}), sys, "signal_child_process", `{"child_pid":2,"signal":"`+c.signal+`"}`)
		if e != nil || out.Result["status"] != c.status {
			t.Fatalf("%s: %v %v", c.signal, out.Result, e)
		}
	}
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "signal_child_process", `{"child_pid":9,"signal":"kill"}`); e == nil || e.Code != tools.CodeDenied {
		t.Fatalf("signal to a stranger: %v", e)
	}
	// An ended child's large or non-JSON result is not inlined.
	res := sys.Put("proc-2", "result", []byte(strings.Repeat("x", MaxInlineResultBytes+1)))
	sys.Children[2].ResultOID = res.OID
	out, e := toolstest.Call(Tools(tools.Config{}), sys, "wait_child_process", `{"child_pid":2}`)
	if e != nil || out.Block != nil || out.Result["ready"] != true || out.Result["result"] != nil || out.Result["result_bytes"] != MaxInlineResultBytes+1 {
		t.Fatalf("wait on a killed child with a large result: %+v %v", out, e)
	}
}

// Spawning one's own image needs no image right; the kernel's refusal (a
// widening, an exhausted budget) is the tool's answer.
func TestSpawnOwnImageAndKernelRefusal(t *testing.T) {
	sys := newTree(spawnRight())
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", `{"image":"base:v0","goal":"g"}`); e != nil {
		t.Fatal(e)
	}
	if !slices.Equal(sys.Checked, []string{"write process:spawn"}) {
		t.Fatalf("checked %v", sys.Checked)
	}
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", `{"image":"nope:v0","goal":"g"}`); e == nil || e.Code != tools.CodeInvalidArguments {
		t.Fatalf("unknown image: %v", e)
	}
	sys.SpawnErr = capabilities.ErrWidening
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", `{"image":"base:v0","goal":"g"}`); e == nil || e.Code != tools.CodeDenied {
		t.Fatalf("a widening spawn: %v", e)
	}
}

// endedChild spawns child 2 of sys and ends it with payload as its result.
func endedChild(t *testing.T, sys *toolstest.Syscalls, payload string) string {
	t.Helper()
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", `{"image":"base:v0","goal":"g"}`); e != nil {
		t.Fatal(e)
	}
	res := sys.Put("proc-2", "result", []byte(payload))
	sys.Children[2].Status, sys.Children[2].ResultOID = process.Exited, res.OID
	return res.OID
}

// A wait inlines a child's result only when the parent may read it: a
// deny keeps it out (result_oid and size, and why), and an ask grant
// neither inlines it nor holds the wait for a Human.
func TestWaitInlinesOnlyAReadableResult(t *testing.T) {
	deny := capabilities.Grant{ID: "no-child-results", Resource: "object_namespace:proc-2", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Deny}
	ask := capabilities.Grant{ID: "ask-child-results", Resource: "object_namespace:proc-2", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Ask}
	secret := `{"secret":"s3cret"}`
	for _, c := range []struct {
		name     string
		grants   []capabilities.Grant
		readable any // result_readable, nil when absent
		withheld string
	}{
		{"denied", []capabilities.Grant{spawnRight(), childResults(2), deny}, false, "denied by grant no-child-results"},
		{"asks", []capabilities.Grant{spawnRight(), childResults(2), ask}, nil, "needs a Human's approval"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sys := newTree(c.grants...)
			oid := endedChild(t, sys, secret)
			check := func(how string, out tools.Outcome, e *tools.Error) {
				t.Helper()
				if e != nil || out.Block != nil {
					t.Fatalf("%s: a wait on an ended child answers at once: %+v %v", how, out, e)
				}
				r := out.Result
				if _, shown := r["result"]; shown || strings.Contains(fmt.Sprint(r), "s3cret") {
					t.Fatalf("%s: the result was shown: %v", how, r)
				}
				if r["ready"] != true || r["result_oid"] != oid || r["result_bytes"] != len(secret) || r["result_readable"] != c.readable ||
					!strings.Contains(fmt.Sprint(r["result_withheld"]), c.withheld) {
					t.Fatalf("%s: %v", how, r)
				}
			}
			out, e := toolstest.Call(Tools(tools.Config{}), sys, "wait_child_process", `{"child_pid":2}`)
			check("an immediate wait", out, e)
			out, e = toolstest.Resume(Tools(tools.Config{}), sys, "wait_child_process", tools.Pending{ID: "p", Data: []byte(`{"child_pid":2,"block":true}`)})
			check("a resumed wait", out, e)
			if want := "read object:" + oid; !slices.Contains(sys.Checked, want) {
				t.Fatalf("checked %v, want %q", sys.Checked, want)
			}
		})
	}
}

// The inline is a read: a one-shot grant that allows it spends a use, and
// a result too large to inline spends none (it is read through result_oid).
func TestWaitInlineSpendsAUseOnlyWhenItReads(t *testing.T) {
	oneShot := capabilities.Grant{ID: "once", Resource: "object_namespace:proc-2", Rights: []capabilities.Right{capabilities.Read}, UsesRemaining: capabilities.Uses(1)}
	sys := newTree(spawnRight(), oneShot)
	endedChild(t, sys, strings.Repeat("x", MaxInlineResultBytes+1))
	out, e := toolstest.Call(Tools(tools.Config{}), sys, "wait_child_process", `{"child_pid":2}`)
	if e != nil || out.Result["result_bytes"] != MaxInlineResultBytes+1 || out.Result["result_withheld"] != nil || *sys.Grants[1].UsesRemaining != 1 {
		t.Fatalf("a large result: %v %v, uses left %d", out.Result, e, *sys.Grants[1].UsesRemaining)
	}
	sys = newTree(spawnRight(), oneShot)
	endedChild(t, sys, `{"answer":42}`)
	out, e = toolstest.Call(Tools(tools.Config{}), sys, "wait_child_process", `{"child_pid":2}`)
	if e != nil || string(out.Result["result"].(json.RawMessage)) != `{"answer":42}` || *sys.Grants[1].UsesRemaining != 0 {
		t.Fatalf("a small result: %v %v, uses left %d", out.Result, e, *sys.Grants[1].UsesRemaining)
	}
}

// A budget field of 0 would read as no limit of its own (the image's
// stays), so the schema refuses it, naming the field.
func TestSpawnBudgetRefusesZero(t *testing.T) {
	sys := newTree(spawnRight())
	for _, field := range []string{"tool_calls", "llm_calls", "llm_tokens", "children", "wall_seconds"} {
		_, e := toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", `{"image":"base:v0","goal":"g","budget":{"`+field+`":0}}`)
		if e == nil || e.Code != tools.CodeInvalidArguments || !strings.Contains(e.Message, "budget."+field) || !strings.Contains(e.Message, ">= 1") {
			t.Fatalf("budget.%s 0: %v", field, e)
		}
	}
	if len(sys.Spawned) != 0 {
		t.Fatalf("a refused budget reached the kernel: %+v", sys.Spawned)
	}
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", `{"image":"base:v0","goal":"g","budget":{"children":1}}`); e != nil || sys.Spawned[0].Budget.Children != 1 {
		t.Fatalf("budget.children 1: %v %+v", e, sys.Spawned)
	}
}

// A malformed expires_at is the caller's argument at fault: refused naming
// capabilities[i].expires_at and the RFC 3339 rule, not a failed decode.
func TestSpawnRefusesAMalformedExpiry(t *testing.T) {
	sys := newTree(spawnRight())
	for _, at := range []string{"tomorrow at noon, UTC", "2026-13-45T99:00:00Z", "2026-01-01 01:00:00Z"} {
		args := `{"image":"base:v0","goal":"g","capabilities":[{"resource":"clock:now","rights":["read"]},{"resource":"clock:now","rights":["read"],"expires_at":"` + at + `"}]}`
		_, e := toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", args)
		if e == nil || e.Code != tools.CodeInvalidArguments || !strings.Contains(e.Message, "capabilities[1].expires_at") || !strings.Contains(e.Message, "RFC 3339") {
			t.Fatalf("expires_at %q: %v", at, e)
		}
	}
	if len(sys.Spawned) != 0 {
		t.Fatalf("a refused grant reached the kernel: %+v", sys.Spawned)
	}
}
