package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/images"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

// Host faults are what a Host's own code does wrong: its tools
// (kernel.Options.Tools) panic or answer what cannot be kept, its provider
// panics or replies as a careless custom provider does, its OnEvent
// panics, and it stops a run while an outside effect is in flight. They are
// drawn from a generator of their own (world.hrng), so a run without them
// draws exactly what it drew before they existed.

// Host fault levels (Config.HostFaults).
const (
	HostFaultsOff   = 0
	HostFaultsLight = 1
	HostFaultsHeavy = 2
)

// hostSchedule is a run's plan of Host faults, drawn from the seed.
type hostSchedule struct {
	level int
	// hostCalls is the probability that a drawn call is a Host tool's.
	hostCalls float64
	// toolFault is the probability that a Host tool's call is drawn with a
	// faulty mode (a panic, a result that cannot be kept, a stop).
	toolFault float64
	// stop is the share of faulty effect calls that stop the run, and the
	// probability that a sim-effect's start stops it.
	stop float64
	// providerPanic is the probability that Complete panics.
	providerPanic float64
	// mangle is the probability that a reply is one a custom provider
	// might give: ids, names, arguments or usage of the wrong shape.
	mangle float64
	// eventPanic is the probability that OnEvent panics after an event.
	eventPanic float64
	// hostAct is the probability that the Host, finding processes held for
	// it, acts (RetryProvider, or a reopen) between two episodes.
	hostAct float64
}

func newHostSchedule(level int, rng *rand.Rand) hostSchedule {
	s := hostSchedule{level: level}
	if level == HostFaultsOff {
		return s
	}
	// Each kind is in a light run's plan half the time, at a low rate; a
	// heavy run has every kind, more often.
	on := func() bool { return level == HostFaultsHeavy || rng.IntN(2) == 0 }
	scale := 1.0
	if level == HostFaultsHeavy {
		scale = 3
	}
	s.hostCalls = 0.10 * scale
	s.toolFault = min(0.3*scale, 0.6)
	if on() {
		s.stop = min((0.05+rng.Float64()*0.1)*scale, 0.5)
	}
	if on() {
		s.providerPanic = (0.005 + rng.Float64()*0.02) * scale
	}
	if on() {
		s.mangle = (0.02 + rng.Float64()*0.05) * scale
	}
	if on() {
		s.eventPanic = (0.005 + rng.Float64()*0.02) * scale
	}
	s.hostAct = 0.5 + 0.15*scale
	return s
}

func (s hostSchedule) String() string {
	if s.level == HostFaultsOff {
		return "host-faults=off"
	}
	return fmt.Sprintf("host-faults=%d calls=%.3f tool=%.3f stop=%.3f provider-panic=%.3f mangle=%.3f event-panic=%.3f act=%.2f",
		s.level, s.hostCalls, s.toolFault, s.stop, s.providerPanic, s.mangle, s.eventPanic, s.hostAct)
}

// hchance draws from the Host faults' own generator; call with mu held or
// while no kernel callback can run.
func (w *world) hchance(p float64) bool { return p > 0 && w.hrng.Float64() < p }

// The Host's tools. Each carries, in its "line" argument, its pid and call
// id ("pid call", filled in by the model as the sim-effect's line is), so
// the tool, the harness and the invariants name the same call.
const (
	// hostCallTool answers in Invoke: it creates an Object, then answers,
	// panics, or returns a result that cannot be kept.
	hostCallTool = "sim_host_call"
	// hostEffectTool is an outside effect: it appends its line to the
	// effect log, as the sim-effect skill does, and may panic, answer what
	// cannot be kept, or stop the run while it is in flight.
	hostEffectTool = "sim_host_effect"
	// hostWaitTool is a multi-stage tool: Invoke creates an Object and
	// blocks on a timer, each Resume blocks again until its last stage,
	// which creates an Object and answers; any of them may panic, and the
	// last may answer what cannot be kept.
	hostWaitTool = "sim_host_wait"
)

var (
	hostCallModes   = []string{"ok", "panic", "nan", "cycle"}
	hostEffectModes = []string{"ok", "panic_before", "panic_after", "nan", "cycle", "stop_giveup", "stop_after", "stop_finish"}
	hostWaitModes   = []string{"ok", "panic_invoke", "panic_mid", "panic", "nan", "cycle"}
)

