// Package quantum is the pure core of a quantum: the rules that decide, for
// one reply's tool calls, which call runs next, which are answered as not
// started, when new messages are looked at, what ends the batch and what the
// process does once it has ended; and the arithmetic of a provider call's
// reservation and settlement.
//
// It does no I/O and reads no clock. As with raft's Step and Ready, the kernel
// feeds a Batch what it observed (Inputs) and applies what Step returns
// (Effects) in the transaction of the quantum; the kernel decides nothing of
// its own about a batch. A Batch is owned by the goroutine running its
// quantum and is not safe for concurrent use.
package quantum

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Call is one tool call of a reply. Its fields and JSON are those of
// llm.ToolCall, so the two convert into each other.
type Call struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// KindInterrupt is the message kind that stops a batch before its next call
// (mailbox.KindInterrupt; a kernel test pins that they agree).
const KindInterrupt = "interrupt"

// Notice is a message the process is told of after its batch's results. Its
// JSON is a subset of mailbox.Message's.
type Notice struct {
	ID      string `json:"id"`
	Seq     uint64 `json:"seq"`
	Sender  string `json:"sender"`
	Kind    string `json:"kind"`
	Channel string `json:"channel"`
	Subject string `json:"subject,omitempty"`
	Body    string `json:"body"`
}

// Interrupt reports whether n stops the batch before the next call.
func (n Notice) Interrupt() bool { return n.Kind == KindInterrupt }

// Batch is the dispatch of one reply's tool calls. It is stored in the
// process record only while a call's outside effect runs between two
// commits; its JSON is that record field.
type Batch struct {
	Turn  int    `json:"turn"`
	Calls []Call `json:"calls"`
	// Next is the index of the next call to run.
	Next int `json:"next"`
	// EffectCall is the index of the call whose outside effect is running,
	// or -1.
	EffectCall int `json:"effect_call"`
	// EndedBy names what ended the batch; later calls are not started.
	EndedBy string `json:"ended_by,omitempty"`
	// Notices are messages to announce after the turn's tool results.
	Notices []Notice `json:"notices,omitempty"`
	// Truncated says the reply was cut off at the output token limit.
	Truncated bool `json:"truncated,omitempty"`
	// EffectAuthority is the authority decisions of the call whose effect
	// runs, for its tool record.
	EffectAuthority []string `json:"effect_authority,omitempty"`
	// TableSkills are the skills that were active when the reply came: the
	// kernel runs the batch's calls against the tool table they select, less
	// any skill a call unloads meanwhile.
	TableSkills []string `json:"table_skills,omitempty"`

	// phase is where the batch is; it is never stored, because a stored
	// batch is always between an effect's start and its result.
	phase Phase
	// ending is how the batch ends, set by the call that exited or blocked.
	// No call runs after such a call, so an effect never separates it from
	// the batch's end and it is never stored.
	ending *Ending
}

// NewBatch is the dispatch of a reply's calls in turn.
func NewBatch(turn int, calls []Call, truncated bool) *Batch {
	return &Batch{Turn: turn, Calls: calls, EffectCall: -1, Truncated: truncated}
}

// Phase is where a batch is between two Steps: each names the input it
// waits for, as a task's run states name what it does next.
type Phase int

const (
	// Idle: nothing asked yet; the next input is Continue.
	Idle Phase = iota
	// CheckingBefore: the kernel looks for messages before call Next (Seen).
	CheckingBefore
	// Invoking: call Next runs at a savepoint (Invoked).
	Invoking
	// CheckingAfter: the kernel looks for messages after call Next (Seen).
	CheckingAfter
	// InEffect: call EffectCall's outside effect runs with no lock held; its
	// result is recorded, then EffectDone.
	InEffect
	// Ended: the batch is over; Step accepts nothing more.
	Ended
)

var phaseNames = [...]string{"idle", "checking-before", "invoking", "checking-after", "in-effect", "ended"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("Phase(%d)", int(p))
}

// Phase reports where b is. A batch loaded from a record with an effect in
// flight is InEffect.
func (b *Batch) Phase() Phase {
	if b.phase == Idle && b.EffectCall >= 0 {
		return InEffect
	}
	return b.phase
}

