package process

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// startConfig is a record in one of the states Step can start from.
type startConfig struct {
	name   string
	record Record
}

func baseRecord() Record {
	return Record{
		PID: 7, ParentPID: 1, Image: "base:v0", State: Created, Gen: 4,
		GoalOID: "goal", Namespace: "proc-7",
		Grants:    []capabilities.Grant{{ID: "g", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow, UsesRemaining: capabilities.Uses(2)}},
		CreatedAt: t0, UpdatedAt: t0,
	}
}

func timerWait() *Wait { return &Wait{Kind: WaitTimer, Until: t0.Add(time.Minute), PendingID: "p1"} }

func startConfigs() []startConfig {
	with := func(s State, pausedFrom State, w *Wait) Record {
		r := baseRecord()
		r.State, r.PausedFrom, r.Wait = s, pausedFrom, w
		return r
	}
	return []startConfig{
		{"created", with(Created, "", nil)},
		{"runnable", with(Runnable, "", nil)},
		{"running", with(Running, "", nil)},
		{"waiting", with(Waiting, "", timerWait())},
		{"paused/created", with(Paused, Created, nil)},
		{"paused/runnable", with(Paused, Runnable, nil)},
		{"paused/waiting", with(Paused, Waiting, timerWait())},
		{"exited", with(Exited, "", nil)},
		{"failed", with(Failed, "", nil)},
		{"killed", with(Killed, "", nil)},
	}
}

// validInput builds a well-formed input of kind k for r.
func validInputFor(k InputKind, r Record) Input {
	in := Input{Kind: k}
	switch k {
	case Block:
		in.Wait = &Wait{Kind: WaitChild, ChildPID: 9}
	case Wake:
		in.Gen = r.Gen
		if r.Wait != nil {
			in.WaitKind = r.Wait.Kind
		} else {
			in.WaitKind = WaitTimer
		}
	case Fail:
		in.Reason = "provider refused"
	case Kill:
		in.Reason = "killed by parent 1"
	case Exit:
		in.ResultOID = "result-1"
	}
	return in
}

// allowed lists, per start configuration, the inputs Step accepts and the
// resulting "state" or "paused/<from>". Every pair not listed is refused with
// ErrInvalidTransition.
// Restore and Fork apply to a checkpoint's copy in any state: a restore
// keeps the state (a running copy becomes runnable), a fork makes every
// live copy runnable, and neither leaves an ended state.
var allowed = map[string]map[InputKind]string{
	"created":         {Admit: "runnable", Pause: "paused/created", Fail: "failed", Kill: "killed", Restore: "created", Fork: "runnable"},
	"runnable":        {Dispatch: "running", Pause: "paused/runnable", Fail: "failed", Kill: "killed", Restore: "runnable", Fork: "runnable"},
	"running":         {Yield: "runnable", Block: "waiting", Exit: "exited", Fail: "failed", Kill: "killed", Recover: "runnable", Restore: "runnable", Fork: "runnable"},
	"waiting":         {Wake: "runnable", Pause: "paused/waiting", Fail: "failed", Kill: "killed", Restore: "waiting", Fork: "runnable"},
	"paused/created":  {Resume: "created", Fail: "failed", Kill: "killed", Restore: "paused/created", Fork: "runnable"},
	"paused/runnable": {Resume: "runnable", Fail: "failed", Kill: "killed", Restore: "paused/runnable", Fork: "runnable"},
	"paused/waiting":  {Resume: "waiting", Wake: "paused/runnable", Fail: "failed", Kill: "killed", Restore: "paused/waiting", Fork: "runnable"},
	"exited":          {Restore: "exited", Fork: "exited"},
	"failed":          {Restore: "failed", Fork: "failed"},
	"killed":          {Restore: "killed", Fork: "killed"},
}

func stateName(r Record) string {
	if r.State == Paused {
		return "paused/" + string(r.PausedFrom)
	}
	return string(r.State)
}