// carriesLine reports whether a tool's arguments name its call ("line"): its
// id must stay the model's, so a mangled reply never changes it.
func carriesLine(tool string) bool {
	return tool == effectTool || tool == hostCallTool || tool == hostEffectTool || tool == hostWaitTool
}

// isEffectTool reports whether a tool's calls run an outside effect that
// appends to the effect log.
func isEffectTool(tool string) bool { return tool == effectTool || tool == hostEffectTool }

type hostArgs struct {
	Mode   string `json:"mode"`
	Line   string `json:"line"`
	Stages int    `json:"stages"`
}

// hostStage is a sim_host_wait's pending data.
type hostStage struct {
	Mode   string `json:"mode"`
	Line   string `json:"line"`
	Stage  int    `json:"stage"`
	Stages int    `json:"stages"`
}

// hostExpect is what the answer of a Host tool's call must be, once its
// fault happened.
type hostExpect struct {
	tool, mode string
	ok         bool   // it succeeds (an effect that finished despite a stop)
	code       string // else its error code
	started    bool   // its effect_started
	says       string // what its error message says
	// stop marks an effect a stop cut short: answered settlement_unknown,
	// or failed if the process was killed while it ran.
	stop bool
	// incarnation and run are the runtime's and the run's when the fault
	// happened: a crash since, or a stop of that run, may answer a started
	// call settlement_unknown instead.
	incarnation, run int
}

// objectRef names an Object that must not exist: one a call staged before
// its fault refused it.
type objectRef struct {
	pid  int64
	name string
	call string
}

func modeSchema(modes []string) *schema.Schema {
	enum := make([]any, len(modes))
	for i, m := range modes {
		enum[i] = m
	}
	return &schema.Schema{Type: "string", Enum: enum}
}

// hostTools are the Host's own tools (kernel.Options.Tools).
func (w *world) hostTools() []*tools.Tool {
	line := &schema.Schema{Type: "string", Description: "pid and call id"}
	one, two := 1.0, 2.0
	return []*tools.Tool{
		{
			Name:        hostCallTool,
			Description: "A Host tool that notes the call in an Object and answers.",
			Schema:      schema.Object(map[string]*schema.Schema{"mode": modeSchema(hostCallModes), "line": line}, "mode", "line"),
			Ops:         []authority.Op{authority.ObjectCreate},
			Invoke:      w.invokeHostCall,
		},
		{
			Name:        hostEffectTool,
			Description: "A Host tool with an outside effect: it appends a line to the effect log.",
			Schema:      schema.Object(map[string]*schema.Schema{"mode": modeSchema(hostEffectModes), "line": line}, "mode", "line"),
			Ops:         []authority.Op{authority.ScopeUse},
			Invoke:      w.invokeHostEffect,
		},
		{
			Name:        hostWaitTool,
			Description: "A multi-stage Host tool: it waits a few seconds per stage, then answers.",
			Schema: schema.Object(map[string]*schema.Schema{"mode": modeSchema(hostWaitModes), "line": line,
				"stages": {Type: "integer", Minimum: &one, Maximum: &two}}, "mode", "line", "stages"),
			Ops:    []authority.Op{authority.ObjectCreate},
			Invoke: w.invokeHostWait,
			Resume: w.resumeHostWait,
		},
	}
}

// hostImages replaces base:v0 with a copy that shows the Host's tools, so
// roots and children of the most common image call them.
func hostImages() (map[string]*images.Image, error) {
	base, err := images.Builtin("base:v0")
	if err != nil {
		return nil, err
	}
	base.Tools = append(append([]string(nil), base.Tools...), hostCallTool, hostEffectTool, hostWaitTool)
	return map[string]*images.Image{"base:v0": base}, nil
}

func parseHostArgs(raw json.RawMessage) (hostArgs, string, error) {
	var a hostArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return a, "", err
	}
	_, call, _ := strings.Cut(a.Line, " ")
	if call == "" {
		return a, "", tools.Errorf(tools.CodeInvalidArguments, "line: %q names no call", a.Line)
	}
	return a, call, nil
}

