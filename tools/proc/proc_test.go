package proc

import (
	"encoding/json"
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

func TestWaitBlocksUntilTheChildEnds(t *testing.T) {
	sys := newTree(spawnRight())
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
