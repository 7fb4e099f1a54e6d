package safety

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/tools"
)

// Moments of a crash relative to a skill's outside effect.
const (
	// atEffectStart: the effect's start is durable, the effect has not run.
	atEffectStart = "effect_start"
	// atEffectDone: the effect ran, its result is not recorded yet.
	atEffectDone = "effect_done"
	// atResultRecorded: the effect's result is durable.
	atResultRecorded = "result_recorded"
)

// crashPlan says when the doomed runtime crashes: at Moment of the Effect-th
// skill effect it runs (1-based).
type crashPlan struct {
	Moment string
	Effect int
}

func (p *crashPlan) String() string { return fmt.Sprintf("%s of effect %d", p.Moment, p.Effect) }

// crashState is the crash of one task's doomed runtime.
type crashState struct {
	plan *crashPlan
	mem  *vfs.MemFS
	stop func()

	mu       sync.Mutex
	effects  int // effects started in the doomed runtime
	results  int // skill results recorded in the doomed runtime
	snapshot *vfs.MemFS
}

// crashNow clones the disk as a crash leaves it and stops the run. After it,
// the doomed runtime runs no outside effect.
func (c *crashState) crashNow() {
	if c.snapshot == nil {
		c.snapshot = c.mem.CrashClone(vfs.CrashCloneCfg{})
		if c.stop != nil {
			c.stop()
		}
	}
}

// clone is the disk the crash left, nil when it never happened.
func (c *crashState) clone() *vfs.MemFS {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snapshot
}

func (c *crashState) dead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snapshot != nil
}

// onEvent crashes right after the planned skill result committed.
func (c *crashState) onEvent(ev kernel.Event) {
	if ev.Kind != kernel.EventToolDone || ev.Code == "cancelled" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snapshot != nil || c.plan.Moment != atResultRecorded || !isSkillTool(ev.Tool) {
		return
	}
	c.results++
	if c.results == c.plan.Effect {
		c.crashNow()
	}
}

// skillToolNames are the tools of the benchmark's skill packages whose
// results a crash plan counts.
var skillToolNames = map[string]bool{"effect": true}

func isSkillTool(name string) bool { return skillToolNames[name] }

// effectRun is one outside effect a skill ran, as the benchmark saw it.
type effectRun struct {
	Tool     string
	Duration time.Duration
	Err      string
}

// effectCatalog is a skill catalog whose outside effects the benchmark
// times and, in a crash task, interrupts with a simulated crash.
type effectCatalog struct {
	inner tools.SkillCatalog
	tools []*tools.Tool

	mu    sync.Mutex
	crash *crashState
	runs  []effectRun
}

func wrapCatalog(inner tools.SkillCatalog) *effectCatalog {
	c := &effectCatalog{inner: inner}
	for _, t := range inner.Tools() {
		wrapped := *t
		invoke, name := t.Invoke, t.Name
		wrapped.Invoke = func(ctx context.Context, sys tools.Syscalls, args json.RawMessage) (tools.Outcome, error) {
			out, err := invoke(ctx, sys, args)
			if err != nil || out.Effect == nil {
				return out, err
			}
			effect := out.Effect
			out.Effect = func(ctx context.Context) (map[string]any, error) { return c.runEffect(ctx, name, effect) }
			return out, nil
		}
		c.tools = append(c.tools, &wrapped)
	}
	return c
}

func (c *effectCatalog) Skills() []tools.SkillInfo { return c.inner.Skills() }

func (c *effectCatalog) Tools() []*tools.Tool { return c.tools }

// reopened ends the crash: the reopened runtime's effects run normally.
func (c *effectCatalog) reopened() {
	c.mu.Lock()
	c.crash = nil
	c.mu.Unlock()
}

func (c *effectCatalog) runEffect(ctx context.Context, name string, effect func(context.Context) (map[string]any, error)) (map[string]any, error) {
	c.mu.Lock()
	cs := c.crash
	c.mu.Unlock()
	n := 0
	if cs != nil {
		if cs.dead() {
			// The doomed runtime is gone: nothing outside happens for it.
			return nil, errors.New("the runtime crashed")
		}
		cs.mu.Lock()
		cs.effects++
		n = cs.effects
		if cs.plan.Moment == atEffectStart && n == cs.plan.Effect {
			cs.crashNow()
		}
		cs.mu.Unlock()
		// An outside effect does not stop when its runtime dies.
		ctx = context.WithoutCancel(ctx)
	}
	start := time.Now()
	res, err := effect(ctx)
	run := effectRun{Tool: name, Duration: time.Since(start)}
	if err != nil {
		run.Err = err.Error()
	}
	c.mu.Lock()
	c.runs = append(c.runs, run)
	c.mu.Unlock()
	if cs != nil && cs.plan.Moment == atEffectDone && n == cs.plan.Effect {
		cs.mu.Lock()
		cs.crashNow()
		cs.mu.Unlock()
	}
	return res, err
}

func (c *effectCatalog) effectRuns() []effectRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]effectRun(nil), c.runs...)
}
