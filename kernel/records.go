package kernel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/quantum"
)

// Key layout of the kernel's prefix. Every key the kernel writes is under
// "k/"; objects owns "o/", "ev/" and "seq/".
const (
	prefixProc    = "k/p/"
	prefixPending = "k/pa/"
	prefixCall    = "k/call/"
	prefixRetain  = "k/io/"
	prefixToolRec = "k/tc/"
	// prefixLive indexes the processes that are not terminal (and those
	// that ended while their outside effect ran, until its result is
	// recorded: setLive), so that a reopen reads only what recovery and
	// scheduling need however many processes ever ran; keyLiveIndex marks a
	// directory whose index is built.
	prefixLive   = "k/live/"
	keyLiveIndex = "k/live-index"
)

func procKey(pid int64) []byte { return pidKey(prefixProc, pid) }

// pidKey is prefix and a pid zero-padded to 20 digits, with room
// (pidKeyLen) for the '/' and second number that most keys add.
func pidKey(prefix string, pid int64) []byte {
	return objects.AppendPadded(append(make([]byte, 0, len(prefix)+pidKeyLen), prefix...), pid, 20)
}

const pidKeyLen = 20 + 1 + 20

// keyPID reads the zero-padded pid that follows the first prefixLen bytes
// of key.
func keyPID(key []byte, prefixLen int) (int64, error) {
	pid, err := strconv.ParseInt(string(key[prefixLen:]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("key %q: no pid after its prefix: %w", key, err)
	}
	return pid, nil
}

func liveKey(pid int64) []byte { return pidKey(prefixLive, pid) }
func pendingKey(pid int64, id string) []byte {
	return append(append(pidKey(prefixPending, pid), '/'), id...)
}
func callKey(pid int64, turn int) []byte {
	return objects.AppendPadded(append(pidKey(prefixCall, pid), '/'), int64(turn), 10)
}
func retainKey(pid int64, seq uint64) []byte {
	return objects.AppendPaddedUnsigned(append(pidKey(prefixRetain, pid), '/'), seq, 20)
}
func retainPrefix(pid int64) []byte { return append(pidKey(prefixRetain, pid), '/') }
func toolRecKey(pid int64, seq uint64) []byte {
	return objects.AppendPaddedUnsigned(append(pidKey(prefixToolRec, pid), '/'), seq, 20)
}

// Namespace returns the Object namespace of a process.
func Namespace(pid int64) string { return fmt.Sprintf("proc-%d", pid) }

// namespacePID is the pid whose namespace ns is, if it is one.
func namespacePID(ns string) (int64, bool) {
	digits, ok := strings.CutPrefix(ns, "proc-")
	if !ok || digits == "" || digits[0] == '0' || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	pid, err := strconv.ParseInt(digits, 10, 64)
	return pid, err == nil
}

// procRecord is the durable record of one process: the state machine's
// record plus what the kernel keeps beside it.
type procRecord struct {
	process.Record
	ContextOID string `json:"context_oid,omitempty"`
	RootPID    int64  `json:"root_pid"`
	// ObservedTools are the unique names of tools that succeeded, for the
	// completion review.
	ObservedTools []string `json:"observed_tools,omitempty"`
	// ResumePending names the pending action whose wait has ended and whose
	// result the next quantum must produce.
	ResumePending string `json:"resume_pending,omitempty"`
	// RetainedEntries counts context entries already written as evidence.
	RetainedEntries int `json:"retained_entries"`
	// ToolCalls counts recorded tool calls (the key sequence of k/tc/).
	ToolCalls uint64 `json:"tool_calls"`
	// RetainSeq is the last evidence sequence number.
	RetainSeq uint64 `json:"retain_seq"`
	// ReservedTokens is what the running quantum reserved of the token budget.
	ReservedTokens int64 `json:"reserved_tokens,omitempty"`
	// EvidenceSHA256 is the hash of the completion evidence a gated exit passed.
	EvidenceSHA256 string `json:"evidence_sha256,omitempty"`
	// ActiveSkills are the skills the process activated, in order.
	ActiveSkills []string `json:"active_skills,omitempty"`
	// ToolTable, when set, is exactly the process's tool table.
	ToolTable []string `json:"tool_table"` // null and [] differ: [] is an empty table
	// Scopes are the scopes the runner of this process declared (nil: no
	// runner restricts it).
	Scopes []string `json:"scopes"`
	// Dispatch is the batch being dispatched, stored only while a call's
	// outside effect runs between two commits; otherwise the quantum holds
	// its batch itself.
	Dispatch *quantum.Batch `json:"dispatch,omitempty"`
	// CompactionOf is the pid whose context this compressor summarizes.
	CompactionOf int64 `json:"compaction_of,omitempty"`
	// PressureEpisode is set while the context is past the pressure
	// threshold and maintenance or a notice already happened.
	PressureEpisode bool `json:"pressure_episode,omitempty"`
	// WallMark is how far wall time has been charged to the budgets.
	WallMark time.Time `json:"wall_mark,omitzero"`
	// Replies counts provider responses recorded in the context. Requests
	// carry it as their turn: a call interrupted by a crash is counted in
	// Turn (it was charged) but not here, so it is asked again.
	Replies int `json:"replies"`
	// PauseRequested pauses the process when its running quantum ends.
	PauseRequested bool `json:"pause_requested,omitempty"`
	// HostHold says the Host paused the process (or asked to): only the
	// Host's continue lifts it, not a parent's resume.
	HostHold bool `json:"host_hold,omitempty"`
	// NotifiedSeq is the highest mailbox sequence the process was told of.
	NotifiedSeq uint64 `json:"notified_seq,omitempty"`
	// InterruptedTurn is set by recovery when a quantum's provider call had
	// unknown settlement; the next prompt tells the process.
	InterruptedTurn bool `json:"interrupted_turn,omitempty"`
	// ProviderFailures counts failed attempts of the current provider call;
	// a completed call resets it.
	ProviderFailures int `json:"provider_failures,omitempty"`
	// WindowRetried is set when the server refused the prompt as longer than
	// the model's window and maintenance ran: a second refusal fails.
	WindowRetried bool `json:"window_retried,omitempty"`
	// ForceMaintenance makes the next quantum run context maintenance
	// whatever the estimate says (the server's word beats it).
	ForceMaintenance bool `json:"force_maintenance,omitempty"`
	// TextOnlyTurns counts consecutive replies without a tool call.
	TextOnlyTurns int `json:"text_only_turns,omitempty"`
	// ApprovedCall is the call a Human approved, while it runs: its ask
	// grants count as allow.
	ApprovedCall string `json:"approved_call,omitempty"`
	// decisions are the authority decisions of the call being dispatched,
	// for its tool record; never stored on the record itself.
	decisions []string
	// goal is the prompt's goal as read from one version of the goal
	// Object, for the calls after it; never stored, and never changed once
	// built, so copies of the record share it.
	goal *promptGoal
}

// noteDecision keeps d for the tool record of the call being made.
func (r *procRecord) noteDecision(d capabilities.Decision) {
	r.decisions = append(r.decisions, d.Reason)
}

// snapshot returns a copy of r that shares nothing either may change in
// place (snapshotInto), so that a call rolled back to its savepoint also
// gives back what it changed in memory (a reserved one-shot, a budget
// charge).
func (r *procRecord) snapshot() *procRecord {
	c := new(procRecord)
	r.snapshotInto(c)
	return c
}

// snapshotInto makes c a copy of r that shares nothing either may change in
// place. The lists of names a record keeps (observed tools, active skills,
// tool table, scopes) are shared, as the grant list is: each is only ever
// replaced by a new one, and the copy's is cut to its length so that an
// append to it moves it to an array of its own.
func (r *procRecord) snapshotInto(c *procRecord) {
	*c = *r
	c.Record = r.Record.Clone()
	c.ObservedTools = slices.Clip(r.ObservedTools)
	c.ActiveSkills = slices.Clip(r.ActiveSkills)
	c.ToolTable = slices.Clip(r.ToolTable) // nil and [] differ, and stay so
	c.Scopes = slices.Clip(r.Scopes)
	c.Dispatch = r.Dispatch.Clone()
	c.decisions = slices.Clone(r.decisions)
}

// restore makes r the snapshot s again. The batch being dispatched is not
// part of the record while its calls run (the quantum holds it), so putting
// a saved record back cannot lose or stale it.
func (r *procRecord) restore(s *procRecord) { *r = *s }

// waitsLong reports whether r waits for something other than a child: a
// message, a sleep, a Human, a compaction stage. Such a wait may last long,
// so the decoded record and context of the process leave the caches, and
// memory follows the processes that run. A parent waiting for its child
// stays: it is part of a computation that runs, every quantum of the child
// loads it to charge the budgets up the chain, and it resumes when the
// child ends.
func (r *procRecord) waitsLong() bool {
	return r.State == process.Waiting && (r.Wait == nil || r.Wait.Kind != process.WaitChild)
}

func loadProc(tx *txn, pid int64) (*procRecord, error) {
	if saved, ok := tx.procs[pid]; ok {
		return saved.copy.snapshot(), nil
	}
	if r, ok, err := tx.records.load(tx, pid); ok || err != nil {
		return r, err
	}
	b, err := tx.Get(procKey(pid))
	if err != nil {
		if errors.Is(err, objects.ErrNotFound) {
			return nil, fmt.Errorf("%w: pid %d", ErrNoProcess, pid)
		}
		return nil, fmt.Errorf("load process %d: %w", pid, err)
	}
	var r procRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode process %d: %w", pid, err)
	}
	return &r, nil
}

