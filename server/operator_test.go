package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
)

// heldUnder holds a spawn of pid 1 for approval under the call id the model
// chose.
func heldUnder(t *testing.T, callID string) (*fixture, kernel.Approval) {
	t.Helper()
	f := newFixture(t, "")
	f.rt.SetProvider(funcProvider(func(req llm.Request) (llm.Response, error) {
		if req.Process.PID == 1 && req.Turn == 0 {
			return call(callID, "spawn_child_process", `{"image":"base:v0","goal":"helper"}`), nil
		}
		return call("e", "process_exit", `{"message":"done"}`), nil
	}))
	f.must(http.StatusCreated, "POST", "/processes", askSpawn, nil)
	f.run()
	var list []kernel.Approval
	f.must(http.StatusOK, "GET", "/approvals", nil, &list)
	if len(list) != 1 || list[0].CallID != callID {
		t.Fatalf("approvals %+v", list)
	}
	return f, list[0]
}

// A model chooses its call ids, "." and ".." included, which no path
// segment can carry (they are collapsed before any handler sees them):
// POST /approvals takes the call in its body and decides any of them.
func TestDecisionNamesTheCallInTheBody(t *testing.T) {
	for _, id := range []string{"..", ".", "a/b", "%2e", "c1"} {
		t.Run(id, func(t *testing.T) {
			f, a := heldUnder(t, id)
			var dec Decision
			f.must(http.StatusOK, "POST", "/approvals", map[string]any{"pid": 1, "call_id": id, "approval_id": a.ID, "decision": "approve"}, &dec)
			if dec.PID != 1 || dec.CallID != id || dec.Decision != "approved" {
				t.Fatalf("decision %+v", dec)
			}
			f.run()
			if ps, _ := f.rt.Processes(); len(ps) != 2 {
				t.Fatalf("the approved spawn did not run: %+v", ps)
			}
			f.must(http.StatusConflict, "POST", "/approvals", map[string]any{"pid": 1, "call_id": id, "approval_id": a.ID, "decision": "deny"}, nil)
		})
	}
	f, a := heldUnder(t, "..")
	before := f.rt.Store().LastEventSeq()
	for _, c := range []struct {
		body   string
		status int
		says   string
	}{
		{`{"call_id": "..", "decision": "approve"}`, 400, "pid: required"},
		{`{"pid": 0, "call_id": "..", "decision": "approve"}`, 400, "pid: required"},
		{`{"pid": 1, "decision": "approve"}`, 400, "call_id: required"},
		{`{"pid": 1, "call_id": "..", "decision": "maybe"}`, 400, `decision "maybe"`},
		{`{"pid": 1, "call_id": "..", "decision": "approve", "reason": "x"}`, 400, "reason: only a deny"},
		{`{"pid": 1, "call_id": "..", "decision": "approve", "extra": 1}`, 400, "extra"},
		{`{"pid": 1, "call_id": ".", "decision": "approve"}`, 409, `call "." of pid 1 does not wait`},
		{`{"pid": 1, "call_id": "..", "approval_id": "nope", "decision": "approve"}`, 409, "approval nope"},
		{`{"pid": 9, "call_id": "..", "decision": "approve"}`, 404, "no such process"},
	} {
		r := f.do("POST", "/approvals", c.body)
		if _, msg := r.errorCode(t); r.status != c.status || !strings.Contains(msg, c.says) {
			t.Errorf("%s: %d %s, want %d saying %q", c.body, r.status, r.body, c.status, c.says)
		}
	}
	if after := f.rt.Store().LastEventSeq(); after != before {
		t.Fatalf("a refused decision changed the runtime")
	}
	f.must(http.StatusOK, "POST", "/approvals", map[string]any{"pid": 1, "call_id": "..", "approval_id": a.ID, "decision": "deny", "reason": "no"}, nil)
}

// A deny reason past the kernel's bound is refused as a bad argument that
// names the field and the bound, in either form, and decides nothing.
func TestDenyReasonIsBoundedThroughServe(t *testing.T) {
	f, a := heldUnder(t, "c1")
	before := f.rt.Store().LastEventSeq()
	long := strings.Repeat("é", kernel.MaxDenyReasonChars+1)
	for _, path := range []string{"/approvals", "/approvals/1/c1"} {
		body := map[string]any{"decision": "deny", "reason": long, "approval_id": a.ID}
		if path == "/approvals" {
			body["pid"], body["call_id"] = 1, "c1"
		}
		r := f.do("POST", path, body)
		code, msg := r.errorCode(t)
		if r.status != http.StatusBadRequest || code != "invalid_argument" ||
			!strings.Contains(msg, fmt.Sprintf("reason: must be at most %d characters, got %d", kernel.MaxDenyReasonChars, kernel.MaxDenyReasonChars+1)) {
			t.Fatalf("POST %s with a long reason: %d %.300s", path, r.status, r.body)
		}
	}
	if after := f.rt.Store().LastEventSeq(); after != before {
		t.Fatal("a refused deny changed the runtime")
	}
	f.must(http.StatusOK, "POST", "/approvals", map[string]any{"pid": 1, "call_id": "c1", "decision": "deny", "reason": long[:2*kernel.MaxDenyReasonChars]}, nil)
}

// A pid no process has is a 404, as on /processes/{pid}, for the filters of
// the checkpoint list and the event stream, which would otherwise answer an
// empty list and a stream that never shows anything.
func TestFiltersOfAMissingPid(t *testing.T) {
	f := newFixture(t, clockScript)
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "read the clock"}, nil)
	f.run()
	for _, path := range []string{"/checkpoints?pid=99", "/events?pid=99", "/events?since=0&pid=99"} {
		r := f.do("GET", path, nil)
		if code, msg := r.errorCode(t); r.status != http.StatusNotFound || code != "not_found" || !strings.Contains(msg, "no such process: pid 99") {
			t.Errorf("GET %s: %d %s", path, r.status, r.body)
		}
	}
	var cps []kernel.Checkpoint
	f.must(http.StatusOK, "GET", "/checkpoints?pid=1", nil, &cps)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.ts.URL+APIPrefix+"/events?since=0&pid=1", nil)
	resp, err := f.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	n, _ := io.ReadAtLeast(resp.Body, buf, 64)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(buf[:n]), `"pid":1`) {
		t.Fatalf("the stream of pid 1: %d %q", resp.StatusCode, buf[:n])
	}
}
