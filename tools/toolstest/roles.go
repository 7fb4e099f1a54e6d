package toolstest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
)

// Grant is a capability grant, as New takes them.
type Grant = capabilities.Grant

// Caller is an in-memory tools.Caller: a process, its grants and a fixed
// clock. Authority is decided by the real capability check; one-shot uses
// are consumed.
type Caller struct {
	Proc     tools.Self
	Grants   []capabilities.Grant
	Clock    time.Time
	Settings tools.Config
	// Checked lists every authority check made, in order, as
	// "right resource" (the most specific name).
	Checked []string
	// Tool is the built-in tool being called (Call sets it): a Require of an
	// operation its entry in the authority table does not list is refused,
	// so a tool cannot check authority the table does not state.
	Tool string
	// Approved says the call is one a Human approved, as the kernel runs a
	// held call again: ask grants allow. Otherwise a requirement an ask
	// grant decides is refused with an error wrapping
	// tools.ErrApprovalRequired, the refusal the kernel holds a call on.
	Approved bool
}

var _ tools.Caller = (*Caller)(nil)

// NewCaller returns the caller pid, whose namespace is proc-<pid>.
func NewCaller(pid int64, grants ...capabilities.Grant) *Caller {
	return &Caller{
		Proc:     tools.Self{PID: pid, Namespace: fmt.Sprintf("proc-%d", pid)},
		Grants:   grants,
		Clock:    time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Settings: tools.Config{MaxSleepSeconds: 60},
	}
}

func (c *Caller) Self() tools.Self     { return c.Proc }
func (c *Caller) Now() time.Time       { return c.Clock }
func (c *Caller) Config() tools.Config { return c.Settings }

// Holding returns the grant that decides op's first requirement on p, as
// Require decides it, or false; false too for an operation the tool may not
// check, as the kernel answers.
func (c *Caller) Holding(op authority.Op, p authority.Params) (capabilities.Grant, bool) {
	reqs, err := authority.Requirements(op, p)
	if err != nil || len(reqs) == 0 || c.undeclared(op) != nil {
		return capabilities.Grant{}, false
	}
	d := capabilities.Check(c.Grants, reqs[0].Right, reqs[0].Names...)
	if c.Approved {
		d = capabilities.Approved(c.Grants, reqs[0].Right, reqs[0].Names...)
	}
	if !d.Allowed && !d.Ask {
		return capabilities.Grant{}, false
	}
	// Tests often leave grant ids empty, which the kernel never does: the
	// grant is the one the decision names that could have made it, of the
	// decision's effect first (an approved call's ask grant allows).
	for _, g := range c.Grants {
		if g.ID == d.GrantID && g.Has(reqs[0].Right) && capabilities.Matches(g.Resource, d.Name) &&
			g.Effect != capabilities.Deny && (g.Effect == capabilities.Ask) == d.Ask {
			return g.Clone(), true
		}
	}
	for _, g := range c.Grants {
		if g.ID == d.GrantID && g.Has(reqs[0].Right) && capabilities.Matches(g.Resource, d.Name) && g.Effect != capabilities.Deny {
			return g.Clone(), true
		}
	}
	return capabilities.Grant{}, false
}

// Require decides each requirement the authority table states for op, in
// order, as the kernel does: an ask grant asks for approval (see Approved).
func (c *Caller) Require(op authority.Op, p authority.Params) error {
	if err := c.undeclared(op); err != nil {
		return err
	}
	reqs, err := authority.Requirements(op, p)
	if err != nil {
		return err
	}
	for _, q := range reqs {
		c.Checked = append(c.Checked, string(q.Right)+" "+q.Names[0])
		d := capabilities.Check(c.Grants, q.Right, q.Names...)
		if c.Approved {
			d = capabilities.Approved(c.Grants, q.Right, q.Names...)
		}
		if d.Ask {
			return fmt.Errorf("%w: %s on %s (grant %s asks)", tools.ErrApprovalRequired, q.Right, d.Name, d.GrantID)
		}
		if !d.Allowed {
			return fmt.Errorf("%w: %s on %s: %s", tools.ErrDenied, q.Right, q.Names[0], d.Reason)
		}
		if d.OneShot {
			grants, _, err := capabilities.Reserve(c.Grants, d)
			if err != nil {
				return fmt.Errorf("%w: %v", tools.ErrDenied, err)
			}
			c.Grants = grants
		}
	}
	return nil
}

