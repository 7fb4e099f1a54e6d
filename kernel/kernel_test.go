package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

var epoch = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

type harness struct {
	t      *testing.T
	dir    string
	clock  *clock.Fake
	rt     *Runtime
	mu     sync.Mutex
	events []Event
}

func newHarness(t *testing.T, script string, mutate ...func(*Options)) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir(), clock: clock.NewFake(epoch, true)}
	h.open(script, mutate...)
	return h
}

func (h *harness) open(script string, mutate ...func(*Options)) {
	h.t.Helper()
	opts := Options{Clock: h.clock, OnEvent: func(ev Event) {
		h.mu.Lock()
		h.events = append(h.events, ev)
		h.mu.Unlock()
	}}
	if script != "" {
		s, err := llm.ParseScript([]byte(script))
		if err != nil {
			h.t.Fatalf("script: %v", err)
		}
		p, err := llm.NewReplay(s, h)
		if err != nil {
			h.t.Fatalf("replay: %v", err)
		}
		opts.Provider = p
	}
	for _, m := range mutate {
		m(&opts)
	}
	rt, err := Open(h.dir, opts)
	if err != nil {
		h.t.Fatalf("open: %v", err)
	}
	h.rt = rt
	h.t.Cleanup(func() { rt.Close() })
}

// SpawnIndex answers the replay provider from the runtime open now, so one
// provider serves the harness across reopens.
func (h *harness) SpawnIndex(pid int64) (int, error) { return h.rt.SpawnIndex(pid) }

func clockGrants() []capabilities.Grant {
	return []capabilities.Grant{
		{Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}},
		{Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}},
	}
}

func (h *harness) spawn(grants []capabilities.Grant) int64 {
	h.t.Helper()
	pid, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "test goal", Grants: grants})
	if err != nil {
		h.t.Fatalf("spawn: %v", err)
	}
	return pid
}

func (h *harness) run() {
	h.t.Helper()
	if err := h.rt.RunUntilIdle(context.Background()); err != nil {
		h.t.Fatalf("run: %v", err)
	}
}

func (h *harness) info(pid int64) ProcessInfo {
	h.t.Helper()
	info, err := h.rt.Process(pid)
	if err != nil {
		h.t.Fatal(err)
	}
	return info
}

func (h *harness) result(pid int64) map[string]any {
	h.t.Helper()
	info := h.info(pid)
	if info.Status != process.Exited {
		h.t.Fatalf("pid %d: status %s (%s), want exited", pid, info.Status, info.Reason)
	}
	_, payload, err := h.rt.ReadObject(info.ResultOID)
	if err != nil {
		h.t.Fatalf("result: %v", err)
	}
	var out map[string]any
	if err := json.Unmarshal(payload, &out); err != nil {
		h.t.Fatalf("result %s: %v", payload, err)
	}
	return out
}

