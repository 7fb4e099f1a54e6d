// Package authority is the one table of authority: which right each tool
// and each kernel stage needs on which resource. A tool or a stage names its
// operation and the resources it acts on (Params); Requirements turns them
// into the rights to check, most specific resource name first, in the order
// they are checked. Nothing else spells a right or a resource name to check.
//
// The package is pure: no I/O, no clock, no grants. Deciding a requirement
// against a process's grants is capabilities.Check's job, done by the kernel
// in one place (kernel/syscalls.go).
package authority

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/libos/libos/capabilities"
)

// Op names an operation that a tool or a kernel stage is authorized for.
type Op string

// Operations of the tools.
const (
	ClockNow          Op = "clock.now"
	ClockSleep        Op = "clock.sleep"
	ObjectRead        Op = "object.read"
	ObjectWrite       Op = "object.write"
	ObjectCreate      Op = "object.create"
	ObjectList        Op = "object.list"
	ProcessSpawn      Op = "process.spawn"
	ProcessWait       Op = "process.wait"
	ProcessSignal     Op = "process.signal"
	ProcessExit       Op = "process.exit"
	MessageSend       Op = "message.send"
	MessageRead       Op = "message.read"
	CheckpointCreate  Op = "checkpoint.create"
	CheckpointList    Op = "checkpoint.list"
	CheckpointRestore Op = "checkpoint.restore"
	CheckpointFork    Op = "checkpoint.fork"
	SkillUse          Op = "skill.use"
	ScopeUse          Op = "scope.use"
	AgentTaskSpawn    Op = "agent_task.spawn"
)

// Operations of the kernel's own stages.
const (
	// ContextMaintenance starts automatic compaction under context pressure.
	ContextMaintenance Op = "context.maintenance"
	// CompactionSource reads, rewrites and materializes the context Object.
	CompactionSource Op = "compaction.source"
	// CompactionJob keeps the compaction job Object in the caller's namespace.
	CompactionJob Op = "compaction.job"
	// CompactionStage starts one compressor child.
	CompactionStage Op = "compaction.stage"
)

// Params are the resources an operation acts on. A field an operation does
// not use is ignored; one it uses and is not given drops the names it fills.
type Params struct {
	OID       string // an Object
	Namespace string // an Object namespace (an Object's, or one to create in or list)
	Image     string // an image name:version
	// OwnImage is the caller's image: a need marked ExceptOwnImage is
	// skipped when Image is the caller's own.
	OwnImage string
	PID      int64  // the root of a checkpointed subtree
	Scope    string // a permission scope
	// Served is, when Namespace is a context compressor's, the namespace
	// of the process it compacts: its Objects hold that process's context,
	// so they answer to that namespace's grants too (a deny there denies
	// them).
	Served string
}

// Need is one row of an entry: a right on the resource names a template
// gives, most specific first. {oid}, {namespace}, {image}, {pid} and
// {scope} are filled from Params; a name whose parameter is empty is left
// out, and a need with no name left is an error.
type Need struct {
	Right capabilities.Right
	Names []string
	// ExceptOwnImage skips the need when Params.Image is Params.OwnImage.
	ExceptOwnImage bool
}

// Entry is what one operation needs.
type Entry struct {
	Op    Op
	Needs []Need
	// Hidden: a refusal answers exactly as a missing target does
	// (tools.HiddenDenial), so probing cannot tell which exist.
	Hidden bool
	// Rule is what decides the operation besides grants, and where that is
	// enforced; empty when grants alone decide.
	Rule string
}

var (
	read        = capabilities.Read
	write       = capabilities.Write
	materialize = capabilities.Materialize
	execute     = capabilities.Execute
	admin       = capabilities.Admin

	anObject    = []string{"object:{oid}", "object_namespace:{namespace}", "object_namespace:{served}"}
	aNamespace  = []string{"object_namespace:{namespace}", "object_namespace:{served}"}
	aCheckpoint = []string{"checkpoint:process:{pid}"}
	spawning    = []string{capabilities.ProcessSpawn}
	anImage     = []string{"image:{image}"}
)

