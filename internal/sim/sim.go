// Package sim is a deterministic simulation of a libos runtime, in the style
// of FoundationDB's simulator and TigerBeetle's VOPR: one seed decides the
// processes, the model's tool-call batches, the Host's actions and the faults
// (crashes at any commit, disk errors, provider failures, and the Host's own
// faults: its tools, provider and OnEvent panicking or answering what cannot
// be kept, runs stopped while effects are in flight; see hostfaults.go), and
// the same seed replays the same run bit for bit. After every step the durable state is
// checked against the runtime's invariants; the first violation stops the run
// and is reported with the seed, the step and the trace.
//
// Crashes happen in process: the store lives on Pebble's crash-consistent
// in-memory filesystem, a crash takes a CrashClone (which keeps only what was
// synced) and the runtime is reopened on the clone.
package sim

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/google/uuid"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/skills/catalog"
	"github.com/libos/libos/tools"
)

// Config configures one simulated run.
type Config struct {
	Seed uint64
	// MaxSteps bounds the Host episodes (one set of Host actions and one
	// RunUntilIdle each); 0 means DefaultMaxSteps.
	MaxSteps int
	// MaxCalls is the number of provider calls after which every process is
	// told to exit; 0 means DefaultMaxCalls.
	MaxCalls int
	// WorkDir holds the outside world of the run: the effect log and the
	// cli-tool scratch folders. Required.
	WorkDir string
	// SkillsDir holds the sim-effect skill package (testdata/skills).
	SkillsDir string
	// AskGrants makes the Host hand roots ask grants now and then, so calls
	// wait for approvals the Host decides. Off, the draws of a seed are
	// those its regression entry was found with.
	AskGrants bool
	// Workers is the runtime's number of workers; 0 means 1. With more,
	// quanta of several processes run at once and workers go on into the
	// next quanta of the processes their commits leave runnable or wake; a
	// seed's run is then not replayed exactly.
	Workers int
	// HostFaults is the mix of Host faults (HostFaultsOff, Light, Heavy):
	// the Host's tools, provider and OnEvent panic or answer what cannot be
	// kept, and the Host stops runs while effects are in flight. Off, the
	// draws of a seed are those its regression entry was found with.
	HostFaults int
}

// Defaults of Config.
const (
	DefaultMaxSteps = 14
	DefaultMaxCalls = 70
)

// Violation is a broken invariant.
type Violation struct {
	Step      int
	Invariant string
	Detail    string
}

func (v Violation) String() string {
	return fmt.Sprintf("step %d: invariant %s: %s", v.Step, v.Invariant, v.Detail)
}

// Result is what a run did.
type Result struct {
	Seed      uint64
	Steps     int
	Events    int
	Calls     int
	Crashes   int
	Faults    int
	Effects   int
	Approvals int // calls held for approval that the Host decided
	Processes int
	// Host faults that happened: Host tools' faults, provider panics,
	// mangled replies, OnEvent panics, runs stopped, clean reopens and
	// RetryProvider calls.
	HostFaults, ProviderPanics, Mangled, EventPanics, Stops, Reopens, Retries int
	// LateEffects are Host effects started by a run the Host had stopped.
	LateEffects int
	// Hash is the SHA-256 of the trace: equal seeds give equal hashes.
	Hash  string
	Trace []string
	// Violation is the first broken invariant, if any.
	Violation *Violation
}

// simDir is the runtime directory inside the in-memory filesystem.
const simDir = "/sim"

// effectVar names the file the sim-effect skill appends to.
const effectVar = "SIM_EFFECT_LOG"

// effectTool is the tool name of the sim-effect skill's runner.
const effectTool = "sim-effect"

