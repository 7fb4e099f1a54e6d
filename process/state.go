package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/libos/libos/capabilities"
)

// State is the scheduling state of an AgentProcess.
type State string

// The states. Exited, Failed and Killed are terminal.
const (
	Created  State = "created"
	Runnable State = "runnable"
	Running  State = "running"
	Waiting  State = "waiting"
	Paused   State = "paused"
	Exited   State = "exited"
	Failed   State = "failed"
	Killed   State = "killed"
)

// States lists every state.
var States = []State{Created, Runnable, Running, Waiting, Paused, Exited, Failed, Killed}

// Terminal reports whether s is exited, failed or killed: no input leaves it.
func (s State) Terminal() bool { return s == Exited || s == Failed || s == Killed }

// Valid reports whether s is one of States.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// WaitKind says what a waiting process waits for.
type WaitKind string

// The kinds of wait.
const (
	WaitTimer      WaitKind = "timer"
	WaitChild      WaitKind = "child"
	WaitMessage    WaitKind = "message"
	WaitHuman      WaitKind = "human"
	WaitCompaction WaitKind = "compaction"
	// WaitProvider: the model endpoint failed in a way worth trying again.
	// With Until, the next attempt is due then (a backoff); without, the
	// process waits for the Host to resume it with working settings.
	WaitProvider WaitKind = "provider"
	// WaitApproval: a call an ask grant covers waits for a Human to approve
	// or deny it (its pending action holds the call).
	WaitApproval WaitKind = "approval"
)

// WaitKinds lists every wait kind.
var WaitKinds = []WaitKind{WaitTimer, WaitChild, WaitMessage, WaitHuman, WaitCompaction, WaitProvider, WaitApproval}

// Wait is the typed wait of a waiting process. Only the fields of its kind may
// be set: Until for a timer (and, optionally, a provider wait, or a child wait
// with a deadline: an agent task's timeout), ChildPID for a child, Filter for a message or a Human wait (a Human wait is a message wait
// whose filter names a Human sender), Reason and Attempt for a provider wait.
// PendingID names the durable pending action the wait belongs to, if any.
type Wait struct {
	Kind      WaitKind        `json:"kind"`
	Until     time.Time       `json:"until,omitzero"`
	ChildPID  int64           `json:"child_pid,omitempty"`
	Filter    json.RawMessage `json:"filter,omitempty"`
	PendingID string          `json:"pending_id,omitempty"`
	// Reason is why a provider wait began: the last error and what fixes it.
	Reason string `json:"reason,omitempty"`
	// Attempt is how many attempts of the current provider call failed.
	Attempt int `json:"attempt,omitempty"`
}

// Validate checks the wait: a known kind, the field its kind needs, and no
// field of another kind. The error names the field.
func (w Wait) Validate() error {
	switch w.Kind {
	case WaitTimer:
		if w.Until.IsZero() {
			return errors.New("wait.until: required for a timer wait")
		}
	case WaitChild:
		if w.ChildPID <= 0 {
			return fmt.Errorf("wait.child_pid: %d must be a positive pid for a child wait", w.ChildPID)
		}
	case WaitMessage, WaitHuman:
		if len(w.Filter) > 0 && !json.Valid(w.Filter) {
			return errors.New("wait.filter: must be valid JSON")
		}
	case WaitCompaction:
	case WaitApproval:
		if w.PendingID == "" {
			return errors.New("wait.pending_id: required for an approval wait (it holds the call)")
		}
	case WaitProvider:
		if strings.TrimSpace(w.Reason) == "" {
			return errors.New("wait.reason: required for a provider wait")
		}
		if w.Attempt < 0 {
			return fmt.Errorf("wait.attempt: %d must not be negative", w.Attempt)
		}
	default:
		return fmt.Errorf("wait.kind: %q must be one of %s", w.Kind, joinKinds())
	}
	if w.Kind != WaitTimer && w.Kind != WaitProvider && w.Kind != WaitChild && !w.Until.IsZero() {
		return fmt.Errorf("wait.until: only a timer, provider or child wait has one, not a %s wait", w.Kind)
	}
	if w.Kind != WaitProvider && (w.Reason != "" || w.Attempt != 0) {
		return fmt.Errorf("wait.reason, wait.attempt: only a provider wait has them, not a %s wait", w.Kind)
	}
	if w.Kind != WaitChild && w.ChildPID != 0 {
		return fmt.Errorf("wait.child_pid: only a child wait has one, not a %s wait", w.Kind)
	}
	if w.Kind != WaitMessage && w.Kind != WaitHuman && len(w.Filter) > 0 {
		return fmt.Errorf("wait.filter: only a message or Human wait has one, not a %s wait", w.Kind)
	}
	return nil
}