// expectLocked notes what the answer of pid's call must be. A runtime
// that crashed runs on until it is closed, and nothing it does counts.
func (w *world) expectLocked(pid int64, call string, e hostExpect) {
	if w.dead {
		return
	}
	w.traceLocked(fmt.Sprintf("host fault %d %s: %s %s", pid, call, e.tool, e.mode))
	e.incarnation, e.run = w.incarnation, w.runs
	w.expects[fmt.Sprintf("%d %s", pid, call)] = e
	w.result.HostFaults++
}

func (w *world) expect(pid int64, call string, e hostExpect) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expectLocked(pid, call, e)
}

// mustNotExist notes an Object a call stages before its fault.
func (w *world) mustNotExist(pid int64, call, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	key := fmt.Sprintf("%d/%s", pid, name)
	if !w.absentSeen[key] {
		w.absentSeen[key] = true
		w.absent = append(w.absent, objectRef{pid: pid, name: name, call: call})
	}
}

// createNote creates the Object name in the caller's namespace.
func createNote(sys tools.Syscalls, name string) error {
	self := sys.Self()
	if err := sys.Require(authority.ObjectCreate, authority.Params{Namespace: self.Namespace}); err != nil {
		return err
	}
	_, err := sys.CreateObject(objects.CreateSpec{Namespace: self.Namespace, Name: name, Kind: "note", Tier: objects.TierDurable,
		Payload: []byte(`{"host":true}`)})
	return err
}

// Messages the kernel answers a Host's fault with.
const (
	saysInvokePanic = "panicked in Invoke"
	saysEffectPanic = "panicked in its outside effect"
	saysResumePanic = "panicked in Resume"
	saysNotJSON     = "cannot be encoded as JSON"
	saysCycle       = "nests more than"
)

// unkeepable is a result of mode that JSON cannot hold, and what the
// kernel's answer says of it.
func unkeepable(mode string) (map[string]any, string) {
	if mode == "nan" {
		return map[string]any{"v": math.NaN(), "w": 1}, saysNotJSON
	}
	cyclic := map[string]any{"w": 1}
	cyclic["self"] = cyclic
	return cyclic, saysCycle
}

func (w *world) invokeHostCall(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
	a, call, err := parseHostArgs(raw)
	if err != nil {
		return tools.Outcome{}, err
	}
	pid, name := sys.Self().PID, "hc-"+call
	if a.Mode != "ok" {
		w.mustNotExist(pid, call, name)
	}
	if err := createNote(sys, name); err != nil {
		return tools.Outcome{}, err
	}
	switch a.Mode {
	case "panic":
		w.expect(pid, call, hostExpect{tool: hostCallTool, mode: a.Mode, code: tools.CodeFailed, says: saysInvokePanic})
		panic(fmt.Sprintf("sim: the Host's tool panics in Invoke of %s", call))
	case "nan", "cycle":
		res, says := unkeepable(a.Mode)
		w.expect(pid, call, hostExpect{tool: hostCallTool, mode: a.Mode, code: tools.CodeFailed, says: says})
		return tools.Outcome{Result: res}, nil
	}
	return tools.Outcome{Result: map[string]any{"created": name}}, nil
}

func (w *world) invokeHostEffect(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
	a, call, err := parseHostArgs(raw)
	if err != nil {
		return tools.Outcome{}, err
	}
	// The same scope as the sim-effect's: checkAuthority holds every
	// effect line to it.
	if err := sys.Require(authority.ScopeUse, authority.Params{Scope: "sim-effect"}); err != nil {
		return tools.Outcome{}, err
	}
	pid := sys.Self().PID
	return tools.Outcome{Effect: func(ctx context.Context) (map[string]any, error) {
		return w.hostEffect(ctx, pid, call, a.Line, a.Mode)
	}}, nil
}

// appendEffectLocked appends line to the effect log.
func (w *world) appendEffectLocked(line string) {
	f, err := os.OpenFile(w.effects, os.O_APPEND|os.O_WRONLY, 0o600)
	if err == nil {
		_, err = fmt.Fprintln(f, line)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		w.failLocked("effect-log", err.Error())
	}
}

