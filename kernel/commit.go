package kernel

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/internal/failpoint"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

// Commit kinds, as failpoints name them: "before-commit:<kind>" fires when a
// batch holding that kind of change is staged but not yet durable,
// "after-commit:<kind>" once it is durable.
const (
	commitToolResult  = "tool_result"
	commitExit        = "exit"
	commitSpawn       = "spawn"
	commitMessagePost = "message_post"
	commitMessageAck  = "message_ack"
	commitQuantum     = "quantum_start"
	commitCompaction  = "compaction_writeback"
	commitCheckpoint  = "checkpoint"
)

// txn is one kernel transaction: the store's transaction and what the kernel
// stages beside its writes. It lives for one k.update or k.view call and is
// owned by the goroutine running it; nothing may keep it afterwards.
type txn struct {
	*objects.Txn
	// readOnly marks a view: staging a change in it is a defect.
	readOnly bool
	// dirty are the contexts changed in this transaction, written once when
	// its function ends so a context Object's version advances once per commit.
	dirty []dirtyContext
	// afterFlush runs once the contexts are written (their versions final).
	afterFlush []func() error
	// kinds are the kinds of commit this transaction holds, for failpoints.
	kinds []string
	// procs are the process records saved in this transaction, each a copy
	// taken at its save and encoded once when the transaction's function
	// ends: a record saved at every step of a quantum is written once.
	procs map[int64]savedRecord
	// savepoints counts the savepoints taken: a saved copy taken since the
	// last one is held by no savepoint, so a later save overwrites it.
	savepoints uint64
	// records is the runtime's cache of committed records (nil in a view).
	records *recordCache
	// transitions are the processes whose state this transaction changed,
	// each with the last state it left them in: the scheduler learns of
	// those once the commit is durable, and of nothing in between (a quantum
	// that yields and goes on into its next call is never queued).
	transitions []transition
	// prepared are the calls of the reply this transaction dispatches,
	// prepared before it began (preparedCall).
	prepared map[string]preparedCall
	// started are the calls of other processes this transaction started on
	// workers it claimed (Runtime.startWoken).
	started []claimedStart
	// taken is the queued process whose quantum this transaction started on
	// the worker it leaves free (Runtime.takeQueued), or 0.
	taken int64
	// reply is what was prepared before the transaction for the context of
	// the process whose reply it settles (Runtime.prepareReply), or nil.
	reply *replyAhead
}

// claimedStart is a call a transaction started on a worker it claimed: the
// worker runs it once the transaction is durable, or is given back.
type claimedStart struct {
	pool *workerPool
	next next
}

// transition is the state a transaction left a process in, as the
// scheduler is told of it.
type transition struct {
	pid   int64
	state process.State
	wait  *process.Wait
	gen   uint64
}

// savepoint marks where a call's changes begin: in the store's batch, in
// the records saved so far, in the usage of the records contexts were
// staged with, which a charge up a chain changes in place (chain), and in
// the contexts staged and the work to do once they are written: a
// compaction's writeback replaces a staged context in place, and its job is
// saved after the flush.
type savepoint struct {
	store       objects.Savepoint
	procs       map[int64]savedRecord
	transitions []transition
	held        []heldUsage
	// contexts are the contexts staged at the savepoint and those the
	// caller has at hand, each as it was then; a context changes only by
	// assignments to its fields (entries are appended past what it holds,
	// or replaced whole), so a copy of the struct is what it was.
	contexts   []savedContext
	dirty      int
	afterFlush int
}

type savedContext struct {
	c    *llmContext
	then llmContext
}

// heldUsage is the usage of a record a context was staged with, as it was
// at a savepoint.
type heldUsage struct {
	r    *procRecord
	used capabilities.Budget
}

// savedRecord is a record saved in a transaction: the copy taken at its
// save, and the record it was saved from. A context is saved with the
// record that staged it, which must be the one saved from last
// (flushContexts).
type savedRecord struct {
	copy *procRecord
	from *procRecord
	// gen is the count of savepoints when copy was taken.
	gen uint64
}

// savepoint marks the changes made so far; rollbackTo undoes what came
// after. atHand are the contexts the caller holds and goes on with after a
// rollback, staged or not: a change made to one after the savepoint is
// undone too.
func (tx *txn) savepoint(atHand ...*llmContext) savepoint {
	sp := savepoint{store: tx.Savepoint(), procs: maps.Clone(tx.procs), transitions: slices.Clone(tx.transitions),
		dirty: len(tx.dirty), afterFlush: len(tx.afterFlush)}
	tx.savepoints++
	for _, d := range tx.dirty {
		sp.held = append(sp.held, heldUsage{r: d.r, used: d.r.Used})
		sp.contexts = append(sp.contexts, savedContext{c: d.c, then: *d.c})
	}
	for _, c := range atHand {
		if c != nil && !slices.ContainsFunc(sp.contexts, func(s savedContext) bool { return s.c == c }) {
			sp.contexts = append(sp.contexts, savedContext{c: c, then: *c})
		}
	}
	return sp
}

// rollbackTo undoes what came after sp. The transaction takes copies of
// sp's records and transitions, so sp holds what it held however the
// transaction goes on, and may be rolled back to again.
func (tx *txn) rollbackTo(sp savepoint) {
	tx.RollbackTo(sp.store)
	tx.procs = maps.Clone(sp.procs)
	tx.transitions = slices.Clone(sp.transitions)
	for _, h := range sp.held {
		h.r.Used = h.used
	}
	// Contexts staged since are written by no one; those staged before are
	// as they were. Their entries' arrays may hold appends past what they
	// hold now, which their shared marks (entriesGrown, grown) keep the
	// next append from writing over.
	tx.dirty = tx.dirty[:sp.dirty]
	for _, saved := range sp.contexts {
		*saved.c = saved.then
	}
	tx.afterFlush = tx.afterFlush[:sp.afterFlush]
}

