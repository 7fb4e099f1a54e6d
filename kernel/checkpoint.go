package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
)

// Checkpoint errors a Host tells apart.
var (
	ErrNoCheckpoint = errors.New("no such checkpoint")
	ErrNotQuiescent = errors.New("the subtree is not quiescent")
)

const (
	prefixCheckpoint     = "k/cp/"
	prefixCheckpointData = "k/cpd/"
)

func checkpointKey(id string) []byte { return []byte(prefixCheckpoint + id) }
func checkpointDataPrefix(id string) []byte {
	return []byte(prefixCheckpointData + id + "/")
}

// Checkpoint describes a checkpoint of a subtree: the same value the
// checkpoint tools show a process.
type Checkpoint = tools.Checkpoint

type checkpointMarks = tools.CheckpointMarks

// checkpointObject is one captured Object: runtime-local payloads are
// captured into the checkpoint, so a restore brings them back.
type checkpointObject struct {
	Meta        objects.Meta `json:"meta"`
	Payload     []byte       `json:"payload,omitempty"`
	PayloadLost bool         `json:"payload_lost,omitempty"`
}

// subtree lists root and every descendant, parents before children.
func subtree(tx *txn, root int64) ([]int64, error) {
	out := []int64{root}
	for i := 0; i < len(out); i++ {
		kids, err := children(tx, out[i])
		if err != nil {
			return nil, err
		}
		out = append(out, kids...)
	}
	return out, nil
}

func putCheckpointItem(tx *txn, id, kind, key string, v any) error {
	return putJSON(tx, []byte(fmt.Sprintf("%s%s/%s", checkpointDataPrefix(id), kind, key)), v)
}

// CreateCheckpoint snapshots the subtree rooted at pid durably: process
// records (capabilities and budgets with them), their Objects with payloads,
// mailboxes, pending actions, context and goal Objects.
func (k *Runtime) CreateCheckpoint(pid int64) (Checkpoint, error) {
	var cp Checkpoint
	err := k.update(func(tx *txn) error {
		var err error
		cp, err = k.createCheckpoint(tx, pid, nil, nil)
		return err
	})
	return cp, err
}

// createCheckpoint captures root's subtree in tx. A process creating a
// checkpoint from inside its own quantum passes its live record and context
// as caller and callerCtx: the stored ones are stale until the quantum's
// commit, and the capture must hold the results the process already saw.
func (k *Runtime) createCheckpoint(tx *txn, root int64, caller *procRecord, callerCtx *llmContext) (Checkpoint, error) {
	pids, err := subtree(tx, root)
	if err != nil {
		return Checkpoint{}, err
	}
	seq, err := tx.NextSequence("checkpoint")
	if err != nil {
		return Checkpoint{}, err
	}
	cp := Checkpoint{ID: fmt.Sprintf("cp-%d", seq), RootPID: root, CreatedAt: k.now(), PIDs: pids, Marks: map[int64]checkpointMarks{}}
	for _, pid := range pids {
		r, err := loadProc(tx, pid)
		if err != nil {
			return Checkpoint{}, err
		}
		if caller != nil && pid == caller.PID {
			r = caller
		}
		if err := putCheckpointItem(tx, cp.ID, "p", fmt.Sprintf("%020d", pid), r); err != nil {
			return Checkpoint{}, err
		}
		last, err := mailbox.LastSeq(tx.Txn, pid)
		if err != nil {
			return Checkpoint{}, err
		}
		cp.Marks[pid] = checkpointMarks{MailboxSeq: last, ToolCalls: r.ToolCalls}
		metas, err := tx.List(r.Namespace)
		if err != nil {
			return Checkpoint{}, err
		}
		for _, m := range metas {
			item := checkpointObject{Meta: m}
			_, payload, err := tx.Read(m.OID)
			switch {
			case r == caller && m.OID == caller.ContextOID && callerCtx != nil:
				// The caller's context as it stands in this quantum.
				if item.Payload, err = json.Marshal(contextDoc{Entries: callerCtx.entries}); err != nil {
					return Checkpoint{}, fmt.Errorf("encode the context of pid %d: %w", pid, err)
				}
			case errors.Is(err, objects.ErrPayloadLost):
				// What the kernel can rebuild from evidence is captured as
				// rebuilt: the context and the initial goal.
				item.Payload, item.PayloadLost = k.rebuiltPayload(tx, r, m)
			case err != nil:
				return Checkpoint{}, err
			default:
				item.Payload = payload
			}
			if err := putCheckpointItem(tx, cp.ID, "o", m.OID, item); err != nil {
				return Checkpoint{}, err
			}
			cp.Objects++
		}
		err = mailbox.List(tx.Txn, pid, func(m *mailbox.Message) error {
			cp.Messages++
			return putCheckpointItem(tx, cp.ID, "m", fmt.Sprintf("%020d/%020d", pid, m.Seq), m)
		})
		if err != nil {
			return Checkpoint{}, err
		}
		if r.ResumePending != "" || (r.Wait != nil && r.Wait.PendingID != "") {
			id := r.ResumePending
			if id == "" {
				id = r.Wait.PendingID
			}
			p, err := loadPending(tx, pid, id)
			if err != nil {
				return Checkpoint{}, err
			}
			if err := putCheckpointItem(tx, cp.ID, "a", fmt.Sprintf("%020d", pid), p); err != nil {
				return Checkpoint{}, err
			}
		}
	}
	if err := putJSON(tx, checkpointKey(cp.ID), cp); err != nil {
		return Checkpoint{}, err
	}
	tx.markCommit(commitCheckpoint)
	return cp, k.emit(tx, Event{Kind: EventCheckpoint, PID: root, Reason: "created " + cp.ID})
}