// stopWait bounds how long a stopped effect waits for its context: a run
// whose stop does not reach its effects would otherwise hang the harness.
const stopWait = 30 * time.Second

// hostEffect is a sim_host_effect's outside effect.
func (w *world) hostEffect(ctx context.Context, pid int64, call, line, mode string) (map[string]any, error) {
	w.mu.Lock()
	if w.dead {
		w.mu.Unlock()
		return nil, errors.New("sim: the simulated runtime crashed")
	}
	w.effN++
	if w.sched.crashAtEffect == w.effN {
		w.crashLocked("host effect started")
		if w.rng.IntN(2) == 0 {
			w.traceLocked("the crashed effect lands")
			w.appendEffectLocked(line)
		} else {
			w.traceLocked("the crashed effect never runs")
		}
		w.mu.Unlock()
		return nil, errors.New("sim: the simulated runtime crashed during the effect")
	}
	late := ""
	if ctx.Err() != nil {
		// Started by a run already stopped (its reply came back anyway).
		late = " (started after the run stopped)"
		w.result.LateEffects++
	}
	w.traceLocked(fmt.Sprintf("host effect %d %s: %s%s", pid, call, mode, late))
	switch mode {
	case "panic_before", "panic_after":
		if mode == "panic_after" {
			w.appendEffectLocked(line)
		}
		w.expectLocked(pid, call, hostExpect{tool: hostEffectTool, mode: mode, code: tools.CodeFailed, started: true, says: saysEffectPanic})
		w.mu.Unlock()
		panic(errors.New("sim: the Host's effect panics"))
	case "nan", "cycle":
		w.appendEffectLocked(line)
		res, says := unkeepable(mode)
		w.expectLocked(pid, call, hostExpect{tool: hostEffectTool, mode: mode, code: tools.CodeFailed, started: true, says: says})
		w.mu.Unlock()
		return res, nil
	case "stop_giveup", "stop_after", "stop_finish":
		if !w.stopLocked(fmt.Sprintf("effect of %d %s in flight", pid, call)) {
			break // no run to stop: the effect runs as any other
		}
		if mode != "stop_giveup" {
			w.appendEffectLocked(line)
		}
		if mode == "stop_finish" {
			// It finished despite the stop: its result is its answer.
			w.expectLocked(pid, call, hostExpect{tool: hostEffectTool, mode: mode, ok: true})
			w.mu.Unlock()
			return map[string]any{"appended": true}, nil
		}
		w.expectLocked(pid, call, hostExpect{tool: hostEffectTool, mode: mode, code: tools.CodeSettlementUnknown, started: true, stop: true})
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("sim: the effect gave up: %w", context.Cause(ctx))
		case <-time.After(stopWait):
			w.fail("stop-reaches-effect", fmt.Sprintf("the run was stopped but the effect of %d %s saw no end of its context in %s", pid, call, stopWait))
			return nil, errors.New("sim: the stop never came")
		}
	}
	w.appendEffectLocked(line)
	w.mu.Unlock()
	return map[string]any{"appended": true}, nil
}

// hostWaitDelay is how long each stage of a sim_host_wait waits: never 0
// (see validArgs' sleep).
const hostWaitDelay = 2 * time.Second

func (w *world) invokeHostWait(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
	a, call, err := parseHostArgs(raw)
	if err != nil {
		return tools.Outcome{}, err
	}
	pid, name := sys.Self().PID, "hw-"+call+"-0"
	if a.Mode == "panic_invoke" {
		w.mustNotExist(pid, call, name)
	}
	if err := createNote(sys, name); err != nil {
		return tools.Outcome{}, err
	}
	if a.Mode == "panic_invoke" {
		w.expect(pid, call, hostExpect{tool: hostWaitTool, mode: a.Mode, code: tools.CodeFailed, says: saysInvokePanic})
		panic("sim: the Host's multi-stage tool panics in Invoke")
	}
	data, _ := json.Marshal(hostStage{Mode: a.Mode, Line: a.Line, Stage: 1, Stages: a.Stages})
	return tools.Outcome{Block: &tools.Block{Wait: process.Wait{Kind: process.WaitTimer, Until: sys.Now().Add(hostWaitDelay)}, Data: data}}, nil
}

