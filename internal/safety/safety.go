// Package safety is the runtime-safety benchmark: scripted tasks (replay
// scripts plus skills with outside effects) that try to escape their
// capabilities, abuse budgets and one-shots, misdirect messages and signals,
// misuse checkpoints, feed malformed input, run hostile skills and crash at
// the worst moment, beside legitimate tasks that must succeed. Each task runs
// the real kernel on its own in-memory directory and is judged only by what
// the runtime and the effect files show afterwards.
package safety

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// Categories of tasks.
const (
	CatCapability = "capability_escape"
	CatHostile    = "hostile_skill"
	CatMalformed  = "malformed_input"
	CatBudget     = "budget_one_shot"
	CatMisdirect  = "message_signal"
	CatCheckpoint = "checkpoint_misuse"
	CatCrash      = "crash_timing"
	CatLegit      = "legitimate"
)

// Options select what Run runs.
type Options struct {
	// Match, when set, runs only the tasks whose name it matches.
	Match *regexp.Regexp
	// Parallel is how many tasks run at once (default 4). Tasks spend most
	// of their time in subprocesses and timers, not on a CPU.
	Parallel int
}

// TaskResult is what one task did.
type TaskResult struct {
	Name     string `json:"name"`
	Category string `json:"category"`
	// Legitimate tasks must succeed; the others are attacks.
	Legitimate bool `json:"legitimate"`
	// Passed: every expected effect happened, no forbidden one did, and no
	// legitimate call was refused.
	Passed bool `json:"passed"`
	// Safe: no forbidden effect happened.
	Safe bool `json:"safe"`
	// Unauthorized lists the forbidden effects observed.
	Unauthorized []string `json:"unauthorized,omitempty"`
	// FalseDenials lists the legitimate calls that were refused.
	FalseDenials []string `json:"false_denials,omitempty"`
	// Missing lists the expected effects that did not happen.
	Missing []string `json:"missing,omitempty"`
	// Error is a harness failure (the task could not be run or observed).
	Error    string  `json:"error,omitempty"`
	Seconds  float64 `json:"seconds"`
	RootInfo string  `json:"root,omitempty"`
}

// Why says in one line why a task did not pass.
func (r TaskResult) Why() string {
	var parts []string
	if r.Error != "" {
		parts = append(parts, "error: "+r.Error)
	}
	for _, u := range r.Unauthorized {
		parts = append(parts, "unauthorized: "+u)
	}
	for _, f := range r.FalseDenials {
		parts = append(parts, "false denial: "+f)
	}
	for _, m := range r.Missing {
		parts = append(parts, "missing: "+m)
	}
	return strings.Join(parts, "; ")
}

// Failure is a task that did not pass, with why.
type Failure struct {
	Name     string `json:"name"`
	Category string `json:"category"`
	Why      string `json:"why"`
}

// Report is the benchmark's outcome.
type Report struct {
	Tasks           int     `json:"tasks"`
	LegitimateTasks int     `json:"legitimate_tasks"`
	AttackTasks     int     `json:"attack_tasks"`
	TaskSuccessRate float64 `json:"task_success_rate"`
	SafetyPassRate  float64 `json:"safety_pass_rate"`
	// UnauthorizedSideEffects counts forbidden effects observed in all tasks.
	UnauthorizedSideEffects int `json:"unauthorized_side_effects"`
	// FalseDenials counts legitimate calls refused in all tasks.
	FalseDenials int `json:"false_denials"`
	// GoalMet: no unauthorized side effect, no false denial, every task passed.
	GoalMet bool          `json:"goal_met"`
	Failing []Failure     `json:"failing"`
	Seconds float64       `json:"seconds"`
	Results []*TaskResult `json:"results"`
}

// Run runs the selected tasks and computes the report. A harness failure of
// one task is reported on that task (it fails); Run itself fails only when
// nothing could run.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	var selected []*task
	for _, t := range allTasks() {
		if opts.Match == nil || opts.Match.MatchString(t.Name) {
			selected = append(selected, t)
		}
	}
	if len(selected) == 0 {
		return nil, fmt.Errorf("no safety task matches %q", opts.Match)
	}
	start := time.Now()
	results := make([]*TaskResult, len(selected))
	sem := make(chan struct{}, opts.Parallel)
	var wg sync.WaitGroup
	for i, t := range selected {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			results[i] = runTask(ctx, t)
		}()
	}
	wg.Wait()
	return summarize(results, time.Since(start)), nil
}

func summarize(results []*TaskResult, elapsed time.Duration) *Report {
	rep := &Report{Tasks: len(results), Results: results, Seconds: elapsed.Seconds(), Failing: []Failure{}}
	legitOK, safe := 0, 0
	for _, r := range results {
		if r.Legitimate {
			rep.LegitimateTasks++
			if r.Passed {
				legitOK++
			}
		} else {
			rep.AttackTasks++
			if r.Safe {
				safe++
			}
		}
		rep.UnauthorizedSideEffects += len(r.Unauthorized)
		rep.FalseDenials += len(r.FalseDenials)
		if !r.Passed {
			rep.Failing = append(rep.Failing, Failure{Name: r.Name, Category: r.Category, Why: r.Why()})
		}
	}
	rep.TaskSuccessRate = ratio(legitOK, rep.LegitimateTasks)
	rep.SafetyPassRate = ratio(safe, rep.AttackTasks)
	rep.GoalMet = rep.UnauthorizedSideEffects == 0 && rep.FalseDenials == 0 && len(rep.Failing) == 0
	sort.SliceStable(rep.Failing, func(i, j int) bool { return rep.Failing[i].Name < rep.Failing[j].Name })
	return rep
}

func ratio(n, d int) float64 {
	if d == 0 {
		return 1
	}
	return float64(n) / float64(d)
}
