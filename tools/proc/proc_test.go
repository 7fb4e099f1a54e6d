package proc

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/toolstest"
)

// treeSys is the fake with a process tree: children it spawned, and their
// states.
type treeSys struct {
	*toolstest.Syscalls
	children map[int64]*tools.ChildStatus
	spawned  []tools.ChildSpec
	signals  []string
}

func newTree(grants ...capabilities.Grant) *treeSys {
	s := &treeSys{Syscalls: toolstest.New(1, grants...), children: map[int64]*tools.ChildStatus{}}
	s.Proc.Image = "base:v0"
	return s
}

func (s *treeSys) ImageOf(ref string) (tools.ImageInfo, error) {
	if ref != "base:v0" && ref != "coding:v0" {
		return tools.ImageInfo{}, tools.Errorf(tools.CodeInvalidArguments, "unknown image %q", ref)
	}
	return tools.ImageInfo{Ref: ref, Gated: ref == "coding:v0"}, nil
}

func (s *treeSys) SpawnChild(spec tools.ChildSpec) (tools.ChildStatus, error) {
	s.spawned = append(s.spawned, spec)
	c := &tools.ChildStatus{PID: int64(len(s.spawned) + 1), Image: spec.Image, GoalOID: "goal", Status: process.Runnable}
	s.children[c.PID] = c
	return *c, nil
}

func (s *treeSys) Child(pid int64) (tools.ChildStatus, error) {
	c, ok := s.children[pid]
	if !ok {
		return tools.ChildStatus{}, tools.Errorf(tools.CodeDenied, "pid %d is not your child", pid)
	}
	return *c, nil
}

func (s *treeSys) SignalChild(pid int64, sig string) (tools.ChildStatus, error) {
	c, err := s.Child(pid)
	if err != nil {
		return c, err
	}
	s.signals = append(s.signals, sig)
	return c, nil
}

func spawnRight() capabilities.Grant {
	return capabilities.Grant{ID: "spawn", Resource: ResourceSpawn, Rights: []capabilities.Right{capabilities.Write}}
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
	if len(sys.spawned) != 0 {
		t.Fatal("a refused spawn reached the kernel")
	}
	ok := `{"image":"base:v0","goal":"g","capabilities":[{"resource":"clock:now","rights":["read"],"effect":"ask","delegable":false,"expires_at":"2026-01-01T01:00:00Z"}],"budget":{"tool_calls":5}}`
	out, e := toolstest.Call(Tools(tools.Config{}), sys, "spawn_child_process", ok)
	if e != nil || out.Result["pid"] != int64(2) {
		t.Fatalf("spawn: %v %v", out.Result, e)
	}
	g := sys.spawned[0].Grants[0]
	if g.Effect != capabilities.Ask || g.CanDelegate() || g.ExpiresAt == nil || sys.spawned[0].Budget.ToolCalls != 5 {
		t.Fatalf("handed down %+v, budget %+v", g, sys.spawned[0].Budget)
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
	sys.children[2].Status, sys.children[2].ResultOID = process.Exited, res.OID
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
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "signal_child_process", `{"child_pid":2,"signal":"pause"}`); e != nil || len(sys.signals) != 1 {
		t.Fatalf("pause: %v", e)
	}
}
