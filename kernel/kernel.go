// Package kernel is the libos runtime: it opens a runtime directory,
// recovers it, schedules AgentProcesses in quanta on a pool of workers,
// implements the syscall surface that tools call, and records every state
// change durably before it is acknowledged.
package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/images"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/skills/catalog"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/ckpt"
	"github.com/libos/libos/tools/msg"
	"github.com/libos/libos/tools/objmem"
	"github.com/libos/libos/tools/proc"
	"github.com/libos/libos/tools/session"
)

// Sentinel errors a Host must tell apart.
var (
	ErrNoProcess    = errors.New("no such process")
	ErrNoProvider   = errors.New("no LLM provider configured")
	ErrClosed       = errors.New("runtime is closed")
	ErrRunning      = errors.New("the scheduler is already running")
	ErrInvalidSpawn = errors.New("invalid spawn request")
	// ErrInvalidOptions reports Options that break a rule; Open opened
	// nothing.
	ErrInvalidOptions = errors.New("invalid runtime options")
	// ErrEnded reports a change asked of a process that has ended: a
	// message to its closed mailbox, a new goal.
	ErrEnded = errors.New("the process has ended")
	// ErrReadOnly reports a change asked of a runtime opened with
	// Options.ReadOnly.
	ErrReadOnly = errors.New("the runtime directory was opened read-only")
)

// Options configure a Runtime. The zero value of every field is a sensible default.
type Options struct {
	// Provider answers model calls. Required to run quanta; a runtime opened
	// only to inspect or post messages may omit it.
	Provider llm.Provider
	// Clock is the time source (default: the real clock).
	Clock clock.Clock
	// Workers is the number of quanta run in parallel (default 16). A waiting
	// process holds no worker. While no other process waits for one, a
	// worker goes on in the commit of a call's result into the process's next
	// call, or into the quantum of a process the commit woke.
	Workers int
	// DisableFullIO turns off retention of full provider I/O as durable
	// evidence; it is on by default.
	DisableFullIO bool
	// MaxSleepSeconds is sleep's maximum, shown in its schema (default 60).
	MaxSleepSeconds float64
	// OnEvent, when set, is called with each event once it is durable, in
	// commit order (Event.Seq ascending), one call at a time: it runs on the
	// goroutine of a commit, so it must not block for long. It may call the
	// Runtime, but not Close; the events of a commit it makes are delivered
	// after it returns. A call of the Runtime may return before its events
	// are delivered; Close returns after every event is. A panic in it is
	// recovered: that event is lost to OnEvent, not to the log.
	OnEvent func(Event)
	// Images resolves image references beyond the built-ins; an entry
	// named as a built-in (context-compressor:v0, say) replaces it. A reopen
	// must be given the images its live processes run.
	Images map[string]*images.Image
	// Tokens estimates tokens (default: four bytes a token).
	Tokens TokenEstimator
	// FS is the filesystem under the store (tests inject faults with errorfs).
	FS vfs.FS
	// Skills is the skill catalog processes discover and activate; its tools
	// join the ToolBroker beside the built-ins.
	Skills tools.SkillCatalog
	// Tools are the Host's own tools, beside the built-ins and the skills':
	// an image names them in its tools to show them. A tool decides its
	// authority through Caller.Require on operations of the authority table
	// it lists in Tool.Ops (a Host tool guarded by a scope of its own uses
	// authority.ScopeUse with Params.Scope, which an execute grant on
	// scope:<name> allows). Invoke runs with the store's write lock held: it
	// must not call the Runtime (that waits for the lock for good); an
	// outside effect belongs in Outcome.Effect, which runs without it.
	Tools []*tools.Tool
	// ProviderRetry is how transient provider failures are retried: a
	// process backs off on a durable provider wait, holding no worker (zero
	// fields take llm's defaults).
	ProviderRetry llm.RetryPolicy
	// ReadOnly opens an existing directory to inspect it without writing
	// anything to it: no recovery (a process found mid-quantum is shown as
	// it was stored), no scheduler, and every method that would change
	// state returns ErrReadOnly. It works on a full disk, and read-only
	// opens in several processes may share a directory (a writer is kept
	// out while they hold it).
	ReadOnly bool
}