// rebuiltPayload returns what the kernel can rebuild of a lost payload of
// one of r's Objects, and whether it stays lost.
func (k *Runtime) rebuiltPayload(tx *txn, r *procRecord, m objects.Meta) ([]byte, bool) {
	switch m.OID {
	case r.ContextOID:
		if c, err := k.loadContext(tx, r); err == nil {
			if b, err := json.Marshal(contextDoc{Entries: c.entries}); err == nil {
				return b, false
			}
		}
	case r.GoalOID:
		if goal, err := k.recoveredGoal(tx, r); err == nil {
			return []byte(goal), false
		}
	}
	return nil, true
}

func loadCheckpoint(tx *txn, id string) (Checkpoint, error) {
	var cp Checkpoint
	b, err := tx.Get(checkpointKey(id))
	if errors.Is(err, objects.ErrNotFound) {
		return cp, fmt.Errorf("%w: %q", ErrNoCheckpoint, id)
	}
	if err != nil {
		return cp, err
	}
	return cp, json.Unmarshal(b, &cp)
}

// checkpointData is a checkpoint's captured items.
type checkpointData struct {
	procs    map[int64]*procRecord
	objects  []checkpointObject
	messages map[int64][]mailbox.Message
	pending  map[int64]*pendingAction
}

func loadCheckpointData(tx *txn, id string) (*checkpointData, error) {
	d := &checkpointData{procs: map[int64]*procRecord{}, messages: map[int64][]mailbox.Message{}, pending: map[int64]*pendingAction{}}
	prefix := checkpointDataPrefix(id)
	err := tx.Scan(prefix, func(key, v []byte) error {
		kind, rest, _ := strings.Cut(string(key[len(prefix):]), "/")
		switch kind {
		case "p":
			var r procRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			d.procs[r.PID] = &r
		case "o":
			var o checkpointObject
			if err := json.Unmarshal(v, &o); err != nil {
				return err
			}
			d.objects = append(d.objects, o)
		case "m":
			var m mailbox.Message
			if err := json.Unmarshal(v, &m); err != nil {
				return err
			}
			d.messages[m.Recipient] = append(d.messages[m.Recipient], m)
		case "a":
			var p pendingAction
			if err := json.Unmarshal(v, &p); err != nil {
				return err
			}
			d.pending[p.PID] = &p
		default:
			return fmt.Errorf("checkpoint %s: unknown item %q", id, rest)
		}
		return nil
	})
	return d, err
}

// Checkpoints lists checkpoints, optionally of one root (0 for all).
func (k *Runtime) Checkpoints(root int64) ([]Checkpoint, error) {
	var out []Checkpoint
	err := k.view(func(tx *txn) error {
		return tx.Scan([]byte(prefixCheckpoint), func(_, v []byte) error {
			var cp Checkpoint
			if err := json.Unmarshal(v, &cp); err != nil {
				return err
			}
			if root == 0 || cp.RootPID == root {
				out = append(out, cp)
			}
			return nil
		})
	})
	return out, err
}

// InspectCheckpoint returns a checkpoint's description.
func (k *Runtime) InspectCheckpoint(id string) (Checkpoint, error) {
	var cp Checkpoint
	err := k.view(func(tx *txn) error {
		var err error
		cp, err = loadCheckpoint(tx, id)
		return err
	})
	return cp, err
}

// RestoreReport says what a restore did and which external effects it did
// not undo.
type RestoreReport = tools.RestoreReport

// EffectSinceRef is a tool call made after the checkpoint: its effect stays.
type EffectSinceRef = tools.EffectSinceRef

// RestoreCheckpoint restores a quiescent subtree to checkpoint id.
func (k *Runtime) RestoreCheckpoint(id string) (RestoreReport, error) {
	var rep RestoreReport
	err := k.update(func(tx *txn) error {
		var err error
		rep, err = k.restoreCheckpoint(tx, id, nil, false)
		return err
	})
	return rep, err
}

