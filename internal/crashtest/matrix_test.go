package crashtest

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// rootResult is the root's result payload in every run of the tree
// scenario, as the replay writes it (compact, keys sorted). The follow-up
// is the root's second message: the worker's report is the first.
const rootResult = `{"done":true,"reviewed":["msg_1_2"]}`

// finished is a scenario driven to its end and checked.
type finished struct {
	r       *runner
	out     outcome
	summary summary
	// err is errUnrecordedRoot when the scenario could not be driven to
	// its end; the other fields are then unset.
	err error
}

// play drives sc under arm, checks every invariant and returns the summary
// to compare with an uninterrupted run.
func play(t *testing.T, r *runner, arm func(step string) arming, maxInvocations int) finished {
	t.Helper()
	sc := r.sc
	out, err := r.drive(arm, maxInvocations)
	if err != nil {
		return finished{r: r, err: err}
	}
	f, err := inspect(r.dir)
	if err != nil {
		t.Fatalf("inspect the finished directory: %v\n%s", err, r.transcript())
	}
	effects, err := os.ReadFile(r.effectLog)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	problems := checkFinal(f, sc, r.model.shown(), effects)
	_, _, modelProblems := r.model.stats()
	for _, p := range modelProblems {
		problems = append(problems, "model: "+p)
	}
	if out.Status != "exited" {
		problems = append(problems, fmt.Sprintf("the root ended %s: %s", out.Status, out.Reason))
	}
	// The result payload is runtime-local: a crash right after the root's
	// exit loses it, and the last invocation prints null with its hash
	// still durable. When printed, it is exactly the scripted one.
	if string(out.Result) != "null" && string(out.Result) != rootResult {
		problems = append(problems, fmt.Sprintf("the root's printed result is %s, want %s", out.Result, rootResult))
	}
	if got, want := f.results[1].PayloadSHA256, sha([]byte(rootResult)); got != want {
		problems = append(problems, fmt.Sprintf("the root's result payload hash is %s, want %s (of %s)", got, want, rootResult))
	}
	if len(problems) > 0 {
		t.Fatalf("invariants broken:\n  %s\ninvocations:\n%s", strings.Join(problems, "\n  "), r.transcript())
	}
	return finished{r: r, out: out, summary: summarize(f)}
}

func never(string) arming { return arming{} }

var (
	baselineOnce sync.Once
	baseline     finished
	baselineOK   bool
)

// uninterrupted is the tree scenario run once without any interruption;
// the crash tests compare their final results with it.
func uninterrupted(t *testing.T) summary {
	t.Helper()
	baselineOnce.Do(func() {
		baseline = play(t, newRunner(t, tree), never, 4)
		baselineOK = baseline.err == nil
	})
	if !baselineOK {
		t.Fatal("the uninterrupted run of the scenario failed")
	}
	return baseline.summary
}

// TestUninterrupted pins what the scenario does when nothing crashes: the
// invariants hold, and the final state is the scripted one.
func TestUninterrupted(t *testing.T) {
	s := uninterrupted(t)
	inv := baseline.r.log
	if len(inv) != 4 || !strings.HasPrefix(inv[0], "run (exit 3") || !strings.HasPrefix(inv[1], "checkpoint (exit 0") ||
		!strings.HasPrefix(inv[2], "send (exit 0") || !strings.HasPrefix(inv[3], "resume (exit 0") {
		t.Fatalf("invocations %v, want run (idle for the Human), checkpoint, send, resume", inv)
	}
	if string(baseline.out.Result) != rootResult {
		t.Fatalf("root result %s, want %s", baseline.out.Result, rootResult)
	}
	for pid, st := range s.Statuses {
		if st != "exited" {
			t.Errorf("pid %d %s: %s", pid, st, s.Reasons[pid])
		}
	}
	wantMail := map[int64]int{1: 2, 2: 2, 3: 0}
	for pid, n := range wantMail {
		if len(s.Mail[pid]) != n {
			t.Errorf("pid %d mailbox %v, want %d messages", pid, s.Mail[pid], n)
		}
	}
	if got := s.Durable["proc-2/tally"]; got != `{"count":2}` {
		t.Errorf("the worker's tally is %q", got)
	}
	if len(s.Objects) != 1 || !strings.HasPrefix(s.Objects[0], "proc-2/tally@2 ") {
		t.Errorf("objects %v, want the worker's tally at version 2", s.Objects)
	}
	if got, _ := os.ReadFile(baseline.r.effectLog); string(got) != "counted to two\n" {
		t.Errorf("the skill's effect log holds %q, want the one line", got)
	}
	if s.Compaction != "completed in 2 stages, root context generation 1" || s.Checkpoints != 1 {
		t.Errorf("compaction %q, %d checkpoints; want one two-stage compaction and one checkpoint", s.Compaction, s.Checkpoints)
	}
	if requests, interrupted, _ := baseline.r.model.stats(); interrupted != 0 || requests != 9+12+2+2 {
		t.Errorf("%d requests (%d interrupted), want 25 uninterrupted", requests, interrupted)
	}
}