func (w *world) resumeHostWait(_ context.Context, sys tools.Syscalls, p tools.Pending) (tools.Outcome, error) {
	var st hostStage
	if err := json.Unmarshal(p.Data, &st); err != nil {
		return tools.Outcome{}, fmt.Errorf("sim: pending data %s: %w", p.Data, err)
	}
	_, call, _ := strings.Cut(st.Line, " ")
	pid := sys.Self().PID
	if st.Stage < st.Stages {
		if st.Mode == "panic_mid" {
			name := fmt.Sprintf("hw-%s-m%d", call, st.Stage)
			w.mustNotExist(pid, call, name)
			if err := createNote(sys, name); err != nil {
				return tools.Outcome{}, err
			}
			w.expect(pid, call, hostExpect{tool: hostWaitTool, mode: st.Mode, code: tools.CodeFailed, started: true, says: saysResumePanic})
			panic("sim: the Host's multi-stage tool panics between its stages")
		}
		st.Stage++
		data, _ := json.Marshal(st)
		return tools.Outcome{Block: &tools.Block{Wait: process.Wait{Kind: process.WaitTimer, Until: sys.Now().Add(hostWaitDelay)}, Data: data}}, nil
	}
	name := "hw-" + call + "-r"
	faulty := st.Mode == "panic" || st.Mode == "nan" || st.Mode == "cycle"
	if faulty {
		w.mustNotExist(pid, call, name)
	}
	if err := createNote(sys, name); err != nil {
		return tools.Outcome{}, err
	}
	switch st.Mode {
	case "panic":
		w.expect(pid, call, hostExpect{tool: hostWaitTool, mode: st.Mode, code: tools.CodeFailed, started: true, says: saysResumePanic})
		panic("sim: the Host's multi-stage tool panics in its last Resume")
	case "nan", "cycle":
		res, says := unkeepable(st.Mode)
		w.expect(pid, call, hostExpect{tool: hostWaitTool, mode: st.Mode, code: tools.CodeFailed, started: true, says: says})
		return tools.Outcome{Result: res}, nil
	}
	return tools.Outcome{Result: map[string]any{"stages": st.Stages, "created": name}}, nil
}

// hostToolArgs draws a Host tool's arguments: a faulty mode now and then.
func (w *world) hostToolArgs(name string) map[string]any {
	args := map[string]any{"mode": "ok", "line": effectLinePending}
	faulty := w.chance(w.hsched.toolFault)
	switch name {
	case hostCallTool:
		if faulty {
			args["mode"] = hostCallModes[1+w.intn(len(hostCallModes)-1)]
		}
	case hostEffectTool:
		if faulty {
			if w.chance(w.hsched.stop) {
				args["mode"] = []string{"stop_giveup", "stop_after", "stop_finish"}[w.intn(3)]
			} else {
				args["mode"] = []string{"panic_before", "panic_after", "nan", "cycle"}[w.intn(4)]
			}
		}
	case hostWaitTool:
		args["stages"] = 1 + w.intn(2)
		if faulty {
			args["mode"] = hostWaitModes[1+w.intn(len(hostWaitModes)-1)]
			if args["mode"] == "panic_mid" {
				args["stages"] = 2
			}
		}
	}
	return args
}