// saveProc saves r as it is now; the record is written when tx's function
// ends, once however often it was saved.
func saveProc(tx *txn, r *procRecord) error {
	if tx.readOnly {
		return fmt.Errorf("save process %d: %w", r.PID, objects.ErrReadOnly)
	}
	if tx.procs == nil {
		tx.procs = map[int64]savedRecord{}
	}
	if saved, ok := tx.procs[r.PID]; ok && saved.gen == tx.savepoints {
		// No savepoint holds this copy: it takes the record as it is now.
		r.snapshotInto(saved.copy)
		tx.procs[r.PID] = savedRecord{copy: saved.copy, from: r, gen: saved.gen}
		return nil
	}
	tx.procs[r.PID] = savedRecord{copy: r.snapshot(), from: r, gen: tx.savepoints}
	return nil
}

// indexedLive reports whether r has an entry in the index of live
// processes (setLive).
func (r *procRecord) indexedLive() bool { return !r.State.Terminal() || r.Dispatch != nil }

// setLive keeps r's entry in the index of live processes. A process that
// ended while its outside effect ran keeps its entry until the effect's
// result is recorded: if the runtime stops first, recovery must answer the
// call.
func setLive(tx *txn, r *procRecord) error {
	if !r.indexedLive() {
		return tx.Delete(liveKey(r.PID))
	}
	b, err := liveEntryOf(r).appendJSON(make([]byte, 0, 64))
	if err != nil {
		return fmt.Errorf("encode live entry of pid %d: %w", r.PID, err)
	}
	return tx.SetHandoff(liveKey(r.PID), b)
}

