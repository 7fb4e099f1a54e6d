package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/libos/libos/kernel"
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
