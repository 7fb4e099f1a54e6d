package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
	msgtools "github.com/libos/libos/tools/msg"
)

// syscalls implements tools.Syscalls for one call of process r, bound to the
// transaction the call's effects commit in.
type syscalls struct {
	k  *Runtime
	tx *txn
	r  *procRecord
	c  *llmContext // the process's context as staged in tx
	// callID is the tool call being served.
	callID string
	// tool is the tool being served, and ops the operations the authority
	// table lets it check.
	tool string
	ops  []authority.Op
	// reserved are the uses of one-shot grants this call's checks reserved:
	// a probe made after them (what a listing shows, which grant decides)
	// looks at the grants as the call found them. scopeUses are those of
	// its scope checks: starting an agent task exercises no scope, so the
	// use its check reserved is the one the child is handed (SpawnChild),
	// and not a second one taken from the caller's grant.
	reserved, scopeUses []capabilities.Reservation
}

// newSyscalls binds t's call callID, of r in tx, to the kernel.
func (k *Runtime) newSyscalls(tx *txn, r *procRecord, c *llmContext, t *tools.Tool, callID string) *syscalls {
	ops := t.Ops
	if ops == nil {
		ops, _ = authority.ToolOps(t.Name)
	}
	return &syscalls{k: k, tx: tx, r: r, c: c, callID: callID, tool: t.Name, ops: ops}
}

var _ tools.Syscalls = (*syscalls)(nil)

func (s *syscalls) Self() tools.Self {
	im, _ := s.k.image(s.r.Image)
	return tools.Self{
		PID: s.r.PID, ParentPID: s.r.ParentPID, Image: s.r.Image, Gated: im != nil && im.Gated(),
		GoalOID: s.r.GoalOID, Namespace: s.r.Namespace,
	}
}

func (s *syscalls) Now() time.Time { return s.k.now() }

func (s *syscalls) Config() tools.Config {
	return tools.Config{MaxSleepSeconds: s.k.opts.MaxSleepSeconds}
}

// Require checks the process's grants for what the authority table says op
// needs and, when a one-shot grant is what allows the call, consumes one use
// in the call's transaction: if the call later fails before its effect, the
// kernel rolls the transaction back to the call's savepoint and the use is
// restored with it.
//
// A call an ask grant covers is refused with an *ApprovalRequiredError, and
// the kernel holds it for a Human; once approved, the same call is run again
// with its ask grants counting as allow.
func (s *syscalls) Require(op authority.Op, p authority.Params) error {
	if !slices.Contains(s.ops, op) {
		return fmt.Errorf("%w: %s checked %s; the table lists %v for it", authority.ErrUndeclared, s.tool, op, s.ops)
	}
	reserved, err := s.k.check(s.tx, s.r, s.approved(), op, p)
	s.reserved = append(s.reserved, reserved...)
	if op == authority.ScopeUse {
		s.scopeUses = append(s.scopeUses, reserved...)
	}
	return err
}

// approved reports whether s serves a call a Human approved.
func (s *syscalls) approved() bool { return s.callID != "" && s.r.ApprovedCall == s.callID }

// asFound is r's grants with the uses this call's checks reserved given
// back: the grants as the call found them.
func (s *syscalls) asFound() []capabilities.Grant {
	grants := s.r.Grants
	for _, res := range s.reserved {
		grants = capabilities.Restore(grants, res)
	}
	return grants
}

func (s *syscalls) Holding(op authority.Op, p authority.Params) (capabilities.Grant, bool) {
	if !slices.Contains(s.ops, op) {
		return capabilities.Grant{}, false
	}
	grants := s.asFound()
	var held capabilities.Grant
	found := false
	err := s.k.decideEach(s.tx, s.r, grants, s.approved(), op, p, func(_ authority.Requirement, d capabilities.Decision) error {
		if d.Allowed || d.Ask {
			for _, g := range grants {
				if g.ID == d.GrantID {
					held, found = g.Clone(), true
				}
			}
		}
		return errStopDeciding // the first requirement names the grant
	})
	return held, found && errors.Is(err, errStopDeciding)
}

