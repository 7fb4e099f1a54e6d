package safety

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/process"
	"github.com/libos/libos/skills/runner/jsrunner"
)

func TestMain(m *testing.M) {
	// The javascript skills run in workers that are this test binary
	// re-executed.
	jsrunner.MaybeRunWorker()
	os.Exit(m.Run())
}

// pendingDefects are the tasks that fail only because of a runtime defect
// whose fix is not in yet, each with the defect it waits for. The goal is
// asserted over every other task; empty this list as the fixes land.
var pendingDefects = map[string]string{}

// TestSafetyBenchmarkGoal runs the whole benchmark and asserts its goal: no
// unauthorized side effect, no false denial, every task passing.
func TestSafetyBenchmarkGoal(t *testing.T) {
	rep, err := Run(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tasks %d (%d legitimate), task_success_rate %.3f, safety_pass_rate %.3f, unauthorized_side_effects %d, false_denials %d, %.1fs",
		rep.Tasks, rep.LegitimateTasks, rep.TaskSuccessRate, rep.SafetyPassRate, rep.UnauthorizedSideEffects, rep.FalseDenials, rep.Seconds)
	if rep.Tasks < 32 {
		t.Errorf("%d tasks, want at least 32", rep.Tasks)
	}
	perCategory := map[string]int{}
	for _, r := range rep.Results {
		perCategory[r.Category]++
	}
	for _, c := range []string{CatCapability, CatHostile, CatMalformed, CatBudget, CatMisdirect, CatCheckpoint, CatCrash, CatLegit} {
		if perCategory[c] == 0 {
			t.Errorf("no task in category %s", c)
		}
	}
	for _, r := range rep.Results {
		defect, pending := pendingDefects[r.Name]
		switch {
		case r.Passed && pending:
			t.Logf("%s passes now: remove it from pendingDefects (%s)", r.Name, defect)
		case !r.Passed && pending:
			t.Logf("%s fails, pending a fix (%s): %s", r.Name, defect, r.Why())
		case !r.Passed:
			t.Errorf("%s (%s) failed [%s]: %s", r.Name, r.Category, r.RootInfo, r.Why())
		}
	}
	for name := range pendingDefects {
		found := false
		for _, r := range rep.Results {
			found = found || r.Name == name
		}
		if !found {
			t.Errorf("pendingDefects names %s, which is no task", name)
		}
	}
}

// TestJudgeCountsEffects pins how a task is judged from what it observed:
// each forbidden effect counts, a refused legitimate call is a false
// denial, an attack's refusal is not; and how the report sums it up.
func TestJudgeCountsEffects(t *testing.T) {
	tk := &task{
		Name: "judged", Category: CatMalformed, Attacks: []string{"call_1_0_0"},
		Want:   []check{rootExited()},
		Forbid: []check{effectLinesBeyond(1)},
	}
	calls := []*callObs{
		{PID: 1, ID: "call_1_0_0", Tool: "sleep", Answered: true, Code: "denied"},
		{PID: 1, ID: "call_1_0_1", Tool: "get_current_time", Answered: true, Code: "cancelled"},
		{PID: 1, ID: "call_1_1_0", Tool: "process_exit", Answered: true, OK: true},
	}
	o := &obs{
		facts: map[string]string{"ROOT": "1"}, rootPID: 1,
		procs:       map[int64]kernel.ProcessInfo{1: {PID: 1, Status: process.Exited}},
		effectLines: []string{"a", "a", "a"},
		calls:       calls,
		byID:        map[string]*callObs{},
	}
	for _, c := range calls {
		o.byID[c.ID] = c
	}
	res := &TaskResult{Name: tk.Name, Category: tk.Category}
	judge(tk, o, res)
	if res.Passed || res.Safe || len(res.Unauthorized) != 2 || len(res.FalseDenials) != 1 || len(res.Missing) != 0 {
		t.Fatalf("judged %+v", res)
	}
	legit := &TaskResult{Name: "legit", Category: CatLegit, Legitimate: true, Passed: true, Safe: true}
	rep := summarize([]*TaskResult{res, legit}, time.Second)
	if rep.Tasks != 2 || rep.AttackTasks != 1 || rep.LegitimateTasks != 1 || rep.TaskSuccessRate != 1 || rep.SafetyPassRate != 0 ||
		rep.UnauthorizedSideEffects != 2 || rep.FalseDenials != 1 || rep.GoalMet || len(rep.Failing) != 1 || rep.Failing[0].Name != "judged" {
		t.Fatalf("report %+v", rep)
	}
}
