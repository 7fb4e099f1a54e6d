package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/libos/libos/internal/benchmarks"
	"github.com/libos/libos/internal/safety"
)

const benchSynopsis = "libos bench [--processes N] [--rounds N] [--startup-runs N] [--scenarios LIST] [--json]"

// benchCommand runs the runtime's benchmark scenarios on temporary
// directories and prints their figures. It measures; it asserts nothing.
// `bench safety` runs the runtime-safety benchmark instead.
func benchCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "safety" {
		return benchSafetyCommand(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("libos bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	procs := fs.Int("processes", 1000, "processes in the quanta scenario (10 quanta each)")
	rounds := fs.Int("rounds", 200, "round trips in the spawn and message scenarios")
	startupRuns := fs.Int("startup-runs", 20, "runs of each program in the startup scenario (medians)")
	only := fs.String("scenarios", "", "comma-separated scenarios to run: quanta, spawn_wait, messages, startup (default all)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	all := []string{"quanta", "spawn_wait", "messages", "startup"}
	names := all
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	bad := len(pos) != 0 || *procs < 1 || *rounds < 1 || *startupRuns < 1
	for _, n := range names {
		bad = bad || !slices.Contains(all, n)
	}
	if bad {
		fmt.Fprintln(stderr, "usage: "+benchSynopsis+"\n       libos bench safety [--json] [--run REGEXP]")
		return exitUsage
	}
	scenarios := map[string]func(dir string) (benchmarks.Result, error){
		"quanta":     func(dir string) (benchmarks.Result, error) { return benchmarks.Quanta(dir, *procs, 10) },
		"spawn_wait": func(dir string) (benchmarks.Result, error) { return benchmarks.SpawnRoundTrips(dir, *rounds) },
		"messages":   func(dir string) (benchmarks.Result, error) { return benchmarks.MessageRoundTrips(dir, *rounds) },
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
	}
	var results []benchmarks.Result
	for _, name := range names {
		run := scenarios[name]
		dir, err := os.MkdirTemp("", "libos-bench-")
		if err != nil {
			fmt.Fprintf(stderr, "libos bench: %v\n", err)
			return exitFailed
		}
		r, err := run(dir)
		os.RemoveAll(dir)
		if err != nil {
			fmt.Fprintf(stderr, "libos bench: %v\n", err)
			return exitFailed
		}
		results = append(results, r)
		if !*asJSON {
			names := make([]string, 0, len(r.Metrics))
			for n := range r.Metrics {
				names = append(names, n)
			}
			sort.Strings(names)
			fmt.Fprintf(stdout, "%-12s %8.2fs", r.Name, r.Elapsed.Seconds())
			for _, n := range names {
				fmt.Fprintf(stdout, "  %12.1f %s", r.Metrics[n], n)
			}
			fmt.Fprintln(stdout)
		}
	}
	if *asJSON {
		b, _ := json.Marshal(results)
		fmt.Fprintln(stdout, string(b))
	}
	return exitOK
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
