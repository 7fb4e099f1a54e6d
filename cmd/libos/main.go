// Command libos runs agent processes on a libos runtime directory.
//
//	libos run <image> --goal TEXT [flags]   run a process tree to its end
//	libos demo [--dir DIR]                  the offline demo (replay provider)
//	libos resume [--dir DIR]                continue a runtime directory
//	libos ps [--dir DIR] [--json]           list processes
//	libos send <pid> TEXT [--interrupt]     post a Human message
//	libos skill run|check <dir> [flags]     run or check a skill package
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/libos/libos/tools/skills/jsrunner"
)

const usage = `usage: libos <command> [arguments]

commands:
  run <image> --goal TEXT   run a process tree until its root ends or the runtime is idle
  demo                      run the embedded offline demo
  resume                    continue a runtime directory with the provider its run recorded
  ps                        list every process of a runtime directory
  send <pid> TEXT           post a Human message to a process
  goal set <pid> TEXT       restate a process's goal (a new goal version)
  checkpoint create <pid>   snapshot a process subtree (also list, inspect, restore, fork)
  bench                     run the benchmark scenarios and print their figures
  skill run <dir>           run a skill package's runner
  skill check <dir>         admit a skill package and print what it holds

Run 'libos <command> -h' for a command's flags.
`

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	exitWaiting = 3
	// A run stopped by SIGINT or SIGTERM before its root ended: 128 plus
	// the signal's number, as a shell reports it.
	exitInterrupted = 130
	exitTerminated  = 143
)

func main() {
	// A javascript skill worker is this binary re-executed; it must take
	// over before anything else runs.
	jsrunner.MaybeRunWorker()
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return runCommand(args[1:], stdout, stderr)
	case "demo":
		return demoCommand(args[1:], stdout, stderr)
	case "resume":
		return resumeCommand(args[1:], stdout, stderr)
	case "ps":
		return psCommand(args[1:], stdout, stderr)
	case "send":
		return sendCommand(args[1:], stdout, stderr)
	case "checkpoint":
		return checkpointCommand(args[1:], stdout, stderr)
	case "goal":
		return goalCommand(args[1:], stdout, stderr)
	case "bench":
		return benchCommand(args[1:], stdout, stderr)
	case "skill":
		return runSkillCommand(args[1:], stdin, stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "libos: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}