// table is the authority of every operation, in the order checked.
var table = []Entry{
	{Op: ClockNow, Needs: []Need{{Right: read, Names: []string{capabilities.ClockNow}}}},
	{Op: ClockSleep, Needs: []Need{{Right: read, Names: []string{capabilities.ClockSleep}}}},

	{Op: ObjectRead, Needs: []Need{{Right: read, Names: anObject}}, Hidden: true,
		Rule: "the result a direct child exited with (its own, or one it handed up) is readable by its parent without a grant unless one denies it (kernel/syscalls.go, childResult)"},
	{Op: ObjectWrite, Needs: []Need{{Right: write, Names: anObject}}, Hidden: true,
		Rule: "Objects of the runtime's kinds (context, transcript, goal, job, result) change only through the kernel (kernel/syscalls.go, kernelKinds)"},
	{Op: ObjectCreate, Needs: []Need{{Right: write, Names: aNamespace}},
		Rule: "the runtime's kinds cannot be created, nor the names it gives its own Objects in a process namespace (kernel/syscalls.go, kernelKinds, kernelName)"},
	{Op: ObjectList, Needs: []Need{{Right: read, Names: aNamespace}},
		Rule: "an Object the caller may not read (a deny on object:<oid>) is left out of the listing (kernel/syscalls.go, ListObjects)"},

	{Op: ProcessSpawn, Needs: []Need{{Right: write, Names: spawning}, {Right: read, Names: anImage, ExceptOwnImage: true}},
		Rule: "the child's grants are attenuated from the caller's and its children budget is charged up the ancestor chain (kernel/tree.go, spawnChild)"},
	{Op: ProcessWait, Rule: "a direct child only (kernel/tree.go, directChild); its result is shown only after object.read on it, never held for approval (tools/proc, readyResult)"},
	{Op: ProcessSignal, Rule: "a direct child only (kernel/tree.go, directChild)"},
	{Op: ProcessExit, Rule: "every process may end itself; a result_oid needs object.read, a gated image the completion review (process/review.go)"},

	{Op: MessageSend, Rule: "to oneself, one's parent or a direct child (kernel/tree.go, canMessage)"},
	{Op: MessageRead, Rule: "one's own mailbox only"},

	{Op: CheckpointCreate, Needs: []Need{{Right: write, Names: aCheckpoint}}},
	{Op: CheckpointList, Needs: []Need{{Right: read, Names: aCheckpoint}}},
	{Op: CheckpointRestore, Needs: []Need{{Right: admin, Names: aCheckpoint}}, Hidden: true,
		Rule: "the subtree is quiescent and does not hold the caller, and no grant denies the caller a write of an Object the restore rewrites or removes (kernel/checkpoint.go, restoreCheckpoint; kernel/syscalls.go, unopposed)"},
	{Op: CheckpointFork, Needs: []Need{{Right: execute, Names: aCheckpoint}}, Hidden: true,
		Rule: "each forked process is a spawn of the caller's (process.spawn), its grants narrowed to the caller's, its wall time to what the caller has left, charged to its children budget; no grant denies the caller a read of an Object the fork copies (kernel/checkpoint.go, forkCheckpoint; kernel/syscalls.go, unopposed)"},

	{Op: SkillUse, Rule: "discovering, activating and reading a skill show schemas and files and grant nothing; only the image's skills"},
	{Op: ScopeUse, Needs: []Need{{Right: execute, Names: []string{"scope:{scope}"}}},
		Rule: "a tool owning a scope runs for a runner's child only when the runner declared it (kernel/skills.go, scopeRefusal)"},
	{Op: AgentTaskSpawn, Needs: []Need{{Right: write, Names: spawning}},
		Rule: "after scope.use on each of the runner's scopes; the child gets exactly those scopes (attenuated)"},

	{Op: ContextMaintenance, Needs: []Need{{Right: execute, Names: []string{capabilities.ContextMaintenance}}}},
	{Op: CompactionSource, Needs: []Need{{Right: read, Names: anObject}, {Right: write, Names: anObject}, {Right: materialize, Names: anObject}}},
	{Op: CompactionJob, Needs: []Need{{Right: write, Names: aNamespace}}},
	{Op: CompactionStage, Needs: []Need{{Right: write, Names: spawning}, {Right: read, Names: anImage}},
		Rule: "probed without reserving before a job exists, then required (one-shots reserved) as each stage's compressor starts"},
}