// require checks (and for a one-shot, reserves) op on p for r in tx, for
// the kernel's own stages: nothing is approved there.
func (k *Runtime) require(tx *txn, r *procRecord, op authority.Op, p authority.Params) error {
	_, err := k.check(tx, r, false, op, p)
	return err
}

// check is the one authority check of the kernel: every requirement the
// table states for op on p, in its order, decided and applied (a one-shot
// reserved before the next is decided). It returns the one-shot uses it
// reserved.
func (k *Runtime) check(tx *txn, r *procRecord, approved bool, op authority.Op, p authority.Params) ([]capabilities.Reservation, error) {
	p, err := served(tx, r, p)
	if err != nil {
		return nil, err
	}
	reqs, err := authority.Requirements(op, p)
	if err != nil {
		return nil, err
	}
	var reserved []capabilities.Reservation
	for _, q := range reqs {
		d := k.decide(r, approved, q.Right, q.Names...)
		if !d.Allowed && !d.Ask && d.GrantID == "" && op == authority.ObjectRead {
			// No grant spoke: the table's rule besides grants may.
			if child, ok := childResult(tx, r, p.OID); ok {
				d = capabilities.Decision{Allowed: true, Right: q.Right, Name: q.Names[0],
					Reason: fmt.Sprintf("allowed: the result of direct child pid %d", child)}
			}
		}
		res, err := k.apply(tx, r, d, q.Right, q.Names...)
		if err != nil {
			return reserved, err
		}
		if res.GrantID != "" {
			reserved = append(reserved, res)
		}
	}
	return reserved, nil
}

// served fills p.Served when p names another process's namespace that is a
// context compressor's: what it holds is the compacted process's context,
// so a grant on that process's namespace speaks for it too (a process
// denied that namespace is denied its compressors').
func served(tx *txn, r *procRecord, p authority.Params) (authority.Params, error) {
	if tx == nil || p.Namespace == "" || p.Namespace == r.Namespace {
		return p, nil
	}
	pid, ok := namespacePID(p.Namespace)
	if !ok {
		return p, nil
	}
	rec, err := loadProc(tx, pid)
	switch {
	case errors.Is(err, ErrNoProcess):
		return p, nil
	case err != nil:
		// Not knowing whose it is could skip a deny that speaks for it.
		return p, fmt.Errorf("authority on namespace %s: %w", p.Namespace, err)
	}
	if rec.CompactionOf != 0 {
		p.Served = Namespace(rec.CompactionOf)
	}
	return p, nil
}

// childResult reports whether oid is the result of a direct child of r,
// and which child: a parent reads what its child handed back without a
// grant on the child's namespace, as wait_child_process names it to r. The
// child may have handed up what it could read, such as its own child's
// result: the parent could be given a copy of it all the same. A deny
// grant still refuses it.
func childResult(tx *txn, r *procRecord, oid string) (int64, bool) {
	if oid == "" {
		return 0, false
	}
	meta, err := tx.Stat(oid)
	if err != nil {
		return 0, false
	}
	// The owner, or the direct child of r it descends from, is the usual
	// one; any other direct child may have handed it up too.
	if owner, err := strconv.ParseInt(meta.Owner, 10, 64); err == nil && owner > 0 {
		for pid, depth := owner, 0; pid > 0 && depth < maxResultHandUps; depth++ {
			c, err := loadProc(tx, pid)
			if err != nil {
				break
			}
			if c.ParentPID == r.PID {
				if c.ResultOID == oid {
					return c.PID, true
				}
				break
			}
			pid = c.ParentPID
		}
	}
	kids, err := children(tx, r.PID)
	if err != nil {
		return 0, false
	}
	for _, pid := range kids {
		if c, err := loadProc(tx, pid); err == nil && c.ResultOID == oid {
			return pid, true
		}
	}
	return 0, false
}

// maxResultHandUps bounds the walk from a result's owner up to the direct
// child that handed it up; a deeper one is found among the children.
const maxResultHandUps = 64