var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// world is one simulated run. Kernel callbacks (OnEvent, the provider, the
// skill's environment lookup) run on kernel goroutines, so shared fields are
// guarded by mu, which is never held while calling into the runtime: the
// runtime calls back synchronously.
type world struct {
	cfg Config
	// approved are the call ids the Host approved (an ask grant allows
	// exactly those).
	approved map[string]bool
	clk      *clock.Fake
	catalog  *catalog.Catalog
	effects  string // the effect log path
	tmp      string

	mu  sync.Mutex
	rng *rand.Rand
	// hrng draws the Host faults (hostSchedule), apart from rng.
	hrng   *rand.Rand
	hsched hostSchedule

	rt     *kernel.Runtime
	mem    *vfs.MemFS
	toggle *diskFault
	cancel context.CancelFunc
	// stopped is set when the Host stopped the run in progress; runs counts
	// the runs started, and stoppedRuns are those the Host stopped: a
	// failure in a stopped run is the stop's (the kernel answers it as of
	// unknown settlement and runs the process again).
	stopped     bool
	runs        int
	stoppedRuns map[int]bool
	// dead is set when the running runtime crashed: its callbacks are
	// ignored and it causes no more outside effects.
	dead  bool
	clone *vfs.MemFS // the filesystem the next incarnation opens
	// acked are the events delivered to OnEvent since the last reopen: what
	// the runtime acknowledged, so what a crash may not lose.
	acked       []kernel.Event
	incarnation int
	// learned are the seqs of the events the harness has learned from,
	// delivered or read back from the log after a crash. Not a high-water
	// mark: the runtime reopened after a crash delivers its recovery events
	// before the dead one's undelivered events are read back.
	learned map[uint64]bool
	// firstSeq, lastSeq and delivered are the events this incarnation handed
	// to OnEvent: in seq order, and every one Close must deliver.
	firstSeq, lastSeq uint64
	delivered         map[uint64]bool

	sched  schedule
	step   int
	events int // events delivered, all incarnations
	calls  int // provider calls answered
	effN   int // effects started
	ids    int // call ids and unique bodies
	trace  []string
	oids   map[string]string // OID -> stable trace name
	result Result

	know knowledge
	// shown maps pid -> call id -> the tool result the process was shown.
	shown      map[int64]map[string]string
	shownOrder []shownResult
	// ackedBy maps a message id to the call ("pid/call") whose result
	// acknowledged it.
	ackedBy map[string]string
	prev    *snapshot
	// logChecked is the last seq of the gap-free log checkEventLog read.
	logChecked uint64
	// violation is the first broken invariant; a callback may set it.
	violation *Violation

	// Host faults: what the answers of faulty calls must be ("pid call"),
	// the Objects their faults must have left out, the pids whose provider
	// panicked in this episode, the pids the Host resumed that must ask
	// their provider again, and the pids a reply charged a huge usage.
	expects    map[string]hostExpect
	absent     []objectRef
	absentSeen map[string]bool
	panicked   map[int64]panicNote
	retried    map[int64]int // pid -> restores counted when resumed
	hugeUsage  map[int64]bool
}

// panicNote is a provider panic: the process must wait for the Host after
// it, unless the runtime crashed or a restore rewrote it since.
type panicNote struct{ incarnation, restores, run int }

// Run simulates one seed.
func Run(cfg Config) (res Result) {
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = DefaultMaxSteps
	}
	if cfg.MaxCalls <= 0 {
		cfg.MaxCalls = DefaultMaxCalls
	}
	w := &world{
		cfg:      cfg,
		clk:      clock.NewFake(epoch, true),
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		effects:  filepath.Join(cfg.WorkDir, "effects.log"),
		tmp:      filepath.Join(cfg.WorkDir, "tmp"),
		oids:     map[string]string{},
		approved: map[string]bool{},
		know:     newKnowledge(),
		shown:    map[int64]map[string]string{},
		ackedBy:  map[string]string{},
		learned:  map[uint64]bool{},

		hrng:       rand.New(rand.NewPCG(cfg.Seed^0x5deece66d, cfg.Seed+0xb5)),
		expects:    map[string]hostExpect{},
		absentSeen: map[string]bool{},
		panicked:   map[int64]panicNote{},
		retried:    map[int64]int{},
		hugeUsage:  map[int64]bool{},

		stoppedRuns: map[int]bool{},
	}
	w.hsched = newHostSchedule(cfg.HostFaults, w.hrng)
	w.result.Seed = cfg.Seed
	// Object ids are UUIDs; drawing them from the seed makes them, and so
	// every listing ordered by them, the same in every replay.
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], cfg.Seed)
	uuid.SetRand(rand.NewChaCha8(key))
	defer uuid.SetRand(nil)
	w.sched = newSchedule(w.rng)
	w.tracef("seed %d schedule %s", cfg.Seed, w.sched)
	if cfg.HostFaults != HostFaultsOff {
		w.tracef("host schedule %s", w.hsched)
	}
	defer func() {
		if r := recover(); r != nil {
			w.fail("harness-panic", fmt.Sprintf("%v", r))
		}
		if w.rt != nil {
			if w.violation == nil && !w.isDead() && !w.toggle.fired() {
				w.closeClean()
			} else {
				_ = w.rt.Close()
			}
		}
		if w.catalog != nil {
			_ = w.catalog.Close()
		}
		res = w.finish()
	}()
	if err := w.setup(); err != nil {
		w.fail("setup", err.Error())
		return
	}
	w.loop()
	return
}

