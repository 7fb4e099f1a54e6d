package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
)

const clockScript = `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: get_current_time
            arguments: {timezone: UTC}
      - text: the clock is read
        tool_calls:
          - name: process_exit
            arguments: {payload: {zone: "${last.timezone}"}}
`

// approvalScript: the root spawns a child, a call an ask grant holds, and
// waits for it.
const approvalScript = `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: "say hello"}
      - tool_calls:
          - name: wait_child_process
            arguments: {child_pid: "${last.pid}"}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
  - image: base:v0
    turns:
      - tool_calls:
          - name: process_exit
            arguments: {message: hello}
`

// messageScript: the root waits for a message from ana and exits with it.
const messageScript = `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: receive_process_messages
            arguments: {sender: "human:ana"}
      - tool_calls:
          - name: process_exit
            arguments: {payload: {got: "${last.messages.0.body}"}}
`

var askSpawn = map[string]any{"image": "base:v0", "goal": "spawn a helper", "grants": []string{"process:spawn=write"}, "asks": []string{"process:spawn=write"}}

func TestSpawnInspectAndRead(t *testing.T) {
	f := newFixture(t, clockScript)
	var created SpawnResponse
	r := f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "read the clock"}, &created)
	if created.PID != 1 || r.header.Get("Location") != APIPrefix+"/processes/1" {
		t.Fatalf("spawned %+v, Location %q", created, r.header.Get("Location"))
	}
	f.run()

	var rows []ProcessRow
	r = f.must(http.StatusOK, "GET", "/processes", nil, &rows)
	if len(rows) != 1 || rows[0].PID != 1 || rows[0].Status != "exited" || rows[0].ParentPID != nil || rows[0].ResultOID == "" {
		t.Fatalf("rows %+v", rows)
	}
	if r.header.Get(EventSeqHeader) == "" {
		t.Fatalf("no %s header", EventSeqHeader)
	}
	var d kernel.ProcessDetail
	f.must(http.StatusOK, "GET", "/processes/1", nil, &d)
	if d.Status != "exited" || string(d.Result) != `{"zone":"UTC"}` || len(d.RecentCalls) != 2 {
		t.Fatalf("detail %+v", d)
	}
	// The root holds the clock as a run's root does.
	var clockGrant bool
	for _, g := range d.Grants {
		clockGrant = clockGrant || g.Resource == "clock:now"
	}
	if !clockGrant {
		t.Fatalf("grants %+v", d.Grants)
	}
	var ctx kernel.ContextView
	f.must(http.StatusOK, "GET", "/processes/1/context", nil, &ctx)
	var sawText, sawTool bool
	for _, m := range ctx.Messages {
		sawText = sawText || m.Content == "the clock is read"
		sawTool = sawTool || (m.Role == "tool" && strings.Contains(m.Content, `"timezone":"UTC"`))
	}
	if !sawText || !sawTool {
		t.Fatalf("transcript lacks the model's text or the tool result: %+v", ctx.Messages)
	}
	var obj kernel.ObjectView
	f.must(http.StatusOK, "GET", "/objects/"+rows[0].ResultOID, nil, &obj)
	if string(obj.Payload) != `{"zone":"UTC"}` {
		t.Fatalf("result object %s", obj.Payload)
	}
	var goal kernel.GoalView
	f.must(http.StatusOK, "GET", "/processes/1/goal", nil, &goal)
	if goal.Text != "read the clock" || goal.Version != 1 {
		t.Fatalf("goal %+v", goal)
	}
	var objs []json.RawMessage
	f.must(http.StatusOK, "GET", "/processes/1/objects", nil, &objs)
	if len(objs) < 2 {
		t.Fatalf("objects %s", objs)
	}
	var msgs kernel.MessageList
	f.must(http.StatusOK, "GET", "/processes/1/messages?all=true", nil, &msgs)
	if msgs.PID != 1 {
		t.Fatalf("messages %+v", msgs)
	}
	var doc map[string]any
	f.must(http.StatusOK, "GET", "/openapi.json", nil, &doc)
	if doc["openapi"] != "3.1.0" {
		t.Fatalf("openapi %v", doc["openapi"])
	}
}

