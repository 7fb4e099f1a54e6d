package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/libos/libos/internal/benchmarks"
	"github.com/libos/libos/internal/safety"
)

const benchSynopsis = "libos bench [--scenarios LIST] [--full] [--json] [--processes N] [--rounds N] [--parents N] [--parallel-rounds N] " +
	"[--cas-writes N] [--ended-processes N] [--alive-processes N] [--js-calls N] [--startup-runs N] [--reopen-processes N] [--reopen-objects N]"

// benchScenarios are the scenarios of `libos bench` in the order they run.
// store_lock names the quanta scenario, whose run measures that row too.
var benchScenarios = []string{"quanta", "store_lock", "large_context", "cas", "ended_heap", "alive_heap", "js_warm", "startup", "reopen", "spawn_wait", "spawn_wait_parallel", "messages"}

// benchCommand runs the runtime's benchmark scenarios on temporary
// directories and prints a row for each performance goal (its figure, the
// baseline measured in the same run, their ratio, the goal and whether it
// was met), then each scenario's figures. It measures; it asserts nothing:
// a missed goal is a row saying so, and only a scenario that could not run
// (the others still do) makes it exit non-zero.
// `bench safety` runs the runtime-safety benchmark instead.
func benchCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "safety" {
		return benchSafetyCommand(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("libos bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	procs := fs.Int("processes", 1000, "processes in the quanta scenario (10 quanta each)")
	rounds := fs.Int("rounds", 200, "round trips in the spawn_wait and messages scenarios")
	parents := fs.Int("parents", 50, "parents at once in the spawn_wait_parallel scenario")
	parallelRounds := fs.Int("parallel-rounds", 20, "round trips of each parent in the spawn_wait_parallel scenario")
	casWrites := fs.Int("cas-writes", 20_000, "writes of each kind in the cas scenario")
	ended := fs.Int("ended-processes", 5000, "processes run to their end in the ended_heap scenario (--full: 50,000)")
	alive := fs.Int("alive-processes", 500, "processes left alive at 10 quanta in the alive_heap scenario")
	jsCalls := fs.Int("js-calls", 2000, "warm calls in the js_warm scenario")
	startupRuns := fs.Int("startup-runs", 20, "runs of each program in the startup scenario (medians)")
	reopenProcs := fs.Int("reopen-processes", 10_000, "processes in the reopen scenario (--full: 100,000)")
	reopenObjs := fs.Int("reopen-objects", 100_000, "Objects besides the processes' own in the reopen scenario")
	full := fs.Bool("full", false, "run the goals' full sizes (50,000 ended processes, 100,000 processes reopened) unless given")
	only := fs.String("scenarios", "", "comma-separated scenarios to run: "+strings.Join(benchScenarios, ", ")+" (default all)")
	asJSON := fs.Bool("json", false, "print JSON: the goal rows and every scenario's figures")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *full && !set["ended-processes"] {
		*ended = 50_000
	}
	if *full && !set["reopen-processes"] {
		*reopenProcs = 100_000
	}
	names := benchScenarios
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	bad := len(pos) != 0
	for _, n := range []int{*procs, *rounds, *parents, *parallelRounds, *casWrites, *ended, *alive, *jsCalls, *startupRuns, *reopenProcs} {
		bad = bad || n < 1
	}
	bad = bad || *reopenObjs < 0
	for _, n := range names {
		bad = bad || !slices.Contains(benchScenarios, n)
	}
	if bad {
		fmt.Fprintln(stderr, "usage: "+benchSynopsis+"\n       libos bench safety [--json] [--run REGEXP]")
		return exitUsage
	}
	scenarios := map[string]func(dir string) (benchmarks.Result, error){
		"quanta": func(dir string) (benchmarks.Result, error) { return benchmarks.Quanta(dir, *procs, 10) },
		"large_context": func(dir string) (benchmarks.Result, error) {
			return benchmarks.LargeContexts(dir, min(*procs, 200))
		},
		"cas": func(dir string) (benchmarks.Result, error) { return benchmarks.CASVsRaw(dir, *casWrites) },
		"ended_heap": func(dir string) (benchmarks.Result, error) {
			// Batches of a fifth at most, so that the growth over the last
			// four fifths is measured (see EndedProcessHeap).
			return benchmarks.EndedProcessHeap(dir, *ended, max(1, min(5000, *ended/5)))
		},
		"alive_heap": func(dir string) (benchmarks.Result, error) { return benchmarks.AliveProcessHeap(dir, *alive) },
		"js_warm":    func(dir string) (benchmarks.Result, error) { return benchmarks.JSWarm(dir, *jsCalls, "") },
		"startup": func(dir string) (benchmarks.Result, error) {
			// It builds a hello-world and the floor programs with the go
			// tool from libos's source tree, and measures this binary.
			mod, err := benchmarks.FindModuleDir()
			if err != nil {
				return benchmarks.Result{}, err
			}
			self, err := os.Executable()
			if err != nil {
				return benchmarks.Result{}, err
			}
			return benchmarks.Startup(dir, benchmarks.StartupOptions{Libos: self, ModuleDir: mod, Runs: *startupRuns})
		},
		"reopen":     func(dir string) (benchmarks.Result, error) { return benchmarks.Reopen(dir, *reopenProcs, *reopenObjs) },
		"spawn_wait": func(dir string) (benchmarks.Result, error) { return benchmarks.SpawnRoundTrips(dir, *rounds) },
		"spawn_wait_parallel": func(dir string) (benchmarks.Result, error) {
			return benchmarks.ParallelSpawnRoundTrips(dir, *parents, *parallelRounds)
		},
		"messages": func(dir string) (benchmarks.Result, error) { return benchmarks.MessageRoundTrips(dir, *rounds) },
	}
	var results []benchmarks.Result
	ran, failed := map[string]bool{}, false
	for _, name := range benchScenarios {
		if !slices.Contains(names, name) {
			continue
		}
		if name == "store_lock" {
			name = "quanta"
		}
		if ran[name] {
			continue
		}
		ran[name] = true
		dir, err := os.MkdirTemp("", "libos-bench-")
		if err != nil {
			fmt.Fprintf(stderr, "libos bench: %v\n", err)
			return exitFailed
		}
		r, err := scenarios[name](dir)
		os.RemoveAll(dir)
		if err != nil {
			// The other scenarios still run; the exit status tells.
			fmt.Fprintf(stderr, "libos bench: %s: %v\n", name, err)
			failed = true
			continue
		}
		results = append(results, r)
	}
	status := exitOK
	if failed {
		status = exitFailed
	}
	var rows []benchmarks.Row
	for _, r := range results {
		rows = append(rows, r.Rows...)
	}
	if *asJSON {
		if rows == nil {
			rows = []benchmarks.Row{}
		}
		b, _ := json.Marshal(struct {
			Rows      []benchmarks.Row    `json:"rows"`
			Scenarios []benchmarks.Result `json:"scenarios"`
			GOGC      int                 `json:"gogc"`
		}{rows, results, currentGCPercent()})
		fmt.Fprintln(stdout, string(b))
		return status
	}
	printBenchRows(stdout, rows)
	printBenchDetails(stdout, results)
	// The collector's target moves every figure: say which one ran.
	fmt.Fprintf(stdout, "\ncollector: GOGC=%d\n", currentGCPercent())
	return status
}

// printBenchRows prints the goal rows as a table.
func printBenchRows(w io.Writer, rows []benchmarks.Row) {
	if len(rows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROW\tVALUE\tUNIT\tBASELINE (same run)\tBASELINE\tRATIO\tGOAL\tMET")
	for _, r := range rows {
		base, baseValue, ratio := "—", "—", "—"
		if r.Baseline != "" {
			base, baseValue, ratio = r.Baseline, benchNumber(r.BaselineValue), fmt.Sprintf("%.3g×", r.Ratio)
		}
		met := "no"
		if r.Met {
			met = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, benchNumber(r.Value), r.Unit, base, baseValue, ratio, r.Goal, met)
	}
	tw.Flush()
}

// printBenchDetails prints every figure of each scenario, one line each.
func printBenchDetails(w io.Writer, results []benchmarks.Result) {
	fmt.Fprintln(w)
	for _, r := range results {
		names := make([]string, 0, len(r.Metrics))
		for n := range r.Metrics {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(w, "%-19s %7.2fs", r.Name, r.Elapsed.Seconds())
		for _, n := range names {
			fmt.Fprintf(w, "  %s %s", benchNumber(r.Metrics[n]), n)
		}
		fmt.Fprintln(w)
	}
}

// benchNumber formats a figure: whole numbers with thousands separators
// from 100 up, three significant digits below.
func benchNumber(v float64) string {
	if math.Abs(v) < 100 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	s := strconv.FormatFloat(math.Abs(v), 'f', 0, 64)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if v < 0 {
		s = "-" + s
	}
	return s
}

// benchSafetyCommand runs the runtime-safety benchmark and prints a table
// and its summary, or one JSON object. It exits non-zero when the goal (no
// unauthorized side effect, no false denial, every task passing) is missed.
func benchSafetyCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos bench safety", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON object")
	match := fs.String("run", "", "run only the tasks whose name matches this regular expression")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 0 {
		fmt.Fprintln(stderr, "usage: libos bench safety [--json] [--run REGEXP]")
		return exitUsage
	}
	opts := safety.Options{}
	if *match != "" {
		re, err := regexp.Compile(*match)
		if err != nil {
			fmt.Fprintf(stderr, "libos bench safety: --run: %v\n", err)
			return exitUsage
		}
		opts.Match = re
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := safety.Run(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "libos bench safety: %v\n", err)
		return exitUsage
	}
	if *asJSON {
		b, err := json.Marshal(rep)
		if err != nil {
			fmt.Fprintf(stderr, "libos bench safety: %v\n", err)
			return exitFailed
		}
		fmt.Fprintln(stdout, string(b))
	} else {
		printSafety(stdout, rep)
	}
	if !rep.GoalMet {
		return exitFailed
	}
	return exitOK
}

func printSafety(w io.Writer, rep *safety.Report) {
	fmt.Fprintf(w, "%-42s %-18s %-6s %-4s %6s\n", "TASK", "CATEGORY", "KIND", "OK", "SECS")
	for _, r := range rep.Results {
		kind, ok := "attack", "pass"
		if r.Legitimate {
			kind = "legit"
		}
		if !r.Passed {
			ok = "FAIL"
		}
		fmt.Fprintf(w, "%-42s %-18s %-6s %-4s %6.2f\n", r.Name, r.Category, kind, ok, r.Seconds)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "tasks                      %d (%d legitimate, %d attacks)\n", rep.Tasks, rep.LegitimateTasks, rep.AttackTasks)
	fmt.Fprintf(w, "task_success_rate          %.3f\n", rep.TaskSuccessRate)
	fmt.Fprintf(w, "safety_pass_rate           %.3f\n", rep.SafetyPassRate)
	fmt.Fprintf(w, "unauthorized_side_effects  %d\n", rep.UnauthorizedSideEffects)
	fmt.Fprintf(w, "false_denials              %d\n", rep.FalseDenials)
	fmt.Fprintf(w, "seconds                    %.1f\n", rep.Seconds)
	if len(rep.Failing) == 0 {
		fmt.Fprintln(w, "goal                       met")
		return
	}
	fmt.Fprintln(w, "goal                       missed; failing tasks:")
	for _, f := range rep.Failing {
		fmt.Fprintf(w, "  %s (%s): %s\n", f.Name, f.Category, f.Why)
	}
}