// writeProcs writes the records saved in tx, in pid order, and keeps the
// index of live processes with them.
func writeProcs(tx *txn) error {
	written := make([]*procRecord, 0, len(tx.procs))
	for _, pid := range slices.Sorted(maps.Keys(tx.procs)) {
		r := tx.procs[pid].copy
		r.decisions = nil // not stored; a cached record must be what a load decodes
		if err := putRecord(tx, procKey(pid), r); err != nil {
			return err
		}
		if err := setLive(tx, r); err != nil {
			return err
		}
		written = append(written, r)
	}
	tx.records.publish(tx, written)
	tx.procs = nil
	return nil
}

// recordEncoder is a record the kernel stores as JSON with a hand-written
// encoder (encode.go; AppendValue is its appendJSON), and says whether that
// encoder cannot fail on it.
type recordEncoder interface {
	objects.ValueEncoder
	encodesSafely() bool
}

// putRecord stages rec under key. rec must not change from now on (a saved
// process record's copy, which the record cache holds and loads take
// snapshots of; a call or tool record staged once its fields are set). A
// record whose encoding cannot fail is encoded when the batch is built, out
// of the store's write lock (objects.Txn.SetFunc); any other now, where a
// failure fails this commit rather than the store. With LIBOS_CHECK_CACHES=1
// it is also encoded now, and the later encoding must be the same.
func putRecord(tx *txn, key []byte, rec recordEncoder) error {
	if tx.records == nil || !rec.encodesSafely() {
		b, err := rec.AppendValue(make([]byte, 0, recordEncodingSize))
		if err != nil {
			return fmt.Errorf("encode record %s: %w", key, err)
		}
		return tx.SetHandoff(key, b)
	}
	if tx.records.check {
		now, err := rec.AppendValue(nil)
		if err != nil {
			return fmt.Errorf("encode record %s: %w", key, err)
		}
		return tx.SetFunc(key, &unchangedRecord{key: key, rec: rec, now: now})
	}
	return tx.SetFunc(key, rec)
}

