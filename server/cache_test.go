package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
)

// consistent checks the cached answers against fresh reads of the runtime.
func (f *fixture) consistent(step string) {
	f.t.Helper()
	ps, err := f.rt.Processes()
	if err != nil {
		f.t.Fatal(err)
	}
	want := make([]ProcessRow, len(ps))
	for i, p := range ps {
		want[i] = Row(p, f.clock.Now())
	}
	wb, _ := json.Marshal(want)
	var got []ProcessRow
	f.must(http.StatusOK, "GET", "/processes", nil, &got)
	if gb, _ := json.Marshal(got); string(gb) != string(wb) {
		f.t.Fatalf("%s: listing\n%s\nwant\n%s", step, gb, wb)
	}
	for _, p := range ps {
		d, err := f.rt.Inspect(p.PID)
		if err != nil {
			f.t.Fatal(err)
		}
		wb, _ := json.Marshal(d)
		r := f.must(http.StatusOK, "GET", fmt.Sprintf("/processes/%d", p.PID), nil, nil)
		if string(r.body) != string(wb)+"\n" {
			f.t.Fatalf("%s: pid %d\n%s\nwant\n%s", step, p.PID, r.body, wb)
		}
	}
	a, _ := f.rt.Approvals()
	ab, _ := json.Marshal(a)
	if len(a) == 0 {
		ab = []byte("[]")
	}
	r := f.must(http.StatusOK, "GET", "/approvals", nil, nil)
	if string(r.body) != string(ab)+"\n" {
		f.t.Fatalf("%s: approvals\n%s\nwant\n%s", step, r.body, ab)
	}
}

// The cached listing, details and approvals follow every change, whoever
// makes it: the API, the scheduler, or a Host beside the server.
func TestCachedReadsFollowChanges(t *testing.T) {
	f := newFixture(t, messageScript)
	f.consistent("empty")
	for i := 0; i < 3; i++ {
		f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "wait for ana"}, nil)
	}
	f.consistent("spawned")
	f.run()
	f.consistent("waiting")
	f.must(http.StatusCreated, "POST", "/processes/2/messages", map[string]any{"body": "hi", "from": "ana"}, nil)
	f.consistent("message posted")
	f.run()
	f.consistent("pid 2 exited")
	f.must(http.StatusOK, "POST", "/processes/3/signal", map[string]any{"signal": "pause"}, nil)
	f.consistent("paused")
	if _, err := f.rt.Signal(3, "continue"); err != nil {
		t.Fatal(err)
	}
	f.consistent("continued beside the server")
	if _, err := f.rt.SetGoal(1, "another goal"); err != nil {
		t.Fatal(err)
	}
	f.consistent("goal set beside the server")
	cp, err := f.rt.CreateCheckpoint(1)
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	if _, err := f.rt.PostHumanMessage(kernelMessage(1, "late")); err != nil {
		t.Fatal(err)
	}
	f.run()
	f.consistent("pid 1 exited")
	if _, err := f.rt.ForkCheckpoint(cp.ID); err != nil {
		t.Fatal(err)
	}
	f.consistent("forked")
	f.run()
	f.consistent("the fork waits")
}

func kernelMessage(to int64, body string) kernel.HumanMessage {
	return kernel.HumanMessage{To: to, From: "ana", Body: body}
}

