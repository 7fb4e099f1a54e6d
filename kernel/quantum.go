package kernel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/images"
	"github.com/libos/libos/internal/failpoint"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/quantum"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

// errSkip aborts a transaction that found nothing to do.
var errSkip = errors.New("skip")

const noToolCallNotice = "(runtime notice) Your reply contained no tool call. Act only through tools; when the goal is done, call process_exit alone in its turn."

const truncatedNotice = "(runtime notice) Your reply was cut off at the output token limit, so its last tool call may be incomplete. Send shorter calls, one at a time if needed."

const interruptedNotice = "(runtime notice) Your previous turn was interrupted before its result was recorded: the model call may or may not have completed and none of its tool calls ran. Re-read the state you depend on before acting."

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// quantum runs one step of pid: resume a pending action, or one provider
// call and its tool calls. It returns only infrastructure errors; a process's
// own failures are recorded on the process.
func (k *Runtime) quantum(ctx context.Context, pid int64) error {
	_, err := k.runOnWorker(ctx, phaseStart{pid: pid}, false)
	return err
}

// quanta is quantum on a scheduler's worker, which goes on in the commit of
// a call's result as long as that delays no other process (goOn): into the
// process's next call, or into the quantum of a process the commit woke. It
// returns the process the worker ran last.
func (k *Runtime) quanta(ctx context.Context, pid int64) (int64, error) {
	return k.runOnWorker(ctx, phaseStart{pid: pid}, true)
}

// runOnWorker runs a quantum from its phase first, and with goOn the ones
// its worker goes on into.
func (k *Runtime) runOnWorker(ctx context.Context, first quantumPhase, goOn bool) (int64, error) {
	last, err := k.runQuantum(ctx, first, goOn)
	if err == nil || errors.Is(err, objects.ErrFailed) || errors.Is(err, objects.ErrClosed) {
		return last, err
	}
	// Anything else is the own failure of the process whose phase failed (a
	// defect or an invalid state it reached): it must not stop the scheduler
	// for every other process, nor stay running with no worker.
	return last, k.update(func(tx *txn) error {
		r, lerr := loadProc(tx, last)
		if lerr != nil || r.State.Terminal() {
			return lerr
		}
		return k.failProcess(tx, r, fmt.Sprintf("internal error in a quantum: %v", err))
	})
}

// A quantum runs in phases, as a task's run states in a kernel: each phase
// is a type whose run does its part (a commit, or the provider call between
// two) and names the phase that follows, nil when the quantum is over. Only
// the provider call and outside effects run with no commit open.
//
// goOn is whether the worker may go on in the commit of a call's result
// (quanta): the same for every phase a worker runs.
type quantumPhase interface {
	run(ctx context.Context, k *Runtime, goOn bool) (quantumPhase, error)
	// process is the pid the phase runs for.
	process() int64
}

func (p phaseStart) process() int64  { return p.pid }
func (p phaseCall) process() int64   { return p.pid }
func (p phaseResult) process() int64 { return p.pid }
func (p phaseEffect) process() int64 { return p.pid }

// phaseStart resumes a pending action whose wait ended, or prepares and
// reserves the provider call (one commit).
type phaseStart struct{ pid int64 }

// phaseCall is the provider call, with no lock held.
type phaseCall struct {
	pid   int64
	start *callStart
}

// phaseResult settles the call and dispatches its tool calls (one commit),
// in which the worker may go on (goOn).
type phaseResult struct {
	pid   int64
	start *callStart
	resp  llm.Response
	perr  error
}

// phaseEffect runs a call's outside effect with no lock held, then records
// its result and goes on with the batch (one commit), in which the worker
// may go on as in phaseResult's.
type phaseEffect struct {
	pid    int64
	effect effectFunc
}