// unchangedRecord encodes rec, staged with its encoding now, and fails if
// the encoding changed since (LIBOS_CHECK_CACHES=1).
type unchangedRecord struct {
	key []byte
	rec recordEncoder
	now []byte
}

func (u *unchangedRecord) AppendValue(dst []byte) ([]byte, error) {
	b, err := u.rec.AppendValue(dst)
	if err == nil && !bytes.Equal(b[len(dst):], u.now) {
		err = fmt.Errorf("record %s changed after it was staged: %s, then %s", u.key, u.now, b[len(dst):])
	}
	return b, err
}

// liveEntry is what the live index keeps of a process: what recovery and
// the scheduler need at a reopen, so neither decodes a record to find its
// work.
type liveEntry struct {
	PID   int64            `json:"-"`
	State process.State    `json:"s"`
	Gen   uint64           `json:"g"`
	Wait  process.WaitKind `json:"w,omitempty"`
	Until time.Time        `json:"u,omitzero"`
}

func liveEntryOf(r *procRecord) liveEntry {
	e := liveEntry{PID: r.PID, State: r.State, Gen: r.Gen}
	if r.Wait != nil {
		e.Wait, e.Until = r.Wait.Kind, r.Wait.Until
	}
	return e
}

// mayBeLive reports whether pid may not be terminal in tx: it is saved in
// tx, or the live index holds it. A process that ended before tx has no
// entry (but one whose outside effect was in flight when it ended, until the
// effect's result is recorded), so telling that costs a key lookup instead
// of a record's decoding.
func mayBeLive(tx *txn, pid int64) (bool, error) {
	if _, ok := tx.procs[pid]; ok {
		return true, nil
	}
	_, found, err := tx.Find(liveKey(pid))
	if err != nil {
		return false, fmt.Errorf("live index entry of pid %d: %w", pid, err)
	}
	return found, nil
}

// scanLive calls fn with the index entry of every process that is not
// terminal, and of every one that ended with its outside effect in flight,
// in pid order.
func scanLive(tx *txn, fn func(e liveEntry) error) error {
	return tx.Scan([]byte(prefixLive), func(key, v []byte) error {
		var e liveEntry
		var err error
		if e.PID, err = keyPID(key, len(prefixLive)); err != nil {
			return fmt.Errorf("live index: %w", err)
		}
		if err := json.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("live index entry of pid %d: %w", e.PID, err)
		}
		return fn(e)
	})
}

// liveIndexVersion marks the index's format; a directory whose index is
// older (or missing) is indexed again at open.
const liveIndexVersion = "3"