func (w *world) finish() Result {
	r := w.result
	r.Steps, r.Events, r.Calls, r.Effects = w.step, w.events, w.calls, w.effN
	r.Trace = w.trace
	r.Violation = w.violation
	h := sha256.New()
	for _, line := range w.trace {
		h.Write([]byte(line))
		h.Write([]byte{'\n'})
	}
	r.Hash = hex.EncodeToString(h.Sum(nil))
	return r
}

func (w *world) setup() error {
	if err := os.MkdirAll(w.tmp, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(w.effects, nil, 0o600); err != nil {
		return err
	}
	builtins := kernel.BuiltinTools(tools.Config{})
	reserved := make([]string, len(builtins))
	for i, t := range builtins {
		reserved[i] = t.Name
	}
	cat, err := catalog.LoadCatalog([]string{w.cfg.SkillsDir}, catalog.CatalogOptions{
		Workspace: w.cfg.WorkDir, TempDir: w.tmp, ReservedToolNames: reserved, LookupEnv: w.lookupEnv,
	})
	if err != nil {
		return err
	}
	w.catalog = cat
	w.mem = vfs.NewCrashableMem()
	// The runtime directory exists before the run, durably: objects.Open
	// creates missing parents without syncing them (see the findings), and a
	// crash clone would drop the whole directory.
	if err := w.mem.MkdirAll(simDir+"/store", 0o700); err != nil {
		return err
	}
	for _, d := range []string{"/", simDir} {
		f, err := w.mem.OpenDir(d)
		if err != nil {
			return err
		}
		if err := errors.Join(f.Sync(), f.Close()); err != nil {
			return err
		}
	}
	w.toggle = &diskFault{}
	if err := w.open(); err != nil {
		return err
	}
	roots := 1 + w.intn(2)
	for i := 0; i < roots; i++ {
		if err := w.spawnRoot(); err != nil {
			return err
		}
		if w.settle() {
			return nil
		}
	}
	return nil
}

// open opens a runtime on w.mem. A crash scheduled during recovery leaves
// the runtime dead, for settle to reopen.
func (w *world) open() error {
	w.mu.Lock()
	w.incarnation++
	w.dead, w.clone, w.acked = false, nil, nil
	w.firstSeq, w.lastSeq, w.delivered = 0, 0, map[uint64]bool{}
	inc := w.incarnation
	w.mu.Unlock()
	opts := kernel.Options{
		Provider: &model{w: w}, Clock: w.clk, Workers: max(1, w.cfg.Workers), MaxSleepSeconds: 60,
		OnEvent: w.onEvent, Tokens: estimator{}, FS: faultedRecycling{errorfs.Wrap(w.mem, w.toggle)}, Skills: w.catalog,
	}
	if w.hsched.level != HostFaultsOff {
		ims, err := hostImages()
		if err != nil {
			return err
		}
		opts.Tools, opts.Images = w.hostTools(), ims
	}
	rt, err := kernel.Open(simDir, opts)
	if err != nil {
		return fmt.Errorf("open incarnation %d: %w", inc, err)
	}
	w.rt = rt
	w.tracef("opened incarnation %d", inc)
	return nil
}

// rootGrantPool is what a root may be granted; each seed picks a subset.
var rootGrantPool = []capabilities.Grant{
	{Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}},
	{Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}},
	{Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}},
	{Resource: "image:base:v0", Rights: []capabilities.Right{capabilities.Read}},
	{Resource: "image:coding:v0", Rights: []capabilities.Right{capabilities.Read}},
	{Resource: "image:context-compressor:v0", Rights: []capabilities.Right{capabilities.Read}},
	{Resource: "checkpoint:process:*", Rights: []capabilities.Right{capabilities.Read, capabilities.Write}},
	{Resource: "checkpoint:process:*", Rights: []capabilities.Right{capabilities.Admin, capabilities.Execute}},
	{Resource: "scope:sim-effect", Rights: []capabilities.Right{capabilities.Execute}},
	{Resource: "object_namespace:proc-*", Rights: []capabilities.Right{capabilities.Read}},
}