func (p phaseStart) run(ctx context.Context, k *Runtime, _ bool) (quantumPhase, error) {
	k.prewarmContext(p.pid)
	nx := next{pid: p.pid}
	var idle bool
	err := k.update(func(tx *txn) error {
		r, err := loadProc(tx, p.pid)
		if err != nil {
			return err
		}
		idle = r.State.Terminal() || r.waitsLong()
		nx.start, nx.effect, err = k.startQuantum(ctx, tx, r, false)
		return err
	})
	if errors.Is(err, errSkip) {
		// Nothing runs: a context decoded for this quantum leaves the cache
		// if its process ended or waits long, as a commit's does; not the
		// context of a process another worker runs (a stale queue entry of
		// a process handed a worker by a commit that woke it).
		if idle {
			k.dropCachedContext(p.pid)
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return nx.phase(), nil
}

func (p phaseCall) run(ctx context.Context, k *Runtime, _ bool) (quantumPhase, error) {
	req := p.start.req
	req.Messages = materialize(p.start.system, p.start.goal, p.start.entries)
	prov := k.provider()
	resp, perr := callHost("", "Complete", func() (llm.Response, error) { return prov.Complete(ctx, req) })
	var hp *hostPanic
	switch {
	case errors.As(perr, &hp):
		// The request may have reached the model, and asking again may
		// panic again: the Host decides when it is asked again.
		perr = &llm.CallError{Settlement: llm.SettlementUnknown, NeedsHost: true, Hint: "a defect of the Host's Provider", Err: perr}
	case perr == nil:
		// Every provider's reply, not only the adapters': its calls become
		// history every later request carries, and its usage is charged.
		resp.Mend(&req)
	}
	return phaseResult{pid: p.pid, start: p.start, resp: resp, perr: perr}, nil
}

// hostPanic is a panic of Host code the kernel called (a tool's Invoke,
// Resume or outside effect, the provider's Complete), recovered by callHost:
// it fails that call, not the Host's process, which would die with the
// store's write lock held and, at every reopen, ask for the call again.
type hostPanic struct {
	tool  string // "" for the provider
	call  string // "Invoke", "Resume", "its outside effect", "Complete"
	value string // the panic's value, bounded (maxPanicValue)
	stack string // the panicking goroutine's stack, bounded (maxPanicStack)
}

// Bounds of what a hostPanic keeps of its value (in the call's error, which
// the model or the process's reason shows) and of its stack (in the event
// log only).
const (
	maxPanicValue = 200
	maxPanicStack = 8 << 10
)

func (e *hostPanic) Error() string {
	if e.tool == "" {
		return fmt.Sprintf("the provider panicked in %s: %s", e.call, e.value)
	}
	return fmt.Sprintf("tool %s panicked in %s: %s", e.tool, e.call, e.value)
}

// callHost runs f, Host code of tool (or of the provider, "") doing call,
// and returns a panic in it as a *hostPanic error.
func callHost[T any](tool, call string, f func() (T, error)) (out T, err error) {
	defer func() {
		if v := recover(); v != nil {
			stack := debug.Stack()
			err = &hostPanic{tool: tool, call: call, value: summarize(fmt.Sprint(v), maxPanicValue),
				stack: string(stack[:min(len(stack), maxPanicStack)])}
		}
	}()
	return f()
}

// panicStack is the stack of the hostPanic in err's chain, or "".
func panicStack(err error) string {
	var hp *hostPanic
	if errors.As(err, &hp) {
		return hp.stack
	}
	return ""
}

func (p phaseResult) run(ctx context.Context, k *Runtime, goOn bool) (quantumPhase, error) {
	var (
		prepared map[string]preparedCall
		reply    *replyAhead
	)
	if p.perr == nil {
		prepared = k.prepareCalls(p.resp.ToolCalls)
		reply = k.prepareReply(p.pid, p.resp)
	}
	return k.commitResult(ctx, p.pid, goOn, func(tx *txn, r *procRecord) (effectFunc, error) {
		tx.prepared, tx.reply = prepared, reply
		return k.finishCall(ctx, tx, r, p.start, p.resp, p.perr)
	})
}

// preparedCall is a reply's tool call checked against its tool's schema
// before the commit that dispatches it. Broker.Prepare depends on the
// catalog and the call alone, so the store's write lock need not wait for
// it; a refusal is made again in the commit, where it is reported.
type preparedCall struct {
	name string
	raw  json.RawMessage
	tool *tools.Tool
	args json.RawMessage
}

// prepareCalls runs Broker.Prepare on calls, outside any commit, and keeps
// what it accepted by call id.
func (k *Runtime) prepareCalls(calls []llm.ToolCall) map[string]preparedCall {
	if len(calls) == 0 {
		return nil
	}
	out := make(map[string]preparedCall, len(calls))
	for _, c := range calls {
		if t, args, err := k.broker.Prepare(c.Name, c.Arguments); err == nil {
			out[c.ID] = preparedCall{name: c.Name, raw: c.Arguments, tool: t, args: args}
		}
	}
	return out
}

// prepare is Broker.Prepare of call: what prepareCalls found for the same
// call before the commit, else made now.
func (k *Runtime) prepare(tx *txn, call llm.ToolCall) (*tools.Tool, json.RawMessage, error) {
	if p, ok := tx.prepared[call.ID]; ok && p.name == call.Name && bytes.Equal(p.raw, call.Arguments) {
		return p.tool, p.args, nil
	}
	return k.broker.Prepare(call.Name, call.Arguments)
}

func (p phaseEffect) run(ctx context.Context, k *Runtime, goOn bool) (quantumPhase, error) {
	if ctx.Err() != nil {
		// The Host stopped the runtime between the commit that recorded the
		// effect's start and the start: it never runs, nor do the calls
		// after it.
		return k.commitResult(ctx, p.pid, false, func(tx *txn, r *procRecord) (effectFunc, error) {
			if r.Dispatch == nil || r.Dispatch.EffectCall < 0 {
				return nil, fmt.Errorf("pid %d: no outside effect in flight", r.PID)
			}
			if err := k.settleStoppedBatch(tx, r, quantum.Stopped, "the runtime stopped before an outside effect started"); err != nil {
				return nil, err
			}
			if r.State != process.Running {
				return nil, nil
			}
			return nil, k.recoverRunning(tx, r)
		})
	}
	failpoint.Hit("effect:started")
	res, effErr := p.effect(ctx)
	// A run that is stopping goes on into nothing.
	goOn = goOn && ctx.Err() == nil
	return k.commitResult(ctx, p.pid, goOn, func(tx *txn, r *procRecord) (effectFunc, error) {
		return k.finishEffect(ctx, tx, r, res, effErr)
	})
}

// commitResult commits what finish makes of pid's call or effect, and with
// goOn what the worker goes on with in the same commit. If going on fails
// the commit (a defect, or a record two quanta of the commit both saved),
// the result commits alone: going on never costs a result that could
// commit. finish then runs a second time, on the committed state, which a
// failed commit left unchanged.
func (k *Runtime) commitResult(ctx context.Context, pid int64, goOn bool, finish func(tx *txn, r *procRecord) (effectFunc, error)) (quantumPhase, error) {
	attempt := func(goingOn bool) (nx next, started []claimedStart, finished bool, err error) {
		var taken int64
		err = k.update(func(tx *txn) error {
			r, err := loadProc(tx, pid)
			if err != nil {
				return err
			}
			nx = next{pid: pid}
			nx.effect, err = finish(tx, r)
			if err != nil || nx.effect != nil || !goingOn {
				return err
			}
			finished = true
			nx, err = k.goOn(ctx, tx, r)
			started, taken = tx.started, tx.taken
			if err == nil {
				k.maySyncLater(tx, nx)
			}
			return err
		})
		if err != nil {
			for _, c := range started {
				k.sched.release(c.next.pid)
			}
			started = nil
			if taken != 0 {
				k.sched.putBack(taken)
			}
			return nx, nil, finished, err
		}
		switch {
		case taken == 0:
		case nx.pid == taken:
			// The worker runs the process it took from now: the one whose
			// result this commit recorded has landed.
			k.sched.landed(pid)
		default:
			// It had nothing to run: a stale entry, or a start that stopped.
			k.sched.landed(taken)
		}
		return nx, started, finished, err
	}
	nx, started, finished, err := attempt(goOn)
	if err != nil && finished && !errors.Is(err, objects.ErrFailed) && !errors.Is(err, objects.ErrClosed) {
		nx, _, _, err = attempt(false)
	}
	if err != nil {
		return nil, err
	}
	// This worker runs now; a claimed one starts only once the Go runtime
	// wakes a thread for it. The process the commit woke or spawned takes
	// this worker, as a synchronous wake-up runs the wakee where the waker
	// ran: its call is what the committing process most often waits for
	// next (the answer to its message, its child's result).
	if len(started) > 0 && nx.phase() != nil {
		started[0].next, nx = nx, started[0].next
	}
	for _, c := range started {
		c.pool.runClaimed(ctx, c.next.phase())
	}
	return nx.phase(), nil
}

// next is what a worker does after a commit: an outside effect of a batch,
// or a provider call the commit started, of process pid; neither when the
// worker is done.
type next struct {
	pid    int64
	start  *callStart
	effect effectFunc
}

func (n next) phase() quantumPhase {
	switch {
	case n.effect != nil:
		return phaseEffect{pid: n.pid, effect: n.effect}
	case n.start != nil:
		return phaseCall{pid: n.pid, start: n.start}
	}
	return nil
}

// maySyncLater lets tx's sync wait for the next commit's (objects.Txn.
// SyncLater) when nothing waits on tx: its worker goes on with nothing,
// starts no call and leaves no process runnable, while another worker's
// quantum is under way, whose commit follows. A child's exit before its
// parent's wait commits, and a parent's wait before its child's exit, then
// share one sync.
func (k *Runtime) maySyncLater(tx *txn, nx next) {
	if nx.phase() != nil || len(tx.started) > 0 || tx.taken != 0 || tx.runnableBesides(0) > 0 {
		return
	}
	if k.sched.othersWorking() {
		tx.SyncLater()
	}
}

// goOn is what the worker of r, whose call's result (or effect's result)
// is in tx, does next in the same commit, when that delays no other
// process (quantum.Share): a process the result left runnable with nothing
// to resume starts its next call; one it left waiting, paused or ended
// hands the worker to the first process the commit woke that it may take
// (handOffTarget), which resumes and starts its call as a quantum's start
// would. Either way a call costs no commit of its own and no trip through
// the run queue, and the other processes the commit left runnable start
// their calls in it too, on free workers (startWoken). It returns no next
// step when the worker is done; the commit then holds the result alone. An
// error in it fails the commit, which commitResult then makes again without
// going on.
//
// r is the record the result was produced with: the context that result
// staged is saved with it when the transaction ends.
func (k *Runtime) goOn(ctx context.Context, tx *txn, r *procRecord) (next, error) {
	if r.State == process.Runnable {
		if !k.sched.share(ctx, tx.runnableBesides(r.PID)).KeepsWorker() {
			return k.takeQueued(ctx, tx)
		}
		start, effect, err := k.startQuantum(ctx, tx, r, true)
		if err == nil && effect != nil {
			return next{}, fmt.Errorf("pid %d: going on into its next call started an outside effect", r.PID)
		}
		if err == nil {
			err = k.startWoken(ctx, tx)
		}
		return next{pid: r.PID, start: start}, err
	}
	// The process handed the worker is one of those the commit left
	// runnable; the others want a worker.
	others := tx.runnableBesides(r.PID)
	if others == 0 || !k.sched.share(ctx, others-1).KeepsWorker() {
		return k.takeQueued(ctx, tx)
	}
	w, err := k.handOffTarget(tx, r)
	if err != nil {
		return next{}, err
	}
	if w == nil {
		return k.takeQueued(ctx, tx)
	}
	woken := w.PID
	start, effect, err := k.startQuantum(ctx, tx, w, false)
	if err != nil || (start == nil && effect == nil) {
		return next{}, err
	}
	from := r.PID
	tx.AfterCommit(func() { k.sched.handOff(from, woken) })
	return next{pid: woken, start: start, effect: effect}, k.startWoken(ctx, tx)
}

// startWoken starts, in tx, the calls of the processes tx left runnable
// that a free worker can take (scheduler.claimWorker): each runs on the
// worker claimed for it once tx is durable (commitResult), so the first call
// of a child, or the resume of a process a message woke, costs no commit of
// its own and no trip through the run queue. A worker is claimed only while
// one stays free for each process queued before. A process whose context tx
// staged is left to the queue (it is saved with another copy of its record),
// and so is one whose context is not at hand (contextAtHand). If the commit
// fails, the workers it claimed are given back.
func (k *Runtime) startWoken(ctx context.Context, tx *txn) error {
	var woken []int64
	for _, t := range tx.transitions {
		if t.state == process.Runnable {
			woken = append(woken, t.pid)
		}
	}
	for _, pid := range woken {
		w, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		if w.State != process.Runnable || tx.stagedContext(w) != nil {
			continue
		}
		atHand, err := k.contextAtHand(tx, w)
		if err != nil {
			return err
		}
		if !atHand {
			continue
		}
		pool := k.sched.claimWorker(ctx, pid)
		if pool == nil {
			return nil
		}
		tx.started = append(tx.started, claimedStart{pool: pool, next: next{pid: pid}})
		c := &tx.started[len(tx.started)-1]
		c.next.start, c.next.effect, err = k.startQuantum(ctx, tx, w, false)
		if err != nil {
			return err
		}
		if c.next.start == nil && c.next.effect == nil {
			tx.started = tx.started[:len(tx.started)-1]
			k.sched.release(pid)
		}
	}
	return nil
}

// takeQueued has a worker that the commit being built leaves free take the
// process first in the scheduler's queue and start its quantum in this
// commit, as the worker would in a commit of its own once this one is
// durable: a process that waited its turn costs no dispatch commit. The
// process counts as in flight from now (scheduler.takeQueued); commitResult
// settles the scheduler's account once the commit is durable or failed. One
// whose context is not at hand (contextAtHand) or that this commit staged a
// context of goes back to the head of the queue at once, for a free
// worker's own commit, which decodes its context before it.
func (k *Runtime) takeQueued(ctx context.Context, tx *txn) (next, error) {
	pid, ok := k.sched.takeQueued(ctx)
	if !ok {
		return next{}, nil
	}
	w, err := loadProc(tx, pid)
	if err != nil {
		k.sched.putBack(pid)
		return next{}, err
	}
	tx.taken = pid
	if w.State != process.Runnable {
		// A stale entry (a process a hand-off ran, or one killed since): it
		// lands once the commit is durable, as a free worker's skip does.
		return next{}, nil
	}
	atHand := tx.stagedContext(w) == nil
	if atHand {
		if atHand, err = k.contextAtHand(tx, w); err != nil {
			return next{}, err
		}
	}
	if !atHand {
		tx.taken = 0
		k.sched.putBack(pid)
		return next{}, nil
	}
	start, effect, err := k.startQuantum(ctx, tx, w, false)
	if err != nil || (start == nil && effect == nil) {
		return next{}, err
	}
	return next{pid: pid, start: start, effect: effect}, k.startWoken(ctx, tx)
}

// handOffTarget is the first process tx woke or made runnable, other than
// r, that r's worker can take in tx, or nil: not one whose context tx
// staged (it is saved with another copy of its record), nor one whose
// context is not at hand (contextAtHand). A descendant of r may be taken:
// its call's charge up its ancestors reaches r through the record r's
// context was staged with (chain).
func (k *Runtime) handOffTarget(tx *txn, r *procRecord) (*procRecord, error) {
	for _, t := range tx.transitions {
		if t.pid == r.PID || t.state != process.Runnable {
			continue
		}
		w, err := loadProc(tx, t.pid)
		if err != nil {
			return nil, err
		}
		if w.State != process.Runnable || tx.stagedContext(w) != nil {
			continue
		}
		if ok, err := k.contextAtHand(tx, w); err != nil || ok {
			return w, err
		}
	}
	return nil, nil
}

// callStart is what the start phase hands the provider call: the request,
// its reservation and the call record's number.
type callStart struct {
	// req is the request without its messages, which the call phase builds
	// from system, goal and entries, outside the store's write lock: a
	// context's entries are never changed once committed (an append writes
	// past their length, a change copies them first), so these stay as the
	// start commit wrote them.
	req          llm.Request
	system, goal string
	entries      []Entry
	im           *images.Image
	reserved     int64
	turn         int
	// record is the call record the start phase committed; only the
	// result phase writes it next, so it need not be read back.
	record callRecord
}

// runQuantum is one quantum from its phase first, and with goOn the next
// ones it goes on into; see quantum and quanta.
func (k *Runtime) runQuantum(ctx context.Context, first quantumPhase, goOn bool) (last int64, err error) {
	for phase := first; phase != nil && err == nil; {
		last = phase.process()
		phase, err = phase.run(ctx, k, goOn)
	}
	return last, err
}

// startQuantum is the start phase: it resumes a pending action whose wait
// ended (which may return an outside effect), or announces what the process
// must know, runs context maintenance, and prepares and reserves the
// provider call, moving the process to running. Continuing, it is the
// same commit as the last call's result (goOn), and returns nothing when
// the process cannot call now.
func (k *Runtime) startQuantum(ctx context.Context, tx *txn, r *procRecord, continuing bool) (*callStart, effectFunc, error) {
	begin := quantum.Begin{Runnable: r.State == process.Runnable, ResumePending: r.ResumePending != "",
		Continuing: continuing, InterruptedTurn: r.InterruptedTurn, ServerRefused: r.ForceMaintenance}
	switch begin.Open() {
	case quantum.Skip:
		return nil, nil, errSkip
	case quantum.Stop:
		return nil, nil, nil
	}
	im, err := k.image(r.Image)
	if err != nil {
		// A Host that reopened without the image can reopen with it: its
		// process waits for that, as for a provider only the Host can fix.
		if r.State == process.Runnable {
			if err := k.step(tx, r, process.Input{Kind: process.Dispatch}); err != nil {
				return nil, nil, err
			}
		}
		return nil, nil, k.waitForProvider(tx, r, time.Time{}, fmt.Sprintf("image %s: %v; open the runtime with it, then resume", r.Image, err))
	}
	if begin.Open() == quantum.Resume {
		p, err := loadPending(tx, r.PID, r.ResumePending)
		if err != nil {
			return nil, nil, err
		}
		begin.PendingApproval = p.Kind == process.WaitApproval
		effect, err := k.resumePending(ctx, tx, r, p)
		if err != nil || effect != nil || begin.ResumeEnds() {
			return nil, effect, err
		}
		begin.Runnable, begin.ResumePending, begin.Resumed = r.State == process.Runnable, r.ResumePending != "", true
		switch begin.Open() {
		case quantum.Stop:
			return nil, nil, nil
		case quantum.CallProvider:
		default:
			return nil, nil, fmt.Errorf("pid %d: pending action %s left a resume to follow", r.PID, p.ID)
		}
	}
	begin.ContextObject = im.Context.Object
	prelude := begin.Prelude()
	c, err := k.loadContext(tx, r)
	if err != nil {
		return nil, nil, err
	}
	if err := k.announce(tx, r, c, prelude.NoticeInterrupted); err != nil {
		return nil, nil, err
	}
	pg, err := k.goalForCall(tx, r)
	if err != nil {
		return nil, nil, err
	}
	goal := pg.text
	shown := k.selectedTools(im, r.ActiveSkills, r.ToolTable)
	if prelude.Maintain {
		prompt := quantum.Prompt{Context: c.tokens, System: k.tokens.Estimate(im.SystemPrompt), Goal: k.tokens.Estimate(goal), Tools: shown.tokens,
			MaxOutput: im.Context.MaxOutputTokens}
		pressure := prompt.Pressure(im.Context.WindowTokens, begin.ServerRefused)
		if prelude.NewPressureEpisode {
			r.ForceMaintenance, r.PressureEpisode = false, false
		}
		waiting, err := k.maintain(tx, r, c, pressure.Projected, pressure.Window)
		if err != nil || waiting {
			return nil, nil, err
		}
	}
	system := k.systemPrompt(r, c, im.SystemPrompt, im.Context.Object)
	start := &callStart{im: im, turn: r.Turn, system: system, goal: goal, entries: c.entries, req: llm.Request{
		Process:   llm.ProcessInfo{PID: r.PID, ParentPID: r.ParentPID, Image: r.Image, GoalOID: r.GoalOID},
		Turn:      r.Replies,
		Attempt:   r.ProviderFailures + 1,
		Tools:     shown.schemas,
		MaxTokens: im.Context.MaxOutputTokens,
	}}
	// Reserve the call and its worst-case tokens up the ancestor chain
	// before the call starts, and charge wall time at each call: a process
	// past its wall budget makes no more calls.
	start.reserved = quantum.Prompt{Context: c.tokens, System: k.tokens.Estimate(system), Goal: k.tokens.Estimate(goal), Tools: shown.tokens,
		MaxOutput: im.Context.MaxOutputTokens}.Reservation()
	var wall int64
	wall, r.WallMark = quantum.WallCharge(r.WallMark, r.CreatedAt, k.now())
	if err := charge(tx, r, capabilities.Budget{LLMCalls: 1, LLMTokens: start.reserved, WallSeconds: wall}); err != nil {
		if errors.Is(err, capabilities.ErrBudgetExhausted) {
			return nil, nil, k.failProcess(tx, r, err.Error())
		}
		return nil, nil, err
	}
	r.ReservedTokens = start.reserved
	digest, err := requestDigest(system, pg.sum, c)
	if err != nil {
		return nil, nil, fmt.Errorf("request of pid %d: %w", r.PID, err)
	}
	start.record = callRecord{
		Turn: r.Turn, Attempt: r.ProviderFailures + 1, Status: "started", RequestSHA256: digest, StartedAt: k.now(), ReservedTokens: start.reserved,
	}
	if err := putRecord(tx, callKey(r.PID, r.Turn), &start.record); err != nil {
		return nil, nil, err
	}
	if err := k.emit(tx, Event{Kind: EventQuantum, PID: r.PID, Turn: r.Turn}); err != nil {
		return nil, nil, err
	}
	tx.markCommit(commitQuantum)
	return start, nil, k.step(tx, r, process.Input{Kind: process.Dispatch})
}

// announce tells the process, before its call, what it must know: that its
// last turn was interrupted, and which messages arrived.
func (k *Runtime) announce(tx *txn, r *procRecord, c *llmContext, interrupted bool) error {
	if interrupted {
		r.InterruptedTurn = false
		if err := k.appendEntries(tx, r, c, Entry{Role: llm.RoleUser, Kind: "notice", Content: interruptedNotice}); err != nil {
			return err
		}
	}
	msgs, err := newNotices(tx, r)
	if err != nil || len(msgs) == 0 {
		return err
	}
	notice, _ := messageNotice(msgs)
	return k.appendEntries(tx, r, c, notice)
}

// finishCall is the result phase: it settles the provider call's
// reservation and records its outcome; a failure goes to providerFailed, a
// reply is appended and its tool calls dispatched (which may return an
// outside effect).
func (k *Runtime) finishCall(ctx context.Context, tx *txn, r *procRecord, start *callStart, resp llm.Response, perr error) (effectFunc, error) {
	pid := r.PID
	turn, reserved := start.turn, start.reserved
	cr := start.record
	cr.FinishedAt = k.now()
	r.Turn++
	r.ReservedTokens = 0
	if perr != nil {
		return nil, k.callFailed(ctx, tx, r, start, cr, perr)
	}
	attempt := r.ProviderFailures + 1
	r.ProviderFailures, r.WindowRetried = 0, false
	// Mend (phaseCall) made each count of the usage at least 0 and bounded
	// it, and estimated a usage reported as none: the sum cannot overflow.
	settle := quantum.SettleReply(reserved, int64(resp.Usage.PromptTokens)+int64(resp.Usage.CompletionTokens))
	cr.Status, cr.Usage, cr.ToolCalls = "completed", &usage{resp.Usage.PromptTokens, resp.Usage.CompletionTokens}, len(resp.ToolCalls)
	if err := putRecord(tx, callKey(pid, turn), &cr); err != nil {
		return nil, err
	}
	if err := k.emit(tx, providerEvent(pid, turn, attempt, cr, nil, &resp)); err != nil {
		return nil, err
	}
	// Settle the reservation to the reported usage. Going over the token
	// budget is discovered here; the call already happened, so it is
	// charged in full and the next call is refused.
	if err := adjustUsage(tx, r, capabilities.Budget{LLMCalls: settle.Calls, LLMTokens: settle.Tokens}); err != nil {
		return nil, err
	}
	if r.State != process.Running {
		// Killed or paused while the call was in flight: nothing runs.
		return nil, saveProc(tx, r)
	}
	c, err := k.loadContext(tx, r)
	if err != nil {
		return nil, err
	}
	if err := k.appendEntries(tx, r, c, replyEntry(resp)); err != nil {
		return nil, err
	}
	// What the result phase prepared for this reply (phaseResult.run).
	if reply := tx.reply; reply != nil && reply.pid == pid {
		c.ahead = &entryAhead{index: len(c.entries) - 1, reply: reply}
	}
	r.Replies++
	calls := make([]quantum.Call, len(resp.ToolCalls))
	for i, tc := range resp.ToolCalls {
		calls[i] = quantum.Call(tc)
	}
	b := quantum.NewBatch(turn, calls, resp.FinishReason == "length")
	return k.dispatch(ctx, tx, r, c, start.im, b, quantum.Input{Kind: quantum.Continue})
}

// callFailed records a failed provider call and decides what follows.
func (k *Runtime) callFailed(ctx context.Context, tx *txn, r *procRecord, start *callStart, cr callRecord, perr error) error {
	cr.Error = perr.Error()
	cr.Settlement = string(llm.SettlementOf(perr))
	cr.Status = "failed"
	if ctx.Err() != nil && r.State == process.Running {
		// The Host stopped the runtime mid-call: the call's settlement is
		// unknown and the process resumes later with a notice.
		cr.Status, cr.Settlement = "unknown", string(llm.SettlementUnknown)
		r.InterruptedTurn = true
		if err := putRecord(tx, callKey(r.PID, start.turn), &cr); err != nil {
			return err
		}
		if err := k.step(tx, r, process.Input{Kind: process.Recover}); err != nil {
			return err
		}
		return k.pauseIfRequested(tx, r)
	}
	served := cr.Settlement != string(llm.SettlementNotStarted) && cr.Settlement != string(llm.SettlementRejected)
	if settle := quantum.SettleFailure(start.reserved, served); settle != (quantum.Settlement{}) {
		if err := adjustUsage(tx, r, capabilities.Budget{LLMCalls: settle.Calls, LLMTokens: settle.Tokens}); err != nil {
			return err
		}
	}
	if err := putRecord(tx, callKey(r.PID, start.turn), &cr); err != nil {
		return err
	}
	if err := k.emit(tx, providerEvent(r.PID, start.turn, r.ProviderFailures+1, cr, perr, nil)); err != nil {
		return err
	}
	if r.State != process.Running {
		return saveProc(tx, r)
	}
	if err := k.providerFailed(tx, r, start.im, perr); err != nil {
		return err
	}
	// A pause asked for while the call ran takes effect at its end, as at
	// the end of a batch: the retry waits for the pause to be lifted.
	if !r.State.Terminal() {
		return k.pauseIfRequested(tx, r)
	}
	return nil
}

// adjustUsage adds delta (which may be negative) to the usage of r's chain
// without a limit check: it settles what already happened (a reservation
// against actual tokens, a call that certainly never started).
func adjustUsage(tx *txn, r *procRecord, delta capabilities.Budget) error {
	recs, err := chain(tx, r)
	if err != nil {
		return err
	}
	for i, rec := range recs {
		u := &rec.Used
		u.LLMCalls = settleUsed(u.LLMCalls, delta.LLMCalls)
		u.LLMTokens = settleUsed(u.LLMTokens, delta.LLMTokens)
		if i > 0 {
			if err := saveProc(tx, rec); err != nil {
				return err
			}
		}
	}
	return nil
}

// settleUsed is used+delta, no less than 0 and, instead of wrapping around
// to less, no more than the most an int64 holds.
func settleUsed(used, delta int64) int64 {
	if delta > 0 && used > math.MaxInt64-delta {
		return math.MaxInt64
	}
	return max(0, used+delta)
}

// effectFunc is a call's outside effect, run without any lock.
type effectFunc func(ctx context.Context) (map[string]any, error)

// answer is the result of the call invoked last, held for the core's Record
// (or, for a call that blocked, for its pending action).
type answer struct {
	result map[string]any
	// body is result's encoding when it was made already (checkedAnswer).
	body   []byte
	ok     bool
	code   string
	effect effectFunc
	// authority is the call's authority decisions, for its tool record.
	authority []string
	// stack is the stack of a panic that failed the call, for its event.
	stack string
}

// startedError is the answer of a call that failed once its effect started:
// its outside effect, or a Resume of its pending action.
func startedError(err error) answer {
	te := *tools.AsError(err) // a copy: a Host's error value may be shared
	te.EffectStarted = true
	return answer{result: tools.ErrorResult(&te), code: te.Code, stack: panicStack(err)}
}

// maxToolResultBytes bounds the encoding of a tool's result, which the
// context keeps and every later request carries. No built-in tool's result
// comes near it (read_object's payload is at most 1 MiB, escaped at most
// six times over; a skill runner's output past 64 KiB is described): only a
// Host's tool can reach it.
const maxToolResultBytes = 8 << 20

// checkedAnswer is the answer of a call whose tool returned result, encoded
// here once, or the tool error that refuses a result that cannot be
// recorded: one JSON cannot encode (NaN, a channel, a func), or one over
// maxToolResultBytes. Nothing of it is kept.
func checkedAnswer(tool string, result map[string]any) (answer, error) {
	res := tools.SuccessResult(result)
	body, err := encodeResult(res)
	switch {
	case err != nil:
		return answer{}, tools.Errorf(tools.CodeFailed, "the result of %s cannot be encoded as JSON: %w", tool, err)
	case len(body) > maxToolResultBytes:
		return answer{}, tools.Errorf(tools.CodeFailed, "the result of %s is %d bytes of JSON, over the %d bytes a result may have", tool, len(body), maxToolResultBytes)
	}
	return answer{result: res, body: body, ok: true}, nil
}

// dispatch feeds b the input in and applies what the core returns, in tx,
// until the batch ends or a call's outside effect must run: then the batch is
// stored in the record and the effect returned, for the caller to commit, run
// it, and record its result with finishEffect. The rules are the core's
// (quantum.Batch.Step); dispatch only carries them out.
func (k *Runtime) dispatch(ctx context.Context, tx *txn, r *procRecord, c *llmContext, im *images.Image, b *quantum.Batch, in quantum.Input) (effectFunc, error) {
	if in.Kind == quantum.Continue {
		if len(b.Calls) > 0 {
			r.TextOnlyTurns = 0
		}
		b.TableSkills = slices.Clone(r.ActiveSkills)
	}
	var last answer
	var table map[string]*tools.Tool
	for {
		effects, err := b.Step(in)
		if err != nil {
			return nil, fmt.Errorf("pid %d: %w", r.PID, err)
		}
		for _, e := range effects {
			var call llm.ToolCall
			if e.Kind != quantum.End && e.Kind != quantum.Abandon {
				call = llm.ToolCall(b.Calls[e.Call])
			}
			switch e.Kind {
			case quantum.CheckMessages:
				msgs, err := newNotices(tx, r)
				if err != nil {
					return nil, err
				}
				in = quantum.Input{Kind: quantum.Seen, Notices: msgs}
			case quantum.Invoke:
				// Looked up again for each call: a call may unload a skill.
				table = k.batchTable(im, r, b)
				in, last, err = k.invokeCall(ctx, tx, r, c, table, b.Turn, call)
				if err != nil {
					return nil, err
				}
			case quantum.Record:
				err = k.recordAnswer(tx, r, c, b.Turn, call, last)
			case quantum.NotStarted:
				// No decision was made for a call that never started.
				err = k.recordCall(tx, r, c, b.Turn, call, tools.NotStarted(e.Reason), false, tools.CodeCancelled, nil)
			case quantum.SettlementUnknown:
				te := &tools.Error{Code: tools.CodeSettlementUnknown, EffectStarted: true,
					Message: fmt.Sprintf("the runtime stopped while %s ran: its effect may or may not have happened; check before retrying", call.Name)}
				err = k.recordCall(tx, r, c, b.Turn, call, tools.ErrorResult(te), false, te.Code, b.EffectAuthority)
			case quantum.StartEffect:
				// Durable before the effect starts: a crash from here on
				// leaves the call's settlement unknown, and recovery says so.
				r.Dispatch = b
				// Its panic fails the call, not the Host (callHost).
				effect := last.effect
				return func(ctx context.Context) (map[string]any, error) {
					return callHost(call.Name, "its outside effect", func() (map[string]any, error) { return effect(ctx) })
				}, saveProc(tx, r)
			case quantum.Abandon:
				if e.Ending != nil && e.Ending.RewindNotified {
					r.NotifiedSeq = e.Ending.NotifiedSeq
				}
				return nil, saveProc(tx, r)
			case quantum.End:
				return nil, k.endBatch(tx, r, c, im, b, e.Ending, last.authority)
			}
			if err != nil {
				return nil, err
			}
		}
	}
}

// invokeCall runs one call at a savepoint and reports its outcome to the
// core: a refused call leaves nothing behind; a call an ask grant covers is
// held for a Human; an outside effect is handed back to run.
func (k *Runtime) invokeCall(ctx context.Context, tx *txn, r *procRecord, c *llmContext, table map[string]*tools.Tool, turn int, call llm.ToolCall) (quantum.Input, answer, error) {
	invoked := func(o quantum.Outcome) quantum.Input { return quantum.Input{Kind: quantum.Invoked, Outcome: o} }
	if err := k.emit(tx, Event{Kind: EventToolCall, PID: r.PID, Turn: turn, Tool: call.Name, CallID: call.ID, Args: summarize(string(call.Arguments), 120),
		Detail: map[string]any{"arguments": loggedArguments(call.Arguments)}}); err != nil {
		return quantum.Input{}, answer{}, err
	}
	sp := tx.savepoint(c)
	saved := r.snapshot()
	r.decisions = nil
	out, terr := k.invoke(ctx, tx, r, c, table, call)
	var done answer
	if terr == nil && out.Effect == nil && out.Block == nil {
		// A result that cannot be recorded refuses the call as a panic does.
		done, terr = checkedAnswer(call.Name, out.Result)
	}
	authority := r.decisions
	r.decisions = nil
	if terr != nil {
		// Nothing of a failed call stays: staged writes, reserved one-shot
		// uses and budget charges all go back.
		tx.rollbackTo(sp)
		r.restore(saved)
		r.ApprovedCall, r.decisions = "", nil
		var need *ApprovalRequiredError
		if errors.As(terr, &need) {
			return invoked(quantum.Outcome{Kind: quantum.Held, Payload: k.approvalBlock(need)}), answer{},
				k.emit(tx, Event{Kind: EventApproval, PID: r.PID, CallID: call.ID, Tool: call.Name, Reason: "requested: " + need.Error(),
					Detail: map[string]any{"decision": "requested", "resource": need.Resource, "right": string(need.Right), "grant_id": need.GrantID}})
		}
		k.shrinkRefusedCall(tx, r, c, call.ID)
		te := tools.AsError(terr)
		return invoked(quantum.Outcome{Kind: quantum.Refused}), answer{result: tools.ErrorResult(te), code: te.Code, authority: authority, stack: panicStack(terr)}, nil
	}
	r.ApprovedCall = ""
	done.authority = authority
	switch {
	case out.Effect != nil:
		return invoked(quantum.Outcome{Kind: quantum.OutsideEffect, Authority: authority}), answer{effect: out.Effect}, nil
	case out.Block != nil:
		return invoked(quantum.Outcome{Kind: quantum.Blocked, Payload: out.Block}), answer{authority: authority}, nil
	case out.Exit != nil:
		return invoked(quantum.Outcome{Kind: quantum.Exited, Payload: out.Exit}), done, nil
	}
	return invoked(quantum.Outcome{Kind: quantum.Done, EndsBatch: table[call.Name].EndsBatch}), done, nil
}

// endBatch carries out how r's batch ended: it exits, or writes the batch's
// notices after its results and waits or yields. authority is the decisions
// of the call invoked last, which a wait's pending action keeps.
func (k *Runtime) endBatch(tx *txn, r *procRecord, c *llmContext, im *images.Image, b *quantum.Batch, e *quantum.Ending, authority []string) error {
	switch e.Kind {
	case quantum.TextOnly:
		return k.textOnlyReply(tx, r, c, im, e.TruncatedNotice)
	case quantum.Exit:
		return k.exitProcess(tx, r, e.Payload.(*tools.Exit))
	}
	if e.RewindNotified {
		r.NotifiedSeq = e.NotifiedSeq
	}
	if len(e.Notices) > 0 {
		notice, _ := messageNotice(e.Notices)
		if err := k.appendEntries(tx, r, c, notice); err != nil {
			return err
		}
	}
	if e.TruncatedNotice {
		if err := k.appendEntries(tx, r, c, Entry{Role: llm.RoleUser, Kind: "notice", Content: truncatedNotice}); err != nil {
			return err
		}
	}
	if e.Kind == quantum.Wait {
		if err := k.blockProcess(tx, r, b.Turn, llm.ToolCall(b.Calls[e.Call]), e.Payload.(*tools.Block), authority); err != nil {
			return err
		}
	} else if err := k.step(tx, r, process.Input{Kind: process.Yield}); err != nil {
		return err
	}
	return k.pauseIfRequested(tx, r)
}

// textOnlyReply answers a reply without a tool call with a notice that only
// tool calls act, and fails the process after the image's limit of such
// replies in a row.
func (k *Runtime) textOnlyReply(tx *txn, r *procRecord, c *llmContext, im *images.Image, truncated bool) error {
	r.TextOnlyTurns++
	if limit := im.TextOnlyTurnLimit(); quantum.TextOnlyFails(r.TextOnlyTurns, limit) {
		if truncated {
			// A reasoning model can spend the whole limit before it calls a
			// tool: the cause is the limit, not tool support.
			return k.failProcess(tx, r, fmt.Sprintf("the model answered %d turns in a row without a tool call, the last cut off at the output "+
				"token limit (%d tokens): raise --max-tokens or the image's context.max_output_tokens (a reasoning model may spend the "+
				"limit on reasoning)", limit, im.Context.MaxOutputTokens))
		}
		return k.failProcess(tx, r, fmt.Sprintf("the model answered %d turns in a row without a tool call; only tool calls act "+
			"(the model or server may not support tool calling: check that the server enables tools for this model)", limit))
	}
	notice := noToolCallNotice
	if truncated {
		notice = truncatedNotice + " " + notice
	}
	if err := k.appendEntries(tx, r, c, Entry{Role: llm.RoleUser, Kind: "notice", Content: notice}); err != nil {
		return err
	}
	if err := k.step(tx, r, process.Input{Kind: process.Yield}); err != nil {
		return err
	}
	return k.pauseIfRequested(tx, r)
}

// finishEffect records the result of the outside effect of r's current
// call and goes on with its batch. A process killed meanwhile keeps the
// result as evidence and runs nothing more.
func (k *Runtime) finishEffect(ctx context.Context, tx *txn, r *procRecord, res map[string]any, effErr error) (effectFunc, error) {
	b := r.Dispatch
	if b == nil || b.EffectCall < 0 {
		return nil, fmt.Errorf("pid %d: no outside effect in flight", r.PID)
	}
	if effErr != nil && ctx.Err() != nil && r.State == process.Running {
		// The Host stopped the runtime (Close, or the run's context) while
		// the effect ran, and the effect gave up: as after a crash, it may
		// or may not have happened, and nothing after it starts.
		if err := k.settleInterruptedEffect(tx, r); err != nil {
			return nil, err
		}
		return nil, k.recoverRunning(tx, r)
	}
	r.Dispatch = nil
	call := llm.ToolCall(b.Calls[b.EffectCall])
	c, err := k.loadContext(tx, r)
	if err != nil {
		return nil, err
	}
	var a answer
	if effErr == nil {
		a, effErr = checkedAnswer(call.Name, res)
	}
	if effErr != nil {
		a = startedError(effErr)
	}
	a.authority = b.EffectAuthority
	if err := k.recordAnswer(tx, r, c, b.Turn, call, a); err != nil {
		return nil, err
	}
	// A process killed meanwhile invokes nothing more, so it needs no image.
	var im *images.Image
	if r.State == process.Running {
		if im, err = k.image(r.Image); err != nil {
			return nil, err
		}
	}
	return k.dispatch(ctx, tx, r, c, im, b, quantum.Input{Kind: quantum.EffectDone, Running: r.State == process.Running})
}

// pauseIfRequested applies a pause signalled while the quantum ran.
func (k *Runtime) pauseIfRequested(tx *txn, r *procRecord) error {
	if !r.PauseRequested {
		return nil
	}
	r.PauseRequested = false
	return k.step(tx, r, process.Input{Kind: process.Pause})
}

// invoke validates, authorizes budget and runs one call.
func (k *Runtime) invoke(ctx context.Context, tx *txn, r *procRecord, c *llmContext, table map[string]*tools.Tool, call llm.ToolCall) (tools.Outcome, error) {
	if _, ok := table[call.Name]; !ok {
		names := make([]string, 0, len(table))
		for n := range table {
			names = append(names, n)
		}
		hint := ""
		if im, err := k.image(r.Image); err == nil {
			if _, ok := k.selectedTools(im, r.ActiveSkills, r.ToolTable).table[call.Name]; ok {
				return tools.Outcome{}, tools.Errorf(tools.CodeUnknownTool, "tool %q belongs to a skill activated in this turn: "+
					"its tools can be called from your next reply on", call.Name)
			}
		}
		if near := tools.Closest(call.Name, names, 3); len(near) > 0 {
			hint = "; the closest tools you may call: " + strings.Join(near, ", ")
		}
		return tools.Outcome{}, tools.Errorf(tools.CodeUnknownTool, "unknown tool %q: not in the tool table of this process (image %s)%s", call.Name, r.Image, hint)
	}
	t, args, err := k.prepare(tx, call)
	if err != nil {
		return tools.Outcome{}, err
	}
	if err := scopeRefusal(t, r); err != nil {
		return tools.Outcome{}, err
	}
	if !t.Uncharged {
		// Wall time is charged at provider calls; a call made after it ran
		// out (an approved one, after its Human took the time) is refused
		// here, as the next provider call would be.
		if left, limited := wallLeft(r, k.now()); limited && left == 0 {
			return tools.Outcome{}, wallExhausted(r)
		}
		if err := charge(tx, r, capabilities.Budget{ToolCalls: 1}); err != nil {
			return tools.Outcome{}, err
		}
	}
	sys := k.newSyscalls(tx, r, c, t, call.ID)
	return callHost(t.Name, "Invoke", func() (tools.Outcome, error) { return t.Invoke(ctx, sys, args) })
}

// recordCall appends a tool result to the context and records the call with
// the authority decisions that allowed or refused it.
func (k *Runtime) recordCall(tx *txn, r *procRecord, c *llmContext, turn int, call llm.ToolCall, result map[string]any, ok bool, code string, authority []string) error {
	return k.recordAnswer(tx, r, c, turn, call, answer{result: result, ok: ok, code: code, authority: authority})
}

// recordAnswer is recordCall of a call's answer a.
func (k *Runtime) recordAnswer(tx *txn, r *procRecord, c *llmContext, turn int, call llm.ToolCall, a answer) error {
	result, ok, code, authority := a.result, a.ok, a.code, a.authority
	body := a.body
	if body == nil {
		var err error
		if body, err = encodeResult(result); err != nil {
			return fmt.Errorf("encode result of %s: %w", call.Name, err)
		}
	}
	if k.records.check {
		if want, _ := schema.Marshal(result); !bytes.Equal(body, want) {
			return fmt.Errorf("encode result of %s: the hand encoder wrote %s, schema.Marshal %s", call.Name, body, want)
		}
	}
	r.ToolCalls++
	tx.markCommit(commitToolResult)
	if err := putRecord(tx, toolRecKey(r.PID, r.ToolCalls), &toolRecord{
		Turn: turn, CallID: call.ID, Tool: call.Name, OK: ok, args: call.Arguments, result: body, hashLate: true, Code: code,
		Authority: authority,
	}); err != nil {
		return err
	}
	if ok {
		r.ObservedTools = addObserved(r.ObservedTools, call.Name)
	}
	content := string(body)
	summary := content
	if st, isStr := result["status"].(string); isStr {
		// The status decides what a result means (exited or a review): lead with it.
		summary = "status " + st + " " + summary
	}
	detail := map[string]any{"result": json.RawMessage(body)}
	if len(authority) > 0 {
		detail["authority"] = authority
	}
	if a.stack != "" {
		detail["panic_stack"] = a.stack
	}
	ev := Event{Kind: EventToolDone, PID: r.PID, Turn: turn, Tool: call.Name, CallID: call.ID, OK: boolPtr(ok), Code: code, Summary: summarize(summary, 160),
		Detail: detail}
	if err := k.emit(tx, ev); err != nil {
		return err
	}
	answer := Entry{Role: llm.RoleTool, ToolCallID: call.ID, Name: call.Name, Content: content}
	if !callInContext(c, call.ID) {
		// The call itself was lost with the history (a reopen with retention
		// off). A tool message needs its call before it, so the runtime
		// restates the call, and the model still gets its result as a result.
		if len(call.Arguments) == 0 {
			call.Arguments = json.RawMessage("{}")
		}
		restated := Entry{Role: llm.RoleAssistant, Kind: "notice", ToolCalls: []llm.ToolCall{call},
			Content: fmt.Sprintf("(runtime notice) Restating my earlier %s call %s, whose request was lost with the history; its result follows.", call.Name, call.ID)}
		return k.appendEntries(tx, r, c, restated, answer)
	}
	return k.appendEntries(tx, r, c, answer)
}

// callInContext reports whether the latest assistant message holds call id.
func callInContext(c *llmContext, id string) bool {
	for i := len(c.entries) - 1; i >= 0; i-- {
		if e := &c.entries[i]; e.Role == llm.RoleAssistant {
			for _, tc := range e.ToolCalls {
				if tc.ID == id {
					return true
				}
			}
			return false
		}
	}
	return false
}

// blockProcess records the pending action of a blocking call and makes the
// process wait. The pending action is durable before timing starts.
func (k *Runtime) blockProcess(tx *txn, r *procRecord, turn int, call llm.ToolCall, b *tools.Block, authority []string) error {
	id := fmt.Sprintf("t%d-%s", turn, call.ID)
	p := &pendingAction{ID: id, PID: r.PID, Tool: call.Name, CallID: call.ID, Kind: b.Wait.Kind, Args: call.Arguments, State: pendingStatePending, Data: b.Data,
		StartedAt: k.now(), Authority: authority}
	if err := savePending(tx, p); err != nil {
		return err
	}
	r.ResumePending = id
	w := b.Wait
	w.PendingID = id
	if err := k.step(tx, r, process.Input{Kind: process.Block, Wait: &w}); err != nil {
		return err
	}
	return k.wakeIfChildEnded(tx, r)
}

// resumePending produces the result of p, r's pending action whose wait
// ended. An approved call is dispatched again, and may return its outside
// effect.
func (k *Runtime) resumePending(ctx context.Context, tx *txn, r *procRecord, p *pendingAction) (effectFunc, error) {
	if p.State == pendingStateResuming {
		return nil, k.failProcess(tx, r, fmt.Sprintf("pending %s action %s was found resuming after a restart; its settlement is unknown, so it is not replayed", p.Tool, p.ID))
	}
	if p.Kind == process.WaitApproval {
		c, err := k.loadContext(tx, r)
		if err != nil {
			return nil, err
		}
		return k.resumeApproval(ctx, tx, r, p, c)
	}
	return nil, k.resumeAction(ctx, tx, r, p)
}

// resumeAction produces the result of a tool's pending action whose wait ended.
func (k *Runtime) resumeAction(ctx context.Context, tx *txn, r *procRecord, p *pendingAction) error {
	t, ok := k.broker.Lookup(p.Tool)
	if !ok || t.Resume == nil {
		return k.failProcess(tx, r, fmt.Sprintf("pending action %s: tool %q cannot resume", p.ID, p.Tool))
	}
	c, err := k.loadContext(tx, r)
	if err != nil {
		return err
	}
	sys := k.newSyscalls(tx, r, c, t, p.CallID)
	// A resume's staged writes persist even when it reports an error: a
	// multi-stage action records its own failure (a failed compaction job).
	// Not when it panics or returns a result that cannot be recorded: then
	// nothing of it stays, as nothing of a refused call does (invokeCall).
	r.decisions = nil
	sp, saved := tx.savepoint(c), r.snapshot()
	out, rerr := callHost(t.Name, "Resume", func() (tools.Outcome, error) {
		return t.Resume(ctx, sys, tools.Pending{ID: p.ID, Tool: p.Tool, CallID: p.CallID, Data: p.Data, StartedAt: p.StartedAt, Recovered: p.Recovered})
	})
	var hp *hostPanic
	discard := errors.As(rerr, &hp)
	var a answer
	if rerr == nil && out.Block == nil {
		a, rerr = checkedAnswer(p.Tool, out.Result)
		discard = rerr != nil
	}
	// The call's record keeps the decisions of its start and of each resume.
	p.Authority = append(slices.Clip(p.Authority), r.decisions...)
	if discard {
		tx.rollbackTo(sp)
		r.restore(saved)
		if err := releaseJob(tx, r, rerr); err != nil {
			return err
		}
	}
	r.decisions = nil
	if rerr == nil && out.Block != nil {
		// A multi-stage action waits again under the same pending action.
		p.Data, p.Recovered = out.Block.Data, false
		if err := savePending(tx, p); err != nil {
			return err
		}
		w := out.Block.Wait
		w.PendingID = p.ID
		if err := k.step(tx, r, process.Input{Kind: process.Dispatch}); err != nil {
			return err
		}
		if err := k.step(tx, r, process.Input{Kind: process.Block, Wait: &w}); err != nil {
			return err
		}
		return k.wakeIfChildEnded(tx, r)
	}
	if rerr != nil {
		a = startedError(rerr)
	}
	a.authority = p.Authority
	p.State = pendingStateCompleted
	if err := savePending(tx, p); err != nil {
		return err
	}
	// The process stays runnable and makes its call in this commit
	// (quantum.Begin.Open), so nothing is scheduled here.
	r.ResumePending = ""
	if p.CallID == "" {
		// A runtime-started action (automatic maintenance) answers no call:
		// its outcome is a notice.
		body, _ := json.Marshal(a.result)
		return k.appendEntries(tx, r, c, Entry{Role: llm.RoleUser, Kind: "notice", Content: "(runtime notice) " + p.Tool + " ran automatically: " + string(body)})
	}
	if err := k.recordAnswer(tx, r, c, r.Turn-1, llm.ToolCall{ID: p.CallID, Name: p.Tool, Arguments: p.Args}, a); err != nil {
		return err
	}
	return saveProc(tx, r)
}

// exitProcess commits a terminal exit: state, result identity, evidence
// hash and the parent's wake in one batch.
func (k *Runtime) exitProcess(tx *txn, r *procRecord, e *tools.Exit) error {
	tx.markCommit(commitExit)
	if e.EvidenceSHA256 != "" {
		r.EvidenceSHA256 = e.EvidenceSHA256
		if err := tx.Set(evidenceKey(r.PID), e.Evidence); err != nil {
			return err
		}
	}
	return k.terminate(tx, r, process.Input{Kind: process.Exit, ResultOID: e.ResultOID})
}

// failProcess moves r to failed with reason.
func (k *Runtime) failProcess(tx *txn, r *procRecord, reason string) error {
	return k.terminate(tx, r, process.Input{Kind: process.Fail, Reason: reason})
}

// fireTimer wakes pid from a wait that ends at a time (a sleep, a provider
// backoff) if the wait is still the one the timer was armed for.
func (k *Runtime) fireTimer(pid int64, gen uint64) error {
	err := k.update(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		if r.State != process.Waiting || r.Gen != gen || r.Wait == nil || r.Wait.Until.IsZero() {
			return errSkip
		}
		return k.step(tx, r, process.Input{Kind: process.Wake, Gen: gen, WaitKind: r.Wait.Kind})
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	return err
}

// requestDigest names the messages of a call: the SHA-256, in hex, of the
// SHA-256 of the system prompt, of the goal and of the context payload. The
// context's part extends the digest its cache keeps, so naming a request
// costs what the context grew by, not its size.
func requestDigest(system string, goalSum [sha256.Size]byte, c *llmContext) (string, error) {
	ctxSum, err := c.payloadDigest()
	if err != nil {
		return "", err
	}
	systemSum := sha256.Sum256([]byte(system))
	return sha(slices.Concat(systemSum[:], goalSum[:], ctxSum[:])), nil
}

// promptGoal is a goal as the prompt shows it, read from one version of the
// goal Object, with the digest the request's digest is made of.
type promptGoal struct {
	oid     string
	version uint64
	text    string
	sum     [sha256.Size]byte
}

// goalForCall returns r's goal for its next call. A goal read whole from the
// version the store holds now is kept on the record, so the calls after it
// neither copy nor hash it again until the goal Object changes.
func (k *Runtime) goalForCall(tx *txn, r *procRecord) (*promptGoal, error) {
	if g := r.goal; g != nil && g.oid == r.GoalOID {
		meta, err := tx.StatShared(r.GoalOID)
		if err == nil && meta.Version == g.version && !meta.PayloadLost {
			return g, nil
		}
	}
	text, meta, whole, err := k.readGoal(tx, r)
	if err != nil {
		return nil, err
	}
	g := &promptGoal{oid: r.GoalOID, version: meta.Version, text: text, sum: sha256.Sum256([]byte(text))}
	r.goal = nil
	if whole {
		r.goal = g
	}
	return g, nil
}

// goalText is the goal as the prompt shows it.
func (k *Runtime) goalText(tx *txn, r *procRecord) (string, error) {
	text, _, _, err := k.readGoal(tx, r)
	return text, err
}

// readGoal is goalText, with the goal Object's metadata and whether the text
// is its payload (not a recovery of it or a note of its loss).
func (k *Runtime) readGoal(tx *txn, r *procRecord) (text string, meta objects.Meta, whole bool, err error) {
	meta, payload, err := tx.Read(r.GoalOID)
	switch {
	case errors.Is(err, objects.ErrPayloadLost):
		if goal, rerr := k.recoveredGoal(tx, r); rerr == nil {
			return "Goal:\n" + goal, meta, false, nil
		}
		if r.CompactionOf != 0 {
			if goal, rerr := k.compressorGoalFor(tx, r); rerr == nil {
				return "Goal:\n" + goal, meta, false, nil
			}
		}
		return fmt.Sprintf("Goal: unavailable. The payload of goal object %s (version %d) did not survive a runtime reopen and could not be recovered. Do not invent it; ask for a restated goal or a checkpoint restore.", meta.OID, meta.Version), meta, false, nil
	case err != nil:
		return "", meta, false, fmt.Errorf("goal of pid %d: %w", r.PID, err)
	}
	return "Goal:\n" + string(payload), meta, true, nil
}

// batchTable returns the tools b's calls may run, by name: the table the
// model was shown for the reply (selected with the skills active when it
// came), less the tools of any skill a call of the batch unloaded since. A
// skill activated by one of its calls shows its tools from the next reply
// on, as activate_skill says; an unloaded one takes them away at once. The
// map is shared: callers only read it.
func (k *Runtime) batchTable(im *images.Image, r *procRecord, b *quantum.Batch) map[string]*tools.Tool {
	skills := r.ActiveSkills
	if !slices.Equal(b.TableSkills, r.ActiveSkills) {
		skills = make([]string, 0, len(b.TableSkills))
		for _, s := range b.TableSkills {
			if slices.Contains(r.ActiveSkills, s) {
				skills = append(skills, s)
			}
		}
	}
	return k.selectedTools(im, skills, r.ToolTable).table
}

// selectedTools is a tool table and its rendering for the provider.
type selectedTools struct {
	table   map[string]*tools.Tool
	schemas []llm.ToolSchema
	// tokens estimates what schemas add to a request.
	tokens int
}

// selectedTools returns the tool table of image im with skills active (or
// the fixed table of an agent-task child, when fixed is not nil), built once
// for each selection: the catalog is immutable, so a table depends only on
// what selects it.
func (k *Runtime) selectedTools(im *images.Image, skills, fixed []string) *selectedTools {
	key := im.Name + ":" + im.Version + "|" + strings.Join(skills, ",") + "|" + strconv.FormatBool(fixed != nil) + strings.Join(fixed, ",")
	if v, ok := k.toolTables.Load(key); ok {
		return v.(*selectedTools)
	}
	table := k.buildToolTable(im, skills, fixed)
	sel := &selectedTools{table: table, schemas: k.renderSchemas(table)}
	for _, ts := range sel.schemas {
		sel.tokens += k.tokens.Estimate(ts.Name) + k.tokens.Estimate(ts.Description) + k.tokens.Estimate(string(ts.Parameters))
	}
	k.toolTables.Store(key, sel)
	return sel
}

func (k *Runtime) renderSchemas(table map[string]*tools.Tool) []llm.ToolSchema {
	names := make([]string, 0, len(table))
	for n := range table {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]llm.ToolSchema, 0, len(names))
	for _, n := range names {
		t := table[n]
		params := t.Parameters
		if len(params) == 0 {
			params, _ = json.Marshal(t.Schema)
		}
		out = append(out, llm.ToolSchema{Name: t.Name, Description: t.Description, Parameters: params})
	}
	return out
}