// errRecordCopies: a transaction saved a process's record from two copies,
// and the one its context was staged with is not the last.
var errRecordCopies = errors.New("record saved from two copies in one transaction")

type dirtyContext struct {
	r *procRecord
	c *llmContext
}

// update is the kernel's only way to commit: one synced batch per call.
// With failpoints compiled in, it fires the failpoints of the kinds of
// change the batch holds.
func (k *Runtime) update(fn func(tx *txn) error) error {
	if k.opts.ReadOnly {
		return ErrReadOnly
	}
	var kinds []string
	err := k.store.Update(func(otx *objects.Txn) error {
		tx := &txn{Txn: otx, records: k.records}
		if err := fn(tx); err != nil {
			return err
		}
		if err := k.flushContexts(tx); err != nil {
			return err
		}
		kinds = tx.kinds
		for _, kind := range kinds {
			failpoint.Hit("before-commit:" + kind)
		}
		return nil
	})
	if err == nil {
		for _, kind := range kinds {
			failpoint.Hit("after-commit:" + kind)
		}
	}
	return closedErr(err)
}

// closedErr makes the store's refusal after Close the runtime's too: a Host
// tells it apart with errors.Is(err, ErrClosed), whichever call it made.
func closedErr(err error) error {
	if errors.Is(err, objects.ErrClosed) && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// view runs fn in a read-only transaction.
func (k *Runtime) view(fn func(tx *txn) error) error {
	return closedErr(k.store.View(func(otx *objects.Txn) error {
		return fn(&txn{Txn: otx, readOnly: true})
	}))
}

// peek is view without waiting for other commits' syncs (objects.Peek):
// for hints an Update checks before it uses them.
func (k *Runtime) peek(fn func(tx *txn) error) error {
	return closedErr(k.store.Peek(func(otx *objects.Txn) error {
		return fn(&txn{Txn: otx, readOnly: true})
	}))
}

// onFlush runs fn once tx's contexts are written (their versions final).
func (tx *txn) onFlush(fn func() error) {
	if tx.readOnly {
		panic("kernel: afterFlush in a view")
	}
	tx.afterFlush = append(tx.afterFlush, fn)
}

// stageContext registers c (of r) to be written when tx's function ends.
func (tx *txn) stageContext(r *procRecord, c *llmContext) {
	if tx.readOnly {
		panic("kernel: context staged in a view")
	}
	for _, d := range tx.dirty {
		if d.c == c {
			return
		}
	}
	tx.dirty = append(tx.dirty, dirtyContext{r: r, c: c})
}

// holder is the record of pid that tx staged a context with, while it is
// also the copy of pid that tx saved last (or tx saved none): the copy the
// commit saves with the context, which a change to pid in tx may reach in
// place. Otherwise nil: another copy was saved since (a wake, a kill), and a
// change made through the holder would undo it, so the change goes to a
// load of the last copy, and the commit fails with errRecordCopies.
func (tx *txn) holder(pid int64) *procRecord {
	for _, d := range tx.dirty {
		if d.r.PID == pid {
			if saved, ok := tx.procs[pid]; ok && saved.from != d.r {
				return nil
			}
			return d.r
		}
	}
	return nil
}

// stagedContext is r's context as this transaction changed it, or nil: a
// quantum that resumes a pending action reads the result it appended when
// it goes on to its call.
func (tx *txn) stagedContext(r *procRecord) *llmContext {
	for _, d := range tx.dirty {
		if d.r.PID == r.PID && d.c.meta.OID == r.ContextOID {
			return d.c
		}
	}
	return nil
}

func (k *Runtime) flushContexts(tx *txn) error {
	for _, d := range tx.dirty {
		if saved, ok := tx.procs[d.r.PID]; ok && saved.from != d.r {
			// Saving d.r would undo what the other copy saved (a charge of
			// another quantum in this commit up its ancestors).
			return fmt.Errorf("pid %d: %w", d.r.PID, errRecordCopies)
		}
		if err := k.writeContext(tx, d.r, d.c); err != nil {
			return err
		}
		if err := saveProc(tx, d.r); err != nil {
			return err
		}
	}
	for _, fn := range tx.afterFlush {
		if err := fn(); err != nil {
			return err
		}
	}
	return writeProcs(tx)
}

// tellScheduler has the scheduler told, once tx is durable, that it left pid
// in state (with wait, at generation gen); a later call for the same pid in
// tx replaces the earlier.
func (k *Runtime) tellScheduler(tx *txn, pid int64, state process.State, wait *process.Wait, gen uint64) {
	t := transition{pid: pid, state: state, wait: wait, gen: gen}
	for i := range tx.transitions {
		if tx.transitions[i].pid == pid {
			tx.transitions[i] = t
			return
		}
	}
	if len(tx.transitions) == 0 {
		tx.AfterCommit(func() {
			for _, t := range tx.transitions {
				k.sched.notify(t.pid, t.state, t.wait, t.gen)
			}
		})
	}
	tx.transitions = append(tx.transitions, t)
}

// runnableBesides counts the processes other than pid that tx leaves
// runnable: the scheduler will queue them once it is durable.
func (tx *txn) runnableBesides(pid int64) int {
	n := 0
	for _, t := range tx.transitions {
		if t.pid != pid && t.state == process.Runnable {
			n++
		}
	}
	return n
}

// markCommit records that tx holds a change of kind (failpoint builds only).
func (tx *txn) markCommit(kind string) {
	if !failpoint.Enabled {
		return
	}
	for _, have := range tx.kinds {
		if have == kind {
			return
		}
	}
	tx.kinds = append(tx.kinds, kind)
}