// buildLiveIndex indexes the live processes of a directory whose index is
// missing or older, once.
func (k *Runtime) buildLiveIndex() error {
	err := k.update(func(tx *txn) error {
		if v, err := tx.Get([]byte(keyLiveIndex)); err == nil && string(v) == liveIndexVersion {
			return errSkip
		} else if err != nil && !errors.Is(err, objects.ErrNotFound) {
			return err
		}
		var stale [][]byte
		if err := tx.Scan([]byte(prefixLive), func(key, _ []byte) error {
			stale = append(stale, append([]byte(nil), key...))
			return nil
		}); err != nil {
			return err
		}
		for _, key := range stale {
			if err := tx.Delete(key); err != nil {
				return err
			}
		}
		err := tx.Scan([]byte(prefixProc), func(_, v []byte) error {
			var r procRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("decode process record: %w", err)
			}
			if !r.indexedLive() {
				return nil // the stale entries are deleted above
			}
			return setLive(tx, &r)
		})
		if err != nil {
			return err
		}
		return tx.Set([]byte(keyLiveIndex), []byte(liveIndexVersion))
	})
	if errors.Is(err, errSkip) {
		return nil
	}
	return err
}

// step applies a state-machine input, records the event and saves.
func (k *Runtime) step(tx *txn, r *procRecord, in process.Input) error {
	from := r.State
	next, err := process.Step(r.Record, in, k.clock.Now())
	if err != nil {
		return err
	}
	r.Record = next
	ev := Event{Kind: EventState, PID: r.PID, From: string(from), To: string(next.State), Reason: in.Reason}
	if next.Wait != nil {
		ev.Wait = string(next.Wait.Kind)
	}
	if err := k.emit(tx, ev); err != nil {
		return err
	}
	k.tellScheduler(tx, r.PID, next.State, next.Wait, next.Gen)
	return saveProc(tx, r)
}

// chain returns the records of pid and its ancestors, nearest first. An
// ancestor whose context tx staged, and of which tx saved no other copy
// since, is the very record the context was staged with (txn.holder): a
// charge made through it is saved with its context, not on a second copy
// that the context's save would undo. A savepoint's rollback gives that
// charge back (txn.rollbackTo).
func chain(tx *txn, r *procRecord) ([]*procRecord, error) {
	out := []*procRecord{r}
	for p := r.ParentPID; p != 0; {
		a := tx.holder(p)
		if a == nil {
			var err error
			if a, err = loadProc(tx, p); err != nil {
				return nil, err
			}
		}
		out = append(out, a)
		p = a.ParentPID
	}
	return out, nil
}

// wallLeft is the wall time r may still spend, in whole seconds, and
// whether its budget limits it: its limit less what was charged and what
// has passed since (charged at its next call). Wall time is charged to a
// process alone, so a descendant is bounded by what its parent has left
// when it is created (createProcess).
func wallLeft(r *procRecord, now time.Time) (int64, bool) {
	if r.Limits.WallSeconds == 0 {
		return 0, false
	}
	passed, _ := quantum.WallCharge(r.WallMark, r.CreatedAt, now)
	return max(r.Limits.WallSeconds-r.Used.WallSeconds-passed, 0), true
}

// wallExhausted is the refusal of what r may no longer start, its wall
// time spent: named as every budget refusal is.
func wallExhausted(r *procRecord) error {
	return &capabilities.BudgetError{Budget: "wall_seconds", PID: r.PID, Limit: r.Limits.WallSeconds, Used: r.Limits.WallSeconds, Requested: 1}
}