// decideEach decides each requirement of op on p for r, in the table's
// order, on grants (r's own when nil), with a compressor's served namespace
// named when tx is given, reserving nothing. visit sees each decision and
// may stop the walk with an error, which decideEach returns.
func (k *Runtime) decideEach(tx *txn, r *procRecord, grants []capabilities.Grant, approved bool, op authority.Op, p authority.Params,
	visit func(authority.Requirement, capabilities.Decision) error) error {
	p, err := served(tx, r, p)
	if err != nil {
		return err
	}
	reqs, err := authority.Requirements(op, p)
	if err != nil {
		return err
	}
	if grants == nil {
		grants = r.Grants
	}
	for _, q := range reqs {
		if err := visit(q, k.decideOn(grants, approved, q.Right, q.Names...)); err != nil {
			return err
		}
	}
	return nil
}

// errStopDeciding ends a decideEach walk that has what it needs.
var errStopDeciding = errors.New("stop deciding")

// refusal is the error of a decision that does not allow, as check words it.
func refusal(q authority.Requirement, d capabilities.Decision) error {
	return fmt.Errorf("%w: %s on %s: %s", tools.ErrDenied, q.Right, q.Names[0], d.Reason)
}

// permits reports whether r holds op on p now, reserving nothing and
// asking no one (an ask grant does not permit): a stage's probe before
// anything exists. The refusal reads as check's does.
func (k *Runtime) permits(r *procRecord, op authority.Op, p authority.Params) error {
	return k.decideEach(nil, r, nil, false, op, p, func(q authority.Requirement, d capabilities.Decision) error {
		if !d.Allowed {
			return refusal(q, d)
		}
		return nil
	})
}

// probe is permits for a call a Human may approve: an ask grant, unless the
// call is approved, holds it for approval (an ApprovalRequiredError), as
// check would. It reserves nothing.
func (k *Runtime) probe(r *procRecord, approved bool, op authority.Op, p authority.Params) error {
	return k.decideEach(nil, r, nil, approved, op, p, func(q authority.Requirement, d capabilities.Decision) error {
		switch {
		case d.Ask:
			return &ApprovalRequiredError{GrantID: d.GrantID, Right: q.Right, Resource: d.Name}
		case !d.Allowed:
			return refusal(q, d)
		}
		return nil
	})
}

// unopposed reports whether no grant of r speaks against op on p: nil,
// unless a grant denies it (an error wrapping tools.ErrDenied) or asks (an
// ApprovalRequiredError, unless the call is approved). It reserves nothing.
// With no grant speaking the operation is allowed: it is a part of another
// the caller holds the right for (a checkpoint's fork or restore copies or
// rewrites the subtree's Objects), and only a grant against it stands.
func (k *Runtime) unopposed(tx *txn, r *procRecord, approved bool, op authority.Op, p authority.Params) error {
	return k.decideEach(tx, r, nil, approved, op, p, func(q authority.Requirement, d capabilities.Decision) error {
		switch {
		case d.Ask:
			return &ApprovalRequiredError{GrantID: d.GrantID, Right: q.Right, Resource: d.Name}
		case !d.Allowed && d.GrantID != "":
			return refusal(q, d)
		}
		return nil
	})
}

// shows reports whether r may do op on p, on grants (as the listing call
// found them), reserving nothing: whether a listing may show the target.
// An ask grant shows it only in a call a Human approved (where it allows);
// the listing itself is not held for it.
func (k *Runtime) shows(tx *txn, r *procRecord, grants []capabilities.Grant, approved bool, op authority.Op, p authority.Params) bool {
	return k.decideEach(tx, r, grants, approved, op, p, func(q authority.Requirement, d capabilities.Decision) error {
		if !d.Allowed {
			return refusal(q, d)
		}
		return nil
	}) == nil
}

// decide is the one authority decision of the kernel: r's grants in force
// now, with ask grants allowing when a Human approved the call.
func (k *Runtime) decide(r *procRecord, approved bool, right capabilities.Right, names ...string) capabilities.Decision {
	return k.decideOn(r.Grants, approved, right, names...)
}

// decideOn is decide on grants.
func (k *Runtime) decideOn(grants []capabilities.Grant, approved bool, right capabilities.Right, names ...string) capabilities.Decision {
	live := capabilities.Live(grants, k.now())
	if approved {
		return capabilities.Approved(live, right, names...)
	}
	return capabilities.Check(live, right, names...)
}