// restoreCheckpoint restores checkpoint id; caller, when not nil, is the
// process asking (approved: in a call a Human approved), which may not be
// inside the subtree, nor be denied writing an Object the restore rewrites
// or removes.
func (k *Runtime) restoreCheckpoint(tx *txn, id string, caller *procRecord, approved bool) (RestoreReport, error) {
	cp, err := loadCheckpoint(tx, id)
	if err != nil {
		return RestoreReport{}, err
	}
	data, err := loadCheckpointData(tx, id)
	if err != nil {
		return RestoreReport{}, err
	}
	var callerPID int64
	if caller != nil {
		callerPID = caller.PID
	}
	current, recs, err := quiescentSubtree(tx, cp.RootPID, id, callerPID)
	if err != nil {
		return RestoreReport{}, err
	}
	rep := RestoreReport{Checkpoint: id, Restored: []int64{}, Killed: []int64{}, KeptTerminal: []int64{}, NotRestored: []string{},
		EffectsSince: effectsSince(tx, cp, current, recs)}
	// Processes born after the checkpoint end.
	for _, pid := range current {
		if _, ok := data.procs[pid]; ok || recs[pid].State.Terminal() {
			continue
		}
		if err := k.step(tx, recs[pid], process.Input{Kind: process.Kill, Reason: "a checkpoint restore ended it: it did not exist at " + id}); err != nil {
			return RestoreReport{}, err
		}
		rep.Killed = append(rep.Killed, pid)
	}
	// Processes that ended since the checkpoint stay ended, with their
	// Objects and results: an exit is irreversible.
	kept := map[string]bool{}
	for _, pid := range cp.PIDs {
		if recs[pid].State.Terminal() && !data.procs[pid].State.Terminal() {
			kept[Namespace(pid)] = true
			rep.KeptTerminal = append(rep.KeptTerminal, pid)
		}
	}
	if caller != nil {
		// A restore rewrites and removes the subtree's Objects: a grant
		// denying the caller a write of one stands against it, as against
		// write_object.
		for _, pid := range cp.PIDs {
			if kept[Namespace(pid)] {
				continue
			}
			metas, err := tx.List(Namespace(pid))
			if err != nil {
				return RestoreReport{}, err
			}
			for _, m := range metas {
				if err := k.unopposed(tx, caller, approved, authority.ObjectWrite, authority.Params{OID: m.OID, Namespace: m.Namespace}); err != nil {
					return RestoreReport{}, fmt.Errorf("restore %s would rewrite or remove object %s: %w", id, m.OID, err)
				}
			}
		}
	}
	// Read before the restore rewrites the contexts that show the answers.
	started := k.startedSince(tx, rep.EffectsSince, recs)
	if rep.NotRestored, err = restoreObjects(tx, cp, data, kept); err != nil {
		return RestoreReport{}, err
	}
	for _, pid := range cp.PIDs {
		if kept[Namespace(pid)] {
			continue
		}
		ended := func(child int64) bool { c := recs[child]; return c != nil && c.State.Terminal() }
		superseded, err := k.restoreRecord(tx, id, cp, data, recs[pid], started[pid], ended)
		if err != nil {
			return RestoreReport{}, err
		}
		if v, ok := capturedVersion(data, data.procs[pid].ContextOID); ok {
			old := data.procs[pid]
			// After the flush: the context's version is final only then.
			tx.onFlush(func() error { return rebaseRestoredJob(tx, old, v) })
		}
		rep.SupersededMessages += superseded
		rep.Restored = append(rep.Restored, pid)
	}
	tx.markCommit(commitCheckpoint)
	return rep, k.emit(tx, Event{Kind: EventCheckpoint, PID: cp.RootPID, Reason: "restored " + id})
}

// startedSince returns, by pid, the ids of the calls recorded since the
// checkpoint that started: what they did may have happened, and a restore
// does not undo it. A call answered as never started (not started, or
// refused before it ran: denied by a grant or a Human, invalid arguments,
// an exhausted budget, all of which leave nothing behind) is not one of
// them, so a call held for approval at the checkpoint and refused or
// cancelled since is held again by the restored process and runs at most
// once. A failed call whose answer the context no longer shows counts as
// started: wrongly held again, it could run twice.
func (k *Runtime) startedSince(tx *txn, effects []EffectSinceRef, recs map[int64]*procRecord) map[int64]map[string]bool {
	out := map[int64]map[string]bool{}
	for pid := range recs {
		out[pid] = map[string]bool{}
	}
	contexts := map[int64]*llmContext{}
	for _, e := range effects {
		if e.Code == tools.CodeCancelled {
			continue
		}
		if !e.OK {
			c, ok := contexts[e.PID]
			if !ok {
				probe := *recs[e.PID] // loadContext may note a rebuild on the record it is given
				c, _ = k.loadContext(tx, &probe)
				contexts[e.PID] = c // nil when unreadable: its answers are unknown
			}
			if answeredNotStarted(c, e.CallID) {
				continue
			}
		}
		out[e.PID][e.CallID] = true
	}
	return out
}

// answeredNotStarted reports whether the latest answer to call id in c
// says the call never started (effect_started false), as every refusal and
// every not-started answer does.
func answeredNotStarted(c *llmContext, id string) bool {
	if c == nil {
		return false
	}
	for i := len(c.entries) - 1; i >= 0; i-- {
		if e := &c.entries[i]; e.Role == llm.RoleTool && e.ToolCallID == id {
			var res struct {
				OK            bool  `json:"ok"`
				EffectStarted *bool `json:"effect_started"`
			}
			return json.Unmarshal([]byte(e.Content), &res) == nil && !res.OK && res.EffectStarted != nil && !*res.EffectStarted
		}
	}
	return false
}