func (w *world) spawnRoot() error {
	images := []string{"base:v0", "base:v0", "coding:v0", "skilled:v0"}
	im := images[w.intn(len(images))]
	var grants []capabilities.Grant
	for _, g := range rootGrantPool {
		// The effect's scope is granted often: an effect that runs is
		// where the interesting interleavings are.
		if w.chance(0.6) || (g.Resource == "scope:sim-effect" && w.chance(0.6)) {
			g.Rights = append([]capabilities.Right(nil), g.Rights...)
			if g.Resource == "process:spawn" && w.chance(0.3) {
				g.UsesRemaining = capabilities.Uses(1 + w.intn(3))
			}
			grants = append(grants, g)
		}
	}
	if w.chance(0.15) {
		grants = append(grants, capabilities.Grant{Resource: "scope:sim-effect", Rights: []capabilities.Right{capabilities.Execute}, Effect: capabilities.Deny})
	}
	if w.cfg.AskGrants && w.chance(0.5) {
		asked := []string{"scope:sim-effect", "process:spawn", "object_namespace:*"}[w.intn(3)]
		right := map[string]capabilities.Right{"scope:sim-effect": capabilities.Execute, "process:spawn": capabilities.Write, "object_namespace:*": capabilities.Write}[asked]
		grants = append(grants, capabilities.Grant{Resource: asked, Rights: []capabilities.Right{right}, Effect: capabilities.Ask})
	}
	budget := capabilities.Budget{}
	if w.chance(0.5) {
		budget = capabilities.Budget{ToolCalls: int64(8 + w.intn(60)), LLMCalls: int64(4 + w.intn(30)), Children: int64(w.intn(6))}
	}
	goal := fmt.Sprintf("simulated root %s", w.unique())
	pid, err := w.rt.Spawn(kernel.SpawnSpec{Image: im, Goal: goal, Grants: grants, Budget: budget})
	w.tracef("host spawn %s grants=%s budget=%+v -> pid %d err=%v", im, grantsString(grants), budget, pid, err)
	if err != nil && !w.isDead() && !w.toggle.fired() {
		return err
	}
	return nil
}

// loop runs the Host episodes.
func (w *world) loop() {
	for w.step = 1; w.step <= w.cfg.MaxSteps; w.step++ {
		if w.violation != nil {
			return
		}
		w.hostActions(false)
		if w.settle() {
			return
		}
		idle := w.runEpisode()
		if w.settle() {
			return
		}
		w.check(idle)
		if w.violation != nil {
			return
		}
		if w.allEnded() {
			// An early end leaves room for another tree in the same
			// directory; a late one ends the run.
			if w.step >= w.cfg.MaxSteps/2 {
				w.tracef("step %d: every process ended", w.step)
				return
			}
			if err := w.spawnRoot(); err != nil {
				w.fail("host-spawn", err.Error())
				return
			}
		}
	}
	// The step bound: the Host ends what is left, and the end is checked.
	w.hostActions(true)
	if w.settle() {
		return
	}
	idle := w.runEpisode()
	if w.settle() {
		return
	}
	w.check(idle)
}

// runEpisode runs the scheduler until idle; it reports whether it ended
// idle (no crash, no fault). A run the Host stopped is followed by a new
// run, as a Host that stopped to do something else starts one again.
func (w *world) runEpisode() bool {
	for {
		ctx, cancel := context.WithCancel(context.Background())
		w.mu.Lock()
		w.cancel, w.stopped = cancel, false
		w.runs++
		w.mu.Unlock()
		err := w.rt.RunUntilIdle(ctx)
		cancel()
		w.mu.Lock()
		w.cancel = nil
		dead, stopped := w.dead, w.stopped
		w.mu.Unlock()
		switch {
		case dead:
			w.tracef("step %d: run stopped by the crash: %v", w.step, errString(err))
			return false
		case w.toggle.fired():
			w.tracef("step %d: run stopped by the disk fault: %v", w.step, errString(err))
			// A stop of the Host's may end the run before the failure does.
			if (err == nil || !errors.Is(err, objects.ErrFailed)) && !(stopped && errors.Is(err, context.Canceled)) {
				w.fail("disk-fault-reported", fmt.Sprintf("a disk fault fired but RunUntilIdle returned %v, want an error wrapping objects.ErrFailed", err))
			}
			return false
		case stopped:
			w.tracef("step %d: run stopped by the Host: %v", w.step, errString(err))
			if err != nil && !errors.Is(err, context.Canceled) {
				w.fail("stop-reported", fmt.Sprintf("the Host stopped the run and RunUntilIdle returned %v, want nil or context.Canceled", err))
				return false
			}
			w.checkStopped()
			if w.violation != nil {
				return false
			}
			continue
		case err != nil:
			w.fail("runtime-error", fmt.Sprintf("RunUntilIdle: %v", err))
			return false
		}
		w.tracef("step %d: idle", w.step)
		return true
	}
}