// apply acts on decision d for r: a refusal, a request for approval, or an
// allow that reserves a one-shot use (returned).
func (k *Runtime) apply(tx *txn, r *procRecord, d capabilities.Decision, right capabilities.Right, names ...string) (capabilities.Reservation, error) {
	r.noteDecision(d)
	if d.Ask {
		return capabilities.Reservation{}, &ApprovalRequiredError{GrantID: d.GrantID, Right: right, Resource: d.Name}
	}
	if !d.Allowed {
		return capabilities.Reservation{}, fmt.Errorf("%w: %s on %s: %s", tools.ErrDenied, right, names[0], d.Reason)
	}
	if !d.OneShot {
		return capabilities.Reservation{}, nil
	}
	grants, res, err := capabilities.Reserve(r.Grants, d)
	if err != nil {
		return capabilities.Reservation{}, fmt.Errorf("%w: %v", tools.ErrDenied, err)
	}
	r.Grants = grants
	return res, saveProc(tx, r)
}

func (s *syscalls) StartCompaction(req tools.CompactionRequest) (tools.Outcome, error) {
	return s.k.startCompaction(s.tx, s.r, s.c, req, s.callID)
}

func (s *syscalls) ResumeCompaction(tools.Pending) (tools.Outcome, error) {
	return s.k.resumeCompaction(s.tx, s.r, s.c)
}

func (s *syscalls) StatObject(oid string) (objects.Meta, error) { return s.tx.Stat(oid) }

func (s *syscalls) ReadObject(oid string) (objects.Meta, []byte, error) { return s.tx.Read(oid) }

// maxDurableResult bounds a result payload kept in the store.
const maxDurableResult = 1 << 20

func (s *syscalls) CreateResult(data json.RawMessage) (objects.Meta, error) {
	if !json.Valid(data) {
		return objects.Meta{}, tools.Errorf(tools.CodeInvalidArguments, "result: not valid JSON")
	}
	name := resultName
	if _, err := s.tx.Lookup(s.r.Namespace, name); err == nil {
		name = fmt.Sprintf("%s:%d", resultName, s.k.now().UnixNano())
	}
	// A result is what an operator comes back for: it outlives a reopen
	// up to maxDurableResult; a larger one stays runtime-local, its identity
	// and hash durable.
	tier := objects.TierRuntimeLocal
	if len(data) <= maxDurableResult {
		tier = objects.TierDurable
	}
	return s.tx.Create(objects.CreateSpec{
		Namespace: s.r.Namespace, Name: name, Kind: "result", Owner: fmt.Sprint(s.r.PID), Payload: data, Tier: tier,
	})
}

// CompletionReview gathers the process's current review input (goal
// identity, every Human message's id, status and content hash, the observed
// successful tools) and runs the pure decision.
func (s *syscalls) CompletionReview(token string, evidence json.RawMessage) (process.Decision, error) {
	in, err := s.k.reviewInput(s.tx, s.r)
	if err != nil {
		return process.Decision{}, err
	}
	d, err := process.Decide(in, token, evidence)
	if err != nil {
		return process.Decision{}, tools.Errorf(tools.CodeFailed, "completion review: %w", err)
	}
	return d, nil
}

func (s *syscalls) ImageOf(ref string) (tools.ImageInfo, error) {
	im, err := s.k.image(ref)
	if err != nil {
		return tools.ImageInfo{}, err
	}
	return tools.ImageInfo{Ref: im.Ref(), Gated: im.Gated()}, nil
}

func (s *syscalls) SpawnChild(spec tools.ChildSpec) (tools.ChildStatus, error) {
	s.handScopeUsesDown(spec.Grants)
	c, err := s.k.spawnChild(s.tx, s.r, spec)
	if err != nil {
		return tools.ChildStatus{}, err
	}
	return childStatus(c), nil
}