// Clone returns a deep copy of b (nil stays nil).
func (b *Batch) Clone() *Batch {
	if b == nil {
		return nil
	}
	c := *b
	if b.Calls != nil {
		c.Calls = make([]Call, len(b.Calls))
		for i, call := range b.Calls {
			call.Arguments = slices.Clone(call.Arguments)
			c.Calls[i] = call
		}
	}
	c.Notices = slices.Clone(b.Notices)
	c.EffectAuthority = slices.Clone(b.EffectAuthority)
	c.TableSkills = slices.Clone(b.TableSkills)
	if b.ending != nil {
		e := *b.ending
		e.Notices = slices.Clone(b.ending.Notices)
		c.ending = &e
	}
	return &c
}

// EffectCallID is the id of the call whose outside effect is running, or "".
func (b *Batch) EffectCallID() string {
	if b == nil || b.EffectCall < 0 || b.EffectCall >= len(b.Calls) {
		return ""
	}
	return b.Calls[b.EffectCall].ID
}

// InputKind names what the kernel observed.
type InputKind int

const (
	// Continue starts a new batch.
	Continue InputKind = iota
	// Seen hands over the messages found at a check (Notices, maybe none).
	Seen
	// Invoked hands over the outcome of the call an Invoke named.
	Invoked
	// EffectDone says the result of the outside effect is recorded, and
	// whether the process still runs (Running).
	EffectDone
	// Crashed says the runtime stopped while the batch's effect ran: the
	// batch is settled without running anything again.
	Crashed
	// Stopped says the runtime stopped before the batch's effect started:
	// the batch is settled with nothing more run.
	Stopped
)

var inputNames = [...]string{"continue", "seen", "invoked", "effect-done", "crashed", "stopped"}

func (k InputKind) String() string {
	if k >= 0 && int(k) < len(inputNames) {
		return inputNames[k]
	}
	return fmt.Sprintf("InputKind(%d)", int(k))
}

// Input is one observation of the kernel.
type Input struct {
	Kind    InputKind
	Notices []Notice
	Outcome Outcome
	Running bool
}

// OutcomeKind is what one invoked call came to.
type OutcomeKind int

const (
	// Done: the call succeeded with a result.
	Done OutcomeKind = iota
	// Refused: the call was refused (invalid, unknown, denied, over budget)
	// and left nothing behind; it does not end the batch.
	Refused
	// Held: an ask grant covers the call; it waits for a Human.
	Held
	// OutsideEffect: the call has an effect to run between commits.
	OutsideEffect
	// Blocked: the call started a durable wait; its result comes later.
	Blocked
	// Exited: the call ends the process.
	Exited
)

// Outcome is what the kernel reports of an invoked call.
type Outcome struct {
	Kind OutcomeKind
	// EndsBatch: the tool ends its batch even when it succeeds.
	EndsBatch bool
	// Authority are the call's authority decisions, kept for the record of
	// an outside effect's result.
	Authority []string
	// Payload is the kernel's own data for an exit or a wait (handed back in
	// the Ending); the core does not look into it.
	Payload any
}

// EffectKind names what the kernel must do.
type EffectKind int

const (
	// CheckMessages: look for messages the process was not told of, and
	// answer Seen. Before says the check precedes call Call.
	CheckMessages EffectKind = iota
	// Invoke: run call Call at a savepoint and answer Invoked.
	Invoke
	// Record: record the result the kernel holds for call Call.
	Record
	// NotStarted: answer call Call as not started, because Reason.
	NotStarted
	// SettlementUnknown: answer call Call as started with an unknown
	// settlement (the runtime stopped while its effect ran).
	SettlementUnknown
	// StartEffect: store the batch in the record, commit, and run call
	// Call's outside effect with no lock held.
	StartEffect
	// Abandon: drop the batch; the process stopped running meanwhile. After
	// a crash, an Ending with RewindNotified sets the told-of watermark back
	// over the messages the batch had seen and not announced.
	Abandon
	// End: the batch is over; Ending says what follows.
	End
)