// toolResults returns the results the process saw, in order.
func (h *harness) toolResults(pid int64) []map[string]any {
	h.t.Helper()
	var out []map[string]any
	err := h.rt.view(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		c, err := h.rt.loadContext(tx, r)
		if err != nil {
			return err
		}
		for _, e := range c.entries {
			if e.Role == llm.RoleTool {
				var m map[string]any
				if err := json.Unmarshal([]byte(e.Content), &m); err != nil {
					return err
				}
				m["_tool"] = e.Name
				out = append(out, m)
			}
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

const clockScript = `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: get_current_time
            arguments: {timezone: Asia/Shanghai}
      - tool_calls:
          - name: sleep
            arguments: {seconds: 5}
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: process_exit
            arguments:
              payload: {slept: "${last.elapsed_seconds}", pid: "${process.pid}"}
`

func TestRunToExit(t *testing.T) {
	h := newHarness(t, clockScript)
	pid := h.spawn(clockGrants())
	h.run()
	got := h.result(pid)
	if got["slept"] != 5.0 || got["pid"] != float64(pid) {
		t.Fatalf("result = %v", got)
	}
	res := h.toolResults(pid)
	if len(res) != 4 {
		t.Fatalf("want 4 tool results, got %d: %v", len(res), res)
	}
	if res[0]["iso8601"] != "2026-11-29T20:00:00+08:00" || res[0]["timezone"] != "Asia/Shanghai" || res[0]["unix_seconds"] != float64(epoch.Unix()) {
		t.Errorf("get_current_time = %v", res[0])
	}
	// The call after the sleep was never started; its answer comes first,
	// the sleep's own result when the timer fired.
	if res[1]["_tool"] != "get_current_time" || res[1]["cancelled"] != true || res[1]["effect_started"] != false || res[1]["ok"] != false {
		t.Errorf("call after sleep = %v", res[1])
	}
	if res[2]["_tool"] != "sleep" || res[2]["requested_seconds"] != 5.0 || res[2]["elapsed_seconds"] != 5.0 {
		t.Errorf("sleep = %v", res[2])
	}
	if res[3]["status"] != "exited" || res[3]["result_oid"] != h.info(pid).ResultOID {
		t.Errorf("process_exit = %v", res[3])
	}
	if !h.clock.Now().Equal(epoch.Add(5 * time.Second)) {
		t.Errorf("fake clock at %v: the sleep must wait on the runtime clock", h.clock.Now())
	}
}

func TestDeniedSleepDoesNotWait(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: sleep
            arguments: {seconds: 30}
      - tool_calls:
          - name: process_exit
            arguments: {message: "${last.error.code}"}
`)
	pid := h.spawn(nil)
	h.run()
	if got := h.result(pid); got["message"] != "denied" {
		t.Fatalf("result = %v", got)
	}
	if !h.clock.Now().Equal(epoch) {
		t.Fatalf("a denied sleep waited: clock at %v", h.clock.Now())
	}
	res := h.toolResults(pid)
	msg := res[0]["error"].(map[string]any)["message"].(string)
	if !strings.Contains(msg, "clock:sleep") || res[0]["effect_started"] != false {
		t.Fatalf("denial must name the resource and not start: %v", res[0])
	}
}

func TestOneShotGrant(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: get_current_time
            arguments: {timezone: Not/AZone}
          - name: get_current_time
            arguments: {timezone: UTC, extra: 1}
      - tool_calls:
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: process_exit
            arguments: {}
`)
	one := 1
	pid := h.spawn([]capabilities.Grant{{Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, UsesRemaining: &one}})
	h.run()
	res := h.toolResults(pid)
	codes := []string{}
	for _, r := range res {
		if e, ok := r["error"].(map[string]any); ok {
			codes = append(codes, e["code"].(string))
		} else {
			codes = append(codes, "ok")
		}
	}
	want := []string{"invalid_arguments", "invalid_arguments", "ok", "denied", "ok"}
	if strings.Join(codes, ",") != strings.Join(want, ",") {
		t.Fatalf("codes = %v, want %v", codes, want)
	}
	if h.info(pid).ResultOID != "" {
		t.Fatal("a bare exit on a one-phase image has no result")
	}
}

func TestScriptExhaustedFails(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: get_current_time
            arguments: {}
`)
	pid := h.spawn(clockGrants())
	h.run()
	info := h.info(pid)
	if info.Status != process.Failed || !strings.Contains(info.Reason, "replay script exhausted") {
		t.Fatalf("status %s reason %q", info.Status, info.Reason)
	}
}

func TestLLMBudgetExhausted(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - text: thinking
      - text: still thinking
      - text: and more
`)
	pid, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", Budget: capabilities.Budget{LLMCalls: 2}})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	info := h.info(pid)
	if info.Status != process.Failed || !strings.Contains(info.Reason, "llm_calls") || info.Turn != 2 {
		t.Fatalf("status %s turn %d reason %q", info.Status, info.Turn, info.Reason)
	}
}

func TestUnknownToolAndBadArguments(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: format_disk
            arguments: {}
          - name: sleep
            arguments: {seconds: 61}
          - name: sleep
            arguments: {}
      - tool_calls:
          - name: process_exit
            arguments: {message: done, review_token: x}
      - tool_calls:
          - name: process_exit
            arguments: {message: done}
`)
	pid := h.spawn(clockGrants())
	h.run()
	res := h.toolResults(pid)
	// A refused sleep started no wait, so the call after it runs (and is
	// refused on its own arguments).
	if res[2]["cancelled"] == true || res[2]["effect_started"] != false {
		t.Errorf("call after a refused sleep: %v", res[2])
	}
	wantMsgs := map[int]string{0: `unknown tool "format_disk"`, 1: "seconds: must be <= 60", 2: "seconds: required", 3: "review_token/completion_evidence: only for images"}
	for i, w := range wantMsgs {
		msg := res[i]["error"].(map[string]any)["message"].(string)
		if !strings.Contains(msg, w) {
			t.Errorf("result %d: %q does not contain %q", i, msg, w)
		}
	}
	if got := h.result(pid); got["message"] != "done" {
		t.Fatalf("result = %v", got)
	}
	if !h.clock.Now().Equal(epoch) {
		t.Fatal("rejected sleeps must not wait")
	}
}

func TestExitPrecedence(t *testing.T) {
	cases := []struct {
		entry int
		check func(t *testing.T, h *harness, pid int64)
	}{
		{0, func(t *testing.T, h *harness, pid int64) {
			info := h.info(pid)
			if info.ResultOID != info.GoalOID {
				t.Fatalf("result_oid must win: %s vs goal %s", info.ResultOID, info.GoalOID)
			}
		}},
		{1, func(t *testing.T, h *harness, pid int64) {
			info := h.info(pid)
			_, payload, err := h.rt.ReadObject(info.ResultOID)
			if err != nil || string(payload) != "[1,2]" {
				t.Fatalf("payload must beat message: %s %v", payload, err)
			}
		}},
		{2, func(t *testing.T, h *harness, pid int64) {
			res := h.toolResults(pid)
			// Without authority on that OID a missing result looks denied.
			if res[0]["error"].(map[string]any)["code"] != "denied" {
				t.Fatalf("missing result_oid: %v", res[0])
			}
			if got := h.result(pid); got["message"] != "m" {
				t.Fatalf("message result = %v", got)
			}
		}},
	}
	for _, c := range cases {
		script := []string{
			"processes:\n  - image: base:v0\n    turns:\n      - tool_calls:\n          - name: process_exit\n            arguments: {result_oid: \"${process.goal_oid}\", payload: {a: 1}, message: m}\n",
			"processes:\n  - image: base:v0\n    turns:\n      - tool_calls:\n          - name: process_exit\n            arguments: {payload: [1, 2], message: m}\n",
			"processes:\n  - image: base:v0\n    turns:\n      - tool_calls:\n          - name: process_exit\n            arguments: {result_oid: no-such-object}\n      - tool_calls:\n          - name: process_exit\n            arguments: {message: m}\n",
		}[c.entry]
		hh := newHarness(t, script)
		pid := hh.spawn(nil)
		hh.run()
		c.check(t, hh, pid)
	}
}

// After a reopen a process stays ended with its result, which is durable;
// other runtime-local payloads (the goal) are reported lost.
func TestReopenKeepsTerminalStateAndReportsLostPayload(t *testing.T) {
	h := newHarness(t, clockScript)
	pid := h.spawn(clockGrants())
	h.run()
	resultOID := h.info(pid).ResultOID
	want := h.result(pid)
	for range 2 {
		if err := h.rt.Close(); err != nil {
			t.Fatal(err)
		}
		h.open(clockScript)
	}
	info := h.info(pid)
	if info.Status != process.Exited || info.ResultOID != resultOID {
		t.Fatalf("after reopen: %+v", info)
	}
	if got := h.result(pid); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("result after two reopens %v, want %v", got, want)
	}
	meta, _, err := h.rt.ReadObject(info.GoalOID)
	if !errors.Is(err, objects.ErrPayloadLost) || meta.Version != 1 {
		t.Fatalf("runtime-local goal after reopen: meta %+v err %v", meta, err)
	}
	// The context is rebuilt from retained evidence.
	res := h.toolResults(pid)
	if len(res) != 4 {
		t.Fatalf("rebuilt context has %d tool results, want 4", len(res))
	}
}

func TestSecondOpenFails(t *testing.T) {
	h := newHarness(t, "")
	_, err := Open(h.dir, Options{})
	if !errors.Is(err, objects.ErrInUse) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second open: %v", err)
	}
}

func TestRunWithoutProvider(t *testing.T) {
	h := newHarness(t, "")
	if err := h.rt.RunUntilIdle(context.Background()); !errors.Is(err, ErrNoProvider) {
		t.Fatalf("got %v", err)
	}
}

func TestSpawnValidation(t *testing.T) {
	h := newHarness(t, "")
	if _, err := h.rt.Spawn(SpawnSpec{Image: "nope:v1", Goal: "g"}); !errors.Is(err, ErrInvalidSpawn) {
		t.Fatalf("unknown image: %v", err)
	}
	if _, err := h.rt.Spawn(SpawnSpec{Image: "base:v0"}); !errors.Is(err, ErrInvalidSpawn) {
		t.Fatalf("empty goal: %v", err)
	}
	if _, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", Budget: capabilities.Budget{LLMCalls: -1}}); !errors.Is(err, ErrInvalidSpawn) {
		t.Fatalf("negative budget: %v", err)
	}
	one := 1
	dup := []capabilities.Grant{
		{ID: "g", Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}, UsesRemaining: &one},
		{ID: "g", Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}, UsesRemaining: &one},
	}
	if _, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", Grants: dup}); !errors.Is(err, ErrInvalidSpawn) {
		t.Fatalf("duplicate grant ids: %v", err)
	}
	bad := []capabilities.Grant{{Resource: "clock:*:x", Rights: []capabilities.Right{capabilities.Read}}}
	if _, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", Grants: bad}); !errors.Is(err, ErrInvalidSpawn) {
		t.Fatalf("bad grant: %v", err)
	}
	if ps, _ := h.rt.Processes(); len(ps) != 0 {
		t.Fatalf("a refused spawn left %d processes", len(ps))
	}
}

// blockingProvider blocks until its context ends.
type blockingProvider struct{ started chan struct{} }

func (b *blockingProvider) Name() string { return "blocking" }
func (b *blockingProvider) Complete(ctx context.Context, _ llm.Request) (llm.Response, error) {
	close(b.started)
	<-ctx.Done()
	return llm.Response{}, &llm.CallError{Settlement: llm.SettlementUnknown, Err: ctx.Err()}
}

func TestInterruptedQuantumResumesWithNotice(t *testing.T) {
	bp := &blockingProvider{started: make(chan struct{})}
	h := newHarness(t, "", func(o *Options) { o.Provider = bp })
	pid := h.spawn(clockGrants())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.rt.RunUntilIdle(ctx) }()
	<-bp.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	info := h.info(pid)
	if info.Status != process.Runnable || info.Turn != 1 {
		t.Fatalf("after an interrupted call: %+v", info)
	}
	h.rt.Close()
	// The interrupted call was counted (and charged) but its response never
	// recorded: the replay asks turn 0 again, as an uninterrupted run would.
	h.open(`
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {message: resumed}}]
`)
	h.run()
	if got := h.result(pid); got["message"] != "resumed" {
		t.Fatalf("result = %v", got)
	}
	var sawNotice bool
	h.rt.view(func(tx *txn) error {
		r, _ := loadProc(tx, pid)
		c, _ := h.rt.loadContext(tx, r)
		for _, e := range c.entries {
			if e.Kind == "notice" && strings.Contains(e.Content, "interrupted") {
				sawNotice = true
			}
		}
		return nil
	})
	if !sawNotice {
		t.Fatal("the process must be told its previous turn was interrupted")
	}
}

func TestWallBudget(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: sleep, arguments: {seconds: 30}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
	pid, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", Grants: clockGrants(), Budget: capabilities.Budget{WallSeconds: 10}})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	info := h.info(pid)
	if info.Status != process.Failed || !strings.Contains(info.Reason, "wall_seconds") {
		t.Fatalf("a process past its wall budget makes no more calls: %+v", info)
	}
}

func TestRestatedGoalIsRecoveredAfterReopen(t *testing.T) {
	h := newHarness(t, "")
	pid := h.spawn(nil)
	if _, err := h.rt.SetGoal(pid, "the restated goal"); err != nil {
		t.Fatal(err)
	}
	h.rt.Close()
	h.open("")
	var text string
	h.rt.view(func(tx *txn) error {
		r, _ := loadProc(tx, pid)
		var err error
		text, err = h.rt.goalText(tx, r)
		return err
	})
	if text != "Goal:\nthe restated goal" {
		t.Fatalf("recovered goal %q", text)
	}
}

// notStartedProvider never reaches its model.
type notStartedProvider struct{}

func (notStartedProvider) Name() string { return "down" }
func (notStartedProvider) Complete(context.Context, llm.Request) (llm.Response, error) {
	return llm.Response{}, &llm.CallError{Settlement: llm.SettlementNotStarted, Err: errors.New("connection refused")}
}

// A provider that never answers is retried with backoff, then the process
// waits for the Host: nothing is charged and nothing fails.
func TestNotStartedCallIsNotCharged(t *testing.T) {
	h := newHarness(t, "", func(o *Options) { o.Provider = notStartedProvider{} })
	pid := h.spawn(nil)
	h.run()
	info := h.info(pid)
	if info.Status != process.Waiting || info.Wait.Kind != process.WaitProvider || !info.Wait.Until.IsZero() ||
		!strings.Contains(info.Wait.Reason, "provider unavailable after 8 attempts") || !strings.Contains(info.Wait.Reason, "connection refused") {
		t.Fatalf("status %s, wait %+v", info.Status, info.Wait)
	}
	if info.Used.LLMCalls != 0 || info.Used.LLMTokens != 0 {
		t.Fatalf("a call that never started is not charged: %+v", info.Used)
	}
	var attempts []any
	for _, ev := range h.events {
		if ev.Kind == EventProvider && ev.PID == pid {
			attempts = append(attempts, ev.Detail.(map[string]any)["attempt"])
		}
	}
	if fmt.Sprint(attempts) != "[1 2 3 4 5 6 7 8]" {
		t.Fatalf("attempts recorded: %v", attempts)
	}
	// Backoff grows with full jitter, within the 1 s .. 60 s ceilings: 8
	// attempts take at most 1+2+4+8+16+32+60 s of the fake clock.
	if waited := h.clock.Now().Sub(epoch); waited <= 0 || waited > 123*time.Second {
		t.Fatalf("backoff took %s", waited)
	}
}

// reopenedAsleep spawns a coding:v0 process on script, whose first call
// sleeps, runs it into that sleep, reopens the runtime and runs it on.
func reopenedAsleep(t *testing.T, script, goal string) (*harness, int64) {
	t.Helper()
	h := newHarness(t, script)
	pid, err := h.rt.Spawn(SpawnSpec{Image: "coding:v0", Goal: goal, Grants: clockGrants()})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.rt.RunReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	if info := h.info(pid); info.Wait == nil || info.Wait.Kind != process.WaitTimer {
		t.Fatalf("before the reopen: %+v, want a timer wait", info)
	}
	h.rt.Close()
	h.open(script)
	h.run()
	return h, pid
}

// A sleep a reopen cut short answers with an error of unknown settlement,
// not a success: the review does not count it among the successful calls
// that completion evidence may cite.
func TestSleepCutShortByAReopenIsNoSuccess(t *testing.T) {
	script := `