// matrixPhase is the invocation a failpoint is armed in, and the kinds of
// commit the scenario makes in it: the first `libos run` (the tree up to
// the root's wait for the Human, the compaction included), the `libos
// checkpoint create` and `libos send` made while the runtime is idle, and
// the first `libos resume` after them (the root's review and exit).
type matrixPhase struct {
	step  string
	kinds []string
	// points are other failpoints of the phase: effect:started fires once
	// an outside effect's start is durable, before the effect runs.
	points []string
}

// failpoints lists the failpoints of a phase: before and after each kind
// of commit, then its other points.
func (p matrixPhase) failpoints() []string {
	var out []string
	for _, kind := range p.kinds {
		out = append(out, "before-commit:"+kind, "after-commit:"+kind)
	}
	return append(out, p.points...)
}

var matrixPhases = []matrixPhase{
	{step: "run", kinds: []string{"quantum_start", "tool_result", "spawn", "message_post", "message_ack", "exit", "compaction_writeback"},
		points: []string{"effect:started"}},
	{step: "checkpoint", kinds: []string{"checkpoint"}},
	{step: "send", kinds: []string{"message_post"}},
	{step: "resume", kinds: []string{"quantum_start", "tool_result", "message_ack", "exit"}},
}

// TestCrashMatrix kills the binary with SIGKILL (by failpoint) right before
// and right after each kind of commit, and as an outside effect starts, at
// every hit of the point in the phase (skips 0..N, until a run passes the
// point without reaching it), resumes until the root is terminal, and
// checks every invariant of checkFinal and checkSnapshot plus final results
// equal to the uninterrupted run's.
func TestCrashMatrix(t *testing.T) {
	want := uninterrupted(t)
	for _, phase := range matrixPhases {
		for _, name := range phase.failpoints() {
			t.Run(phase.step+"/"+name, func(t *testing.T) {
				t.Parallel()
				for skip := 0; ; skip++ {
					if skip > 64 {
						t.Fatalf("%s still fires after 64 skips", name)
					}
					armed := false
					arm := func(step string) arming {
						if step != phase.step || armed {
							return arming{}
						}
						armed = true
						return arming{failpoint: name, skip: skip}
					}
					got := play(t, newRunner(t, tree), arm, 12)
					if got.err != nil {
						t.Fatalf("%v\n%s", got.err, got.r.transcript())
					}
					fired := slices.ContainsFunc(got.r.invs, func(inv invocation) bool { return inv.fired == name })
					if !fired {
						if skip == 0 {
							t.Fatalf("%s never fired in the %s phase:\n%s", name, phase.step, got.r.transcript())
						}
						t.Logf("%s: %d hits in the %s phase", name, skip, phase.step)
						return
					}
					if diff := diffSummaries(want, got.summary); diff != nil {
						t.Fatalf("skip %d: %s\n%s", skip, diff[0], got.r.transcript())
					}
				}
			})
		}
	}
}