// undeclared refuses an operation the called tool's entry in the authority
// table does not list; nil when no tool is set.
func (c *Caller) undeclared(op authority.Op) error {
	if c.Tool == "" {
		return nil
	}
	if ops, ok := authority.ToolOps(c.Tool); !ok || !slices.Contains(ops, op) {
		return fmt.Errorf("toolstest: tool %s requires %s, which its entry in the authority table does not list (%v)", c.Tool, op, ops)
	}
	return nil
}

// Objects is an in-memory tools.ObjectStore of versioned Objects.
type Objects struct {
	// Metas and Payloads hold the Objects by OID.
	Metas    map[string]objects.Meta
	Payloads map[string][]byte
	// Lost marks OIDs whose runtime-local payload a reopen lost.
	Lost map[string]bool

	namespace string // the caller's, where its results go
	pid       int64
}

var _ tools.ObjectStore = (*Objects)(nil)

// NewObjects returns an empty store whose results go to namespace, owned by pid.
func NewObjects(namespace string, pid int64) *Objects {
	return &Objects{Metas: map[string]objects.Meta{}, Payloads: map[string][]byte{}, Lost: map[string]bool{}, namespace: namespace, pid: pid}
}

// Put stores an Object directly (no authority check) and returns its metadata.
func (s *Objects) Put(namespace, name string, payload []byte) objects.Meta {
	m := objects.Meta{OID: uuid.NewString(), Namespace: namespace, Name: name, Kind: "data", Version: 1, Tier: objects.TierDurable,
		PayloadBytes: len(payload), PayloadSHA256: digest(payload)}
	s.Metas[m.OID], s.Payloads[m.OID] = m, payload
	return m
}

func (s *Objects) StatObject(oid string) (objects.Meta, error) {
	m, ok := s.Metas[oid]
	if !ok {
		return objects.Meta{}, fmt.Errorf("%w: %s", objects.ErrNotFound, oid)
	}
	m.PayloadLost = s.Lost[oid]
	return m, nil
}

func (s *Objects) ReadObject(oid string) (objects.Meta, []byte, error) {
	m, err := s.StatObject(oid)
	if err == nil && m.PayloadLost {
		return m, nil, fmt.Errorf("%w: %s", objects.ErrPayloadLost, oid)
	}
	return m, s.Payloads[oid], err
}

func (s *Objects) LookupObject(namespace, name string) (objects.Meta, error) {
	for _, m := range s.Metas {
		if m.Namespace == namespace && m.Name == name {
			return s.StatObject(m.OID)
		}
	}
	return objects.Meta{}, fmt.Errorf("%w: %s/%s", objects.ErrNotFound, namespace, name)
}