// capturedVersion returns the version of Object oid the checkpoint captured.
func capturedVersion(data *checkpointData, oid string) (uint64, bool) {
	for _, o := range data.objects {
		if o.Meta.OID == oid {
			return o.Meta.Version, true
		}
	}
	return 0, false
}

// quiescentSubtree loads the records of root's subtree as it is now, and
// refuses a restore of id while one of them runs a quantum or is caller.
func quiescentSubtree(tx *txn, root int64, id string, caller int64) ([]int64, map[int64]*procRecord, error) {
	current, err := subtree(tx, root)
	if err != nil {
		return nil, nil, err
	}
	recs := map[int64]*procRecord{}
	for _, pid := range current {
		r, err := loadProc(tx, pid)
		if err != nil {
			return nil, nil, err
		}
		if pid == caller {
			return nil, nil, fmt.Errorf("%w: pid %d is inside the subtree of %s and cannot restore itself", ErrNotQuiescent, caller, id)
		}
		if r.State == process.Running {
			return nil, nil, fmt.Errorf("%w: pid %d is running a quantum", ErrNotQuiescent, pid)
		}
		recs[pid] = r
	}
	return current, recs, nil
}

// effectsSince lists the calls recorded since cp: external effects are
// reported by a restore, never undone.
func effectsSince(tx *txn, cp Checkpoint, current []int64, recs map[int64]*procRecord) []EffectSinceRef {
	out := []EffectSinceRef{}
	for _, pid := range current {
		for seq := cp.Marks[pid].ToolCalls + 1; seq <= recs[pid].ToolCalls; seq++ {
			var tr toolRecord
			if b, err := tx.Get(toolRecKey(pid, seq)); err == nil && json.Unmarshal(b, &tr) == nil {
				out = append(out, EffectSinceRef{PID: pid, Tool: tr.Tool, CallID: tr.CallID, OK: tr.OK, Code: tr.Code})
			}
		}
	}
	return out
}

// restoreObjects gives captured Objects their captured payload as a new
// version and removes ones created since, outside the kept namespaces:
// versions never go backwards. It returns the captured Objects that no
// longer exist.
func restoreObjects(tx *txn, cp Checkpoint, data *checkpointData, kept map[string]bool) ([]string, error) {
	captured := map[string]bool{}
	for _, o := range data.objects {
		captured[o.Meta.OID] = true
	}
	for _, pid := range cp.PIDs {
		if kept[Namespace(pid)] {
			continue
		}
		metas, err := tx.List(Namespace(pid))
		if err != nil {
			return nil, err
		}
		for _, m := range metas {
			if !captured[m.OID] {
				if err := tx.Remove(m.OID, m.Version); err != nil {
					return nil, err
				}
			}
		}
	}
	notRestored := []string{}
	for _, o := range data.objects {
		if kept[o.Meta.Namespace] {
			continue
		}
		labels := o.Meta.Labels
		if labels == nil {
			// A nil map would leave the labels written since in place.
			labels = map[string]string{}
		}
		if o.Meta.Kind == contextKind {
			labels = advanceGeneration(tx, o.Meta)
		}
		cur, err := tx.Stat(o.Meta.OID)
		switch {
		case errors.Is(err, objects.ErrNotFound):
			notRestored = append(notRestored, o.Meta.OID)
			continue
		case err != nil:
		default:
			// One the checkpoint found lost is lost again, not left with what
			// was written since.
			_, err = tx.Write(o.Meta.OID, cur.Version, objects.WriteSpec{Payload: o.Payload, Labels: labels, DropPayload: o.PayloadLost})
		}
		if err != nil {
			return nil, fmt.Errorf("restore object %s: %w", o.Meta.OID, err)
		}
	}
	return notRestored, nil
}