processes:
  - image: coding:v0
    turns:
      - tool_calls: [{name: sleep, arguments: {seconds: 30}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
`
	h, pid := reopenedAsleep(t, script, "g")
	res := h.toolResults(pid)
	if len(res) != 2 {
		t.Fatalf("results %v", res)
	}
	errObj, _ := res[0]["error"].(map[string]any)
	if res[0]["ok"] != false || errObj["code"] != "settlement_unknown" || res[0]["effect_started"] != true {
		t.Fatalf("the sleep's result %v, want an error of unknown settlement whose effect started", res[0])
	}
	review, _ := res[1]["completion_review"].(map[string]any)
	if review == nil || strings.Contains(fmt.Sprint(review["observed_successful_tool_calls"]), "sleep") {
		t.Fatalf("review %v counts the sleep as a success", review)
	}
}

// After a reopen lost the goal's payload, the completion review carries the
// goal recovered from retained evidence, since its reference's read cannot
// return it any more.
func TestReviewCarriesTheRecoveredGoal(t *testing.T) {
	script := `
processes:
  - image: coding:v0
    turns:
      - tool_calls: [{name: sleep, arguments: {seconds: 30}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
      - tool_calls: [{name: read_object, arguments: {namespace: "${last.completion_review.goal.reference.arguments.namespace}", name: "${last.completion_review.goal.reference.arguments.name}"}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
`
	h, pid := reopenedAsleep(t, script, "the original goal")
	res := h.toolResults(pid)
	if len(res) < 3 {
		t.Fatalf("results %v", res)
	}
	review, _ := res[1]["completion_review"].(map[string]any)
	goal, _ := review["goal"].(map[string]any)
	if goal["recovered_text"] != "the original goal" || !strings.Contains(fmt.Sprint(review["hints"]), "goal.recovered_text") {
		t.Fatalf("review after the reopen: %v", review)
	}
	if res[2]["ok"] != false {
		t.Fatalf("the goal's payload read back after the reopen: %v", res[2])
	}
	// Before any reopen the review does not inline the goal.
	h2 := newHarness(t, script)
	pid2, err := h2.rt.Spawn(SpawnSpec{Image: "coding:v0", Goal: "the original goal", Grants: clockGrants()})
	if err != nil {
		t.Fatal(err)
	}
	h2.run()
	res2 := h2.toolResults(pid2)
	if len(res2) < 2 {
		t.Fatalf("results %v", res2)
	}
	review2, _ := res2[1]["completion_review"].(map[string]any)
	if goal2, _ := review2["goal"].(map[string]any); goal2 == nil || goal2["recovered_text"] != nil {
		t.Fatalf("a live goal is inlined: %v", review2)
	}
}

// Each tool record keeps the decisions of its own call: a call a blocking
// call's batch left not started has none, and the blocking call, recorded
// when its wait ends, keeps those that allowed it to start.
func TestToolRecordsKeepTheirOwnAuthority(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - {name: sleep, arguments: {seconds: 1}}
          - {name: get_current_time, arguments: {}}
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
	pid := h.spawn([]capabilities.Grant{
		{ID: "may-sleep", Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}},
		{ID: "may-read", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}},
	})
	h.run()
	d, err := h.rt.Inspect(pid)
	if err != nil {
		t.Fatal(err)
	}
	byTool := map[string]CallView{}
	for _, c := range d.RecentCalls {
		byTool[c.Name] = c
	}
	if c := byTool["get_current_time"]; c.ErrorCode != "cancelled" || len(c.Authority) != 0 {
		t.Fatalf("the call that never started: %+v, want no decision", c)
	}
	if c := byTool["sleep"]; !c.OK || fmt.Sprint(c.Authority) != "[allowed by grant may-sleep]" {
		t.Fatalf("the sleep: %+v, want the decision that allowed it", c)
	}
}