func TestApproveAndDeny(t *testing.T) {
	f := newFixture(t, approvalScript)
	f.must(http.StatusCreated, "POST", "/processes", askSpawn, nil)
	f.run()
	var list []kernel.Approval
	f.must(http.StatusOK, "GET", "/approvals", nil, &list)
	if len(list) != 1 || list[0].PID != 1 || list[0].Tool != "spawn_child_process" {
		t.Fatalf("approvals %+v", list)
	}
	path := fmt.Sprintf("/approvals/1/%s", list[0].CallID)
	r := f.do("POST", "/approvals/1/nonsense", map[string]any{"decision": "approve"})
	if code, msg := r.errorCode(t); r.status != http.StatusConflict || code != "conflict" || !strings.Contains(msg, list[0].CallID) {
		t.Fatalf("approving another call: %d %s", r.status, r.body)
	}
	r = f.do("POST", path, map[string]any{"decision": "approve", "reason": "why not"})
	if code, msg := r.errorCode(t); r.status != 400 || code != "invalid_argument" || !strings.HasPrefix(msg, "reason:") {
		t.Fatalf("approve with a reason: %d %s", r.status, r.body)
	}
	var dec Decision
	f.must(http.StatusOK, "POST", path, map[string]any{"decision": "approve"}, &dec)
	if dec.Decision != "approved" || dec.CallID != list[0].CallID {
		t.Fatalf("decision %+v", dec)
	}
	f.must(http.StatusConflict, "POST", path, map[string]any{"decision": "approve"}, nil)
	f.run()
	var rows []ProcessRow
	f.must(http.StatusOK, "GET", "/processes", nil, &rows)
	if len(rows) != 2 || rows[0].Status != "exited" || rows[1].Status != "exited" || *rows[1].ParentPID != 1 {
		t.Fatalf("after the approval: %+v", rows)
	}

	g := newFixture(t, approvalScript)
	g.must(http.StatusCreated, "POST", "/processes", askSpawn, nil)
	g.run()
	g.must(http.StatusOK, "GET", "/approvals", nil, &list)
	g.must(http.StatusOK, "POST", fmt.Sprintf("/approvals/1/%s", list[0].CallID), map[string]any{"decision": "deny", "reason": "not today"}, &dec)
	if dec.Decision != "denied" || dec.Reason != "not today" {
		t.Fatalf("decision %+v", dec)
	}
	g.run()
	// The call never ran; the model saw the denial and its reason.
	var ctx kernel.ContextView
	g.must(http.StatusOK, "GET", "/processes/1/context", nil, &ctx)
	var denied bool
	for _, m := range ctx.Messages {
		denied = denied || (m.Role == "tool" && strings.Contains(m.Content, `"denied"`) && strings.Contains(m.Content, "not today"))
	}
	if ps, _ := g.rt.Processes(); len(ps) != 1 || !denied {
		t.Fatalf("denied: %d processes, transcript %+v", len(ps), ctx.Messages)
	}
}