// restoreRecord brings now's process back to its record in checkpoint id:
// fences advance past their high-water marks, one-shots never regain uses,
// no approval is in force, counters and budget usage keep moving forward,
// messages up to the checkpoint have the status it captured, and messages
// that arrived since are superseded (their count is returned).
func (k *Runtime) restoreRecord(tx *txn, id string, cp Checkpoint, data *checkpointData, now *procRecord, started map[string]bool, ended func(pid int64) bool) (int, error) {
	pid := now.PID
	old := data.procs[pid]
	r := fromCapture(old)
	restored, err := process.Step(old.Record, process.Input{Kind: process.Restore, Floor: now.Gen}, k.now())
	if err != nil {
		return 0, fmt.Errorf("restore pid %d: %w", pid, err)
	}
	r.Record = restored
	r.Grants = neverRegain(old.Grants, now.Grants)
	r.Used, r.Turn, r.ToolCalls, r.RetainSeq = now.Used, now.Turn, now.ToolCalls, now.RetainSeq
	r.ReservedTokens = 0 // a call in flight at the capture is answered, not resumed
	// The restored context is the captured one, and so are the statuses of
	// the messages it was told of (below).
	r.NotifiedSeq = old.NotifiedSeq
	r.WallMark = now.WallMark // wall time already charged stays charged once
	if id := r.Dispatch.EffectCallID(); id != "" {
		started[id] = true
	}
	r.Dispatch = nil
	if old.State == process.Running || old.Dispatch != nil {
		// Captured mid-quantum, or ended while its outside effect ran: like
		// a crash, the call's settlement is unknown to the restored process.
		// Calls of its batch that ran after the capture are answered as
		// started, the others as not.
		r.InterruptedTurn = old.State == process.Running
		if err := k.answerUnanswered(tx, &r, started, "the process was restored from a checkpoint taken during this batch"); err != nil {
			return 0, err
		}
	}
	p, pending := data.pending[pid]
	if pending && p.Kind == process.WaitApproval && started[p.CallID] {
		if err := k.settleRanApproval(tx, &r, started); err != nil {
			return 0, err
		}
		pending = false
	}
	// A pause the Host put on the process outlives the restore: only the
	// Host lifts it (a process restoring its child would lift it otherwise).
	r.HostHold = now.HostHold
	if r.HostHold && !r.State.Terminal() && r.State != process.Paused {
		paused, err := process.Step(r.Record, process.Input{Kind: process.Pause}, k.now())
		if err != nil {
			return 0, fmt.Errorf("restore pid %d: keep the Host's pause: %w", pid, err)
		}
		r.Record = paused
	}
	state := Event{Kind: EventState, PID: pid, From: string(now.State), To: string(r.State), Reason: "restored from " + id}
	if r.Wait != nil {
		state.Wait = string(r.Wait.Kind) // as step's events say what a process waits on
	}
	if err := k.emit(tx, state); err != nil {
		return 0, err
	}
	if pending {
		if err := savePending(tx, p); err != nil {
			return 0, err
		}
	}
	// Messages up to the mark are as the checkpoint captured them (one read
	// since is unread again); later ones arrived after it and are superseded.
	if _, err := mailbox.RestoreStatuses(tx.Txn, pid, data.messages[pid]); err != nil {
		return 0, fmt.Errorf("restore the mailbox of pid %d: %w", pid, err)
	}
	superseded, err := mailbox.SupersedeAfter(tx.Txn, pid, cp.Marks[pid].MailboxSeq)
	if err != nil {
		return 0, err
	}
	// Evidence restarts from the restored context, so a reopen rebuilds it.
	if err := k.retainSnapshot(tx, &r); err != nil {
		return 0, err
	}
	if err := saveProc(tx, &r); err != nil {
		return 0, err
	}
	waiting := r.State == process.Waiting || r.State == process.Paused && r.PausedFrom == process.Waiting
	if w := r.Wait; waiting && w != nil && (w.Kind == process.WaitChild || w.Kind == process.WaitCompaction) && ended(w.ChildPID) {
		// The child it waited for ended since the checkpoint and stays
		// ended: that exit's wake belongs to the restored wait too, paused
		// by the Host or not.
		return superseded, k.step(tx, &r, process.Input{Kind: process.Wake, Gen: r.Gen, WaitKind: w.Kind})
	}
	k.tellScheduler(tx, pid, r.State, r.Wait, r.Gen)
	return superseded, nil
}

// fromCapture starts a restored or forked record as a copy of the captured
// one, less what held only at the moment of the capture: an approval in
// force (ApprovedCall) covered the one call running then, and carried over
// it would let the next call under that id skip its Human.
func fromCapture(old *procRecord) procRecord {
	r := *old
	r.ApprovedCall = ""
	return r
}

// settleRanApproval settles a restored process whose call held for approval
// at the checkpoint was decided and ran since: restoring the wait would run
// the call again once approved, repeating what it did. The wait is not
// restored; the call is answered as of unknown settlement.
func (k *Runtime) settleRanApproval(tx *txn, r *procRecord, started map[string]bool) error {
	r.ResumePending = ""
	if r.State == process.Waiting && r.Wait != nil && r.Wait.Kind == process.WaitApproval {
		if err := k.step(tx, r, process.Input{Kind: process.Wake, Gen: r.Gen, WaitKind: process.WaitApproval}); err != nil {
			return err
		}
	}
	return k.answerUnanswered(tx, r, started, "the process was restored from a checkpoint taken while this call waited for approval, and it ran since")
}

// advanceGeneration returns a context Object's labels with the generation
// past both the current and the captured one.
func advanceGeneration(tx *txn, captured objects.Meta) map[string]string {
	gen := parseGeneration(captured.Labels)
	if cur, err := tx.Stat(captured.OID); err == nil {
		gen = max(gen, parseGeneration(cur.Labels))
	}
	labels := map[string]string{}
	for k, v := range captured.Labels {
		labels[k] = v
	}
	labels[labelGeneration] = fmt.Sprint(gen + 1)
	return labels
}

func parseGeneration(labels map[string]string) uint64 {
	var g uint64
	fmt.Sscan(labels[labelGeneration], &g)
	return g
}

// neverRegain returns the captured grants with every one-shot limited to
// the uses it has now.
func neverRegain(captured, now []capabilities.Grant) []capabilities.Grant {
	out := capabilities.CloneGrants(captured)
	for i, g := range out {
		if g.UsesRemaining == nil {
			continue
		}
		left := 0
		for _, n := range now {
			if n.ID == g.ID && n.UsesRemaining != nil {
				left = *n.UsesRemaining
			}
		}
		if left < *g.UsesRemaining {
			out[i].UsesRemaining = capabilities.Uses(left)
		}
	}
	return out
}