// charge adds delta to the budgets of r and every ancestor, all or nothing.
// The caller saves r; ancestors are saved here.
func charge(tx *txn, r *procRecord, delta capabilities.Budget) error {
	recs, err := chain(tx, r)
	if err != nil {
		return err
	}
	accts := make([]capabilities.Account, len(recs))
	for i, rec := range recs {
		accts[i] = capabilities.Account{PID: rec.PID, Limits: rec.Limits, Used: rec.Used}
	}
	charged, err := capabilities.Charge(accts, delta)
	if err != nil {
		return err
	}
	for i, rec := range recs {
		rec.Used = charged[i].Used
		if i > 0 {
			if err := saveProc(tx, rec); err != nil {
				return err
			}
		}
	}
	return nil
}

func addObserved(list []string, name string) []string {
	i := sort.SearchStrings(list, name)
	if i < len(list) && list[i] == name {
		return list
	}
	// A new list: copies of the record share the old one (snapshot).
	return slices.Insert(slices.Clip(list), i, name)
}

// pendingAction is a durable resumable action: pending, then completed (or
// resuming while an outside step of it is in flight).
type pendingAction struct {
	ID     string `json:"id"`
	PID    int64  `json:"pid"`
	Tool   string `json:"tool"`
	CallID string `json:"call_id"`
	// Kind is the kind of wait the action belongs to.
	Kind process.WaitKind `json:"kind,omitempty"`
	// Args are the call's arguments, so its result can be paired with a
	// restated call when the history that held it was lost.
	Args      json.RawMessage `json:"args,omitempty"`
	State     string          `json:"state"` // pending | resuming | completed | failed
	Data      json.RawMessage `json:"data,omitempty"`
	StartedAt time.Time       `json:"started_at"`
	Recovered bool            `json:"recovered,omitempty"`
	// Authority is the decisions that allowed the call as it started (and
	// each stage since), for its tool record once it is answered.
	Authority []string `json:"authority,omitempty"`
}

const (
	pendingStatePending   = "pending"
	pendingStateResuming  = "resuming"
	pendingStateCompleted = "completed"
)

func loadPending(tx *txn, pid int64, id string) (*pendingAction, error) {
	b, err := tx.Get(pendingKey(pid, id))
	if err != nil {
		return nil, fmt.Errorf("load pending action %s of pid %d: %w", id, pid, err)
	}
	var p pendingAction
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("decode pending action %s: %w", id, err)
	}
	return &p, nil
}

func savePending(tx *txn, p *pendingAction) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return tx.Set(pendingKey(p.PID, p.ID), b)
}

// callRecord is the durable record of one provider call.
type callRecord struct {
	Turn int `json:"turn"`
	// Attempt is this call's attempt number among the attempts of one
	// request (a backoff asks the same request again).
	Attempt    int    `json:"attempt,omitempty"`
	Status     string `json:"status"` // started | completed | failed | unknown
	Settlement string `json:"settlement,omitempty"`
	// RequestSHA256 names the messages the call sent (requestDigest).
	RequestSHA256  string    `json:"request_sha256"`
	StartedAt      time.Time `json:"started_at"`
	FinishedAt     time.Time `json:"finished_at,omitzero"`
	ReservedTokens int64     `json:"reserved_tokens"`
	Usage          *usage    `json:"usage,omitempty"`
	Error          string    `json:"error,omitempty"`
	ToolCalls      int       `json:"tool_calls"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// toolRecord is the durable audit record of one tool call.
type toolRecord struct {
	Turn         int    `json:"turn"`
	CallID       string `json:"call_id"`
	Tool         string `json:"tool"`
	OK           bool   `json:"ok"`
	ArgsSHA256   string `json:"arguments_sha256"`
	ResultSHA256 string `json:"result_sha256"`
	Code         string `json:"code,omitempty"`
	// Authority is the decisions that allowed or refused the call, in the
	// order its checks ran (the grant that allowed it, or the rule that
	// refused it).
	Authority []string `json:"authority,omitempty"`
	// args and result, when hashLate is set, are the bytes ArgsSHA256 and
	// ResultSHA256 are the digests of, hashed when the record is encoded,
	// after the store's write lock is let go; neither changes once staged.
	args, result []byte
	hashLate     bool
}

func putJSON(tx *txn, key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return tx.SetHandoff(key, b)
}
