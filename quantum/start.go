package quantum

// Opening is how a quantum begins.
type Opening int

const (
	// Skip: the process is not runnable; the quantum does nothing.
	Skip Opening = iota
	// Resume: a pending action's wait ended; the quantum produces its result
	// first, then asks Open again with Resumed (unless ResumeEnds).
	Resume
	// CallProvider: the quantum tells the process what it must know, runs context
	// maintenance, and reserves and makes a provider call.
	CallProvider
	// Stop: the quantum resumed a pending action, or produced a call's
	// result and goes on (Continuing), and the process can make no call now
	// (it waits, or it ended); the commit holds what the quantum did.
	Stop
)

var openingNames = [...]string{"skip", "resume", "call", "stop"}

func (o Opening) String() string { return openingNames[o] }

// Begin is what the start of a quantum knows of its process.
type Begin struct {
	Runnable      bool
	ResumePending bool
	// PendingApproval: the pending action is a call held for a Human's
	// approval.
	PendingApproval bool
	// Resumed: this quantum has produced the result of a pending action.
	Resumed bool
	// Continuing: this quantum has produced a call's result and its worker
	// may go on with the process's next call in the same commit
	// (Share.KeepsWorker). Only a process left runnable with nothing to
	// resume makes that call: a resume can start an outside effect, which
	// needs a commit of its own before it runs.
	Continuing bool
	// InterruptedTurn: the last call's settlement is unknown (the runtime
	// stopped during it).
	InterruptedTurn bool
	// ContextObject: the image keeps its context as an Object, so context
	// maintenance judges its pressure before each call.
	ContextObject bool
	// ServerRefused: the server refused the last prompt as over its window.
	ServerRefused bool
}

// Open is how the quantum of b begins: nothing unless the process is
// runnable, the result of a pending action whose wait ended before any new
// call, else a call. After a resume it is asked again: a process the result
// left runnable makes its call in the same commit, which spares every wake
// a synced commit and a trip through the scheduler.
func (b Begin) Open() Opening {
	switch {
	case b.Continuing && (!b.Runnable || b.ResumePending):
		return Stop
	case !b.Runnable && b.Resumed:
		return Stop
	case !b.Runnable:
		return Skip
	case b.ResumePending:
		return Resume
	}
	return CallProvider
}

// ResumeEnds says whether resuming b's pending action ends the quantum: an
// approval dispatches the held call as a batch of one, which is a result
// phase of its own and schedules what follows it.
func (b Begin) ResumeEnds() bool { return b.PendingApproval }

// Prelude is what a call does before its request is built, in this order:
// the interrupted turn's notice, the notice of messages the process was not
// told of (always looked for), then context maintenance.
type Prelude struct {
	NoticeInterrupted bool
	Maintain          bool
	// NewPressureEpisode: the server's refusal starts a new pressure episode,
	// and the window is taken to be what the context holds (Prompt.Pressure).
	NewPressureEpisode bool
}

// Prelude is what b's call does first.
func (b Begin) Prelude() Prelude {
	return Prelude{
		NoticeInterrupted:  b.InterruptedTurn,
		Maintain:           b.ContextObject,
		NewPressureEpisode: b.ContextObject && b.ServerRefused,
	}
}

// Share is what the scheduler knows when a quantum's result is ready to
// commit and its process could make its next call at once: going on saves
// the process a synced commit and a trip through the run queue, and holds
// its worker meanwhile.
type Share struct {
	// Waiting counts the other processes that want a worker: runnable and
	// queued, or left runnable by the commit being built.
	Waiting int
	// FreeWorkers counts the workers with no quantum to run.
	FreeWorkers int
	// Stopping: the run the worker serves is being stopped.
	Stopping bool
}

// KeepsWorker says whether the process keeps its worker for its next call:
// only when that delays no other process, every one that wants a worker
// having a free one.
func (s Share) KeepsWorker() bool { return !s.Stopping && s.Waiting <= s.FreeWorkers }
