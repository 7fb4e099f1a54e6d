// Package tools is the ToolBroker: the catalog of tools with their exact JSON
// Schemas, argument validation, and the rules of a batch of calls. Built-in
// tool families live in subpackages. Tools reach the kernel only through
// Syscalls, which this package declares and the kernel implements, so every
// tool is testable against a fake.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools/schema"
)

// Error codes shown to the model in a failed tool result.
const (
	CodeInvalidArguments = "invalid_arguments"
	CodeUnknownTool      = "unknown_tool"
	CodeDenied           = "denied"
	CodeBudgetExhausted  = "budget_exhausted"
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodeFailed           = "failed"
	// CodeSettlementUnknown: the effect started and whether it completed is
	// not known (the runtime stopped meanwhile).
	CodeSettlementUnknown = "settlement_unknown"
	// CodeCancelled: the call never started (NotStarted); it is the code
	// of its tool record.
	CodeCancelled = "cancelled"
)

// Error is a tool failure that the model is shown as
// {ok:false, error:{code, message}, effect_started}.
type Error struct {
	Code          string
	Message       string
	EffectStarted bool
	Err           error
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf builds a tool Error whose effect did not start.
func Errorf(code, format string, a ...any) *Error {
	err := fmt.Errorf(format, a...)
	return &Error{Code: code, Message: err.Error(), Err: errors.Unwrap(err)}
}

// AsError turns any error into a tool Error: argument, authority and budget
// failures keep their codes, anything else is a plain failure.
func AsError(err error) *Error {
	var te *Error
	switch {
	case errors.As(err, &te):
		return te
	case errors.Is(err, schema.ErrInvalid):
		return &Error{Code: CodeInvalidArguments, Message: err.Error(), Err: err}
	case errors.Is(err, ErrDenied), errors.Is(err, ErrApprovalRequired):
		return &Error{Code: CodeDenied, Message: err.Error(), Err: err}
	case errors.Is(err, capabilities.ErrBudgetExhausted):
		return &Error{Code: CodeBudgetExhausted, Message: err.Error(), Err: err}
	case errors.Is(err, objects.ErrNotFound):
		return &Error{Code: CodeNotFound, Message: err.Error(), Err: err}
	case errors.Is(err, objects.ErrConflict):
		return &Error{Code: CodeConflict, Message: err.Error(), Err: err}
	case errors.Is(err, capabilities.ErrWidening):
		return &Error{Code: CodeDenied, Message: err.Error(), Err: err}
	case errors.Is(err, mailbox.ErrInvalid), errors.Is(err, objects.ErrNameTaken), errors.Is(err, objects.ErrInvalid):
		// The store's refusals of a field (a name's bytes, a NUL, a label)
		// are the caller's arguments at fault, and name the field.
		return &Error{Code: CodeInvalidArguments, Message: err.Error(), Err: err}
	}
	return &Error{Code: CodeFailed, Message: err.Error(), Err: err}
}

// ErrDenied is wrapped by every authority refusal.
var ErrDenied = errors.New("capability denied")

// ErrApprovalRequired is wrapped by the refusal of a call an ask grant
// covers: the kernel holds such a call for a Human's decision.
var ErrApprovalRequired = errors.New("approval required")

// StatAuthorized stats oid and requires op (ObjectRead or ObjectWrite) on
// it. An Object the caller may not reach answers exactly as a missing OID
// does for that caller (Missing): the hidden denial to a caller without op
// on object:<oid>, not_found to one with it. So probing cannot tell which
// OIDs exist or which namespace holds them, even with a grant on
// object:* and a deny on a namespace. A call an ask grant covers is held
// for approval (Hide).
func StatAuthorized(sys interface {
	Caller
	ObjectStore
}, op authority.Op, oid string) (objects.Meta, error) {
	// A missing OID has no namespace, so the answer for one names only
	// the OID; a found one the caller may not reach gets that same answer.
	missing := func() error {
		return Missing(sys, op, authority.Params{OID: oid}, "object:"+oid, fmt.Errorf("object %s: %w", oid, objects.ErrNotFound))
	}
	meta, err := sys.StatObject(oid)
	switch {
	case errors.Is(err, objects.ErrNotFound):
		return objects.Meta{}, missing()
	case err != nil:
		return objects.Meta{}, err
	}
	if err := sys.Require(op, authority.Params{OID: meta.OID, Namespace: meta.Namespace}); err != nil {
		if errors.Is(err, ErrApprovalRequired) {
			return objects.Meta{}, err
		}
		return objects.Meta{}, missing()
	}
	return meta, nil
}

// Missing is the answer to op on a target that is not there for the
// caller: missing, or found and refused. p names the target as a missing
// one is named, without what only its existence tells (the namespace that
// holds an OID). A caller whose grants allow op on p gets notFound, as it
// would for a missing target; one whose grants do not, HiddenDenial; a call
// an ask grant covers is held for approval. Answering both cases here keeps
// them from reading differently.
//
// Only a grant counts (Holding, which reserves nothing), before Require
// reserves a one-shot use or asks: the table's rules besides grants (a
// direct child's result is readable) speak only of a target that exists,
// so they never speak for a missing one.
func Missing(sys Caller, op authority.Op, p authority.Params, target string, notFound error) error {
	if _, ok := sys.Holding(op, p); !ok {
		return HiddenDenial(op, target)
	}
	if err := sys.Require(op, p); err != nil {
		return Hide(err, op, target)
	}
	return notFound
}

// ShowResult decides whether the caller may be shown the result oid (in
// namespace, of size bytes) of a child it started: showing it is a read of
// the Object, decided as read_object's is (the kernel lets a parent read
// its direct child's result without a grant; a deny refuses it). An ask
// grant does not hold the call that shows it: the result is withheld and
// read_object on result_oid asks. A withheld result is described in out
// (result_bytes, result_withheld, and result_readable false when refused).
func ShowResult(sys Caller, out map[string]any, oid, namespace string, size int) (bool, error) {
	switch err := sys.Require(authority.ObjectRead, authority.Params{OID: oid, Namespace: namespace}); {
	case errors.Is(err, ErrApprovalRequired):
		out["result_bytes"] = size
		out["result_withheld"] = fmt.Sprintf("reading it needs a Human's approval (%v); this call does not wait for it: read_object on result_oid asks", err)
		return false, nil
	case errors.Is(err, ErrDenied):
		out["result_bytes"] = size
		out["result_readable"] = false
		out["result_withheld"] = fmt.Sprintf("not readable by you (%v); read_object on result_oid is refused too", err)
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// Hide answers err, Require's refusal of op on target, as HiddenDenial
// does, except a call an ask grant covers: that refusal (wrapping
// ErrApprovalRequired) is returned unchanged, so the kernel holds the call
// for a Human as it holds any other instead of answering it as missing.
func Hide(err error, op authority.Op, target string) error {
	if errors.Is(err, ErrApprovalRequired) {
		return err
	}
	return HiddenDenial(op, target)
}

// HiddenDenial is the one answer to a caller without authority for op on
// target, whether or not target exists: a missing thing and a forbidden one
// must read alike, or probing would reveal what exists and who owns it.
func HiddenDenial(op authority.Op, target string) error {
	return fmt.Errorf("%w: %s on %s: it does not exist or no grant of yours allows it", ErrDenied, authority.Right(op), target)
}

// Self describes the calling process.
type Self struct {
	PID       int64
	ParentPID int64
	Image     string
	Gated     bool
	GoalOID   string
	Namespace string
}

// Config is the Host's tool configuration that schemas show.
type Config struct {
	MaxSleepSeconds float64
}

// Syscalls is the process-scoped kernel surface a tool call uses: the
// composition of the roles below, which the kernel implements. A tool
// family's code depends only on the roles it uses, so each is tested against
// the in-memory fakes of those roles (tools/toolstest).
//
// The kernel hands each call its own value, bound to the transaction the
// call's effects commit in: every staged change of a call that returns an
// error is rolled back, so a failed call changes nothing. A Syscalls value
// must not be kept after the call returns and is not safe for concurrent use.
type Syscalls interface {
	Caller
	ObjectStore
	ProcessTree
	Mailbox
	SkillSet
	Compactor
	Checkpoints
	Reviewer
}

// Caller is who is calling, when, and with what authority: every tool uses it.
type Caller interface {
	Self() Self
	Now() time.Time
	Config() Config
	// Require checks what the authority table says op on p needs, in its
	// order, and reserves a one-shot grant where that is what allows it. A
	// refusal wraps ErrDenied and names the right and resource.
	Require(op authority.Op, p authority.Params) error
	// Holding returns the caller's grant that decides op on p now (its
	// first requirement), as Require would decide it (an approved call's ask
	// grant included), and false when none allows or asks, or the tool may
	// not check op: what a tool hands down must be no wider.
	Holding(op authority.Op, p authority.Params) (capabilities.Grant, bool)
}

// ObjectStore reads and writes Objects. None of its methods checks
// authority: the tool checks first.
type ObjectStore interface {
	StatObject(oid string) (objects.Meta, error)
	ReadObject(oid string) (objects.Meta, []byte, error)
	CreateObject(spec objects.CreateSpec) (objects.Meta, error)
	WriteObject(oid string, expectedVersion uint64, spec objects.WriteSpec) (objects.Meta, error)
	LookupObject(namespace, name string) (objects.Meta, error)
	// ListObjects returns, in name order, up to limit of namespace's
	// Objects whose names sort after after ("" starts at the first) and
	// that the caller may read, and whether more such Objects follow.
	ListObjects(namespace, after string, limit int) (metas []objects.Meta, more bool, err error)
	// CreateResult creates the caller's result Object holding data (JSON),
	// without an authority check: every process may end itself.
	CreateResult(data json.RawMessage) (objects.Meta, error)
}

// ProcessTree is the caller's place in the process tree: its children.
type ProcessTree interface {
	// ImageOf resolves an image reference; the error names the built-ins.
	ImageOf(ref string) (ImageInfo, error)
	// SpawnChild creates a child of the caller. The kernel refuses grants the
	// caller does not hold (attenuation only) and charges the children budget
	// up the ancestor chain; the tool checks process:spawn and image rights.
	SpawnChild(spec ChildSpec) (ChildStatus, error)
	// Child reports a direct child of the caller; anything else is refused.
	Child(pid int64) (ChildStatus, error)
	// SignalChild kills (with every descendant), pauses or resumes a direct child.
	SignalChild(pid int64, signal string) (ChildStatus, error)
}

// Mailbox is the caller's durable message queue and its sending.
type Mailbox interface {
	// PostMessage sends m from the caller to itself, its parent or a direct
	// child, waking the recipient if its wait matches.
	PostMessage(m mailbox.Message) (mailbox.Message, error)
	// ReadMessages reads the caller's mailbox; acks commit with the call.
	ReadMessages(f mailbox.Filter, ack bool) (mailbox.Page, error)
	// HasMessage reports whether a message matching f is in the caller's mailbox.
	HasMessage(f mailbox.Filter) (bool, error)
	// PostedMessage returns the message id of the caller's mailbox whatever
	// its status (superseded ones included), and whether there is one.
	PostedMessage(id string) (mailbox.Message, bool, error)
}

// SkillSet is the set of skills the caller activated; activation shows
// schemas and grants nothing.
type SkillSet interface {
	DiscoverSkills() []SkillInfo
	ActivateSkill(name string) (SkillInfo, error)
	UnloadSkill(name string) error
	ActiveSkills() []string
}

// Compactor compacts the caller's LLM context Object.
type Compactor interface {
	// StartCompaction: an under-target call returns its no-op result at
	// once; otherwise a job is created and the outcome blocks on its first
	// compressor child.
	StartCompaction(req CompactionRequest) (Outcome, error)
	// ResumeCompaction advances the caller's compaction job when its
	// compressor child ended: the next stage (another Block), the writeback
	// (a Result), or the job's failure (an error; the context is unchanged).
	ResumeCompaction(p Pending) (Outcome, error)
}

// Checkpoints snapshots, lists, restores and forks subtrees; the tool checks
// the checkpoint:process:<root> right first.
type Checkpoints interface {
	// CheckpointRoot is the root pid checkpoint id snapshots; a missing id is
	// a not_found tool error.
	CheckpointRoot(id string) (int64, error)
	CreateCheckpoint(root int64) (Checkpoint, error)
	ListCheckpoints(root int64) ([]Checkpoint, error)
	RestoreCheckpoint(id string) (RestoreReport, error)
	ForkCheckpoint(id string) (ForkReport, error)
}

// Reviewer runs the completion review of a gated image.
type Reviewer interface {
	// CompletionReview runs the cumulative completion review for a
	// process_exit call with token ("" for a bare probe) and evidence (nil
	// for none).
	CompletionReview(token string, evidence json.RawMessage) (process.Decision, error)
}

// Checkpoint describes a durable snapshot of a process subtree, as the
// checkpoint tools show it.
type Checkpoint struct {
	ID        string    `json:"id"`
	RootPID   int64     `json:"root_pid"`
	CreatedAt time.Time `json:"created_at"`
	PIDs      []int64   `json:"pids"`
	Objects   int       `json:"objects"`
	Messages  int       `json:"messages"`
	// Marks are each process's high-water marks at the checkpoint.
	Marks map[int64]CheckpointMarks `json:"marks"`
}

// CheckpointMarks are one process's high-water marks at a checkpoint.
type CheckpointMarks struct {
	MailboxSeq uint64 `json:"mailbox_seq"`
	ToolCalls  uint64 `json:"tool_calls"`
}

// RestoreReport says what a restore did and which external effects it did
// not undo.
type RestoreReport struct {
	Checkpoint string  `json:"checkpoint"`
	Restored   []int64 `json:"restored_pids"`
	Killed     []int64 `json:"killed_pids"`
	// KeptTerminal are processes that ended since the checkpoint: an exit is
	// irreversible, so they stay ended.
	KeptTerminal []int64 `json:"kept_terminal_pids"`
	// NotRestored are Objects removed since the checkpoint: re-creating one
	// would restart its version, so they stay removed.
	NotRestored        []string         `json:"not_restored_oids"`
	SupersededMessages int              `json:"superseded_messages"`
	EffectsSince       []EffectSinceRef `json:"external_effects_since_checkpoint"`
}

// EffectSinceRef is a tool call made after the checkpoint: its effect stays.
type EffectSinceRef struct {
	PID    int64  `json:"pid"`
	Tool   string `json:"tool"`
	CallID string `json:"call_id"`
	OK     bool   `json:"ok"`
	// Code is the error code of a call that failed; CodeCancelled says it
	// never started.
	Code string `json:"code,omitempty"`
}

// ForkReport maps a checkpoint's processes to their forks.
type ForkReport struct {
	Checkpoint string          `json:"checkpoint"`
	RootPID    int64           `json:"root_pid"`
	PIDs       map[int64]int64 `json:"pids"` // checkpoint pid -> new pid
}

// SkillInfo describes a skill a process may activate.
type SkillInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Tools are the tool names activation shows: the skill's own tools and
	// the catalog tools its allowed-tools names.
	Tools []string `json:"tools"`
	// Dir is the package folder (for reading resources).
	Dir string `json:"-"`
	// Manual and Metadata are the SKILL.md admission read: its Markdown
	// after the front matter, and the front matter's other keys as compact
	// JSON. Tools show these rather than read the file again, since they
	// run inside a commit, where no file is read.
	Manual   string                     `json:"-"`
	Metadata map[string]json.RawMessage `json:"-"`
}

// SkillCatalog is the set of skills a runtime knows. Implementations are
// immutable after construction and safe for concurrent use.
type SkillCatalog interface {
	// Skills lists every skill, sorted by name.
	Skills() []SkillInfo
	// Tools returns the tools skills add to the catalog (runner and bundled
	// tools), each with its exact schema.
	Tools() []*Tool
}

// CompactionRequest holds compact_process_context's validated arguments.
type CompactionRequest struct {
	TargetTokens          int  `json:"target_tokens"`
	PreserveRecentEntries int  `json:"preserve_recent_entries"`
	MaxChunks             int  `json:"max_chunks"`
	Force                 bool `json:"force"`
}

// ImageInfo is what a tool needs to know of an image.
type ImageInfo struct {
	Ref   string
	Gated bool
}

// ChildSpec is a spawn request from a process.
type ChildSpec struct {
	Image  string
	Goal   string
	Grants []capabilities.Grant
	Budget capabilities.Budget
	// ToolTable, when set, is exactly the child's tool table (an agent-task
	// runner's allowed_tools); every name must resolve in the catalog
	// before the child exists.
	ToolTable []string
	// Scopes are the scopes the child's runner declared: a catalog tool that
	// owns a scope outside them is refused.
	Scopes []string
}

// ChildStatus is a snapshot of a child process.
type ChildStatus struct {
	PID       int64
	Image     string
	GoalOID   string
	Status    process.State
	ResultOID string
	Reason    string
}

// Outcome is what a successful call produced. Exactly one of Result, Block
// or Exit describes it; Block and Exit end the batch.
type Outcome struct {
	// Result is the JSON object shown to the model ("ok": true is added).
	Result map[string]any
	// Block makes the process wait durably; the result is produced by the
	// tool's Resume when the wait ends.
	Block *Block
	// Exit ends the process; Result is shown alongside.
	Exit *Exit
	// Effect runs outside the runtime's commit (a subprocess, a javascript
	// worker): the kernel first records durably that the effect started,
	// then runs it without holding any lock, then records its result as the
	// call's result. A crash in between leaves the effect's settlement
	// unknown, and the process is told so rather than the effect re-run.
	Effect func(ctx context.Context) (map[string]any, error)
}

// Block is a durable wait a call enters.
type Block struct {
	Wait process.Wait
	// Data is kept with the pending action and handed to Resume.
	Data json.RawMessage
}

// Exit is a terminal exit a call requests.
type Exit struct {
	ResultOID string
	// Evidence is the canonical completion evidence a gated exit passed, and
	// EvidenceSHA256 its hash; both are recorded with the exit.
	Evidence       json.RawMessage
	EvidenceSHA256 string
}

// Pending is a durable pending action handed back to the tool that created it.
type Pending struct {
	ID        string
	Tool      string
	CallID    string
	Data      json.RawMessage
	StartedAt time.Time
	// Recovered is true when the runtime was reopened while the action was
	// pending, so whether its effect completed is not known.
	Recovered bool
}

// Tool is one catalog entry.
type Tool struct {
	Name        string
	Description string
	Schema      *schema.Schema
	// Parameters, when set, is the argument schema the model is given in
	// place of Schema's rendering: a JSON Schema object that says more than
	// Schema can (a skill runner's declared input schemas, exactly). Schema
	// still checks every call before Invoke and must never refuse what
	// Parameters allows; Invoke checks the rest.
	Parameters json.RawMessage
	// EndsBatch marks wait, compaction and exit tools: calls after one in the
	// same response are answered as not started.
	EndsBatch bool
	// Uncharged tools are not counted against the tool-call budget: a
	// process at its limit must still be able to end with process_exit.
	Uncharged bool
	// Invoke runs the call with validated arguments (defaults applied). It
	// acts only through sys, inside the commit that records its result; an
	// effect outside the store is returned as Outcome.Effect, never run here.
	// The kernel may abandon that commit and run the call again (a worker
	// that went on into the next quantum in it and failed there), so Invoke
	// must leave nothing behind but what it did through sys. It runs with
	// the store's write lock held: it must not call the Runtime. A panic in
	// it, or a Result JSON cannot encode or over 8 MiB encoded, fails the
	// call (code failed) and keeps nothing of it; an Outcome.Effect's panic
	// or such a result fails the call with effect_started. An Effect should
	// return once its context ends: the runtime's Close waits for it.
	Invoke func(ctx context.Context, sys Syscalls, args json.RawMessage) (Outcome, error)
	// Resume completes a pending action this tool created with Block: with a
	// Result, or with another Block to keep waiting (a multi-stage action).
	// It acts only through sys, as Invoke does, and may run again as Invoke
	// may.
	Resume func(ctx context.Context, sys Syscalls, p Pending) (Outcome, error)
	// Scopes are the permission scopes this tool owns: a process running for
	// a skill runner may call it only when the runner declared them all.
	Scopes []string
	// Ops are the authority operations the tool may check; nil means the
	// built-in tool's entry in the authority table (authority.ToolOps). The
	// kernel refuses a check of any other operation (authority.ErrUndeclared).
	Ops []authority.Op
}

// Family builds the tools of one built-in family for a configuration.
type Family func(cfg Config) []*Tool

// Broker is the catalog. It is immutable after construction and safe for
// concurrent use.
type Broker struct {
	tools map[string]*Tool
	names []string
}

// NewBroker builds a catalog from tools; a duplicate name is an error.
func NewBroker(ts ...*Tool) (*Broker, error) {
	b := &Broker{tools: map[string]*Tool{}}
	for i, t := range ts {
		if t == nil {
			return nil, fmt.Errorf("tools: tool %d is nil", i)
		}
		if t.Name == "" || t.Schema == nil || t.Invoke == nil {
			return nil, fmt.Errorf("tools: tool %q lacks a name, schema or Invoke", t.Name)
		}
		if !validToolName(t.Name) {
			return nil, fmt.Errorf("tools: tool %q: a name is 1 to 64 letters, digits, '_' or '-', as chat-completions servers hold them", t.Name)
		}
		for _, op := range t.Ops {
			if _, ok := authority.Lookup(op); !ok {
				return nil, fmt.Errorf("tools: tool %q: ops: %q is no operation of the authority table", t.Name, op)
			}
		}
		if _, dup := b.tools[t.Name]; dup {
			return nil, fmt.Errorf("tools: tool %q registered twice", t.Name)
		}
		b.tools[t.Name] = t
		b.names = append(b.names, t.Name)
	}
	sort.Strings(b.names)
	return b, nil
}

// validToolName reports whether name is 1 to 64 ASCII letters, digits, '_'
// or '-': the names a model can be shown and call through any
// chat-completions server.
func validToolName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for _, c := range []byte(name) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Names lists every tool name, sorted.
func (b *Broker) Names() []string { return append([]string(nil), b.names...) }

// Lookup finds a tool.
func (b *Broker) Lookup(name string) (*Tool, bool) {
	t, ok := b.tools[name]
	return t, ok
}

// Prepare finds the tool a call names and validates its arguments against the
// exact schema, returning the canonical arguments with defaults applied.
// Nothing is executed.
func (b *Broker) Prepare(name string, raw json.RawMessage) (*Tool, json.RawMessage, error) {
	t, ok := b.tools[name]
	if !ok {
		return nil, nil, Errorf(CodeUnknownTool, "unknown tool %q", name)
	}
	if err := argumentsObject(raw); err != nil {
		return nil, nil, &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf("%s: %v", name, err), Err: err}
	}
	args, err := t.Schema.Normalize(raw)
	if err != nil {
		return nil, nil, &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf("%s: %v", name, err), Err: err}
	}
	return t, args, nil
}