// settle reopens the runtime after a crash or a disk fault, as often as
// needed (a crash may be scheduled during recovery). It reports whether the
// run must stop.
func (w *world) settle() bool {
	for {
		if w.violation != nil {
			return true
		}
		w.mu.Lock()
		dead, faulted := w.dead, w.toggle.fired()
		w.mu.Unlock()
		if !dead && !faulted {
			return false
		}
		w.mu.Lock()
		if !dead {
			// A disk fault stopped the store: what survives is what was synced.
			w.crashLocked("disk fault")
		}
		clone, acked := w.clone, w.acked
		w.mu.Unlock()
		if w.rt != nil {
			_ = w.rt.Close() // a failed store reports its failure again
			w.rt = nil
		}
		w.toggle.disarm()
		w.mem = clone
		w.result.Crashes++
		if err := w.open(); err != nil {
			if w.toggle.fired() && errors.Is(err, objects.ErrFailed) {
				// A disk fault armed by a recovery event stopped the
				// recovery: the open must fail closed, and the next one
				// starts from what was synced.
				w.mu.Lock()
				w.crashLocked("disk fault during recovery")
				w.mu.Unlock()
				continue
			}
			w.fail("reopen", err.Error())
			return true
		}
		if w.isDead() {
			continue // crashed again during recovery
		}
		w.checkAcknowledged(acked)
	}
}

// crashLocked simulates a crash now: the next incarnation opens a crash
// clone of the filesystem; the dying runtime is stopped and ignored.
func (w *world) crashLocked(where string) {
	if w.dead {
		return
	}
	cfg := vfs.CrashCloneCfg{}
	if w.sched.unsyncedPercent > 0 {
		cfg.UnsyncedDataPercent = w.sched.unsyncedPercent
		cfg.RNG = rand.New(rand.NewPCG(w.cfg.Seed, uint64(w.events)))
	}
	w.clone = w.mem.CrashClone(cfg)
	w.dead = true
	w.traceLocked(fmt.Sprintf("CRASH at event %d (%s), incarnation %d", w.events, where, w.incarnation))
	if w.cancel != nil {
		w.cancel()
	}
}

func (w *world) isDead() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dead
}

// onEvent records an acknowledged event, and fires the crashes and disk
// faults the schedule places at event counts. With Host faults it panics
// now and then, after its work: the kernel must lose that event to OnEvent
// only.
func (w *world) onEvent(ev kernel.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead {
		return
	}
	if w.lastSeq != 0 && ev.Seq <= w.lastSeq {
		w.failLocked("onevent-order", fmt.Sprintf("OnEvent got event %d (%s pid %d) after event %d", ev.Seq, ev.Kind, ev.PID, w.lastSeq))
	}
	if w.delivered[ev.Seq] {
		w.failLocked("onevent-once", fmt.Sprintf("OnEvent got event %d (%s pid %d) twice", ev.Seq, ev.Kind, ev.PID))
	}
	if w.firstSeq == 0 {
		w.firstSeq = ev.Seq
	}
	w.lastSeq = max(w.lastSeq, ev.Seq)
	w.delivered[ev.Seq] = true
	w.events++
	w.learned[ev.Seq] = true
	w.acked = append(w.acked, ev)
	w.know.observe(ev)
	w.traceLocked("ev " + w.eventLine(ev))
	if w.sched.crashAtEvent(w.events) {
		w.crashLocked("commit")
	}
	if w.sched.faultAt == w.events {
		w.toggle.arm(w.sched.faultKind)
		w.result.Faults++
		w.traceLocked(fmt.Sprintf("DISK FAULT armed: %s", w.sched.faultKind))
	}
	if w.hchance(w.hsched.eventPanic) {
		w.result.EventPanics++
		w.traceLocked(fmt.Sprintf("ONEVENT PANIC at event %d", ev.Seq))
		panic(fmt.Sprintf("sim: OnEvent panics at event %d", ev.Seq))
	}
}

