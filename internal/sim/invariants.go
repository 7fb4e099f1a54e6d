package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
)

// Raw key prefixes of the kernel's durable records. The kernel has no read
// API for them; their JSON fields are decoded as the kernel writes them, as
// internal/crashtest does.
const (
	keyProcs    = "k/p/"
	keyToolRecs = "k/tc/"
)

// procState is a durable process record: the state machine's record and
// the kernel fields the invariants read.
type procState struct {
	process.Record
	ContextOID string          `json:"context_oid"`
	ToolCalls  uint64          `json:"tool_calls"`
	Dispatch   json.RawMessage `json:"dispatch"`
	// ctxGen is the generation label of the context Object.
	ctxGen uint64
}

// toolRec is the kernel's audit record of one tool call.
type toolRec struct {
	CallID       string `json:"call_id"`
	Tool         string `json:"tool"`
	OK           bool   `json:"ok"`
	ResultSHA256 string `json:"result_sha256"`
	Code         string `json:"code"`
}

// snapshot is the durable state at one check.
type snapshot struct {
	pids  []int64
	procs map[int64]*procState
	recs  map[int64][]toolRec
	mail  map[int64][]mailbox.Message
}

// shownResult is a tool result a process was shown.
type shownResult struct {
	pid               int64
	id, name, content string
}

