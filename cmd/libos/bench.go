package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/libos/libos/internal/benchmarks"
)

// benchCommand runs the runtime's benchmark scenarios on temporary
// directories and prints their figures. It measures; it asserts nothing.
func benchCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	procs := fs.Int("processes", 1000, "processes in the quanta scenario (10 quanta each)")
	rounds := fs.Int("rounds", 200, "round trips in the spawn and message scenarios")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 0 || *procs < 1 || *rounds < 1 {
		fmt.Fprintln(stderr, "usage: libos bench [--processes N] [--rounds N] [--json]")
		return exitUsage
	}
	scenarios := []func(dir string) (benchmarks.Result, error){
		func(dir string) (benchmarks.Result, error) { return benchmarks.Quanta(dir, *procs, 10) },
		func(dir string) (benchmarks.Result, error) { return benchmarks.SpawnRoundTrips(dir, *rounds) },
		func(dir string) (benchmarks.Result, error) { return benchmarks.MessageRoundTrips(dir, *rounds) },
	}
	var results []benchmarks.Result
	for _, run := range scenarios {
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