func joinKinds() string {
	names := make([]string, len(WaitKinds))
	for i, k := range WaitKinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// Clone returns a deep copy of w.
func (w *Wait) Clone() *Wait {
	if w == nil {
		return nil
	}
	c := *w
	c.Filter = slices.Clone(w.Filter)
	return &c
}

// Record is the durable state of one AgentProcess. The kernel owns records:
// it reads one, calls Step, and writes the result; Step never mutates the
// record it is given, so a Record value may be shared by readers.
type Record struct {
	PID       int64  `json:"pid"`
	ParentPID int64  `json:"parent_pid"` // 0 for a root
	Image     string `json:"image"`      // "name:version"
	State     State  `json:"state"`
	// Gen is the state generation: +1 on every transition.
	Gen uint64 `json:"gen"`
	// Wait is set exactly when State is waiting, or paused from waiting.
	Wait *Wait `json:"wait,omitempty"`
	// PausedFrom is the state resume returns to; set exactly when paused.
	PausedFrom State  `json:"paused_from,omitempty"`
	Reason     string `json:"reason,omitempty"` // why the process failed or was killed
	ResultOID  string `json:"result_oid,omitempty"`
	GoalOID    string `json:"goal_oid"`
	Namespace  string `json:"namespace"`
	// Turn counts the provider calls made.
	Turn      int                  `json:"turn"`
	Grants    []capabilities.Grant `json:"grants"`
	Limits    capabilities.Budget  `json:"limits"`
	Used      capabilities.Budget  `json:"used"`
	CreatedAt time.Time            `json:"created_at"`
	UpdatedAt time.Time            `json:"updated_at"`
}

// Clone returns a copy of r that shares nothing it may edit. The grant list
// is shared, since a grant list is only ever replaced (package
// capabilities); its capacity is cut to its length, so an append to either
// copy's list moves that copy to an array of its own.
func (r Record) Clone() Record {
	c := r
	c.Wait = r.Wait.Clone()
	c.Grants = r.Grants[:len(r.Grants):len(r.Grants)]
	return c
}

// Validate checks the invariants Step relies on: a known state, a valid wait
// present exactly when waiting (or paused from waiting), and PausedFrom set
// exactly when paused, to a state pause can come from. The error wraps
// ErrInvalidRecord.
func (r Record) Validate() error {
	if problem := r.invariantProblem(); problem != "" {
		return fmt.Errorf("%w: process %d: %s", ErrInvalidRecord, r.PID, problem)
	}
	return nil
}

func (r Record) invariantProblem() string {
	if !r.State.Valid() {
		return fmt.Sprintf("state %q is not a state", r.State)
	}
	if r.State == Paused {
		switch r.PausedFrom {
		case Created, Runnable, Waiting:
		default:
			return fmt.Sprintf("paused_from %q must be created, runnable or waiting", r.PausedFrom)
		}
	} else if r.PausedFrom != "" {
		return fmt.Sprintf("paused_from is set but the state is %s", r.State)
	}
	waiting := r.State == Waiting || (r.State == Paused && r.PausedFrom == Waiting)
	switch {
	case waiting && r.Wait == nil:
		return describe(r) + " without a wait"
	case !waiting && r.Wait != nil:
		return fmt.Sprintf("has a %s wait but is %s", r.Wait.Kind, describe(r))
	case waiting:
		if err := r.Wait.Validate(); err != nil {
			return err.Error()
		}
	}
	return ""
}

func describe(r Record) string {
	if r.State == Paused {
		return "paused from " + string(r.PausedFrom)
	}
	return string(r.State)
}

// InputKind names a transition request.
type InputKind string

// The inputs Step accepts, with the states they apply to.
const (
	// Admit: created -> runnable.
	Admit InputKind = "admit"
	// Dispatch: runnable -> running (a worker takes the process).
	Dispatch InputKind = "dispatch"
	// Yield: running -> runnable (the quantum ended without a wait).
	Yield InputKind = "yield"
	// Block: running -> waiting; Input.Wait is required.
	Block InputKind = "block"
	// Wake: waiting -> runnable. Input.Gen must equal the record's Gen and
	// Input.WaitKind the wait's kind. A wake of a process paused from waiting
	// keeps it paused and makes resume return to runnable.
	Wake InputKind = "wake"
	// Pause: created, runnable or waiting -> paused, remembering the state and
	// keeping the wait.
	Pause InputKind = "pause"
	// Resume: paused -> the state it was paused from.
	Resume InputKind = "resume"
	// Exit: running -> exited; Input.ResultOID is the result (may be empty).
	Exit InputKind = "exit"
	// Fail: any non-terminal state -> failed; Input.Reason is required.
	Fail InputKind = "fail"
	// Kill: any non-terminal state -> killed; Input.Reason says why.
	Kill InputKind = "kill"
	// Recover: running -> runnable, for a process found running when the
	// runtime reopens after a crash.
	Recover InputKind = "recover"
	// Restore: the record is a checkpoint's copy being brought back. It keeps
	// its state, wait and result, except that a copy taken mid-quantum
	// becomes runnable (its call's settlement is unknown); Gen moves past
	// Input.Floor (the current record's Gen), so no wake of the present can
	// land on the restored past. An ended copy stays ended.
	Restore InputKind = "restore"
	// Fork: the record is a checkpoint's copy starting a new process: an
	// ended copy stays ended, any other becomes runnable with no wait, and
	// Gen starts over.
	Fork InputKind = "fork"
)

// InputKinds lists every input kind.
var InputKinds = []InputKind{Admit, Dispatch, Yield, Block, Wake, Pause, Resume, Exit, Fail, Kill, Recover, Restore, Fork}

// Input is one transition request.
type Input struct {
	Kind InputKind
	// Gen fences the transition: Wake requires it to equal the record's Gen;
	// for every other input a non-zero Gen must equal it too (zero skips the check).
	Gen       uint64
	Wait      *Wait    // Block
	Reason    string   // Fail (required), Kill
	ResultOID string   // Exit
	WaitKind  WaitKind // Wake: the kind of wait being ended
	Floor     uint64   // Restore: the generation the restored record must move past
}

// Errors Step returns, wrapped in a *TransitionError.
var (
	// ErrInvalidTransition: the input does not apply to the current state.
	ErrInvalidTransition = errors.New("invalid transition")
	// ErrStaleGeneration: the input names a generation the record has moved past.
	ErrStaleGeneration = errors.New("stale generation")
	// ErrWaitMismatch: a wake names a different kind of wait than the one pending.
	ErrWaitMismatch = errors.New("wait mismatch")
	// ErrInvalidInput: the input is malformed (unknown kind, a block without a
	// valid wait, a fail without a reason).
	ErrInvalidInput = errors.New("invalid input")
	// ErrInvalidRecord: the record breaks an invariant (see Record.Validate).
	ErrInvalidRecord = errors.New("invalid process record")
)

// TransitionError is the error Step returns: it names the process, the state
// it was in and the input, and wraps one of the errors above.
type TransitionError struct {
	PID    int64
	From   State
	Input  InputKind
	Err    error  // ErrInvalidTransition, ErrStaleGeneration, ErrWaitMismatch, ErrInvalidInput or ErrInvalidRecord
	Detail string // what exactly was wrong
}

func (e *TransitionError) Error() string {
	msg := fmt.Sprintf("process %d: %q from %s: %v", e.PID, e.Input, e.From, e.Err)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns the sentinel error.
func (e *TransitionError) Unwrap() error { return e.Err }

// Step applies in to r and returns the new record: Gen is incremented and
// UpdatedAt set to now. It is pure: r is not mutated and the result shares no
// memory with it. A refused input returns the zero Record and a
// *TransitionError.
func Step(r Record, in Input, now time.Time) (Record, error) {
	fail := func(err error, format string, args ...any) (Record, error) {
		return Record{}, &TransitionError{PID: r.PID, From: r.State, Input: in.Kind, Err: err, Detail: fmt.Sprintf(format, args...)}
	}
	if problem := r.invariantProblem(); problem != "" {
		return fail(ErrInvalidRecord, "%s", problem)
	}
	if !validInput(in.Kind) {
		return fail(ErrInvalidInput, "unknown input kind; want one of %s", joinInputs())
	}
	if r.State.Terminal() && in.Kind != Restore && in.Kind != Fork {
		return fail(ErrInvalidTransition, "the process is %s, which is terminal", r.State)
	}
	if in.Kind != Wake && in.Gen != 0 && in.Gen != r.Gen {
		return fail(ErrStaleGeneration, "input names generation %d, the record is at %d", in.Gen, r.Gen)
	}
	next := r.Clone()
	switch in.Kind {
	case Admit, Dispatch, Yield, Recover:
		want, to := simpleTransitions[in.Kind].from, simpleTransitions[in.Kind].to
		if r.State != want {
			return fail(ErrInvalidTransition, "only a %s process can be given %q", want, in.Kind)
		}
		next.State = to
	case Block:
		if r.State != Running {
			return fail(ErrInvalidTransition, "only a running process can block")
		}
		if in.Wait == nil {
			return fail(ErrInvalidInput, "wait: required to block")
		}
		if err := in.Wait.Validate(); err != nil {
			return fail(ErrInvalidInput, "%v", err)
		}
		next.State, next.Wait = Waiting, in.Wait.Clone()
	case Wake:
		if r.State != Waiting && !(r.State == Paused && r.PausedFrom == Waiting) {
			return fail(ErrInvalidTransition, "only a waiting process (or one paused while waiting) can be woken")
		}
		if in.Gen != r.Gen {
			return fail(ErrStaleGeneration, "wake names generation %d, the record is at %d", in.Gen, r.Gen)
		}
		if in.WaitKind != r.Wait.Kind {
			return fail(ErrWaitMismatch, "wake is for a %q wait, the process waits on %q", in.WaitKind, r.Wait.Kind)
		}
		next.Wait = nil
		if r.State == Paused {
			next.PausedFrom = Runnable
		} else {
			next.State = Runnable
		}
	case Pause:
		switch r.State {
		case Created, Runnable, Waiting:
			next.State, next.PausedFrom = Paused, r.State
		default:
			return fail(ErrInvalidTransition, "only a created, runnable or waiting process can be paused")
		}
	case Resume:
		if r.State != Paused {
			return fail(ErrInvalidTransition, "only a paused process can be resumed")
		}
		next.State, next.PausedFrom = r.PausedFrom, ""
	case Exit:
		if r.State != Running {
			return fail(ErrInvalidTransition, "only a running process can exit")
		}
		next.State, next.ResultOID = Exited, in.ResultOID
	case Restore:
		if r.State == Running {
			next.State = Runnable
		}
		next.Gen = max(r.Gen, in.Floor)
	case Fork:
		if !r.State.Terminal() {
			next.State, next.Wait, next.PausedFrom = Runnable, nil, ""
		}
		next.Gen = 0
	case Fail, Kill:
		if in.Kind == Fail && strings.TrimSpace(in.Reason) == "" {
			return fail(ErrInvalidInput, "reason: required to fail a process")
		}
		next.State, next.Reason, next.Wait, next.PausedFrom = Failed, in.Reason, nil, ""
		if in.Kind == Kill {
			next.State = Killed
		}
	}
	next.Gen++
	next.UpdatedAt = now
	return next, nil
}

// simpleTransitions are the inputs that only move one state to another.
var simpleTransitions = map[InputKind]struct{ from, to State }{
	Admit:    {Created, Runnable},
	Dispatch: {Runnable, Running},
	Yield:    {Running, Runnable},
	Recover:  {Running, Runnable},
}

func validInput(k InputKind) bool {
	for _, v := range InputKinds {
		if k == v {
			return true
		}
	}
	return false
}

func joinInputs() string {
	names := make([]string, len(InputKinds))
	for i, k := range InputKinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}