// toolOps are the operations each built-in tool names, in the order it
// checks them.
var toolOps = map[string][]Op{
	"get_current_time":         {ClockNow},
	"sleep":                    {ClockSleep},
	"compact_process_context":  {CompactionSource, CompactionJob, CompactionStage},
	"process_exit":             {ProcessExit, ObjectRead},
	"spawn_child_process":      {ProcessSpawn},
	"wait_child_process":       {ProcessWait, ObjectRead},
	"signal_child_process":     {ProcessSignal},
	"send_process_message":     {MessageSend},
	"read_process_messages":    {MessageRead},
	"receive_process_messages": {MessageRead},
	"create_object":            {ObjectCreate, ObjectRead},
	"read_object":              {ObjectRead},
	"write_object":             {ObjectWrite, ObjectRead},
	"list_objects":             {ObjectList},
	"checkpoint_create":        {CheckpointCreate},
	"checkpoint_list":          {CheckpointList},
	"checkpoint_restore":       {CheckpointRestore},
	"checkpoint_fork":          {CheckpointFork},
	"discover_skills":          {SkillUse},
	"activate_skill":           {SkillUse},
	"unload_skill":             {SkillUse},
	"read_skill_resource":      {SkillUse},
}

// Skill runner tools are named by their packages, so they are listed by
// kind: a javascript or cli-tool runner, and an agent task.
var (
	RunnerOps    = []Op{ScopeUse}
	AgentTaskOps = []Op{ScopeUse, AgentTaskSpawn, ObjectRead}
)

// ErrUndeclared is a check of an operation the table does not list for the
// tool that made it: a defect of the tool, refused before anything is
// decided.
var ErrUndeclared = errors.New("authority: operation not declared for this tool")

// Lookup returns the entry of op.
func Lookup(op Op) (Entry, bool) {
	for _, e := range table {
		if e.Op == op {
			return e, true
		}
	}
	return Entry{}, false
}

// Entries returns the whole table, in its order.
func Entries() []Entry { return append([]Entry(nil), table...) }

// ToolOps returns the operations the built-in tool name checks, and whether
// the table has an entry for it.
func ToolOps(name string) ([]Op, bool) {
	ops, ok := toolOps[name]
	return append([]Op(nil), ops...), ok
}

// Requirement is one check: right on a target known by names, most
// specific first.
type Requirement struct {
	Right capabilities.Right
	Names []string
}

func (q Requirement) String() string {
	return string(q.Right) + " on " + strings.Join(q.Names, " ")
}

// Requirements returns what op on p needs, in the order to check it. An
// operation without an entry, or a need none of whose names p fills, is an
// error: a check the table cannot state is never made up.
func Requirements(op Op, p Params) ([]Requirement, error) {
	e, ok := Lookup(op)
	if !ok {
		return nil, fmt.Errorf("authority: no entry for operation %q", op)
	}
	out := make([]Requirement, 0, len(e.Needs))
	for _, n := range e.Needs {
		if n.ExceptOwnImage && p.Image != "" && p.Image == p.OwnImage {
			continue
		}
		names := make([]string, 0, len(n.Names))
		for _, tmpl := range n.Names {
			if name, ok := fill(tmpl, p); ok {
				names = append(names, name)
			}
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("authority: %s: %s needs %s; none was given", op, n.Right, strings.Join(n.Names, " or "))
		}
		out = append(out, Requirement{Right: n.Right, Names: names})
	}
	return out, nil
}

// Right is the right an operation is named by in a hidden denial: its first
// need's ("" for an operation without needs).
func Right(op Op) capabilities.Right {
	if e, ok := Lookup(op); ok && len(e.Needs) > 0 {
		return e.Needs[0].Right
	}
	return ""
}

// fill expands the one placeholder of tmpl from p; false when it is empty.
func fill(tmpl string, p Params) (string, bool) {
	open := strings.IndexByte(tmpl, '{')
	if open < 0 {
		return tmpl, true
	}
	var v string
	switch key := tmpl[open+1 : len(tmpl)-1]; key {
	case "oid":
		v = p.OID
	case "namespace":
		v = p.Namespace
	case "served":
		v = p.Served
	case "image":
		v = p.Image
	case "scope":
		v = capabilities.ScopeName(p.Scope)
	case "pid":
		if p.PID > 0 {
			v = strconv.FormatInt(p.PID, 10)
		}
	default:
		panic("authority: unknown placeholder in " + tmpl)
	}
	if v == "" {
		return "", false
	}
	return tmpl[:open] + v, true
}