func TestStepEveryStateAndInput(t *testing.T) {
	now := t0.Add(time.Hour)
	pairs := 0
	for _, sc := range startConfigs() {
		for _, k := range InputKinds {
			pairs++
			r := sc.record
			before := r.Clone()
			// A clone shares the grant list; a deep copy shows an edit.
			before.Grants = capabilities.CloneGrants(r.Grants)
			in := validInputFor(k, r)
			next, err := Step(r, in, now)
			if !reflect.DeepEqual(r, before) {
				t.Fatalf("%s + %s mutated the input record", sc.name, k)
			}
			want, ok := allowed[sc.name][k]
			if !ok {
				var te *TransitionError
				if !errors.Is(err, ErrInvalidTransition) || !errors.As(err, &te) {
					t.Errorf("%s + %s: err = %v, want ErrInvalidTransition", sc.name, k, err)
					continue
				}
				if te.PID != 7 || te.From != r.State || te.Input != k {
					t.Errorf("%s + %s: error names pid %d, from %s, input %s", sc.name, k, te.PID, te.From, te.Input)
				}
				for _, part := range []string{"process 7", string(r.State), string(k)} {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("%s + %s: error %q does not name %q", sc.name, k, err, part)
					}
				}
				if !reflect.DeepEqual(next, Record{}) {
					t.Errorf("%s + %s: refused step returned a record", sc.name, k)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s + %s: unexpected error %v", sc.name, k, err)
				continue
			}
			if got := stateName(next); got != want {
				t.Errorf("%s + %s: went to %s, want %s", sc.name, k, got, want)
			}
			wantGen := r.Gen + 1
			if k == Fork {
				wantGen = 1 // a fork is a new process: its generations start over
			}
			if next.Gen != wantGen || !next.UpdatedAt.Equal(now) || !next.CreatedAt.Equal(t0) {
				t.Errorf("%s + %s: gen %d updated %v created %v", sc.name, k, next.Gen, next.UpdatedAt, next.CreatedAt)
			}
			if err := next.Validate(); err != nil {
				t.Errorf("%s + %s: result breaks an invariant: %v", sc.name, k, err)
			}
			checkEffects(t, sc.name, k, r, in, next)
			// The result shares no memory it may edit with the input (the
			// grant list is only ever replaced).
			if next.Wait != nil {
				next.Wait.PendingID = "changed"
			}
			if !reflect.DeepEqual(r, before) {
				t.Fatalf("%s + %s: result aliases the input record", sc.name, k)
			}
		}
	}
	if pairs != len(startConfigs())*len(InputKinds) {
		t.Fatalf("covered %d pairs", pairs)
	}
}

// checkEffects checks what each accepted input does besides the state.
func checkEffects(t *testing.T, name string, k InputKind, r Record, in Input, next Record) {
	t.Helper()
	switch {
	case k == Block:
		if !reflect.DeepEqual(next.Wait, in.Wait) || next.Wait == in.Wait {
			t.Errorf("%s + block: wait %+v, want a copy of %+v", name, next.Wait, in.Wait)
		}
	case k == Wake:
		if next.Wait != nil {
			t.Errorf("%s + wake: wait kept", name)
		}
	case k == Pause || k == Resume:
		if !reflect.DeepEqual(next.Wait, r.Wait) {
			t.Errorf("%s + %s: wait changed from %+v to %+v", name, k, r.Wait, next.Wait)
		}
	case k == Exit:
		if next.ResultOID != in.ResultOID {
			t.Errorf("exit: result %q", next.ResultOID)
		}
	case k == Fail || k == Kill:
		if next.Reason != in.Reason || next.Wait != nil || next.PausedFrom != "" {
			t.Errorf("%s + %s: reason %q wait %+v paused_from %q", name, k, next.Reason, next.Wait, next.PausedFrom)
		}
	}
}