// NotStarted is the result every call after a batch-ending call receives.
func NotStarted(reason string) map[string]any {
	return map[string]any{"ok": false, "cancelled": true, "effect_started": false, "reason": reason}
}

// ErrorResult renders a failed call for the model.
func ErrorResult(e *Error) map[string]any {
	return map[string]any{
		"ok":             false,
		"error":          map[string]any{"code": e.Code, "message": e.Message},
		"effect_started": e.EffectStarted,
	}
}

// SuccessResult renders a successful call's result for the model.
func SuccessResult(r map[string]any) map[string]any {
	out := make(map[string]any, len(r)+1)
	for k, v := range r {
		out[k] = v
	}
	out["ok"] = true
	return out
}

// argumentsObject checks that raw is a JSON object, naming the JSON error
// when the model wrote text that is not JSON (providers carry such text as a
// JSON string).
func argumentsObject(raw json.RawMessage) error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		return nil
	}
	var text string
	if json.Unmarshal(trimmed, &text) == nil {
		var v any
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			return fmt.Errorf("%w: arguments: not valid JSON (%v); send one JSON object", schema.ErrInvalid, err)
		}
		trimmed = bytes.TrimSpace([]byte(text))
		if len(trimmed) > 0 && trimmed[0] == '{' {
			return fmt.Errorf("%w: arguments: a JSON object encoded inside a string; send the object itself", schema.ErrInvalid)
		}
	}
	var v any
	if err := json.Unmarshal(trimmed, &v); err != nil {
		return fmt.Errorf("%w: arguments: not valid JSON (%v); send one JSON object", schema.ErrInvalid, err)
	}
	return fmt.Errorf("%w: arguments: must be a JSON object, not %s", schema.ErrInvalid, jsonKind(v))
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}

// Closest returns up to n of names nearest to name by edit distance (and
// sharing a prefix or substring first), for "did you mean" hints.
func Closest(name string, names []string, n int) []string {
	type scored struct {
		name string
		d    int
	}
	var all []scored
	for _, c := range names {
		d := editDistance(strings.ToLower(name), strings.ToLower(c))
		if strings.Contains(c, name) || strings.Contains(name, c) {
			d = 0
		}
		if d <= max(3, len(name)/2) {
			all = append(all, scored{c, d})
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].d != all[j].d {
			return all[i].d < all[j].d
		}
		return all[i].name < all[j].name
	})
	out := make([]string, 0, n)
	for i := 0; i < len(all) && i < n; i++ {
		out = append(out, all[i].name)
	}
	return out
}

// editDistance is the Levenshtein distance of a and b, by bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