func read(rt *kernel.Runtime) (*snapshot, error) {
	s := &snapshot{procs: map[int64]*procState{}, recs: map[int64][]toolRec{}, mail: map[int64][]mailbox.Message{}}
	err := rt.Store().View(func(tx *objects.Txn) error {
		if err := tx.Scan([]byte(keyProcs), func(_, v []byte) error {
			var p procState
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("decode process record: %w", err)
			}
			s.procs[p.PID] = &p
			s.pids = append(s.pids, p.PID)
			return nil
		}); err != nil {
			return err
		}
		for _, pid := range s.pids {
			p := s.procs[pid]
			if p.ContextOID != "" {
				if m, err := tx.Stat(p.ContextOID); err == nil {
					p.ctxGen, _ = strconv.ParseUint(m.Labels["generation"], 10, 64)
				}
			}
			if err := tx.Scan(fmt.Appendf(nil, "%s%020d/", keyToolRecs, pid), func(_, v []byte) error {
				var r toolRec
				if err := json.Unmarshal(v, &r); err != nil {
					return fmt.Errorf("decode tool record of pid %d: %w", pid, err)
				}
				s.recs[pid] = append(s.recs[pid], r)
				return nil
			}); err != nil {
				return err
			}
			if err := mailbox.List(tx, pid, func(m *mailbox.Message) error {
				s.mail[pid] = append(s.mail[pid], *m)
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	slices.Sort(s.pids)
	return s, err
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// check reads the durable state and checks every invariant; idle says the
// episode ended with the runtime idle.
func (w *world) check(idle bool) {
	if w.violation != nil {
		return
	}
	s, err := read(w.rt)
	if err != nil {
		w.fail("read-state", err.Error())
		return
	}
	w.result.Processes = len(s.pids)
	checks := []func(*snapshot) (string, string){
		w.checkInternalErrors,
		w.checkMonotone,
		w.checkBudgets,
		w.checkEffects,
		w.checkShownDurable,
		w.checkMessages,
		w.checkAuthority,
		w.checkEventLog,
		w.checkHostFaults,
	}
	if idle {
		checks = append(checks, w.checkIdle)
	}
	for _, c := range checks {
		if inv, detail := c(s); inv != "" {
			w.fail(inv, detail)
			return
		}
	}
	w.prev = s
}

// checkInternalErrors: no process ever fails with an internal error.
func (w *world) checkInternalErrors(s *snapshot) (string, string) {
	for _, pid := range s.pids {
		if p := s.procs[pid]; strings.Contains(p.Reason, "internal error") {
			return "no-internal-error", fmt.Sprintf("pid %d is %s: %s", pid, p.State, p.Reason)
		}
	}
	return "", ""
}

// checkMonotone compares with the previous check: ended processes stay
// ended as they ended, generations only grow, one-shot uses never come
// back, acknowledged messages stay acknowledged.
func (w *world) checkMonotone(s *snapshot) (string, string) {
	prev := w.prev
	if prev == nil {
		return "", ""
	}
	for _, pid := range prev.pids {
		was, now := prev.procs[pid], s.procs[pid]
		if now == nil {
			return "nothing-lost", fmt.Sprintf("pid %d (%s) is gone", pid, was.State)
		}
		if was.State.Terminal() && (now.State != was.State || now.ResultOID != was.ResultOID || now.Reason != was.Reason) {
			return "terminal-stays", fmt.Sprintf("pid %d ended %s (result %q, reason %q) and is now %s (result %q, reason %q)",
				pid, was.State, was.ResultOID, was.Reason, now.State, now.ResultOID, now.Reason)
		}
		if now.Gen < was.Gen {
			return "generations-grow", fmt.Sprintf("pid %d state generation went %d -> %d", pid, was.Gen, now.Gen)
		}
		if now.ctxGen < was.ctxGen {
			return "generations-grow", fmt.Sprintf("pid %d context generation went %d -> %d", pid, was.ctxGen, now.ctxGen)
		}
		if now.ToolCalls < was.ToolCalls || len(s.recs[pid]) < len(prev.recs[pid]) {
			return "nothing-lost", fmt.Sprintf("pid %d tool call records went %d -> %d", pid, len(prev.recs[pid]), len(s.recs[pid]))
		}
		for _, g := range was.Grants {
			if g.UsesRemaining == nil {
				continue
			}
			for _, n := range now.Grants {
				if n.ID == g.ID && (n.UsesRemaining == nil || *n.UsesRemaining > *g.UsesRemaining) {
					return "one-shot-never-back", fmt.Sprintf("pid %d grant %s (%s) had %d uses and now has %s", pid, g.ID, g.Resource, *g.UsesRemaining, uses(n.UsesRemaining))
				}
			}
		}
		status := map[string]string{}
		for _, m := range s.mail[pid] {
			status[m.ID] = m.Status
		}
		for _, m := range prev.mail[pid] {
			st, ok := status[m.ID]
			switch {
			case !ok:
				return "message-not-lost", fmt.Sprintf("message %s to pid %d (%s) is gone", m.ID, pid, m.Status)
			case m.Status == mailbox.StatusAcked && st == mailbox.StatusUnread && w.know.restores == 0:
				return "ack-not-lost", fmt.Sprintf("message %s to pid %d was acked and is unread again", m.ID, pid)
			case m.Status == mailbox.StatusSuperseded && st != mailbox.StatusSuperseded && w.know.restores == 0:
				return "message-status", fmt.Sprintf("message %s to pid %d was superseded and is now %s", m.ID, pid, st)
			}
		}
	}
	return "", ""
}

func uses(n *int) string {
	if n == nil {
		return "unlimited"
	}
	return strconv.Itoa(*n)
}

// checkBudgets: no budget is exceeded anywhere, and what a child used is
// charged to its parent too.
func (w *world) checkBudgets(s *snapshot) (string, string) {
	// A reply that reported a usage past any reservation is charged as
	// reported (clamped), up the chain: its tree's token budgets may be
	// overrun, by the provider and not the kernel.
	w.mu.Lock()
	overrun := map[int64]bool{}
	for pid := range w.hugeUsage {
		for p := s.procs[pid]; p != nil && !overrun[p.PID]; p = s.procs[p.ParentPID] {
			overrun[p.PID] = true
		}
	}
	w.mu.Unlock()
	sum := map[int64]capabilities.Budget{}
	for _, pid := range s.pids {
		p := s.procs[pid]
		u, l := p.Used, p.Limits
		var was capabilities.Budget
		if w.prev != nil && w.prev.procs[pid] != nil {
			was = w.prev.procs[pid].Used
		}
		for _, f := range []struct {
			name             string
			used, limit, was int64
		}{
			{"tool_calls", u.ToolCalls, l.ToolCalls, was.ToolCalls}, {"llm_calls", u.LLMCalls, l.LLMCalls, was.LLMCalls},
			{"llm_tokens", u.LLMTokens, l.LLMTokens, was.LLMTokens},
			{"children", u.Children, l.Children, was.Children}, {"wall_seconds", u.WallSeconds, l.WallSeconds, was.WallSeconds},
		} {
			// A count below 0, or below what it was (one that wrapped
			// around), is no count.
			if f.used < 0 || f.used < f.was {
				return "budget-used-counts", fmt.Sprintf("pid %d used %d %s, after %d at the last check", pid, f.used, f.name, f.was)
			}
			if f.name == "llm_tokens" && overrun[pid] {
				continue
			}
			if f.limit > 0 && f.used > f.limit {
				return "budget-not-exceeded", fmt.Sprintf("pid %d used %d %s of its limit %d", pid, f.used, f.name, f.limit)
			}
		}
		if p.ParentPID != 0 {
			b := sum[p.ParentPID]
			b.ToolCalls += u.ToolCalls
			b.LLMCalls += u.LLMCalls
			sum[p.ParentPID] = b
		}
	}
	for _, pid := range s.pids {
		p, kids := s.procs[pid], sum[pid]
		if p.Used.ToolCalls < kids.ToolCalls || p.Used.LLMCalls < kids.LLMCalls {
			return "budget-charged-up-the-chain", fmt.Sprintf("pid %d used %d tool calls and %d LLM calls, less than its children's %d and %d",
				pid, p.Used.ToolCalls, p.Used.LLMCalls, kids.ToolCalls, kids.LLMCalls)
		}
	}
	return "", ""
}

// effectLines reads the effect log: call id -> the lines naming it.
func (w *world) effectLines() (map[string][]string, []string, error) {
	data, err := os.ReadFile(w.effects)
	if err != nil {
		return nil, nil, err
	}
	byCall := map[string][]string{}
	var order []string
	for _, line := range strings.Split(string(bytes.TrimSpace(data)), "\n") {
		if line == "" {
			continue
		}
		_, call, _ := strings.Cut(line, " ")
		if _, ok := byCall[call]; !ok {
			order = append(order, call)
		}
		byCall[call] = append(byCall[call], line)
	}
	return byCall, order, nil
}

// checkEffects: every outside effect that started is answered exactly once,
// with its result or as settlement_unknown, and never runs twice; an effect
// known to have succeeded ran exactly once.
func (w *world) checkEffects(s *snapshot) (string, string) {
	lines, order, err := w.effectLines()
	if err != nil {
		return "read-effects", err.Error()
	}
	// An effect's answer is the first record of its call in the process
	// that ran it (its effect line names the pid): a fork copies the call
	// into a new pid, which answers it as not carried over.
	answered := map[string]toolRec{}
	for _, pid := range s.pids {
		// seen holds, for each call recorded so far, whether every record
		// of it said it was not started.
		seen := map[string]bool{}
		for _, r := range s.recs[pid] {
			// A restore may answer again a call of the batch it rewinds: a
			// wait pending at the checkpoint (a call held for approval among
			// them, answered again as the Human decided), or a call that ran
			// since (as settlement_unknown). An effect's call answered again
			// must say its effect did not start or is of unknown settlement,
			// unless it had never started: a call approved at the checkpoint
			// and cancelled since, or held at the checkpoint and denied since,
			// runs when the restored process takes it up again. That it ran
			// once is checked on its lines. Without a restore nothing is
			// recorded twice.
			notStartedBefore, again := seen[r.CallID]
			if again && (w.know.restores == 0 || (isEffectTool(r.Tool) && !effectNotRerun(r.Code) && !notStartedBefore)) {
				return "answered-once", fmt.Sprintf("pid %d: call %s (%s) is recorded twice", pid, r.CallID, r.Tool)
			}
			seen[r.CallID] = (!again || notStartedBefore) && neverStarted(r.Code)
			key := fmt.Sprintf("%d %s", pid, r.CallID)
			// The effect's answer is its first record, or the first after
			// records that said it did not start.
			if prev, first := answered[key]; isEffectTool(r.Tool) && (!first || neverStarted(prev.Code)) {
				answered[key] = r
			}
		}
	}
	for _, call := range order {
		ls := lines[call]
		if len(ls) > 1 {
			return "effect-at-most-once", fmt.Sprintf("call %s ran its effect %d times: %q", call, len(ls), ls)
		}
		ranIn, _, _ := strings.Cut(ls[0], " ")
		r, ok := answered[ranIn+" "+call]
		switch {
		case !ok:
			return "effect-answered", fmt.Sprintf("the effect of call %s (%q) ran but the call has no recorded result", call, ls[0])
		case !r.OK && r.Code != "settlement_unknown" && r.Code != "failed" && !strings.HasPrefix(r.Code, "skill") && r.Code != "timeout":
			return "effect-answered", fmt.Sprintf("the effect of call %s ran but the call is answered %s (not started?)", call, r.Code)
		}
	}
	for _, pid := range s.pids {
		for _, r := range s.recs[pid] {
			if isEffectTool(r.Tool) && r.OK && len(lines[r.CallID]) != 1 {
				return "effect-exactly-once", fmt.Sprintf("pid %d: call %s succeeded but its effect ran %d times", pid, r.CallID, len(lines[r.CallID]))
			}
		}
	}
	return "", ""
}

// effectNotRerun reports whether an effect call's answer says its effect did
// not run again: refused before it started, not started, or of unknown
// settlement.
// neverStarted are the answers of a call that never started: answered as not
// started, or denied by a Human while it was held.
func neverStarted(code string) bool {
	return code == tools.CodeCancelled || code == tools.CodeDenied
}

func effectNotRerun(code string) bool {
	return code == tools.CodeSettlementUnknown || code == tools.CodeDenied || code == tools.CodeCancelled
}

// notRecorded are results a kernel may have answered without a tool record:
// calls that did not carry over into a restored or forked process (the
// kernel records them now; directories written before did not).
func notRecorded(content string) bool {
	return strings.Contains(content, "did not carry over") || strings.Contains(content, "restored from a checkpoint taken")
}

// checkShownDurable: every tool result a process was shown is durable: its
// call has a tool record with the result's hash.
func (w *world) checkShownDurable(s *snapshot) (string, string) {
	w.mu.Lock()
	shown := slices.Clone(w.shownOrder)
	forked := w.know.forked
	w.mu.Unlock()
	for _, r := range shown {
		if forked[r.pid] || notRecorded(r.content) {
			continue
		}
		found, match := false, false
		for _, rec := range s.recs[r.pid] {
			if rec.CallID == r.id {
				found = true
				match = match || rec.ResultSHA256 == sha(r.content)
			}
		}
		if found && !match {
			return "shown-is-durable", fmt.Sprintf("pid %d was shown a result of call %s (%s) that is not the recorded one: %s", r.pid, r.id, r.name, r.content)
		}
		if !found {
			return "shown-is-durable", fmt.Sprintf("pid %d was shown the result of call %s (%s), which has no tool record: %s", r.pid, r.id, r.name, r.content)
		}
	}
	return "", ""
}

// checkMessages: no acknowledged message is lost or duplicated, an ACK a
// process was shown is durable, and messages go only to self, parent or a
// direct child.
func (w *world) checkMessages(s *snapshot) (string, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	byID := map[string]mailbox.Message{}
	for _, pid := range s.pids {
		bodies := map[string]string{}
		for _, m := range s.mail[pid] {
			byID[m.ID] = m
			key := m.Sender + "\x00" + m.Body
			if prev, dup := bodies[key]; dup && m.Body != "" {
				return "message-not-duplicated", fmt.Sprintf("pid %d received %q from %s twice (%s and %s)", pid, m.Body, m.Sender, prev, m.ID)
			}
			bodies[key] = m.ID
			if spid, ok := m.SenderPID(); ok && !w.know.forked[pid] {
				sp := s.procs[spid]
				if spid != pid && (sp == nil || (sp.ParentPID != pid && s.procs[pid].ParentPID != spid)) {
					return "message-direction", fmt.Sprintf("message %s went from pid %d to pid %d, neither itself, its parent nor a direct child", m.ID, spid, pid)
				}
			}
		}
	}
	for _, id := range w.know.postOrder {
		p := w.know.posted[id]
		m, ok := byID[id]
		if !ok {
			return "message-not-lost", fmt.Sprintf("message %s to pid %d (%q) was acknowledged and is gone", id, p.to, p.body)
		}
		if m.Recipient != p.to || m.Body != p.body || m.Sender != p.sender {
			return "message-not-lost", fmt.Sprintf("message %s is %s -> %d %q, but %s -> %d %q was posted", id, m.Sender, m.Recipient, m.Body, p.sender, p.to, p.body)
		}
	}
	ids := make([]string, 0, len(w.ackedBy))
	for id := range w.ackedBy {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if m, ok := byID[id]; ok && m.Status == mailbox.StatusUnread && w.know.restores == 0 {
			return "ack-not-lost", fmt.Sprintf("message %s was shown acked by call %s but is unread", id, w.ackedBy[id])
		}
	}
	return "", ""
}

func stripUses(gs []capabilities.Grant) []capabilities.Grant {
	out := capabilities.CloneGrants(gs)
	for i := range out {
		out[i].UsesRemaining = nil
	}
	return out
}

// checkAuthority: no effect without the authority it needs. The effect's
// process holds execute on scope:sim-effect; a child spawned by a process
// was allowed by process:spawn and holds nothing its parent does not.
func (w *world) checkAuthority(s *snapshot) (string, string) {
	lines, order, err := w.effectLines()
	if err != nil {
		return "read-effects", err.Error()
	}
	for _, call := range order {
		pid, _, _ := strings.Cut(lines[call][0], " ")
		n, _ := strconv.ParseInt(pid, 10, 64)
		p := s.procs[n]
		if p == nil {
			return "effect-authority", fmt.Sprintf("the effect of call %s names pid %s, which does not exist", call, pid)
		}
		d := capabilities.Check(stripUses(p.Grants), capabilities.Execute, capabilities.ScopeResource("sim-effect"))
		if d.Ask && w.wasApproved(call) {
			// An ask grant allows exactly the calls a Human approved.
			d = capabilities.Approved(stripUses(p.Grants), capabilities.Execute, capabilities.ScopeResource("sim-effect"))
		}
		if !d.Allowed {
			return "effect-authority", fmt.Sprintf("pid %d ran the effect of call %s without execute on scope:sim-effect (grants %s)", n, call, grantsString(p.Grants))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, pid := range s.pids {
		p := s.procs[pid]
		parent := s.procs[p.ParentPID]
		if parent == nil || w.know.forked[pid] || p.Image == "context-compressor:v0" || p.Image == "skill-agent:v0" {
			continue
		}
		// An ask grant allows a spawn a Human approved.
		if d := capabilities.Check(stripUses(parent.Grants), capabilities.Write, "process:spawn"); !d.Allowed && !(d.Ask && w.know.approvedSpawns[parent.PID] > 0) {
			return "spawn-authority", fmt.Sprintf("pid %d spawned pid %d without write on process:spawn (grants %s)", parent.PID, pid, grantsString(parent.Grants))
		}
		var handed []capabilities.Grant
		for _, g := range p.Grants {
			// Its own namespace is every process's; an inherited deny or ask
			// only narrows what the child may do.
			inherited := strings.HasPrefix(g.ID, capabilities.InheritedDenyPrefix) && g.Effect != capabilities.Allow
			if g.Resource != "object_namespace:"+kernel.Namespace(pid) && !inherited {
				handed = append(handed, g)
			}
		}
		if err := capabilities.Attenuate(stripUses(parent.Grants), stripUses(handed)); err != nil {
			return "no-widening", fmt.Sprintf("pid %d holds more than its parent %d: %v (child %s, parent %s)", pid, parent.PID, err, grantsString(p.Grants), grantsString(parent.Grants))
		}
	}
	return "", ""
}

// checkIdle: at idle every process has ended or waits legitimately: for the
// outside world, for a child still running, or paused.
func (w *world) checkIdle(s *snapshot) (string, string) {
	for _, pid := range s.pids {
		p := s.procs[pid]
		switch p.State {
		case process.Exited, process.Failed, process.Killed, process.Paused:
		case process.Waiting:
			if p.Wait == nil {
				return "legitimate-wait", fmt.Sprintf("pid %d waits on nothing", pid)
			}
			switch p.Wait.Kind {
			case process.WaitTimer:
				return "legitimate-wait", fmt.Sprintf("pid %d waits on a timer at %s while the runtime is idle", pid, p.Wait.Until)
			case process.WaitProvider:
				// A backoff is a timer the run waits for; without a time the
				// process is held for the Host, which must be told why.
				if !p.Wait.Until.IsZero() {
					return "legitimate-wait", fmt.Sprintf("pid %d waits on a provider backoff until %s while the runtime is idle", pid, p.Wait.Until)
				}
				if strings.TrimSpace(p.Wait.Reason) == "" {
					return "legitimate-wait", fmt.Sprintf("pid %d is held for the Host on its provider without a reason", pid)
				}
				w.mu.Lock()
				restores, retried := w.retried[pid]
				// A restore since may have brought the hold back.
				retried = retried && restores == w.know.restores
				w.mu.Unlock()
				if retried {
					return "held-goes-on", fmt.Sprintf("the Host resumed pid %d, held on its provider, and it is held again without asking it (%s)", pid, p.Wait.Reason)
				}
			case process.WaitApproval:
				// Only the Host can decide it: it must see it.
				list, err := w.rt.Approvals()
				if err != nil {
					return "read-state", err.Error()
				}
				if !slices.ContainsFunc(list, func(a kernel.Approval) bool { return a.PID == pid }) {
					return "legitimate-wait", fmt.Sprintf("pid %d waits for an approval (%s) the Host's Approvals does not list", pid, p.Wait.PendingID)
				}
			case process.WaitChild, process.WaitCompaction:
				if c := s.procs[p.Wait.ChildPID]; p.Wait.ChildPID != 0 && (c == nil || c.State.Terminal()) {
					state := "missing"
					if c != nil {
						state = string(c.State)
					}
					return "legitimate-wait", fmt.Sprintf("pid %d waits (%s) on child %d, which is %s: a lost wake-up", pid, p.Wait.Kind, p.Wait.ChildPID, state)
				}
			}
		default:
			return "legitimate-wait", fmt.Sprintf("pid %d is %s while the runtime is idle", pid, p.State)
		}
	}
	// Every process the Host resumed asked its provider again, or left the
	// wait otherwise (checked above).
	w.mu.Lock()
	clear(w.retried)
	w.mu.Unlock()
	return "", ""
}

// checkAcknowledged runs after a reopen: every event the dead runtime
// delivered to OnEvent is in the durable log exactly as delivered.
func (w *world) checkAcknowledged(acked []kernel.Event) {
	evs, err := w.rt.Store().Events(0, 0)
	if err != nil {
		w.fail("read-events", err.Error())
		return
	}
	durable := map[uint64]json.RawMessage{}
	for _, e := range evs {
		durable[e.Seq] = e.Data
	}
	for _, ev := range acked {
		raw, ok := durable[ev.Seq]
		if !ok {
			w.fail("acknowledged-not-lost", fmt.Sprintf("event %d (%s pid %d) was acknowledged and is not durable after the crash", ev.Seq, ev.Kind, ev.PID))
			return
		}
		var got kernel.Event
		if err := json.Unmarshal(raw, &got); err != nil {
			w.fail("read-events", err.Error())
			return
		}
		got.Seq = ev.Seq
		// Round-trip the delivered event too, so both compare as JSON.
		var want kernel.Event
		b0, _ := json.Marshal(ev)
		_ = json.Unmarshal(b0, &want)
		a, b := w.eventLine(want), w.eventLine(got)
		if a != b {
			w.fail("acknowledged-not-lost", fmt.Sprintf("event %d differs after the crash:\n  delivered %s\n  durable   %s", ev.Seq, a, b))
			return
		}
	}
	w.tracef("reopen check: %d acknowledged events durable", len(acked))
	// A crash at one event of a commit leaves the commit's later events
	// durable but undelivered: learn them from the log.
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range evs {
		if w.learned[e.Seq] {
			continue
		}
		var ev kernel.Event
		if err := json.Unmarshal(e.Data, &ev); err != nil {
			w.failLocked("read-events", err.Error())
			return
		}
		ev.Seq = e.Seq
		w.learned[e.Seq] = true
		w.know.observe(ev)
		w.traceLocked("durable ev " + w.eventLine(ev))
	}
}