// mangle makes resp a reply a custom provider might give, and says how;
// calls whose arguments name their call keep their ids.
func (w *world) mangle(resp *llm.Response, pid int64) string {
	var free []int
	for i, c := range resp.ToolCalls {
		if !carriesLine(c.Name) {
			free = append(free, i)
		}
	}
	kind := w.hrng.IntN(9)
	if kind < 5 && len(free) == 0 {
		kind = 5 + w.hrng.IntN(4)
	}
	pick := func() *llm.ToolCall { return &resp.ToolCalls[free[w.hrng.IntN(len(free))]] }
	switch kind {
	case 0:
		pick().ID = ""
		return "an empty call id"
	case 1:
		// A later call takes an earlier one's id: Mend renames the later.
		var later []int
		for _, i := range free {
			if i > 0 {
				later = append(later, i)
			}
		}
		if len(later) == 0 {
			pick().ID = ""
			return "an empty call id"
		}
		j := later[w.hrng.IntN(len(later))]
		resp.ToolCalls[j].ID = resp.ToolCalls[w.hrng.IntN(j)].ID
		return fmt.Sprintf("call %d repeats an id", j)
	case 2:
		pick().Name = []string{"", " ", "\t"}[w.hrng.IntN(3)]
		return "an empty tool name"
	case 3:
		pick().Arguments = json.RawMessage([]string{`{"unterminated`, `not json at all`, `{'single': 'quotes'}`}[w.hrng.IntN(3)])
		return "arguments that are not JSON"
	case 4:
		pick().Arguments = nil
		return "no arguments"
	case 5:
		resp.Usage = llm.Usage{PromptTokens: -(1 + w.hrng.IntN(1<<30)), CompletionTokens: -w.hrng.IntN(100)}
		return "negative usage"
	case 6:
		resp.Usage = llm.Usage{PromptTokens: -math.MaxInt, CompletionTokens: 7}
		return "a prompt of minus the most an int holds"
	case 7:
		if w.hrng.IntN(3) == 0 {
			// Rare: a usage past any budget ends the tree's calls.
			w.hugeUsage[pid] = true
			resp.Usage = llm.Usage{PromptTokens: math.MaxInt, CompletionTokens: 1 << 62}
			return "huge usage"
		}
		fallthrough
	default:
		resp.Usage = llm.Usage{}
		return "no usage"
	}
}

// stopLocked stops the run in progress, as a Host's stop (the run's
// context cancelled) does; it reports whether there was one to stop.
func (w *world) stopLocked(why string) bool {
	if w.dead || w.cancel == nil {
		return false
	}
	w.stopped, w.stoppedRuns[w.runs] = true, true
	w.result.Stops++
	w.traceLocked("HOST STOP: " + why)
	w.cancel()
	return true
}

// heldForHost reports whether a process waits for the Host on its provider.
func heldForHost(status process.State, wait *process.Wait) bool {
	return status == process.Waiting && wait != nil && wait.Kind == process.WaitProvider && wait.Until.IsZero()
}

// resumeHeld has the Host resume the processes held for it on their
// provider, by RetryProvider or by a reopen. It reports whether the run must
// stop acting this round (the runtime died or failed).
func (w *world) resumeHeld(live []kernel.ProcessInfo) bool {
	var held []int64
	for _, p := range live {
		if heldForHost(p.Status, p.Wait) {
			held = append(held, p.PID)
		}
	}
	w.mu.Lock()
	act, reopen := len(held) > 0 && w.hchance(w.hsched.hostAct), w.hchance(0.3)
	w.mu.Unlock()
	if !act {
		return false
	}
	if reopen {
		w.tracef("host reopen to resume %v", held)
		w.markRetried(held)
		return w.reopen()
	}
	woken, err := w.rt.RetryProvider()
	w.tracef("host retry provider %v -> woken %v: %v", held, woken, errString(err))
	if err != nil {
		if !w.isDead() && !w.toggle.fired() {
			w.fail("retry-provider", err.Error())
		}
		return true
	}
	for _, pid := range held {
		found := false
		for _, p := range woken {
			found = found || p == pid
		}
		if !found {
			w.fail("retry-wakes-held", fmt.Sprintf("pid %d was held for the Host on its provider, and RetryProvider woke %v", pid, woken))
			return true
		}
	}
	w.mu.Lock()
	w.result.Retries++
	w.mu.Unlock()
	w.markRetried(woken)
	return false
}

func (w *world) markRetried(pids []int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, pid := range pids {
		w.retried[pid] = w.know.restores
	}
}

// reopen closes the runtime cleanly and opens it again, as a Host does; it
// checks that Close delivered every event to OnEvent first. It reports
// whether the Host must stop acting this round.
func (w *world) reopen() bool {
	if !w.closeClean() {
		return true
	}
	w.result.Reopens++
	if err := w.open(); err != nil {
		if w.toggle.fired() && errors.Is(err, objects.ErrFailed) {
			w.mu.Lock()
			w.crashLocked("disk fault during a reopen")
			w.mu.Unlock()
			return true
		}
		w.fail("reopen", err.Error())
		return true
	}
	return w.isDead()
}