// retainSnapshot writes a reset marker and the whole current context of r
// as evidence, so a rebuild after reopen starts from it.
func (k *Runtime) retainSnapshot(tx *txn, r *procRecord) error {
	if !k.retain {
		return nil
	}
	_, payload, err := tx.Read(r.ContextOID)
	if err != nil {
		if errors.Is(err, objects.ErrPayloadLost) {
			return nil
		}
		return err
	}
	var doc contextDoc
	if err := json.Unmarshal(payload, &doc); err != nil {
		return err
	}
	r.RetainSeq++
	if err := putJSON(tx, retainKey(r.PID, r.RetainSeq), retained{Kind: evidenceKindReset}); err != nil {
		return err
	}
	for i := range doc.Entries {
		r.RetainSeq++
		if err := putJSON(tx, retainKey(r.PID, r.RetainSeq), retained{Kind: evidenceKindEntry, Entry: &doc.Entries[i]}); err != nil {
			return err
		}
	}
	r.RetainedEntries = len(doc.Entries)
	return nil
}

// ForkReport maps a checkpoint's processes to their forks.
type ForkReport = tools.ForkReport

// ForkCheckpoint creates a new subtree from checkpoint id: new pids and
// OIDs, grants renamed to them, no pending actions or approvals, waits
// turned runnable with their calls answered, no one-shot grants.
func (k *Runtime) ForkCheckpoint(id string) (ForkReport, error) {
	var rep ForkReport
	err := k.update(func(tx *txn) error {
		var err error
		rep, err = k.forkCheckpoint(tx, id, nil, false)
		return err
	})
	return rep, err
}

// forkCheckpoint forks checkpoint id. A process asking (caller non-nil;
// approved: in a call a Human approved) gets the fork as its own child:
// each forked process is a spawn of the caller's, its grants narrowed to
// what the caller holds and charged to its children budget, and a copy of
// every captured Object is the caller's to read through the fork, so a
// grant denying it a read of one stands against the fork.
func (k *Runtime) forkCheckpoint(tx *txn, id string, caller *procRecord, approved bool) (ForkReport, error) {
	cp, err := loadCheckpoint(tx, id)
	if err != nil {
		return ForkReport{}, err
	}
	data, err := loadCheckpointData(tx, id)
	if err != nil {
		return ForkReport{}, err
	}
	if caller != nil {
		for _, pid := range cp.PIDs {
			if _, err := k.check(tx, caller, approved, authority.ProcessSpawn, authority.Params{Image: data.procs[pid].Image, OwnImage: caller.Image}); err != nil {
				return ForkReport{}, fmt.Errorf("fork %s: pid %d is a spawn of image %s: %w", id, pid, data.procs[pid].Image, err)
			}
		}
		for _, o := range data.objects {
			if err := k.unopposed(tx, caller, approved, authority.ObjectRead, authority.Params{OID: o.Meta.OID, Namespace: o.Meta.Namespace}); err != nil {
				return ForkReport{}, fmt.Errorf("fork %s would copy object %s to you: %w", id, o.Meta.OID, err)
			}
		}
	}
	rep := ForkReport{Checkpoint: id, PIDs: map[int64]int64{}}
	for _, pid := range cp.PIDs {
		seq, err := tx.NextSequence("pid")
		if err != nil {
			return ForkReport{}, err
		}
		rep.PIDs[pid] = int64(seq)
	}
	rep.RootPID = rep.PIDs[cp.RootPID]
	if caller != nil {
		if err := charge(tx, caller, capabilities.Budget{Children: int64(len(cp.PIDs))}); err != nil {
			return ForkReport{}, err
		}
		if err := saveProc(tx, caller); err != nil {
			return ForkReport{}, err
		}
	}
	oids, err := forkObjects(tx, data, rep.PIDs)
	if err != nil {
		return ForkReport{}, err
	}
	names := forkNames{pids: rep.PIDs, oids: oids, captured: map[string]bool{}}
	for _, o := range data.objects {
		names.captured[o.Meta.OID] = true
	}
	for _, pid := range cp.PIDs {
		if err := k.forkRecord(tx, id, cp, data, rep, names, caller, pid); err != nil {
			return ForkReport{}, err
		}
	}
	tx.markCommit(commitCheckpoint)
	return rep, k.emit(tx, Event{Kind: EventCheckpoint, PID: rep.RootPID, Reason: "forked " + id})
}

// forkNames maps what a checkpoint's subtree names to the fork's names.
type forkNames struct {
	pids     map[int64]int64   // each captured pid to its fork's
	oids     map[string]string // each forked Object to its copy
	captured map[string]bool   // every captured Object, forked or not
}