func TestMessagesGoalAndSignals(t *testing.T) {
	f := newFixture(t, messageScript)
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "wait for ana"}, nil)
	f.run()
	var rows []ProcessRow
	f.must(http.StatusOK, "GET", "/processes", nil, &rows)
	if rows[0].Status != "waiting" || rows[0].WaitingOn == nil {
		t.Fatalf("rows %+v", rows)
	}
	var set GoalSet
	f.must(http.StatusOK, "PUT", "/processes/1/goal", map[string]any{"goal": "wait for ana, then report"}, &set)
	if set.Version != 2 || set.PID != 1 {
		t.Fatalf("goal set %+v", set)
	}
	var rep kernel.SignalReport
	f.must(http.StatusOK, "POST", "/processes/1/signal", map[string]any{"signal": "pause"}, &rep)
	if !rep.Changed || rep.Processes[0].Status != "paused" {
		t.Fatalf("pause %+v", rep)
	}
	f.must(http.StatusOK, "POST", "/processes/1/signal", map[string]any{"signal": "continue"}, &rep)
	var m struct {
		ID     string `json:"id"`
		Sender string `json:"sender"`
	}
	f.must(http.StatusCreated, "POST", "/processes/1/messages", map[string]any{"body": "the answer is 42", "from": "ana"}, &m)
	if m.Sender != "human:ana" || m.ID == "" {
		t.Fatalf("message %+v", m)
	}
	var list kernel.MessageList
	f.must(http.StatusOK, "GET", "/processes/1/messages", nil, &list)
	if list.Unread != 1 || list.Messages[0].Body != "the answer is 42" {
		t.Fatalf("messages %+v", list)
	}
	f.run()
	var d kernel.ProcessDetail
	f.must(http.StatusOK, "GET", "/processes/1", nil, &d)
	if d.Status != "exited" || string(d.Result) != `{"got":"the answer is 42"}` {
		t.Fatalf("after the message: %s %s", d.Status, d.Result)
	}
	// An ended process takes no message and no new goal; kill finds nothing to do.
	r := f.do("POST", "/processes/1/messages", map[string]any{"body": "late"})
	if code, _ := r.errorCode(t); r.status != http.StatusConflict || code != "conflict" {
		t.Fatalf("message to an ended process: %d %s", r.status, r.body)
	}
	f.must(http.StatusConflict, "PUT", "/processes/1/goal", map[string]any{"goal": "again"}, nil)
	f.must(http.StatusOK, "POST", "/processes/1/signal", map[string]any{"signal": "kill"}, &rep)
	if rep.Changed {
		t.Fatalf("kill of an ended process changed %+v", rep)
	}
}

func TestCheckpoints(t *testing.T) {
	f := newFixture(t, messageScript)
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "wait for ana"}, nil)
	f.run()
	var cp kernel.Checkpoint
	f.must(http.StatusCreated, "POST", "/processes/1/checkpoints", nil, &cp)
	if cp.ID == "" || cp.RootPID != 1 {
		t.Fatalf("checkpoint %+v", cp)
	}
	var cps []kernel.Checkpoint
	f.must(http.StatusOK, "GET", "/checkpoints", nil, &cps)
	if len(cps) != 1 || cps[0].ID != cp.ID {
		t.Fatalf("checkpoints %+v", cps)
	}
	f.must(http.StatusOK, "GET", "/checkpoints?pid=1", nil, &cps)
	f.must(http.StatusOK, "GET", "/checkpoints/"+cp.ID, nil, nil)
	var fork kernel.ForkReport
	f.must(http.StatusCreated, "POST", "/checkpoints/"+cp.ID+"/fork", "{}", &fork)
	if fork.RootPID != 2 {
		t.Fatalf("fork %+v", fork)
	}
	var rest kernel.RestoreReport
	f.must(http.StatusOK, "POST", "/checkpoints/"+cp.ID+"/restore", nil, &rest)
	if rest.Checkpoint != cp.ID {
		t.Fatalf("restore %+v", rest)
	}
	for _, path := range []string{"/checkpoints/nope", "/checkpoints/nope/restore", "/checkpoints/nope/fork"} {
		method := "POST"
		if path == "/checkpoints/nope" {
			method = "GET"
		}
		r := f.do(method, path, nil)
		if code, _ := r.errorCode(t); r.status != http.StatusNotFound || code != "not_found" {
			t.Fatalf("%s %s: %d %s", method, path, r.status, r.body)
		}
	}
	f.must(http.StatusBadRequest, "POST", "/checkpoints/"+cp.ID+"/fork", `{"x":1}`, nil)
}