// closeClean closes a healthy runtime and checks that every event it
// committed reached OnEvent before Close returned. It reports whether the
// runtime closed cleanly.
func (w *world) closeClean() bool {
	evs, err := w.rt.Store().Events(0, 0)
	cerr := w.rt.Close()
	w.rt = nil
	if w.isDead() || w.toggle.fired() {
		return false
	}
	if err = errors.Join(err, cerr); err != nil {
		w.fail("close", err.Error())
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.firstSeq == 0 {
		return true
	}
	for _, e := range evs {
		if e.Seq < w.firstSeq || strings.HasPrefix(e.Kind, "object.") {
			continue
		}
		if !w.delivered[e.Seq] {
			w.failLocked("onevent-delivered", fmt.Sprintf("event %d (%s) of incarnation %d is durable and Close returned without handing it to OnEvent", e.Seq, e.Kind, w.incarnation))
			return false
		}
	}
	return true
}

// checkAnswerShown checks the answer a process was shown for a call whose
// Host fault happened (called from observeShown, mu held).
func (w *world) checkAnswerShownLocked(pid int64, r toolResult) {
	e, ok := w.expects[fmt.Sprintf("%d %s", pid, r.id)]
	if !ok || r.name != e.tool {
		return
	}
	var got struct {
		OK            bool `json:"ok"`
		EffectStarted bool `json:"effect_started"`
		Error         struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(r.content), &got)
	if w.answerFits(e, got.OK, got.Error.Code) && (got.OK || got.Error.Code != e.code || (got.EffectStarted == e.started && strings.Contains(got.Error.Message, e.says))) {
		return
	}
	w.failLocked("host-fault-answer", fmt.Sprintf("pid %d call %s (%s, mode %s) was answered %s; want %s", pid, r.id, e.tool, e.mode, r.content, e.want()))
}

// answerFits reports whether an answer (ok, code) is one e allows.
func (w *world) answerFits(e hostExpect, ok bool, code string) bool {
	switch {
	case e.ok:
		// A crash may still cut it short.
		return ok || (code == tools.CodeSettlementUnknown && w.incarnation != e.incarnation)
	case ok:
		return false
	case code == e.code:
		return true
	case code == tools.CodeCancelled && w.incarnation != e.incarnation:
		// A crash lost the commit it happened in, and recovery answered
		// the call as not started (after an effect before it in its batch).
		return true
	}
	// A started call the runtime crashed in, or whose run the Host stopped
	// (another worker's effect did), is of unknown settlement.
	return e.started && code == tools.CodeSettlementUnknown && (w.incarnation != e.incarnation || w.stoppedRuns[e.run])
}

func (e hostExpect) want() string {
	if e.ok {
		return "ok"
	}
	return fmt.Sprintf("%s (effect_started %v) saying %q", e.code, e.started, e.says)
}

// checkEventLog: the durable event log has no gap: its seqs are 1, 2, 3…
// What an earlier check read was durable, so each check reads on from there.
func (w *world) checkEventLog(*snapshot) (string, string) {
	evs, err := w.rt.Store().Events(w.logChecked, 0)
	if err != nil {
		return "read-events", err.Error()
	}
	for _, e := range evs {
		if e.Seq != w.logChecked+1 {
			return "event-log-gap-free", fmt.Sprintf("the log's event after seq %d has seq %d", w.logChecked, e.Seq)
		}
		w.logChecked = e.Seq
	}
	return "", ""
}

// checkHostFaults: a call a Host fault refused is answered as the fault
// says, exactly once, and left nothing staged; a provider's panic left its
// process held for the Host; no Host fault failed a process.
func (w *world) checkHostFaults(s *snapshot) (string, string) {
	for _, pid := range s.pids {
		if p := s.procs[pid]; p.State == process.Failed && strings.Contains(p.Reason, "panicked") {
			return "host-fault-fails-call", fmt.Sprintf("pid %d failed on a Host's panic: %s", pid, p.Reason)
		}
	}
	w.mu.Lock()
	inv, detail := w.checkHostAnswersLocked(s)
	absent := slices.Clone(w.absent)
	w.mu.Unlock()
	if inv != "" {
		return inv, detail
	}
	return checkAbsent(w.rt, absent)
}

func (w *world) checkHostAnswersLocked(s *snapshot) (string, string) {
	keys := make([]string, 0, len(w.expects))
	for k := range w.expects {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		e := w.expects[key]
		spid, call, _ := strings.Cut(key, " ")
		pid, _ := strconv.ParseInt(spid, 10, 64)
		var recs []toolRec
		for _, r := range s.recs[pid] {
			if r.CallID == call {
				recs = append(recs, r)
			}
		}
		switch {
		case len(recs) == 0:
			// Its answer's commit may not be durable yet, or was lost to
			// a crash with the reply that made the call.
			continue
		case len(recs) > 1 && w.know.restores == 0:
			return "host-fault-answered-once", fmt.Sprintf("pid %d call %s (%s, mode %s) is recorded %d times", pid, call, e.tool, e.mode, len(recs))
		}
		r := recs[0]
		killed := s.procs[pid] != nil && s.procs[pid].State == process.Killed
		if !w.answerFits(e, r.OK, r.Code) && !(e.stop && killed && !r.OK) {
			return "host-fault-answer", fmt.Sprintf("pid %d call %s (%s, mode %s) is recorded ok=%v code %q; want %s", pid, call, e.tool, e.mode, r.OK, r.Code, e.want())
		}
	}
	pids := make([]int64, 0, len(w.panicked))
	for pid := range w.panicked {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	for _, pid := range pids {
		n, p := w.panicked[pid], s.procs[pid]
		delete(w.panicked, pid)
		if p == nil || n.incarnation != w.incarnation || n.restores != w.know.restores || w.stoppedRuns[n.run] {
			// A crash, a restore or a stop of the run since may have
			// moved it on: a call cut short by a stop is of unknown
			// settlement and runs again (kernel/quantum.go, callFailed).
			continue
		}
		switch {
		case p.State == process.Killed || p.State == process.Paused:
		case heldForHost(p.State, p.Wait) && strings.Contains(p.Wait.Reason, "panicked in Complete"):
		default:
			return "provider-panic-holds", fmt.Sprintf("pid %d's provider panicked and it is %s (wait %+v, reason %q), not held for the Host", pid, p.State, p.Wait, p.Reason)
		}
	}
	return "", ""
}

// checkAbsent: no Object a call staged before its fault exists.
func checkAbsent(rt *kernel.Runtime, absent []objectRef) (string, string) {
	if len(absent) == 0 {
		return "", ""
	}
	var found *objectRef
	err := rt.Store().View(func(tx *objects.Txn) error {
		for i := range absent {
			o := &absent[i]
			_, err := tx.Lookup(kernel.Namespace(o.pid), o.name)
			switch {
			case err == nil:
				found = o
				return nil
			case !errors.Is(err, objects.ErrNotFound):
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "read-state", err.Error()
	}
	if found != nil {
		return "fault-leaves-nothing", fmt.Sprintf("Object %s/%s, staged by pid %d's call %s before its fault, exists", kernel.Namespace(found.pid), found.name, found.pid, found.call)
	}
	return "", ""
}

// checkStopped runs after the Host stopped a run: no quantum is left
// running without a worker, and the invariants hold.
func (w *world) checkStopped() {
	s, err := read(w.rt)
	if err != nil {
		w.fail("read-state", err.Error())
		return
	}
	for _, pid := range s.pids {
		p := s.procs[pid]
		if p.State == process.Running {
			w.fail("stop-leaves-nothing-running", fmt.Sprintf("pid %d is running after the run stopped (dispatch %s)", pid, p.Dispatch))
			return
		}
		// A stop is the Host's, never a process's failure.
		if p.State == process.Failed && (strings.Contains(p.Reason, "context canceled") || strings.Contains(p.Reason, "gave up")) {
			w.fail("stop-fails-nothing", fmt.Sprintf("pid %d failed on the Host's stop: %s", pid, p.Reason))
			return
		}
	}
	w.check(false)
}