// resource names in the fork the resource a captured grant names. A
// namespace, an Object or a checkpoint of the subtree becomes the fork's own
// (own), so that no grant, a process's own or one handed down to it, reaches
// the source subtree from the fork. drop is set for an Object of the
// subtree the fork has no copy of (its payload was lost at the checkpoint).
// Other resources, prefixes with a trailing * among them, keep their name.
func (n forkNames) resource(res string) (name string, own, drop bool) {
	if oid, ok := strings.CutPrefix(res, "object:"); ok && n.captured[oid] {
		nw, forked := n.oids[oid]
		return "object:" + nw, forked, !forked
	}
	for old, nw := range n.pids {
		switch res {
		case "object_namespace:" + Namespace(old):
			return "object_namespace:" + Namespace(nw), true, false
		case fmt.Sprintf("checkpoint:process:%d", old):
			return fmt.Sprintf("checkpoint:process:%d", nw), true, false
		}
	}
	return res, false, false
}

// forkedGrants are the grants of a fork of old: no one-shots, every
// resource of the subtree renamed to the fork's (forkNames.resource), and,
// when a process forks, nothing else wider than what that process holds,
// with its denies and asks inherited.
func (k *Runtime) forkedGrants(old *procRecord, names forkNames, caller *procRecord) []capabilities.Grant {
	var grants []capabilities.Grant
	for _, g := range old.Grants {
		if g.UsesRemaining != nil {
			continue // one-shots never copy
		}
		name, own, drop := names.resource(g.Resource)
		if drop {
			continue
		}
		g.Resource = name
		if caller != nil && !own {
			if capabilities.Attenuate(capabilities.Live(caller.Grants, k.now()), []capabilities.Grant{g}) != nil {
				continue // more than the caller holds: not handed to its fork
			}
		}
		grants = append(grants, g)
	}
	if caller != nil {
		// The source's own inherited grants and the caller's may share ids.
		grants = capabilities.WithUniqueIDs(append(grants, capabilities.InheritedDenies(caller.Grants)...))
	}
	return grants
}

// forkedJob is a compaction job as a fork holds it: one that was running is
// failed, since its compressor is the source's and the fork carries no
// pending action to take its result (otherwise the fork's own compactions
// would be refused as conflicting with it for good).
func forkedJob(payload []byte) ([]byte, error) {
	var job compactionJob
	if err := json.Unmarshal(payload, &job); err != nil {
		return nil, fmt.Errorf("decode compaction job: %w", err)
	}
	if job.State != "running" {
		return payload, nil
	}
	job.State, job.Error = "failed", "the process was forked from a checkpoint while this compaction ran; the fork does not carry it on"
	return json.Marshal(job)
}

// forkObjects copies the captured Objects whose payloads survived into the
// fork's namespaces, under new OIDs; it returns the new OID of each.
func forkObjects(tx *txn, data *checkpointData, pids map[int64]int64) (map[string]string, error) {
	oids := map[string]string{}
	sort.Slice(data.objects, func(i, j int) bool { return data.objects[i].Meta.OID < data.objects[j].Meta.OID })
	for _, o := range data.objects {
		if o.PayloadLost {
			continue
		}
		var owner int64
		fmt.Sscan(o.Meta.Owner, &owner)
		newPID := pids[owner]
		ns := o.Meta.Namespace
		for old, nw := range pids {
			if ns == Namespace(old) {
				ns = Namespace(nw)
			}
		}
		name := o.Meta.Name
		if kernelName(o.Meta.Namespace, name) && strings.HasSuffix(name, fmt.Sprintf(":%d", owner)) && newPID != 0 {
			// The kernel's names carry their pid; a process's own names are
			// its data and stay as they are.
			name = strings.TrimSuffix(name, fmt.Sprint(owner)) + fmt.Sprint(newPID)
		}
		labels := o.Meta.Labels
		if o.Meta.Kind == contextKind {
			labels = map[string]string{labelGeneration: fmt.Sprint(parseGeneration(o.Meta.Labels) + 1)}
		}
		payload := o.Payload
		if o.Meta.Kind == jobKind {
			var err error
			if payload, err = forkedJob(payload); err != nil {
				return nil, fmt.Errorf("fork object %s: %w", o.Meta.OID, err)
			}
		}
		m, err := tx.Create(objects.CreateSpec{Namespace: ns, Name: name, Kind: o.Meta.Kind, Owner: fmt.Sprint(newPID),
			Labels: labels, Tier: o.Meta.Tier, Payload: payload})
		if err != nil {
			return nil, fmt.Errorf("fork object %s: %w", o.Meta.OID, err)
		}
		oids[o.Meta.OID] = m.OID
	}
	return oids, nil
}