// handScopeUsesDown gives back to the caller's grants each scope use this
// call reserved for a right a one-shot grant of handed asks for (up to its
// uses, for every right): starting the task exercises no scope, so the
// caller pays for it with the uses spawnChild then moves to the child
// (transferOneShots), once, not twice. A reserved use matches when the
// decision that reserved it, on the grants in force and approved as the
// call was, picks its grant again once the use is back. Each reserved use
// moves at most once.
func (s *syscalls) handScopeUsesDown(handed []capabilities.Grant) {
	approved := s.approved()
	for _, g := range handed {
		if g.UsesRemaining == nil || g.Effect == capabilities.Deny {
			continue
		}
		for _, right := range g.Rights {
			for n := 0; n < *g.UsesRemaining && len(s.scopeUses) > 0; n++ {
				i := slices.IndexFunc(s.scopeUses, func(res capabilities.Reservation) bool {
					return s.k.decideOn(capabilities.Restore(s.r.Grants, res), approved, right, g.Resource).GrantID == res.GrantID
				})
				if i < 0 {
					break
				}
				s.r.Grants = capabilities.Restore(s.r.Grants, s.scopeUses[i])
				s.scopeUses = slices.Delete(s.scopeUses, i, i+1)
			}
		}
	}
}

func (s *syscalls) Child(pid int64) (tools.ChildStatus, error) {
	c, err := directChild(s.tx, s.r.PID, pid)
	if err != nil {
		return tools.ChildStatus{}, err
	}
	return childStatus(c), nil
}

func (s *syscalls) SignalChild(pid int64, signal string) (tools.ChildStatus, error) {
	c, err := s.k.signal(s.tx, s.r, pid, signal)
	if err != nil {
		return tools.ChildStatus{}, err
	}
	return childStatus(c), nil
}

func (s *syscalls) PostMessage(m mailbox.Message) (mailbox.Message, error) {
	if err := canMessage(s.tx, s.r, m.Recipient); err != nil {
		return mailbox.Message{}, err
	}
	m.Sender = fmt.Sprintf("%s%d", mailbox.SenderProcessPrefix, s.r.PID)
	if m.Recipient == s.r.PID {
		// A message to oneself is already known: no notice for it.
		stored, err := s.k.post(s.tx, m)
		if err == nil && stored.Seq > s.r.NotifiedSeq {
			s.r.NotifiedSeq = stored.Seq
		}
		return stored, err
	}
	return s.k.post(s.tx, m)
}

func (s *syscalls) ReadMessages(f mailbox.Filter, ack bool) (mailbox.Page, error) {
	page, err := mailbox.Read(s.tx.Txn, s.r.PID, f, ack, msgtools.MaxResultBytes, s.k.now())
	if err == nil && len(page.AckedIDs) > 0 {
		s.tx.markCommit(commitMessageAck)
	}
	if err == nil {
		err = s.k.emitRead(s.tx, s.r.PID, page)
	}
	return page, err
}

func (s *syscalls) HasMessage(f mailbox.Filter) (bool, error) {
	m, err := mailbox.FirstMatch(s.tx.Txn, s.r.PID, f)
	return m != nil, err
}

func (s *syscalls) PostedMessage(id string) (mailbox.Message, bool, error) {
	m, err := mailbox.Get(s.tx.Txn, s.r.PID, id)
	if errors.Is(err, objects.ErrNotFound) {
		return mailbox.Message{}, false, nil
	}
	return m, err == nil, err
}

// kernelKinds are the Object kinds the kernel owns: a process reads them
// but changes them only through the kernel (its context through
// compaction, its goal through the Host), never by a plain write.
var kernelKinds = map[string]bool{contextKind: true, transcriptKind: true, "goal": true, jobKind: true, "result": true}

func (s *syscalls) CreateObject(spec objects.CreateSpec) (objects.Meta, error) {
	if kernelKinds[spec.Kind] {
		return objects.Meta{}, tools.Errorf(tools.CodeDenied, "kind: %q is owned by the runtime; choose another kind", spec.Kind)
	}
	if kernelName(spec.Namespace, spec.Name) {
		return objects.Meta{}, tools.Errorf(tools.CodeDenied, "name: %q is a name the runtime gives its own Objects in a process namespace (%s); choose another name",
			spec.Name, spec.Namespace)
	}
	return s.tx.Create(spec)
}