// A held call stays listed while its process is paused, and leaves the list
// when the process is killed, approved or denied, however the steps are
// taken: the cached approvals match the runtime's after every one.
func TestCachedApprovalsFollowPauseAndKill(t *testing.T) {
	f := newFixture(t, "")
	f.rt.SetProvider(funcProvider(func(req llm.Request) (llm.Response, error) {
		if req.Process.ParentPID == 0 && req.Turn == 0 {
			return call("c1", "spawn_child_process", `{"image":"base:v0","goal":"help"}`), nil
		}
		return call("c2", "process_exit", `{"message":"done"}`), nil
	}))
	for i := 0; i < 4; i++ {
		f.must(http.StatusCreated, "POST", "/processes", askSpawn, nil)
	}
	f.run()
	f.consistent("four held calls")
	signal := func(pid int64, sig string) {
		f.t.Helper()
		f.must(http.StatusOK, "POST", fmt.Sprintf("/processes/%d/signal", pid), map[string]any{"signal": sig}, nil)
	}
	signal(1, "pause")
	f.consistent("pid 1 paused in its approval wait")
	signal(1, "kill")
	f.consistent("pid 1 killed while paused")
	signal(2, "pause")
	signal(2, "continue")
	f.consistent("pid 2 paused and continued")
	signal(2, "pause")
	f.consistent("pid 2 paused again")
	if _, err := f.rt.Signal(2, "kill"); err != nil {
		t.Fatal(err)
	}
	f.consistent("pid 2 killed beside the server")
	var list []kernel.Approval
	f.must(http.StatusOK, "GET", "/approvals", nil, &list)
	signal(3, "pause")
	f.must(http.StatusOK, "POST", "/approvals/3/"+list[0].CallID, map[string]any{"decision": "approve"}, nil)
	f.consistent("pid 3 approved while paused")
	signal(3, "continue")
	f.consistent("pid 3 continued")
	f.run()
	f.consistent("pid 3 ran its call")
	f.must(http.StatusOK, "POST", "/approvals/4/"+list[1].CallID, map[string]any{"decision": "deny", "reason": "no"}, nil)
	f.consistent("pid 4 denied")
	f.run()
	f.consistent("all done")
}

// treeProvider: pid 1 spawns pid 2 (handing down spawn), which spawns pid 3;
// then each waits for a message from ana, again after each one.
var treeProvider = funcProvider(func(req llm.Request) (llm.Response, error) {
	if req.Turn == 0 && req.Process.PID < 3 {
		return call("s", "spawn_child_process", `{"image":"base:v0","goal":"below","capabilities":[{"resource":"process:spawn","rights":["write"]}]}`), nil
	}
	return call(fmt.Sprintf("r%d", req.Turn), "receive_process_messages", `{"sender":"human:ana"}`), nil
})

// The calls of a process charge its ancestors' budgets, which their cached
// details follow although no entry about them is logged.
func TestCachedDetailFollowsDescendantsCharges(t *testing.T) {
	f := newFixture(t, "")
	f.rt.SetProvider(treeProvider)
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "a tree", "grants": []string{"process:spawn=write"}}, nil)
	f.run()
	f.consistent("the tree waits")
	before := map[int64]kernel.ProcessDetail{}
	for pid := int64(1); pid <= 2; pid++ {
		var d kernel.ProcessDetail
		f.must(http.StatusOK, "GET", fmt.Sprintf("/processes/%d", pid), nil, &d)
		before[pid] = d
	}
	f.must(http.StatusCreated, "POST", "/processes/3/messages", map[string]any{"body": "go on", "from": "ana"}, nil)
	f.run()
	for pid := int64(1); pid <= 2; pid++ {
		var d kernel.ProcessDetail
		f.must(http.StatusOK, "GET", fmt.Sprintf("/processes/%d", pid), nil, &d)
		if d.Budgets["llm_calls"].Used <= before[pid].Budgets["llm_calls"].Used {
			t.Errorf("pid %d: llm_calls used %d after pid 3's turn, %d before", pid, d.Budgets["llm_calls"].Used, before[pid].Budgets["llm_calls"].Used)
		}
	}
	f.consistent("pid 3 took a turn")
}

// A pause requested of a running process beside the server (as the control
// socket does) shows in its cached detail at once.
func TestCachedDetailShowsARequestedPause(t *testing.T) {
	f := newFixture(t, "")
	started, release := make(chan struct{}), make(chan struct{})
	f.rt.SetProvider(funcProvider(func(req llm.Request) (llm.Response, error) {
		if req.Turn == 0 {
			close(started)
			<-release
		}
		return call("c1", "process_exit", `{"message":"done"}`), nil
	}))
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "think"}, nil)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- f.rt.RunUntilIdle(ctx)
	}()
	<-started
	var d kernel.ProcessDetail
	f.must(http.StatusOK, "GET", "/processes/1", nil, &d)
	if d.Status != "running" || d.PauseRequested {
		t.Fatalf("before the pause: %s, pause requested %v", d.Status, d.PauseRequested)
	}
	if _, err := f.rt.Signal(1, "pause"); err != nil {
		t.Fatal(err)
	}
	f.must(http.StatusOK, "GET", "/processes/1", nil, &d)
	if d.Status != "running" || !d.PauseRequested {
		t.Errorf("after the pause: %s, pause requested %v", d.Status, d.PauseRequested)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.consistent("paused at the quantum's end")
}