// forkRecord starts the fork of pid: a new process from its captured record,
// with new pids and OIDs, no pending actions, approvals or one-shots, and
// its unread messages re-posted. A call it had not answered (a wait, a wait
// ended but not yet resumed, a held call, decided or not, a call running at
// the capture) is answered as not started: the fork carries no pending
// action, and the messages a receive would have returned are unread in its
// mailbox.
func (k *Runtime) forkRecord(tx *txn, id string, cp Checkpoint, data *checkpointData, rep ForkReport, names forkNames, caller *procRecord, pid int64) error {
	old := data.procs[pid]
	oids := names.oids
	r := fromCapture(old)
	forked, err := process.Step(old.Record, process.Input{Kind: process.Fork}, k.now())
	if err != nil {
		return fmt.Errorf("fork pid %d: %w", pid, err)
	}
	r.Record = forked
	r.PID, r.ParentPID, r.RootPID = rep.PIDs[pid], rep.PIDs[old.ParentPID], rep.RootPID
	if pid == cp.RootPID && caller != nil {
		r.ParentPID, r.RootPID = caller.PID, caller.RootPID
	}
	r.Namespace = Namespace(r.PID)
	r.GoalOID, r.ContextOID, r.ResultOID = oids[old.GoalOID], oids[old.ContextOID], oids[old.ResultOID]
	r.Used, r.ToolCalls, r.RetainSeq, r.RetainedEntries = capabilities.Budget{}, 0, 0, 0
	r.ResumePending, r.Dispatch = "", nil
	r.NotifiedSeq, r.InterruptedTurn, r.PauseRequested, r.HostHold, r.WallMark = 0, false, false, false, time.Time{}
	r.ReservedTokens = 0 // a call in flight at the capture is not the fork's
	r.CreatedAt = k.now()
	if caller != nil {
		// The fork is the caller's subtree: its wall time passes within the
		// caller's, as a spawned child's does (createProcess).
		if left, limited := wallLeft(caller, r.CreatedAt); limited {
			if left == 0 {
				return fmt.Errorf("fork %s: %w", id, wallExhausted(caller))
			}
			r.Limits = r.Limits.Min(capabilities.Budget{WallSeconds: left})
		}
	}
	r.Grants = k.forkedGrants(old, names, caller)
	if r.ContextOID == "" {
		// The context was lost before the checkpoint: the fork starts
		// with an empty one.
		m, err := tx.Create(objects.CreateSpec{Namespace: r.Namespace, Name: contextNamePrefix + fmt.Sprint(r.PID), Kind: contextKind,
			Owner: fmt.Sprint(r.PID), Labels: map[string]string{labelGeneration: "1"}, Payload: []byte(`{"entries":[]}`)})
		if err != nil {
			return err
		}
		r.ContextOID = m.OID
	}
	if r.GoalOID == "" {
		m, err := tx.Create(objects.CreateSpec{Namespace: r.Namespace, Name: goalName, Kind: "goal", Owner: fmt.Sprint(r.PID),
			Payload: []byte(fmt.Sprintf("(the goal of pid %d was lost before checkpoint %s; ask the Host to restate it)", pid, id))})
		if err != nil {
			return err
		}
		r.GoalOID = m.OID
	}
	if err := copySpawnIndex(tx, pid, r.PID); err != nil {
		return err
	}
	if r.ParentPID != 0 {
		if err := tx.Set(childKey(r.ParentPID, r.PID), nil); err != nil {
			return err
		}
	}
	if !r.State.Terminal() || old.Dispatch != nil {
		if err := k.answerUnanswered(tx, &r, map[string]bool{old.Dispatch.EffectCallID(): true}, "this process was forked from a checkpoint taken while this call waited or ran; it did not carry over"); err != nil {
			return err
		}
	}
	for _, m := range data.messages[pid] {
		if m.Status != mailbox.StatusUnread {
			continue
		}
		m.Recipient = r.PID
		if spid, ok := m.SenderPID(); ok && rep.PIDs[spid] != 0 {
			m.Sender = fmt.Sprintf("%s%d", mailbox.SenderProcessPrefix, rep.PIDs[spid])
		}
		if _, err := mailbox.Post(tx.Txn, m, k.now()); err != nil {
			return err
		}
	}
	if err := k.retainSnapshot(tx, &r); err != nil {
		return err
	}
	if err := saveProc(tx, &r); err != nil {
		return err
	}
	if err := k.emit(tx, Event{Kind: EventSpawn, PID: r.PID, Parent: r.ParentPID, Image: r.Image, Reason: "forked from " + id}); err != nil {
		return err
	}
	k.tellScheduler(tx, r.PID, r.State, nil, 0)
	return nil
}

// answerUnanswered answers every call of r's latest response that has no
// result yet, so its context stays a valid conversation.
func (k *Runtime) answerUnanswered(tx *txn, r *procRecord, started map[string]bool, reason string) error {
	c, err := k.loadContext(tx, r)
	if err != nil {
		return err
	}
	for i := len(c.entries) - 1; i >= 0; i-- {
		e := c.entries[i]
		if e.Role != llm.RoleAssistant {
			continue
		}
		answered := map[string]bool{}
		for _, later := range c.entries[i+1:] {
			answered[later.ToolCallID] = true
		}
		for _, call := range e.ToolCalls {
			if answered[call.ID] {
				continue
			}
			// Recorded like any answer: the tool record, the event and the
			// context agree on what the process was shown.
			res, code := tools.NotStarted(reason), tools.CodeCancelled
			if started[call.ID] {
				// It ran, or its outside effect had started: what it did may
				// have happened, and is not undone.
				te := &tools.Error{Code: tools.CodeSettlementUnknown, EffectStarted: true,
					Message: fmt.Sprintf("%s: %s had started, and what it did may have happened; check before retrying", reason, call.Name)}
				res, code = tools.ErrorResult(te), te.Code
			}
			if err := k.recordCall(tx, r, c, r.Turn-1, call, res, false, code, nil); err != nil {
				return err
			}
		}
		break
	}
	return nil
}