var effectNames = [...]string{"check-messages", "invoke", "record", "not-started", "settlement-unknown", "start-effect", "abandon", "end"}

func (k EffectKind) String() string {
	if int(k) < len(effectNames) {
		return effectNames[k]
	}
	return fmt.Sprintf("EffectKind(%d)", int(k))
}

// Effect is one thing the kernel does, in order.
type Effect struct {
	Kind   EffectKind
	Call   int
	Before bool
	Reason string
	Ending *Ending
}

// EndKind is what a process does once its batch has ended.
type EndKind int

const (
	// Yield: the process is runnable again.
	Yield EndKind = iota
	// Wait: the process waits durably on the call that blocked or was held.
	Wait
	// Exit: the process ends.
	Exit
	// TextOnly: the reply had no tool call; see TextOnlyVerdict.
	TextOnly
)

var endNames = [...]string{"yield", "wait", "exit", "text-only"}

func (k EndKind) String() string {
	if int(k) < len(endNames) {
		return endNames[k]
	}
	return fmt.Sprintf("EndKind(%d)", int(k))
}

// Ending is how a batch ended and what the kernel writes after its results.
type Ending struct {
	Kind EndKind
	// Call is the call that blocked, was held or exited.
	Call    int
	Payload any
	// Notices are announced after the results, in one notice.
	Notices []Notice
	// RewindNotified: the messages seen are announced only after the blocked
	// call's result (a notice now would split a call from its result), so
	// the process's told-of watermark goes back to NotifiedSeq.
	RewindNotified bool
	NotifiedSeq    uint64
	// TruncatedNotice: tell the process its reply was cut off.
	TruncatedNotice bool
}

// Step feeds b one observation and returns what the kernel must do, in
// order. The last effect is what b waits for: a CheckMessages or Invoke to
// be answered, a StartEffect whose result comes back as EffectDone, or the
// batch's End or Abandon. An input the phase does not expect is a defect of
// the caller and returns an error, changing nothing.
func (b *Batch) Step(in Input) ([]Effect, error) {
	phase := b.Phase()
	if want := expected(phase); want != in.Kind && !((in.Kind == Crashed || in.Kind == Stopped) && phase == InEffect) {
		return nil, fmt.Errorf("quantum: batch of turn %d is %s and cannot take input %s", b.Turn, phase, in.Kind)
	}
	var out []Effect
	switch in.Kind {
	case Continue:
		if len(b.Calls) == 0 {
			b.phase = Ended
			return []Effect{{Kind: End, Ending: &Ending{Kind: TextOnly, TruncatedNotice: b.Truncated}}}, nil
		}
	case Seen:
		b.see(in.Notices, phase == CheckingBefore)
		if phase == CheckingBefore {
			if b.EndedBy == "" {
				b.phase = Invoking
				return []Effect{{Kind: Invoke, Call: b.Next}}, nil
			}
			out = append(out, b.notStarted())
		}
		b.Next++
	case Invoked:
		var done bool
		out, done = b.invoked(in.Outcome)
		if done {
			return out, nil
		}
		if b.EndedBy == "" {
			b.phase = CheckingAfter
			return append(out, Effect{Kind: CheckMessages, Call: b.Next}), nil
		}
		b.Next++
	case EffectDone:
		b.EffectCall, b.EffectAuthority = -1, nil
		if !in.Running {
			b.phase = Ended
			return []Effect{{Kind: Abandon}}, nil
		}
		if b.EndedBy == "" {
			// The effect's call is Next-1: check after it, as after any call.
			b.Next--
			b.phase = CheckingAfter
			return []Effect{{Kind: CheckMessages, Call: b.Next}}, nil
		}
	case Crashed:
		return b.crashed(Effect{Kind: SettlementUnknown, Call: b.EffectCall}), nil
	case Stopped:
		return b.crashed(Effect{Kind: NotStarted, Call: b.EffectCall, Reason: "not started: the runtime stopped before it"}), nil
	}
	return b.advance(out), nil
}

func expected(p Phase) InputKind {
	switch p {
	case CheckingBefore, CheckingAfter:
		return Seen
	case Invoking:
		return Invoked
	case InEffect:
		return EffectDone
	case Ended:
		return -1
	}
	return Continue
}

