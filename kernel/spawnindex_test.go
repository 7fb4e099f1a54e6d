package kernel

import (
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/process"
)

// spawnIndexScript: a parent spawns a child of its own image, which waits
// for a Human; after that message the child exits, then the parent.
const spawnIndexScript = `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: "wait for the Human"}}]
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: "${last.pid}"}}]
      - tool_calls: [{name: process_exit, arguments: {message: "parent done"}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
      - tool_calls: [{name: process_exit, arguments: {message: "child done"}}]
`

// TestSpawnIndexAcrossReopenRestoreAndFork: the replay entry of a process
// is its place among its tree's spawns of its image, kept beside the record:
// a reopen and a restore leave it, a fork copies it, and every process
// answers from its own entry to the end.
func TestSpawnIndexAcrossReopenRestoreAndFork(t *testing.T) {
	h := newHarness(t, spawnIndexScript)
	parent := h.spawn([]capabilities.Grant{
		{Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}},
		{Resource: "image:base:v0", Rights: []capabilities.Right{capabilities.Read}},
	})
	h.run()
	child := parent + 1
	want := func(pid int64, index int) {
		t.Helper()
		if got, err := h.rt.SpawnIndex(pid); err != nil || got != index {
			t.Fatalf("spawn index of pid %d = %d, %v; want %d", pid, got, err, index)
		}
	}
	want(parent, 0)
	want(child, 1)
	cp, err := h.rt.CreateCheckpoint(parent)
	if err != nil {
		t.Fatal(err)
	}
	h.rt.Close()
	h.open(spawnIndexScript)
	want(child, 1)
	if _, err := h.rt.RestoreCheckpoint(cp.ID); err != nil {
		t.Fatal(err)
	}
	want(child, 1)
	rep, err := h.rt.ForkCheckpoint(cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	want(rep.PIDs[parent], 0)
	want(rep.PIDs[child], 1)
	if _, err := h.rt.SpawnIndex(999); err == nil {
		t.Fatal("a pid that was never spawned has a spawn index")
	}
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: child, From: "h", Body: "go on"}); err != nil {
		t.Fatal(err)
	}
	h.run()
	// The forked parent's wait did not carry over: it goes on to its exit,
	// which only the first entry's third turn is.
	for _, pid := range []int64{parent, child, rep.PIDs[parent]} {
		if info := h.info(pid); info.Status != process.Exited {
			t.Fatalf("pid %d: %s (%s), want exited", pid, info.Status, info.Reason)
		}
	}
}

// TestSpawnIndexIsKeptWhileAlive: the index the replay provider asks for at
// every call is read from the store once and kept while the process lives;
// its end forgets it, and asking again reads the same index back.
func TestSpawnIndexIsKeptWhileAlive(t *testing.T) {
	h := newHarness(t, parentChildScript)
	parent := h.spawn(append(clockGrants(), spawnGrant()))
	for range 2 { // the spawn, then the wait
		if err := h.rt.quantum(t.Context(), parent); err != nil {
			t.Fatal(err)
		}
	}
	const child = 2
	if _, ok := h.rt.spawnIndexes.Load(int64(parent)); !ok {
		t.Fatal("the parent's spawn index is not kept after its calls")
	}
	h.run()
	for _, pid := range []int64{parent, child} {
		if h.info(pid).Status != process.Exited {
			t.Fatalf("pid %d is %s, want exited", pid, h.info(pid).Status)
		}
		if _, ok := h.rt.spawnIndexes.Load(pid); ok {
			t.Fatalf("pid %d's spawn index is still kept after it ended", pid)
		}
		want := map[int64]int{parent: 0, child: 1}[pid]
		if n, err := h.rt.SpawnIndex(pid); err != nil || n != want {
			t.Fatalf("SpawnIndex(%d) after its end = %d, %v; want %d", pid, n, err, want)
		}
	}
}