// lookupEnv is the skill runners' environment: the effect log while the
// runtime is alive. An effect may also be the moment of a crash.
func (w *world) lookupEnv(name string) (string, bool) {
	if name != effectVar {
		return os.LookupEnv(name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead {
		return os.DevNull, true
	}
	w.effN++
	if w.hchance(w.hsched.stop) && w.stopLocked("a sim-effect starting") {
		// Its context is done before its process starts: the runner
		// gives up, and the call is of unknown settlement.
		return w.effects, true
	}
	if w.sched.crashAtEffect == w.effN {
		w.crashLocked("effect started")
		// The crash came either just before the effect or just after it.
		if w.rng.IntN(2) == 0 {
			w.traceLocked("the crashed effect lands")
			return w.effects, true
		}
		w.traceLocked("the crashed effect never runs")
		return os.DevNull, true
	}
	return w.effects, true
}

// fail records the first violation.
func (w *world) fail(invariant, detail string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failLocked(invariant, detail)
}

func (w *world) failLocked(invariant, detail string) {
	if w.violation != nil {
		return
	}
	w.violation = &Violation{Step: w.step, Invariant: invariant, Detail: detail}
	w.traceLocked("VIOLATION " + w.violation.String())
}

func (w *world) tracef(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.traceLocked(fmt.Sprintf(format, args...))
}

var (
	uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	// durationRE matches a cli-tool run's duration, also inside JSON that
	// is itself quoted in a string (a notice, a compressor's goal).
	durationRE = regexp.MustCompile(`duration_ms(\\*"):\s*[0-9]+`)
)

// traceLocked appends a trace line. Wall-clock durations of cli-tool runs
// are the one thing the seed does not decide, so they are blanked; OIDs get
// short stable names.
func (w *world) traceLocked(line string) {
	line = durationRE.ReplaceAllString(line, `duration_ms$1:_`)
	line = uuidRE.ReplaceAllStringFunc(line, func(oid string) string {
		name, ok := w.oids[oid]
		if !ok {
			name = fmt.Sprintf("oid%d", len(w.oids)+1)
			w.oids[oid] = name
		}
		return name
	})
	w.trace = append(w.trace, line)
}

func (w *world) eventLine(ev kernel.Event) string {
	ev.Time = ev.Time.UTC()
	if strings.Contains(ev.Summary, "duration_ms") {
		// The kernel cuts summaries by length, and a duration's digits move
		// the cut: such a summary is not decided by the seed.
		ev.Summary = "(a timed result)"
	}
	if ev.Kind == kernel.EventToolDone {
		// A full result can describe a context Object, whose size and hash
		// hold a cli-tool's measured duration: the summary stands for it.
		ev.Detail = nil
	}
	if d, ok := ev.Detail.(map[string]any); ok && (d["panic_stack"] != nil || d["usage_estimated"] == true) {
		// A panic's stack names goroutines and addresses, and a usage the
		// kernel estimated from a request's size counts the digits of
		// cli-tool durations: only their presence is the seed's.
		c := make(map[string]any, len(d))
		for k, v := range d {
			c[k] = v
		}
		if c["panic_stack"] != nil {
			c["panic_stack"] = "_"
		}
		if c["usage_estimated"] == true {
			c["prompt_tokens"], c["completion_tokens"] = "_", "_"
		}
		ev.Detail = c
	}
	b, _ := json.Marshal(ev)
	return string(b)
}

// Random draws. The generator is used only under mu or from the test
// goroutine while no kernel callback can run.
func (w *world) intn(n int) int        { return w.rng.IntN(n) }
func (w *world) chance(p float64) bool { return w.rng.Float64() < p }
func (w *world) unique() string {
	w.ids++
	return fmt.Sprintf("u%d", w.ids)
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func grantsString(gs []capabilities.Grant) string {
	var parts []string
	for _, g := range gs {
		s := fmt.Sprintf("%s:%s=%v", g.Effect, g.Resource, g.Rights)
		if g.UsesRemaining != nil {
			s += fmt.Sprintf("@%d", *g.UsesRemaining)
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// estimator is the kernel's default four-bytes-a-token estimate, with the
// wall-clock duration of cli-tool runs blanked so that token charges do not
// depend on how fast the machine ran a subprocess.
type estimator struct{}

func (estimator) Estimate(text string) int {
	if strings.Contains(text, "duration_ms") {
		text = durationRE.ReplaceAllString(text, `duration_ms$1:0`)
	}
	return (len(text) + 3) / 4
}