// Runtime is an open runtime directory. Its methods are safe for concurrent
// use, except from inside a tool's Invoke or Resume, which run with the
// store's write lock held (see Options.Tools).
type Runtime struct {
	dir    string
	opts   Options
	store  *objects.Store
	clock  clock.Clock
	broker *tools.Broker
	// builtinNames are the built-in tools an image's "builtin" entry stands for.
	builtinNames []string
	tokens       TokenEstimator
	retain       bool // full-I/O retention

	ctxMu    sync.Mutex
	ctxCache map[int64]*llmContext
	// records is used only under the store's write lock (see recordCache).
	records *recordCache

	sched *scheduler
	// events delivers to OnEvent; nil without one.
	events *eventQueue

	provMu sync.Mutex

	toolTables sync.Map // tool table selector -> *selectedTools
	// spawnIndexes are the spawn indexes asked for, by pid (int64 -> int):
	// a pid's never changes once its spawn committed, so it is read from
	// the store once; it is forgotten when the process ends.
	spawnIndexes sync.Map

	closeOnce sync.Once
	closed    chan struct{}
}

// StorePath is the store of the runtime directory dir: the Pebble database
// every commit writes to.
func StorePath(dir string) string { return filepath.Join(dir, "store") }

// Open opens (creating if needed) the runtime directory dir and recovers it.
// A directory held by another runtime fails with an error wrapping
// objects.ErrInUse.
func Open(dir string, opts Options) (*Runtime, error) {
	switch {
	case opts.Workers < 0:
		return nil, fmt.Errorf("%w: workers: must be 0 (the default) or more, got %d", ErrInvalidOptions, opts.Workers)
	case opts.MaxSleepSeconds < 0 || math.IsNaN(opts.MaxSleepSeconds) || math.IsInf(opts.MaxSleepSeconds, 0):
		return nil, fmt.Errorf("%w: max_sleep_seconds: must be 0 (the default) or a finite number of seconds, got %v", ErrInvalidOptions, opts.MaxSleepSeconds)
	}
	if err := opts.ProviderRetry.Validate(); err != nil {
		return nil, fmt.Errorf("%w: provider_retry: %w", ErrInvalidOptions, err)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Workers == 0 {
		opts.Workers = 16
	}
	if opts.MaxSleepSeconds == 0 {
		opts.MaxSleepSeconds = session.DefaultMaxSleepSeconds
	}
	if opts.Tokens == nil {
		opts.Tokens = byteEstimator{}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("runtime directory %q: %w", dir, err)
	}
	// The tools are resolved before the directory is touched, so a
	// misconfigured image fails here and not at a process's first quantum.
	builtins := BuiltinTools(tools.Config{MaxSleepSeconds: opts.MaxSleepSeconds})
	builtinNames := make([]string, 0, len(builtins))
	for _, t := range builtins {
		builtinNames = append(builtinNames, t.Name)
	}
	all := builtins
	if opts.Skills != nil || len(opts.Tools) > 0 {
		all = slices.Clone(builtins)
		if opts.Skills != nil {
			all = append(all, opts.Skills.Tools()...)
		}
		all = append(all, opts.Tools...)
	}
	broker, err := tools.NewBroker(all...)
	if err != nil {
		return nil, err
	}
	if opts.Images, err = checkImages(opts.Images, broker, opts.Skills); err != nil {
		return nil, err
	}
	if opts.FS == nil && !opts.ReadOnly {
		if err := objects.MkdirDurable(vfs.Default, abs, 0o700); err != nil {
			return nil, fmt.Errorf("runtime directory %q: %w", dir, err)
		}
	}
	store, err := objects.Open(StorePath(abs), objects.Options{FS: opts.FS, Clock: opts.Clock.Now, ReadOnly: opts.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("open runtime directory %s: %w", abs, err)
	}
	k := &Runtime{
		dir:          abs,
		opts:         opts,
		store:        store,
		clock:        opts.Clock,
		broker:       broker,
		builtinNames: builtinNames,
		tokens:       opts.Tokens,
		retain:       !opts.DisableFullIO,
		ctxCache:     map[int64]*llmContext{},
		records:      newRecordCache(),
		closed:       make(chan struct{}),
	}
	k.sched = newScheduler(k)
	if opts.OnEvent != nil {
		k.events = newEventQueue(opts.OnEvent)
	}
	if opts.ReadOnly {
		// Recovery writes; what it would change is shown as stored.
		return k, nil
	}
	if err := k.recover(); err != nil {
		store.Close()
		return nil, fmt.Errorf("recover runtime directory %s: %w", abs, err)
	}
	return k, nil
}

// checkImages returns Options.Images as the runtime keeps them: copies,
// checked and with their defaults filled as an image file's are
// (images.Image.Validate; a window too small for an answer and a prompt
// would fail the process's maintenance, not the Host's Open). It refuses
// an image a process could not run with: an entry keyed by a reference
// other than the image's own name:version (spawn would find it, the
// quantum would not), a tool table naming a tool the broker does not
// resolve (buildToolTable would drop it without a word), and a skills list
// naming a skill the catalog does not hold (discover_skills would leave it
// out without a word).
func checkImages(ims map[string]*images.Image, broker *tools.Broker, catalog tools.SkillCatalog) (map[string]*images.Image, error) {
	if ims == nil {
		return nil, nil
	}
	var skills []tools.SkillInfo
	if catalog != nil {
		skills = catalog.Skills()
	}
	out := make(map[string]*images.Image, len(ims))
	for _, ref := range slices.Sorted(maps.Keys(ims)) {
		im := ims[ref]
		if im == nil {
			return nil, fmt.Errorf("Options.Images[%q]: nil image", ref)
		}
		if im.Ref() != ref {
			return nil, fmt.Errorf("Options.Images[%q]: the image is %s; an image must be keyed by its own name:version", ref, im.Ref())
		}
		checked := *im
		if err := checked.Validate(); err != nil {
			return nil, fmt.Errorf("Options.Images[%q]: %w", ref, err)
		}
		for i, name := range checked.Tools {
			if name == images.BuiltinTools {
				continue
			}
			// The rule checkToolTable applies to an agent task's allowed_tools.
			if _, ok := broker.Lookup(name); !ok {
				return nil, fmt.Errorf("Options.Images[%q]: tools[%d]: %q does not resolve in the tool catalog (the built-in tools, the skills' and Options.Tools)", ref, i, name)
			}
		}
		for i, name := range checked.Skills {
			if !slices.ContainsFunc(skills, func(s tools.SkillInfo) bool { return s.Name == name }) {
				return nil, fmt.Errorf("Options.Images[%q]: skills[%d]: %q is not a skill of the catalog (Options.Skills)", ref, i, name)
			}
		}
		out[ref] = &checked
	}
	return out, nil
}

// BuiltinTools returns every built-in tool of the runtime.
func BuiltinTools(cfg tools.Config) []*tools.Tool {
	var all []*tools.Tool
	for _, family := range []tools.Family{session.Tools, proc.Tools, msg.Tools, objmem.Tools, ckpt.Tools, catalog.MetaTools} {
		all = append(all, family(cfg)...)
	}
	return all
}

// SetProvider sets the provider before RunUntilIdle (a Host that opened the
// runtime to read its recorded settings first), or replaces it; processes
// waiting on the provider for the Host ask it again after RetryProvider.
func (k *Runtime) SetProvider(p llm.Provider) {
	k.provMu.Lock()
	k.opts.Provider = p
	k.provMu.Unlock()
}

// RetryProvider makes every process that waits on its provider for the Host
// (a refused key, an unknown model, a server to fix) ask it again in its
// next quantum, with its failures counted from zero, as a reopen does; a
// backoff keeps its time. It returns the pids it woke, in order.
func (k *Runtime) RetryProvider() ([]int64, error) {
	var held []int64
	err := k.view(func(tx *txn) error {
		return scanLive(tx, func(e liveEntry) error {
			if e.State == process.Waiting && e.Wait == process.WaitProvider && e.Until.IsZero() {
				held = append(held, e.PID)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	var woken []int64
	for _, pid := range held {
		still := false
		err := k.update(func(tx *txn) error {
			r, err := loadProc(tx, pid)
			if err != nil {
				return err
			}
			// It may have been killed, paused or woken since the scan.
			still = r.State == process.Waiting && r.Wait != nil && r.Wait.Kind == process.WaitProvider && r.Wait.Until.IsZero()
			if !still {
				return nil
			}
			return k.askProviderAgain(tx, r, EventSignal)
		})
		if err != nil {
			return woken, fmt.Errorf("retry the provider of pid %d: %w", pid, err)
		}
		if still {
			woken = append(woken, pid)
		}
	}
	return woken, nil
}

func (k *Runtime) provider() llm.Provider {
	k.provMu.Lock()
	defer k.provMu.Unlock()
	return k.opts.Provider
}

// Dir is the absolute runtime directory.
func (k *Runtime) Dir() string { return k.dir }

// Store exposes the Object store (for inspection tools and tests).
func (k *Runtime) Store() *objects.Store { return k.store }

// Close stops the scheduler (waiting for running quanta to commit) and
// releases the directory.
func (k *Runtime) Close() error {
	var err error
	k.closeOnce.Do(func() {
		close(k.closed)
		k.sched.stopAndWait()
		if k.events != nil {
			k.events.flush()
		}
		err = k.store.Close()
	})
	return err
}

// image resolves an image reference.
func (k *Runtime) image(ref string) (*images.Image, error) {
	if im, ok := k.opts.Images[ref]; ok {
		return im, nil
	}
	return images.Builtin(ref)
}

// SpawnSpec is a Host request for a root process.
type SpawnSpec struct {
	Image string
	Goal  string
	// Grants are what the Host grants; the process also gets read, write and
	// materialize on its own Object namespace.
	Grants []capabilities.Grant
	// Budget lowers the image's default limits (0 fields keep the default).
	Budget capabilities.Budget
	// RecordPIDAs, when set, stores the new pid as Host metadata under this
	// key (see GetMeta) in the spawn's own commit, so a crash cannot leave
	// a process the Host has no record of.
	RecordPIDAs string
}

// Spawn creates a root process and makes it runnable.
func (k *Runtime) Spawn(spec SpawnSpec) (int64, error) {
	im, err := k.image(spec.Image)
	if err != nil {
		return 0, fmt.Errorf("%w: image: %w", ErrInvalidSpawn, err)
	}
	if err := checkGoal(spec.Goal); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidSpawn, err)
	}
	if spec.RecordPIDAs != "" {
		if err := checkMetaKey(spec.RecordPIDAs); err != nil {
			return 0, fmt.Errorf("%w: record_pid_as: %w", ErrInvalidSpawn, err)
		}
	}
	if err := spec.Budget.Validate(); err != nil {
		return 0, fmt.Errorf("%w: budget: %w", ErrInvalidSpawn, err)
	}
	grants := make([]capabilities.Grant, len(spec.Grants))
	for i, g := range spec.Grants {
		// The record owns its grants: a Host may reuse what it passed.
		g = g.Clone()
		if g.ID == "" {
			g.ID = fmt.Sprintf("host-%d", i+1)
		}
		if g.Effect == "" {
			g.Effect = capabilities.Allow
		}
		if err := capabilities.ValidateGrant(g); err != nil {
			return 0, fmt.Errorf("%w: grants[%d]: %w", ErrInvalidSpawn, i, err)
		}
		grants[i] = g
	}
	var pid int64
	err = k.update(func(tx *txn) error {
		r, err := k.createProcess(tx, im, 0, spec.Goal, grants, spec.Budget)
		if err != nil {
			return err
		}
		pid = r.PID
		if spec.RecordPIDAs != "" {
			return putJSON(tx, []byte(prefixHostMeta+spec.RecordPIDAs), pid)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	k.sched.enqueue(pid)
	return pid, nil
}

func imageBudget(im *images.Image) capabilities.Budget {
	b := im.Budget
	return capabilities.Budget{ToolCalls: b.ToolCalls, LLMCalls: b.LLMCalls, LLMTokens: b.LLMTokens, Children: b.Children, WallSeconds: b.WallSeconds}
}

// createProcess stages a new runnable process with its goal and context Objects.
func (k *Runtime) createProcess(tx *txn, im *images.Image, parent int64, goal string, grants []capabilities.Grant, budget capabilities.Budget) (*procRecord, error) {
	seq, err := tx.NextSequence("pid")
	if err != nil {
		return nil, err
	}
	pid := int64(seq)
	root := pid
	now := k.clock.Now()
	if parent != 0 {
		pr, err := loadProc(tx, parent)
		if err != nil {
			return nil, err
		}
		root = pr.RootPID
		// A child's wall time passes within its parent's: it may not run
		// longer than the parent has left.
		if left, limited := wallLeft(pr, now); limited {
			if left == 0 {
				return nil, wallExhausted(pr)
			}
			budget = budget.Min(capabilities.Budget{WallSeconds: left})
		}
	}
	if err := assignSpawnIndex(tx, pid, root, im.Ref()); err != nil {
		return nil, err
	}
	ns := Namespace(pid)
	goalMeta, err := tx.Create(objects.CreateSpec{Namespace: ns, Name: goalName, Kind: "goal", Owner: fmt.Sprint(pid), Payload: []byte(goal)})
	if err != nil {
		return nil, fmt.Errorf("create goal object: %w", err)
	}
	// Only an image that enables it has a context Object; others keep
	// their transcript in a plain transcript Object.
	ctxName, ctxKind := contextNamePrefix+fmt.Sprint(pid), contextKind
	if !im.Context.Object {
		ctxName, ctxKind = transcriptNamePrefix+fmt.Sprint(pid), transcriptKind
	}
	ctxMeta, err := tx.Create(objects.CreateSpec{
		Namespace: ns, Name: ctxName, Kind: ctxKind, Owner: fmt.Sprint(pid),
		Labels: map[string]string{labelGeneration: "0"}, Payload: []byte(`{"entries":[]}`),
	})
	if err != nil {
		return nil, fmt.Errorf("create context object: %w", err)
	}
	// The new process's first quantum finds its empty context in the cache.
	tx.AfterCommit(func() { k.cacheContext(pid, &llmContext{meta: ctxMeta, encoded: []byte(contextPayloadStart)}) })
	all, err := processGrants(pid, ns, grants)
	if err != nil {
		return nil, err
	}
	r := &procRecord{
		Record: process.Record{
			PID: pid, ParentPID: parent, Image: im.Ref(),
			State: process.Created, GoalOID: goalMeta.OID, Namespace: ns,
			Grants: all, Limits: imageBudget(im).Min(budget), CreatedAt: now, UpdatedAt: now,
		},
		ContextOID: ctxMeta.OID,
		RootPID:    root,
	}
	if err := k.emit(tx, Event{Kind: EventSpawn, PID: pid, Parent: parent, Image: im.Ref()}); err != nil {
		return nil, err
	}
	if k.retain {
		r.RetainSeq++
		if err := putJSON(tx, retainKey(pid, r.RetainSeq), retained{Kind: evidenceKindHeader, Goal: goal}); err != nil {
			return nil, err
		}
	}
	if err := k.step(tx, r, process.Input{Kind: process.Admit}); err != nil {
		return nil, err
	}
	return r, nil
}

// processGrants are the grants of a new process pid: its own namespace, then
// grants with ids and effects defaulted.
func processGrants(pid int64, ns string, grants []capabilities.Grant) ([]capabilities.Grant, error) {
	all := make([]capabilities.Grant, 0, len(grants)+1)
	all = append(all, capabilities.Grant{
		ID: fmt.Sprintf("g%d-ns", pid), Resource: "object_namespace:" + ns,
		Rights: []capabilities.Right{capabilities.Read, capabilities.Write, capabilities.Materialize}, Effect: capabilities.Allow,
	})
	for i, g := range grants {
		if g.ID == "" {
			g.ID = fmt.Sprintf("g%d-%d", pid, i+1)
		}
		if g.Effect == "" {
			g.Effect = capabilities.Allow
		}
		all = append(all, g)
	}
	// Grant ids must be unique: a one-shot is reserved by id.
	if err := capabilities.ValidateGrants(all); err != nil {
		return nil, fmt.Errorf("%w: grants: %w", ErrInvalidSpawn, err)
	}
	return all, nil
}

// ProcessInfo is a snapshot of a process for a Host.
type ProcessInfo struct {
	PID       int64         `json:"pid"`
	ParentPID int64         `json:"parent_pid"`
	Image     string        `json:"image"`
	Status    process.State `json:"status"`
	// WaitingOn is the kind of wait of a waiting process ("provider", "child", ...).
	WaitingOn process.WaitKind    `json:"waiting_on,omitempty"`
	Wait      *process.Wait       `json:"wait,omitempty"`
	Reason    string              `json:"reason,omitempty"`
	ResultOID string              `json:"result_oid,omitempty"`
	GoalOID   string              `json:"goal_oid"`
	Namespace string              `json:"namespace"`
	Turn      int                 `json:"turn"`
	Used      capabilities.Budget `json:"used"`
	Limits    capabilities.Budget `json:"limits"`
	CreatedAt time.Time           `json:"created_at"`
}

func (r *procRecord) info() ProcessInfo {
	info := ProcessInfo{
		PID: r.PID, ParentPID: r.ParentPID, Image: r.Image, Status: r.State, Wait: r.Wait, Reason: r.Reason,
		ResultOID: r.ResultOID, GoalOID: r.GoalOID, Namespace: r.Namespace, Turn: r.Turn, Used: r.Used, Limits: r.Limits,
		CreatedAt: r.CreatedAt,
	}
	if r.Wait != nil {
		info.WaitingOn = r.Wait.Kind
		if r.Wait.Kind == process.WaitProvider {
			// Why a process waits on its provider is what an operator must fix.
			info.Reason = r.Wait.Reason
		}
	}
	return info
}

// Process returns a snapshot of one process.
func (k *Runtime) Process(pid int64) (ProcessInfo, error) {
	var info ProcessInfo
	err := k.view(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		info = r.info()
		return nil
	})
	return info, err
}

// Processes lists every process, terminal ones included, by pid.
func (k *Runtime) Processes() ([]ProcessInfo, error) {
	var out []ProcessInfo
	err := k.view(func(tx *txn) error {
		return tx.Scan([]byte(prefixProc), func(_, v []byte) error {
			var r procRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			out = append(out, r.info())
			return nil
		})
	})
	return out, err
}

// ReadObject reads an Object's metadata and payload (Host view: no authority
// check). A runtime-local payload from before a reopen returns
// objects.ErrPayloadLost with the metadata.
func (k *Runtime) ReadObject(oid string) (objects.Meta, []byte, error) {
	var meta objects.Meta
	var payload []byte
	err := k.view(func(tx *txn) error {
		var err error
		meta, payload, err = tx.Read(oid)
		return err
	})
	return meta, payload, err
}

// RunUntilIdle runs quanta until every process is terminal or waits on
// something only an outside event can end (a Human message). Pending timers
// are not idle: the runtime waits for them on its clock.
func (k *Runtime) RunUntilIdle(ctx context.Context) error {
	return k.runScheduler(ctx, false)
}

// RunReady runs quanta until no process can run now. Unlike RunUntilIdle it
// does not wait for timers (a sleep, a provider backoff): a Host that drives
// time itself advances its clock and calls RunReady again.
func (k *Runtime) RunReady(ctx context.Context) error {
	return k.runScheduler(ctx, true)
}

func (k *Runtime) runScheduler(ctx context.Context, untilTimers bool) error {
	if k.opts.ReadOnly {
		return ErrReadOnly
	}
	if k.provider() == nil {
		return ErrNoProvider
	}
	return k.sched.run(ctx, untilTimers)
}

func (k *Runtime) now() time.Time { return k.clock.Now() }