// ListObjects lists a page of a namespace by name, as the store does.
func (s *Objects) ListObjects(namespace, after string, limit int) ([]objects.Meta, bool, error) {
	var out []objects.Meta
	for _, m := range s.Metas {
		if m.Namespace == namespace && m.Name > after {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

func (s *Objects) CreateObject(spec objects.CreateSpec) (objects.Meta, error) {
	if _, err := s.LookupObject(spec.Namespace, spec.Name); err == nil {
		return objects.Meta{}, fmt.Errorf("%w: %s/%s", objects.ErrNameTaken, spec.Namespace, spec.Name)
	}
	m := s.Put(spec.Namespace, spec.Name, spec.Payload)
	m.Kind, m.Labels, m.Owner, m.Tier = spec.Kind, spec.Labels, spec.Owner, spec.Tier
	s.Metas[m.OID] = m
	return m, nil
}

func (s *Objects) WriteObject(oid string, expected uint64, spec objects.WriteSpec) (objects.Meta, error) {
	m, err := s.StatObject(oid)
	if err != nil {
		return m, err
	}
	if m.Version != expected {
		return objects.Meta{}, fmt.Errorf("%w: %s is at version %d, not %d", objects.ErrConflict, oid, m.Version, expected)
	}
	m.Version++
	if spec.Labels != nil {
		m.Labels = spec.Labels
	}
	if !spec.KeepPayload {
		s.Payloads[oid], m.PayloadBytes, m.PayloadSHA256 = spec.Payload, len(spec.Payload), digest(spec.Payload)
	}
	s.Metas[oid] = m
	return m, nil
}

// digest is a payload's SHA-256 in hex, as the store keeps it.
func digest(payload []byte) string {
	sum := sha256.Sum256(payload)
	return hex.EncodeToString(sum[:])
}

// CreateResult stores data as the caller's result Object, as the kernel does:
// "result", or "result:<n>" when a result exists already.
func (s *Objects) CreateResult(data json.RawMessage) (objects.Meta, error) {
	if !json.Valid(data) {
		return objects.Meta{}, tools.Errorf(tools.CodeInvalidArguments, "result: not valid JSON")
	}
	name := "result"
	for n := 2; ; n++ {
		if _, err := s.LookupObject(s.namespace, name); err != nil {
			break
		}
		name = fmt.Sprintf("result:%d", n)
	}
	return s.CreateObject(objects.CreateSpec{Namespace: s.namespace, Name: name, Kind: "result", Owner: fmt.Sprint(s.pid),
		Tier: objects.TierDurable, Payload: data})
}

// Tree is an in-memory tools.ProcessTree: the caller's children.
type Tree struct {
	// Images are the images ImageOf resolves.
	Images map[string]tools.ImageInfo
	// Children are the caller's direct children by pid.
	Children map[int64]*tools.ChildStatus
	// Spawned and Signals record the calls that reached the tree.
	Spawned []tools.ChildSpec
	Signals []string
	// SpawnErr, when set, refuses every spawn (as the kernel refuses a
	// widening grant or an exhausted budget).
	SpawnErr error

	pid  int64 // the caller
	next int64
}

var _ tools.ProcessTree = (*Tree)(nil)

// NewTree returns the tree of caller pid, with no children yet; children
// get the pids after it. It knows base:v0 and coding:v0 (gated).
func NewTree(pid int64) *Tree {
	return &Tree{
		Images:   map[string]tools.ImageInfo{"base:v0": {Ref: "base:v0"}, "coding:v0": {Ref: "coding:v0", Gated: true}},
		Children: map[int64]*tools.ChildStatus{},
		pid:      pid, next: pid,
	}
}

func (t *Tree) ImageOf(ref string) (tools.ImageInfo, error) {
	im, ok := t.Images[ref]
	if !ok {
		names := make([]string, 0, len(t.Images))
		for n := range t.Images {
			names = append(names, n)
		}
		sort.Strings(names)
		return tools.ImageInfo{}, fmt.Errorf("unknown image %q (known: %v)", ref, names)
	}
	return im, nil
}

func (t *Tree) SpawnChild(spec tools.ChildSpec) (tools.ChildStatus, error) {
	if t.SpawnErr != nil {
		return tools.ChildStatus{}, t.SpawnErr
	}
	t.Spawned = append(t.Spawned, spec)
	t.next++
	c := &tools.ChildStatus{PID: t.next, Image: spec.Image, GoalOID: fmt.Sprintf("goal-%d", t.next), Status: process.Runnable}
	t.Children[c.PID] = c
	return *c, nil
}

func (t *Tree) Child(pid int64) (tools.ChildStatus, error) {
	c, ok := t.Children[pid]
	if !ok {
		return tools.ChildStatus{}, tools.Errorf(tools.CodeDenied, "pid %d: not a direct child of pid %d", pid, t.pid)
	}
	return *c, nil
}

// SignalChild applies the signal's state change, as the kernel does to a
// child that is not running: a terminal child is left as it is.
func (t *Tree) SignalChild(pid int64, sig string) (tools.ChildStatus, error) {
	if _, err := t.Child(pid); err != nil {
		return tools.ChildStatus{}, err
	}
	c := t.Children[pid]
	t.Signals = append(t.Signals, sig)
	if !c.Status.Terminal() {
		switch sig {
		case "kill":
			c.Status, c.Reason = process.Killed, fmt.Sprintf("killed by parent pid %d", t.pid)
		case "pause":
			c.Status = process.Paused
		case "resume":
			if c.Status == process.Paused {
				c.Status = process.Runnable
			}
		default:
			return tools.ChildStatus{}, tools.Errorf(tools.CodeInvalidArguments, "signal: %q must be kill, pause or resume", sig)
		}
	}
	return *c, nil
}

// Mail is an in-memory tools.Mailbox: the caller's queue, and what it sent.
type Mail struct {
	// Inbox is the caller's queue, in order.
	Inbox []mailbox.Message
	// Sent are the messages the caller posted to others.
	Sent []mailbox.Message

	caller *Caller
	tree   *Tree
	seq    uint64
}

var _ tools.Mailbox = (*Mail)(nil)

// NewMail returns the mailbox of caller, who may write to itself, its
// parent and the children in tree.
func NewMail(caller *Caller, tree *Tree) *Mail { return &Mail{caller: caller, tree: tree} }

// Deliver puts m in the caller's queue as unread, with the next id.
func (b *Mail) Deliver(m mailbox.Message) mailbox.Message {
	b.seq++
	m.Recipient, m.Seq, m.ID, m.Status = b.caller.Proc.PID, b.seq, mailbox.FormatID(b.caller.Proc.PID, b.seq), mailbox.StatusUnread
	b.Inbox = append(b.Inbox, m)
	return m
}

func (b *Mail) PostMessage(m mailbox.Message) (mailbox.Message, error) {
	self := b.caller.Proc
	_, child := b.tree.Children[m.Recipient]
	if m.Recipient != self.PID && m.Recipient != self.ParentPID && !child {
		return mailbox.Message{}, tools.Errorf(tools.CodeDenied, "recipient_pid %d: a process may send only to itself, its parent or a direct child", m.Recipient)
	}
	m.Sender = fmt.Sprintf("%s%d", mailbox.SenderProcessPrefix, self.PID)
	if err := m.Validate(); err != nil {
		return mailbox.Message{}, err
	}
	if m.Recipient == self.PID {
		return b.Deliver(m), nil
	}
	m.ID, m.Status = mailbox.FormatID(m.Recipient, uint64(len(b.Sent)+1)), mailbox.StatusUnread
	b.Sent = append(b.Sent, m)
	return m, nil
}

// ReadMessages returns up to f.Limit matching messages in queue order.
func (b *Mail) ReadMessages(f mailbox.Filter, ack bool) (mailbox.Page, error) {
	if err := f.Validate(); err != nil {
		return mailbox.Page{}, err
	}
	page := mailbox.Page{Messages: []mailbox.Message{}, AckedIDs: []string{}}
	for i := range b.Inbox {
		m := &b.Inbox[i]
		if !f.Matches(m) {
			continue
		}
		if len(page.Messages) == f.Limit {
			page.HasMore = true
			page.OmittedCount++
			continue
		}
		page.Messages = append(page.Messages, *m)
		if ack && m.Status == mailbox.StatusUnread {
			m.Status = mailbox.StatusAcked
			page.AckedIDs = append(page.AckedIDs, m.ID)
		}
	}
	return page, nil
}

func (b *Mail) HasMessage(f mailbox.Filter) (bool, error) {
	for i := range b.Inbox {
		if f.Matches(&b.Inbox[i]) {
			return true, nil
		}
	}
	return false, nil
}

func (b *Mail) PostedMessage(id string) (mailbox.Message, bool, error) {
	for _, m := range b.Inbox {
		if m.ID == id {
			return m, true, nil
		}
	}
	return mailbox.Message{}, false, nil
}

// Skills is an in-memory tools.SkillSet.
type Skills struct {
	Available []tools.SkillInfo
	Active    []string
}

var _ tools.SkillSet = (*Skills)(nil)

func (s *Skills) DiscoverSkills() []tools.SkillInfo { return s.Available }
func (s *Skills) ActiveSkills() []string            { return slices.Clone(s.Active) }

func (s *Skills) ActivateSkill(name string) (tools.SkillInfo, error) {
	for _, sk := range s.Available {
		if sk.Name == name {
			if !slices.Contains(s.Active, name) {
				s.Active = append(s.Active, name)
			}
			return sk, nil
		}
	}
	return tools.SkillInfo{}, tools.Errorf(tools.CodeNotFound, "name: no skill %q is available (see discover_skills)", name)
}

func (s *Skills) UnloadSkill(name string) error {
	i := slices.Index(s.Active, name)
	if i < 0 {
		return tools.Errorf(tools.CodeNotFound, "name: skill %q is not active", name)
	}
	s.Active = slices.Delete(slices.Clone(s.Active), i, i+1)
	return nil
}

// Compactor is an in-memory tools.Compactor: it records each call and
// answers with Next.
type Compactor struct {
	Started []tools.CompactionRequest
	Resumed []tools.Pending
	// Next is what the next call returns; a zero Next answers a start with
	// the under-target no-op and a resume with a finished compaction.
	Next tools.Outcome
	Err  error
}

var _ tools.Compactor = (*Compactor)(nil)

func (c *Compactor) StartCompaction(req tools.CompactionRequest) (tools.Outcome, error) {
	c.Started = append(c.Started, req)
	if c.Next.Result == nil && c.Next.Block == nil {
		return tools.Outcome{Result: map[string]any{"compacted": false, "reason": "context_under_target"}}, c.Err
	}
	return c.Next, c.Err
}

func (c *Compactor) ResumeCompaction(p tools.Pending) (tools.Outcome, error) {
	c.Resumed = append(c.Resumed, p)
	if c.Next.Result == nil && c.Next.Block == nil {
		return tools.Outcome{Result: map[string]any{"compacted": true}}, c.Err
	}
	return c.Next, c.Err
}

// Checkpoints is an in-memory tools.Checkpoints: snapshots are records
// only; a restore or fork reports what it would do.
type Checkpoints struct {
	All      []tools.Checkpoint
	Restored []string
	Forked   []string
	// NextPID is the first pid a fork hands out.
	NextPID int64
}

var _ tools.Checkpoints = (*Checkpoints)(nil)

// NewCheckpoints returns a fake with no checkpoints; forks start at pid 100.
func NewCheckpoints() *Checkpoints { return &Checkpoints{NextPID: 100} }

// Add records a checkpoint of root directly and returns its id.
func (c *Checkpoints) Add(root int64, pids ...int64) string {
	id := fmt.Sprintf("cp-%d", len(c.All)+1)
	if len(pids) == 0 {
		pids = []int64{root}
	}
	marks := map[int64]tools.CheckpointMarks{}
	for _, p := range pids {
		marks[p] = tools.CheckpointMarks{}
	}
	c.All = append(c.All, tools.Checkpoint{ID: id, RootPID: root, CreatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), PIDs: pids, Marks: marks})
	return id
}

func (c *Checkpoints) find(id string) (tools.Checkpoint, error) {
	for _, cp := range c.All {
		if cp.ID == id {
			return cp, nil
		}
	}
	return tools.Checkpoint{}, tools.Errorf(tools.CodeNotFound, "checkpoint_id: no such checkpoint: %q", id)
}

// CheckpointRoot answers as the kernel does: a missing id is a not_found
// tool error.
func (c *Checkpoints) CheckpointRoot(id string) (int64, error) {
	cp, err := c.find(id)
	return cp.RootPID, err
}

func (c *Checkpoints) CreateCheckpoint(root int64) (tools.Checkpoint, error) {
	cp, _ := c.find(c.Add(root))
	return cp, nil
}

func (c *Checkpoints) ListCheckpoints(root int64) ([]tools.Checkpoint, error) {
	out := []tools.Checkpoint{}
	for _, cp := range c.All {
		if cp.RootPID == root {
			out = append(out, cp)
		}
	}
	return out, nil
}

func (c *Checkpoints) RestoreCheckpoint(id string) (tools.RestoreReport, error) {
	cp, err := c.find(id)
	if err != nil {
		return tools.RestoreReport{}, err
	}
	c.Restored = append(c.Restored, id)
	return tools.RestoreReport{Checkpoint: id, Restored: cp.PIDs, Killed: []int64{}, KeptTerminal: []int64{}, NotRestored: []string{},
		EffectsSince: []tools.EffectSinceRef{}}, nil
}

func (c *Checkpoints) ForkCheckpoint(id string) (tools.ForkReport, error) {
	cp, err := c.find(id)
	if err != nil {
		return tools.ForkReport{}, err
	}
	c.Forked = append(c.Forked, id)
	rep := tools.ForkReport{Checkpoint: id, PIDs: map[int64]int64{}}
	for _, p := range cp.PIDs {
		rep.PIDs[p] = c.NextPID
		c.NextPID++
	}
	rep.RootPID = rep.PIDs[cp.RootPID]
	return rep, nil
}

// Reviewer is an in-memory tools.Reviewer: the real completion review
// (process.Decide) over Input.
type Reviewer struct {
	Input process.ReviewInput
	Calls int
}

var _ tools.Reviewer = (*Reviewer)(nil)

func (r *Reviewer) CompletionReview(token string, evidence json.RawMessage) (process.Decision, error) {
	r.Calls++
	d, err := process.Decide(r.Input, token, evidence)
	if err != nil {
		return process.Decision{}, tools.Errorf(tools.CodeFailed, "completion review: %w", err)
	}
	return d, nil
}