func TestStepRefusesBadInput(t *testing.T) {
	rec := func(s State, pausedFrom State, w *Wait) Record {
		r := baseRecord()
		r.State, r.PausedFrom, r.Wait = s, pausedFrom, w
		return r
	}
	running := rec(Running, "", nil)
	waiting := rec(Waiting, "", timerWait())
	cases := []struct {
		name string
		r    Record
		in   Input
		want error
		text string
	}{
		{"block without wait", running, Input{Kind: Block}, ErrInvalidInput, "wait: required"},
		{"unknown wait kind", running, Input{Kind: Block, Wait: &Wait{Kind: "tea"}}, ErrInvalidInput, "wait.kind"},
		{"timer without until", running, Input{Kind: Block, Wait: &Wait{Kind: WaitTimer}}, ErrInvalidInput, "wait.until"},
		{"child without pid", running, Input{Kind: Block, Wait: &Wait{Kind: WaitChild}}, ErrInvalidInput, "wait.child_pid"},
		{"message with until", running, Input{Kind: Block, Wait: &Wait{Kind: WaitMessage, Until: t0}}, ErrInvalidInput, "wait.until"},
		{"message with bad filter", running, Input{Kind: Block, Wait: &Wait{Kind: WaitMessage, Filter: json.RawMessage(`{`)}}, ErrInvalidInput, "wait.filter"},
		{"human with child pid", running, Input{Kind: Block, Wait: &Wait{Kind: WaitHuman, ChildPID: 2}}, ErrInvalidInput, "wait.child_pid"},
		{"timer with filter", running, Input{Kind: Block, Wait: &Wait{Kind: WaitTimer, Until: t0, Filter: json.RawMessage(`{}`)}}, ErrInvalidInput, "wait.filter"},
		{"stale wake", waiting, Input{Kind: Wake, Gen: 3, WaitKind: WaitTimer}, ErrStaleGeneration, "generation 3"},
		{"future wake", waiting, Input{Kind: Wake, Gen: 5, WaitKind: WaitTimer}, ErrStaleGeneration, "generation 5"},
		{"wake without gen", waiting, Input{Kind: Wake, WaitKind: WaitTimer}, ErrStaleGeneration, "generation 0"},
		{"wrong wait kind", waiting, Input{Kind: Wake, Gen: 4, WaitKind: WaitChild}, ErrWaitMismatch, `"child"`},
		{"wake without kind", waiting, Input{Kind: Wake, Gen: 4}, ErrWaitMismatch, `""`},
		{"stale wake while paused", rec(Paused, Waiting, timerWait()), Input{Kind: Wake, Gen: 2, WaitKind: WaitTimer}, ErrStaleGeneration, "generation 2"},
		{"fail without reason", running, Input{Kind: Fail, Reason: "  "}, ErrInvalidInput, "reason"},
		{"unknown input", running, Input{Kind: "teleport"}, ErrInvalidInput, "unknown input kind"},
		{"fenced dispatch", rec(Runnable, "", nil), Input{Kind: Dispatch, Gen: 3}, ErrStaleGeneration, "generation 3"},
		{"fenced kill", waiting, Input{Kind: Kill, Gen: 9}, ErrStaleGeneration, "generation 9"},
		{"waiting without wait", rec(Waiting, "", nil), Input{Kind: Kill}, ErrInvalidRecord, "without a wait"},
		{"wait while runnable", rec(Runnable, "", timerWait()), Input{Kind: Dispatch}, ErrInvalidRecord, "has a timer wait"},
		{"paused from running", rec(Paused, Running, nil), Input{Kind: Resume}, ErrInvalidRecord, "paused_from"},
		{"paused_from while runnable", rec(Runnable, Created, nil), Input{Kind: Dispatch}, ErrInvalidRecord, "paused_from"},
		{"unknown state", rec("sleeping", "", nil), Input{Kind: Kill}, ErrInvalidRecord, `"sleeping"`},
		{"invalid stored wait", rec(Waiting, "", &Wait{Kind: WaitChild}), Input{Kind: Kill}, ErrInvalidRecord, "wait.child_pid"},
	}
	for _, c := range cases {
		next, err := Step(c.r, c.in, t0)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.text) || !strings.Contains(err.Error(), "process 7") {
			t.Errorf("%s: error %q does not mention %q and the pid", c.name, err, c.text)
		}
		if !reflect.DeepEqual(next, Record{}) {
			t.Errorf("%s: refused step returned a record", c.name)
		}
	}
	// Accepted edge cases.
	ok := []struct {
		name string
		r    Record
		in   Input
	}{
		{"kill without reason", running, Input{Kind: Kill}},
		{"fenced dispatch at the current gen", rec(Runnable, "", nil), Input{Kind: Dispatch, Gen: 4}},
		{"exit without result", running, Input{Kind: Exit}},
		{"message wait without filter", running, Input{Kind: Block, Wait: &Wait{Kind: WaitMessage}}},
		{"compaction wait", running, Input{Kind: Block, Wait: &Wait{Kind: WaitCompaction, PendingID: "job-1"}}},
	}
	for _, c := range ok {
		if _, err := Step(c.r, c.in, t0); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestRecordJSON(t *testing.T) {
	r := baseRecord()
	r.State, r.Wait = Waiting, &Wait{Kind: WaitChild, ChildPID: 9, PendingID: "p"}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"pid":7`, `"parent_pid":1`, `"state":"waiting"`, `"gen":4`, `"wait":{"kind":"child","child_pid":9,"pending_id":"p"}`, `"goal_oid":"goal"`, `"created_at":`, `"updated_at":`, `"limits":{"tool_calls":0`} {
		if !strings.Contains(string(data), key) {
			t.Errorf("record JSON %s lacks %s", data, key)
		}
	}
	var back Record
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip:\n%+v\n%+v", back, r)
	}
	w, _ := json.Marshal(Wait{Kind: WaitTimer, Until: t0})
	if string(w) != `{"kind":"timer","until":"2026-03-01T12:00:00Z"}` {
		t.Fatalf("timer wait JSON %s", w)
	}
}

func TestStateHelpers(t *testing.T) {
	for _, s := range States {
		if s.Terminal() != (s == Exited || s == Failed || s == Killed) {
			t.Errorf("%s.Terminal() = %v", s, s.Terminal())
		}
		if !s.Valid() {
			t.Errorf("%s not valid", s)
		}
	}
	if State("").Valid() || State("zombie").Terminal() {
		t.Error("unknown states accepted")
	}
}

func TestCloneSharesNothingItMayEdit(t *testing.T) {
	r := Record{PID: 7, State: Waiting, Wait: &Wait{Kind: WaitChild, ChildPID: 8},
		Grants: append(make([]capabilities.Grant, 0, 4), capabilities.Grant{ID: "g1", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}})}
	c := r.Clone()
	c.Grants = append(c.Grants, capabilities.Grant{ID: "g2", Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}})
	c.Wait.ChildPID = 9
	if got := r.Grants[:cap(r.Grants)][1].ID; got != "" {
		t.Fatalf("an append to the clone's grants wrote %q into the original's array", got)
	}
	if r.Wait.ChildPID != 8 {
		t.Fatalf("the clone's wait is the original's: child %d", r.Wait.ChildPID)
	}
}