// kernelName reports whether name, in namespace, is one the kernel creates
// and finds its Objects by: a process's goal, context, transcript and
// compaction job. Taken first by a process, it would be the kernel's Object
// to the kernel (a job written into a process's data) or block the kernel's
// own (a goal squatted in the namespace of a pid to come blocks every spawn).
func kernelName(namespace, name string) bool {
	if _, ok := namespacePID(namespace); !ok {
		return false
	}
	return name == goalName || strings.HasPrefix(name, contextNamePrefix) || strings.HasPrefix(name, transcriptNamePrefix) ||
		strings.HasPrefix(name, jobNamePrefix)
}

func (s *syscalls) WriteObject(oid string, expectedVersion uint64, spec objects.WriteSpec) (objects.Meta, error) {
	meta, err := s.tx.Stat(oid)
	if err != nil {
		return objects.Meta{}, err
	}
	if kernelKinds[meta.Kind] {
		return objects.Meta{}, tools.Errorf(tools.CodeDenied, "oid: object %s (kind %s) is owned by the runtime and changes only through it", oid, meta.Kind)
	}
	return s.tx.Write(oid, expectedVersion, spec)
}

func (s *syscalls) LookupObject(namespace, name string) (objects.Meta, error) {
	return s.tx.Lookup(namespace, name)
}

// ListObjects lists a page of namespace's Objects less those the caller may
// not read: the tool's read on the namespace shows its Objects, but a deny
// on one (object:<oid>) hides it from a listing as it does from
// read_object, and from the page's count and its has-more answer.
func (s *syscalls) ListObjects(namespace, after string, limit int) ([]objects.Meta, bool, error) {
	grants, approved := s.asFound(), s.approved()
	metas := make([]objects.Meta, 0, min(limit, 64))
	more := false
	err := s.tx.ListAfter(namespace, after, func(m objects.Meta) (bool, error) {
		if !s.k.shows(s.tx, s.r, grants, approved, authority.ObjectRead, authority.Params{OID: m.OID, Namespace: m.Namespace}) {
			return true, nil
		}
		if len(metas) == limit {
			more = true
			return false, nil
		}
		metas = append(metas, m)
		return true, nil
	})
	if err != nil {
		return nil, false, err
	}
	return metas, more, nil
}

func (s *syscalls) CheckpointRoot(id string) (int64, error) {
	cp, err := loadCheckpoint(s.tx, id)
	switch {
	case errors.Is(err, ErrNoCheckpoint):
		return 0, tools.Errorf(tools.CodeNotFound, "checkpoint_id: %v", err)
	case err != nil:
		return 0, fmt.Errorf("checkpoint %q: %w", id, err)
	}
	return cp.RootPID, nil
}

func (s *syscalls) CreateCheckpoint(root int64) (tools.Checkpoint, error) {
	if _, err := loadProc(s.tx, root); err != nil {
		return tools.Checkpoint{}, tools.Errorf(tools.CodeNotFound, "pid: %v", err)
	}
	cp, err := s.k.createCheckpoint(s.tx, root, s.r, s.c)
	return cp, err
}

func (s *syscalls) ListCheckpoints(root int64) ([]tools.Checkpoint, error) {
	out := []tools.Checkpoint{}
	err := s.tx.Scan([]byte(prefixCheckpoint), func(_, v []byte) error {
		var cp Checkpoint
		if err := json.Unmarshal(v, &cp); err != nil {
			return err
		}
		if cp.RootPID == root {
			out = append(out, cp)
		}
		return nil
	})
	return out, err
}

func (s *syscalls) RestoreCheckpoint(id string) (tools.RestoreReport, error) {
	rep, err := s.k.restoreCheckpoint(s.tx, id, s.r, s.approved())
	if errors.Is(err, tools.ErrDenied) {
		return tools.RestoreReport{}, err // a refusal keeps its code, as a fork's does
	}
	if err != nil {
		return tools.RestoreReport{}, tools.Errorf(tools.CodeFailed, "%w", err)
	}
	return rep, nil
}

func (s *syscalls) ForkCheckpoint(id string) (tools.ForkReport, error) {
	rep, err := s.k.forkCheckpoint(s.tx, id, s.r, s.approved())
	return rep, err
}