// advance runs the batch on from call Next until it needs the kernel.
func (b *Batch) advance(out []Effect) []Effect {
	for ; b.Next < len(b.Calls); b.Next++ {
		if b.EndedBy == "" {
			b.phase = CheckingBefore
			return append(out, Effect{Kind: CheckMessages, Call: b.Next, Before: true})
		}
		out = append(out, b.notStarted())
	}
	b.phase = Ended
	return append(out, Effect{Kind: End, Ending: b.end()})
}

func (b *Batch) notStarted() Effect {
	return Effect{Kind: NotStarted, Call: b.Next, Reason: fmt.Sprintf("not started: %s ended this batch", b.EndedBy)}
}

// see takes the messages found at a check: an interrupt ends the batch
// before the next call, any other message after the current one. The notice
// follows the turn's results, so every call is answered first.
func (b *Batch) see(msgs []Notice, before bool) {
	b.Notices = append(b.Notices, msgs...)
	for _, m := range msgs {
		if m.Interrupt() && b.EndedBy == "" {
			b.EndedBy = "an interrupt message"
		}
	}
	if !before && len(b.Notices) > 0 && b.EndedBy == "" {
		b.EndedBy = "a new message"
	}
}

// invoked applies a call's outcome; done says the batch now waits for an
// effect.
func (b *Batch) invoked(o Outcome) ([]Effect, bool) {
	call := b.Calls[b.Next]
	switch o.Kind {
	case Refused:
		// A refused call started nothing: even a refused wait or exit leaves
		// the rest of the batch to run.
		return []Effect{{Kind: Record, Call: b.Next}}, false
	case Held:
		b.EndedBy = call.Name + " (waiting for approval)"
		b.ending = &Ending{Kind: Wait, Call: b.Next, Payload: o.Payload}
		return nil, false
	case OutsideEffect:
		b.EffectCall, b.EffectAuthority = b.Next, o.Authority
		b.Next++
		b.phase = InEffect
		return []Effect{{Kind: StartEffect, Call: b.EffectCall}}, true
	case Blocked:
		b.EndedBy = call.Name
		b.ending = &Ending{Kind: Wait, Call: b.Next, Payload: o.Payload}
		return nil, false
	case Exited:
		b.EndedBy = call.Name
		b.ending = &Ending{Kind: Exit, Call: b.Next, Payload: o.Payload}
	default:
		if o.EndsBatch {
			b.EndedBy = call.Name
		}
	}
	return []Effect{{Kind: Record, Call: b.Next}}, false
}

// end is how the answered batch ends: an exit ends the process at once; a
// wait or a yield follows the batch's notices.
func (b *Batch) end() *Ending {
	e := b.ending
	if e == nil {
		e = &Ending{Kind: Yield}
	}
	if e.Kind == Exit {
		return e
	}
	switch {
	case len(b.Notices) > 0 && e.Kind == Wait:
		e.RewindNotified, e.NotifiedSeq = true, b.Notices[0].Seq-1
	case len(b.Notices) > 0:
		e.Notices = b.Notices
	}
	e.TruncatedNotice = b.Truncated && e.Kind != Wait
	return e
}

// crashed settles a batch whose effect was in flight, or about to start,
// when the runtime stopped: that call is answered with effect (its
// settlement unknown, or not started) and nothing after it starts.
// Messages the batch had seen and meant to announce after its results are
// announced by the next call instead: the told-of watermark goes back.
func (b *Batch) crashed(effect Effect) []Effect {
	var out []Effect
	if b.EffectCall >= 0 {
		out = append(out, effect)
	}
	for ; b.Next < len(b.Calls); b.Next++ {
		out = append(out, Effect{Kind: NotStarted, Call: b.Next, Reason: "not started: the runtime stopped during this batch"})
	}
	b.EffectCall, b.phase = -1, Ended
	abandon := Effect{Kind: Abandon}
	if len(b.Notices) > 0 {
		abandon.Ending = &Ending{Kind: Yield, RewindNotified: true, NotifiedSeq: b.Notices[0].Seq - 1}
	}
	return append(out, abandon)
}