// Every bad request answers a JSON error naming what is wrong, and changes
// nothing: no process, no event.
func TestBadInputChangesNothing(t *testing.T) {
	f := newFixture(t, messageScript, func(o *Options) { o.MaxBodyBytes = 4096 })
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "wait for ana"}, nil)
	f.run()
	before := f.rt.Store().LastEventSeq()
	big := `{"body": "` + strings.Repeat("x", 5000) + `"}`
	cases := []struct {
		method, path string
		body         any
		header       []string
		status       int
		code, says   string
	}{
		{"POST", "/processes", `{"image": "base:v0", "goal": `, nil, 400, "malformed_json", "body: malformed JSON"},
		{"POST", "/processes", `{"image": "base:v0" "goal": "x"}`, nil, 400, "malformed_json", "body: malformed JSON at byte"},
		{"POST", "/processes", `{"image": "base:v0", "goal": "x", "colour": "red"}`, nil, 400, "unknown_field", `colour: not a known field (known: asks, budget, denies, goal, grants, image, skills)`},
		{"POST", "/processes", `{"image": 7, "goal": "x"}`, nil, 400, "invalid_argument", "image: must be a string, got number"},
		{"POST", "/processes", `{"image": "base:v0", "goal": "x"} {}`, nil, 400, "malformed_json", "unexpected data after the JSON object"},
		{"POST", "/processes", `[1]`, nil, 400, "malformed_json", "must be a JSON object"},
		{"POST", "/processes", ``, nil, 400, "malformed_json", "body: required"},
		{"POST", "/processes", `{"goal": "x"}`, nil, 400, "invalid_argument", "image: required"},
		{"POST", "/processes", `{"image": "base:v0"}`, nil, 400, "invalid_argument", "goal: required"},
		{"POST", "/processes", `{"image": "nope:v9", "goal": "x"}`, nil, 400, "invalid_argument", "image"},
		{"POST", "/processes", `{"image": "base:v0", "goal": "x", "grants": ["clock:now"]}`, nil, 400, "invalid_argument", "grants[0]:"},
		{"POST", "/processes", `{"image": "base:v0", "goal": "x", "denies": ["clock:now=fly"]}`, nil, 400, "invalid_argument", "denies[0]:"},
		{"POST", "/processes", `{"image": "base:v0", "goal": "x", "skills": ["tally"]}`, nil, 400, "invalid_argument", "skills:"},
		{"POST", "/processes", `{"image": "base:v0", "goal": "x", "budget": {"tool_calls": -1}}`, nil, 400, "invalid_argument", "budget:"},
		{"POST", "/processes", `{"image": "base:v0", "goal": "x"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type", "must be application/json"},
		// Keys are exact and named once, strings are UTF-8, and an error names
		// the field by its whole path.
		{"POST", "/processes/1/signal", `{"SIGNAL": "pause"}`, nil, 400, "unknown_field", "SIGNAL: not a known field (known: signal; names are case-sensitive: signal is one)"},
		{"POST", "/processes/1/signal", `{"signal": "continue", "Signal": "kill"}`, nil, 400, "unknown_field", "Signal: not a known field"},
		{"POST", "/processes/1/signal", `{"signal": "pause", "signal": "kill"}`, nil, 400, "malformed_json", "signal: named more than once"},
		{"POST", "/processes", `{"image": "base:v0", "goal": "x", "budget": {"children": 1, "children": 9}}`, nil, 400, "malformed_json", "budget.children: named more than once"},
		{"POST", "/processes/1/messages", "{\"body\": \"hi \xff\"}", nil, 400, "malformed_json", "body: must be valid UTF-8"},
		{"POST", "/processes/1/messages", `{"body": "hi", "from": "ana \ud800"}`, nil, 400, "malformed_json", "from: must be valid UTF-8"},
		{"POST", "/processes/1/messages", `{"body": "hi", "subject": "\udc00\ud83d"}`, nil, 400, "malformed_json", "subject: must be valid UTF-8"},
		{"POST", "/processes", "{\"image\": \"base:v0\", \"goal\": \"x\", \"grants\": [\"clock:now=read\", \"\xc3\"]}", nil, 400, "malformed_json", "grants[1]: must be valid UTF-8"},
		{"POST", "/processes", `{"image": "base:v0", "goal": "x", "budget": {"tokens": 5}}`, nil, 400, "unknown_field", "budget.tokens: not a known field (known: children, llm_calls, llm_tokens, tool_calls, wall_seconds)"},
		{"POST", "/processes", `{"image": "base:v0", "goal": "x", "grants": [1]}`, nil, 400, "invalid_argument", "grants[0]: must be a string, got number"},
		{"POST", "/processes", `{"image": "base:v0", "goal": "x", "budget": {"tool_calls": 1.5}}`, nil, 400, "invalid_argument", "budget.tool_calls: must be an integer, got 1.5"},
		{"POST", "/processes", `{"image": "base:v0", "goal": "x", "budget": {"tool_calls": 99999999999999999999}}`, nil, 400, "invalid_argument", "budget.tool_calls: 99999999999999999999 is out of range"},
		{"POST", "/processes", `{"image": "base:v0", "goal": "x", "budget": []}`, nil, 400, "invalid_argument", "budget: must be an object, got array"},
		{"POST", "/processes/1/checkpoints", `{"x": 1}`, nil, 400, "unknown_field", "x: not a known field (known: none)"},
		{"POST", "/approvals/1/call_x", `{"decision": "approve", "approval_id": 7}`, nil, 400, "invalid_argument", "approval_id: must be a string, got number"},
		// Query parameters an endpoint does not read are refused, not ignored.
		{"GET", "/processes/1/messages?al=true", nil, nil, 400, "invalid_argument", `query parameter "al": not known (known: all, after, limit)`},
		{"GET", "/processes/1/messages?before=3", nil, nil, 400, "invalid_argument", `query parameter "before": not known`},
		{"GET", "/processes/1/messages?limit=3", nil, nil, 400, "invalid_argument", "limit: only a page read with after takes a limit"},
		{"GET", "/processes/1/messages?after=-1", nil, nil, 400, "invalid_argument", `after "-1": must be a message seq`},
		{"GET", "/processes/1/messages?after=0&limit=0", nil, nil, 400, "invalid_argument", `limit "0": must be an integer from 1 to 1000`},
		{"GET", "/processes?all=true", nil, nil, 400, "invalid_argument", `query parameter "all": not known (this endpoint takes none)`},
		{"GET", "/processes/1?x", nil, nil, 400, "invalid_argument", `query parameter "x": not known`},
		{"GET", "/approvals?limit=1", nil, nil, 400, "invalid_argument", `query parameter "limit": not known`},
		{"GET", "/checkpoints?pid=1&pid=2", nil, nil, 400, "invalid_argument", `query parameter "pid": given 2 times`},
		{"GET", "/checkpoints?pid=%zz", nil, nil, 400, "invalid_argument", "malformed"},
		{"GET", "/events?sinse=1", nil, nil, 400, "invalid_argument", `query parameter "sinse": not known (known: since, pid)`},
		{"GET", "/events", nil, []string{"Last-Event-ID", "5.0"}, 400, "invalid_argument", "Last-Event-ID"},
		{"GET", "/events", nil, []string{"Last-Event-ID", "5.x"}, 400, "invalid_argument", "Last-Event-ID"},
		{"GET", "/openapi.json?v=2", nil, nil, 400, "invalid_argument", `query parameter "v": not known`},
		{"POST", "/processes?dry_run=1", `{"image": "base:v0", "goal": "x"}`, nil, 400, "invalid_argument", `query parameter "dry_run": not known`},
		{"POST", "/processes/1/messages", big, nil, 413, "body_too_large", "4096 bytes"},
		{"POST", "/processes/1/messages", `{"body": ""}`, nil, 400, "invalid_argument", "body: required"},
		{"POST", "/processes/99/messages", `{"body": "hi"}`, nil, 404, "not_found", "pid 99"},
		{"POST", "/processes/abc/messages", `{"body": "hi"}`, nil, 400, "invalid_argument", `pid "abc": must be a positive integer`},
		{"POST", "/processes/-1/signal", `{"signal": "kill"}`, nil, 400, "invalid_argument", "pid"},
		{"POST", "/processes/1/signal", `{"signal": "stop"}`, nil, 400, "invalid_argument", `signal "stop": must be kill, pause or continue`},
		{"POST", "/processes/1/signal", `{}`, nil, 400, "invalid_argument", "signal: required"},
		{"POST", "/processes/99/signal", `{"signal": "kill"}`, nil, 404, "not_found", "pid 99"},
		{"PUT", "/processes/1/goal", `{"goal": "  "}`, nil, 400, "invalid_argument", "goal: required"},
		{"PUT", "/processes/99/goal", `{"goal": "x"}`, nil, 404, "not_found", "pid 99"},
		{"GET", "/processes/99", nil, nil, 404, "not_found", "pid 99"},
		{"GET", "/processes/99/context", nil, nil, 404, "not_found", "pid 99"},
		{"GET", "/processes/99/messages", nil, nil, 404, "not_found", "pid 99"},
		{"GET", "/processes/1/messages?all=maybe", nil, nil, 400, "invalid_argument", "all"},
		{"GET", "/objects/nope", nil, nil, 404, "not_found", "not found"},
		{"POST", "/approvals/1/call_x", `{"decision": "maybe"}`, nil, 400, "invalid_argument", `decision "maybe": must be approve or deny`},
		{"POST", "/approvals/1/call_x", `{}`, nil, 400, "invalid_argument", "decision: required"},
		{"POST", "/approvals/1/call_x", `{"decision": "approve"}`, nil, 409, "conflict", "no pending approval"},
		{"POST", "/processes/99/checkpoints", nil, nil, 404, "not_found", "pid 99"},
		{"GET", "/checkpoints?pid=x", nil, nil, 400, "invalid_argument", "pid"},
		{"GET", "/events?since=-1", nil, nil, 400, "invalid_argument", "since"},
		{"GET", "/events?pid=0", nil, nil, 400, "invalid_argument", "pid"},
		{"GET", "/events", nil, []string{"Last-Event-ID", "x"}, 400, "invalid_argument", "Last-Event-ID"},
		{"GET", "/nothing", nil, nil, 404, "not_found", "no such endpoint"},
		{"DELETE", "/processes/1", nil, nil, 405, "method_not_allowed", "must be GET"},
	}
	for _, c := range cases {
		r := f.do(c.method, c.path, c.body, c.header...)
		code, msg := r.errorCode(t)
		if r.status != c.status || code != c.code || !strings.Contains(msg, c.says) {
			t.Errorf("%s %s %v: %d %s, want %d %s saying %q", c.method, c.path, c.body, r.status, r.body, c.status, c.code, c.says)
		}
	}
	if after := f.rt.Store().LastEventSeq(); after != before {
		t.Fatalf("bad requests changed the runtime: event seq %d -> %d", before, after)
	}
	ps, _ := f.rt.Processes()
	if len(ps) != 1 || ps[0].Status != "waiting" {
		t.Fatalf("processes %+v", ps)
	}
	var list kernel.MessageList
	f.must(http.StatusOK, "GET", "/processes/1/messages?all=1", nil, &list)
	if list.Total != 0 {
		t.Fatalf("messages %+v", list)
	}
}

// A decision names the hold it decides: repeated after the hold was
// answered, it is refused rather than applied to a later call the model
// made under the same call id.
func TestDecisionNamesItsHold(t *testing.T) {
	f := newFixture(t, "")
	f.rt.SetProvider(funcProvider(func(req llm.Request) (llm.Response, error) {
		if req.Process.PID != 1 || req.Turn > 1 {
			return call("c1", "process_exit", `{"message":"done"}`), nil
		}
		return call("c1", "spawn_child_process", fmt.Sprintf(`{"image":"base:v0","goal":"helper %d"}`, req.Turn)), nil
	}))
	f.must(http.StatusCreated, "POST", "/processes", askSpawn, nil)
	f.run()
	var list []kernel.Approval
	f.must(http.StatusOK, "GET", "/approvals", nil, &list)
	first := list[0]
	approve := map[string]any{"decision": "approve", "approval_id": first.ID}
	f.must(http.StatusOK, "POST", "/approvals/1/c1", approve, nil)
	f.run()
	f.must(http.StatusOK, "GET", "/approvals", nil, &list)
	if len(list) != 1 || list[0].CallID != "c1" || list[0].ID == first.ID || !strings.Contains(string(list[0].Arguments), "helper 1") {
		t.Fatalf("the second hold: %+v", list)
	}
	before := f.rt.Store().LastEventSeq()
	r := f.do("POST", "/approvals/1/c1", approve)
	if code, msg := r.errorCode(t); r.status != http.StatusConflict || code != "conflict" || !strings.Contains(msg, list[0].ID) {
		t.Fatalf("a repeated approve: %d %s", r.status, r.body)
	}
	f.must(http.StatusConflict, "POST", "/approvals/1/c1", map[string]any{"decision": "deny", "approval_id": first.ID}, nil)
	if after := f.rt.Store().LastEventSeq(); after != before {
		t.Fatalf("a refused decision changed the runtime: seq %d -> %d", before, after)
	}
	f.must(http.StatusOK, "POST", "/approvals/1/c1", map[string]any{"decision": "deny", "approval_id": list[0].ID}, nil)
	f.run()
	if ps, _ := f.rt.Processes(); len(ps) != 2 {
		t.Fatalf("%d processes: only the approved helper may exist", len(ps))
	}
}

// Every message can be read: pages after a seq reach the ones the newest
// answer leaves out.
func TestMessagesPageToTheOldest(t *testing.T) {
	f := newFixture(t, messageScript)
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "wait for ana"}, nil)
	f.run()
	body := strings.Repeat("€", 32000) // 96,000 bytes
	const n = 50
	for i := 0; i < n; i++ {
		// From bob: pid 1 waits for ana, and leaves them unread.
		f.must(http.StatusCreated, "POST", "/processes/1/messages", map[string]any{"body": body, "from": "bob", "subject": strconv.Itoa(i)}, nil)
	}
	var newest MessagePage
	f.must(http.StatusOK, "GET", "/processes/1/messages?all=true", nil, &newest)
	if newest.Omitted == 0 || len(newest.Messages)+newest.Omitted != n || newest.NextAfter != 0 {
		t.Fatalf("the newest: %d messages, %d omitted, next_after %d", len(newest.Messages), newest.Omitted, newest.NextAfter)
	}
	for _, q := range []string{"all=true&", "", "all=true&limit=7&", "limit=1000&"} {
		var got []string
		pages := 0
		for after := uint64(0); ; pages++ {
			var page MessagePage
			f.must(http.StatusOK, "GET", fmt.Sprintf("/processes/1/messages?%safter=%d", q, after), nil, &page)
			if page.Total != n || page.Unread != n || len(page.Messages) == 0 {
				t.Fatalf("%s page after %d: total %d unread %d, %d messages", q, after, page.Total, page.Unread, len(page.Messages))
			}
			for _, m := range page.Messages {
				got = append(got, m.Subject)
			}
			if page.NextAfter == 0 {
				break
			}
			if page.NextAfter != page.Messages[len(page.Messages)-1].Seq {
				t.Fatalf("%s next_after %d, last seq %d", q, page.NextAfter, page.Messages[len(page.Messages)-1].Seq)
			}
			after = page.NextAfter
		}
		for i, s := range got {
			if s != strconv.Itoa(i) {
				t.Fatalf("%s: subjects %v, want 0..%d in order", q, got, n-1)
			}
		}
		if len(got) != n {
			t.Fatalf("%s: %d messages in %d pages", q, len(got), pages+1)
		}
	}
	var last MessagePage
	f.must(http.StatusOK, "GET", "/processes/1/messages?after=50", nil, &last)
	if len(last.Messages) != 0 || last.NextAfter != 0 {
		t.Fatalf("after the last: %+v", last)
	}
	f.must(http.StatusNotFound, "GET", "/processes/9/messages?after=0", nil, nil)
}
