// Command libos runs agent processes on a libos runtime directory.
//
//	libos run <image> --goal TEXT [flags]   run a process tree to its end
//	libos ps | inspect | logs | ...         read a runtime directory, idle or live
//	libos kill | pause | continue <pid>     signal a process as the Host
//
// `libos help` lists every command; `libos help CMD` shows one.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"text/tabwriter"

	"github.com/libos/libos/skills/runner/jsrunner"
	"github.com/libos/libos/tools"
)

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

// command is one libos command.
type command struct {
	name string
	// synopsis is the usage line, positional arguments included.
	synopsis string
	summary  string
	run      func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// commands are libos's commands, in the order help lists them. A new
// command is one entry here. (Set in init: the commands print help, which
// reads this list.)
var commands []command

func init() {
	commands = []command{
		{"run", "libos run <image> --goal TEXT [--dir DIR] [--provider replay|openai] [--script FILE] [--grant R=RIGHTS]... [--ask R=RIGHTS]... [--deny R=RIGHTS]... [flags]",
			"Run a process tree until its root ends or the runtime is idle.", noStdin(runCommand)},
		{"demo", "libos demo [--dir DIR]", "Run the embedded offline demo.", noStdin(demoCommand)},
		{"resume", "libos resume [--dir DIR] [--skills DIR]... [--retain-io=BOOL] [provider flags]", "Continue a runtime directory with the settings its run recorded; a flag given corrects that setting.", noStdin(resumeCommand)},
		{"serve", serveSynopsis, "Run the scheduler and serve the HTTP API and the live web console.", noStdin(serveCommand)},
		{"ps", "libos ps [--dir DIR] [--json]", "List every process of a runtime directory, terminal ones included.", noStdin(psCommand)},
		{"inspect", "libos inspect <pid> [--dir DIR] [--json]", "Show one process: state, wait, goal, grants, budgets, children, context, result and recent calls.", noStdin(inspectCommand)},
		{"logs", "libos logs [--pid N] [--follow] [--since SEQ] [--dir DIR] [--json]", "Print the durable event log in commit order; --follow streams a live runtime's new events until interrupted.", noStdin(logsCommand)},
		{"objects", "libos objects <pid> [--dir DIR] [--json]", "List the Objects in a process's namespace.", noStdin(objectsCommand)},
		{"object", "libos object <oid> [--dir DIR] [--json]", "Show an Object's metadata and payload (or that the payload was lost to a reopen).", noStdin(objectCommand)},
		{"messages", "libos messages <pid> [--all] [--dir DIR] [--json]", "List a process's unread messages (--all: every message, whatever its status).", noStdin(messagesCommand)},
		{"context", "libos context <pid> [--dir DIR] [--json]", "Show a process's LLM context as the model sees it: system prompt, goal and entries.", noStdin(contextCommand)},
		{"send", "libos send <pid> TEXT [--interrupt] [--from NAME] [--subject S] [--dir DIR] [--json]", "Post a Human message to a process.", noStdin(sendCommand)},
		{"goal", "libos goal <get <pid> | set <pid> TEXT> [--dir DIR] [--json]", "Read a process's goal, or restate it (a new goal version).", noStdin(goalCommand)},
		{"kill", "libos kill <pid> [--dir DIR] [--json]", "Kill a process and its whole subtree.", signalCommand("kill")},
		{"pause", "libos pause <pid> [--dir DIR] [--json]", "Pause a process (a running quantum finishes first).", signalCommand("pause")},
		{"continue", "libos continue <pid> [--dir DIR] [--json]", "Continue a paused process.", signalCommand("continue")},
		{"approvals", "libos approvals [--dir DIR] [--json]", "List calls waiting for a Human's approval.", noStdin(approvalsCommand)},
		{"approve", "libos approve <pid> <call_id> [--id ID] [--dir DIR] [--json]", "Run a call that waits for approval.", noStdin(decideCommand("approve"))},
		{"deny", "libos deny <pid> <call_id> [--id ID] [--reason R] [--dir DIR] [--json]", "Answer a call that waits for approval with a denial.", noStdin(decideCommand("deny"))},
		{"checkpoint", "libos checkpoint <create <pid> | list [pid] | inspect <id> | restore <id> | fork <id>> [--dir DIR] [--json]",
			"Snapshot a process subtree, list, inspect, restore or fork snapshots.", noStdin(checkpointCommand)},
		{"bench", benchSynopsis + " | libos bench safety [--json] [--run REGEXP]", "Run the benchmark scenarios, or the runtime-safety benchmark.", noStdin(benchCommand)},
		{"skill", "libos skill <run|check> <dir> [flags]", "Run or check a skill package.", runSkillCommand},
		{"version", "libos version [--json]", "Print libos's version.", noStdin(versionCommand)},
		{"help", "libos help [command]", "Show the commands, or one command's usage.", helpCommand},
	}
}

// subcommandSynopses are the usage lines of flag sets below a command.
var subcommandSynopses = map[string]string{
	"libos bench safety": "libos bench safety [--json] [--run REGEXP]",
	"libos skill run":    "libos skill run <dir> [--runner NAME] [--inputs FILE|-] [--workspace DIR]",
	"libos skill check":  "libos skill check <dir>",
}

func noStdin(f func(args []string, stdout, stderr io.Writer) int) func([]string, io.Reader, io.Writer, io.Writer) int {
	return func(args []string, _ io.Reader, stdout, stderr io.Writer) int { return f(args, stdout, stderr) }
}

func findCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// lookupSynopsis finds the usage of the flag set named flagSet ("libos ps").
func lookupSynopsis(flagSet string) command {
	if s, ok := subcommandSynopses[flagSet]; ok {
		return command{synopsis: s}
	}
	if c, ok := findCommand(strings.TrimPrefix(flagSet, "libos ")); ok {
		return c
	}
	return command{synopsis: flagSet + " [flags]"}
}

func main() {
	// A javascript skill worker is this binary re-executed; it must take
	// over before anything else runs.
	jsrunner.MaybeRunWorker()
	setGCPercent()
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// gcPercent is the collector's target of every libos command unless the
// environment sets GOGC. The runtime allocates quickly on a small live heap:
// with Go's default (a collection each time the heap doubles) collection took
// a fifth of a quantum's CPU in `libos bench`. A heap up to three times the
// live one is the price; what a run keeps alive is unchanged.
const gcPercent = 200

// setGCPercent applies gcPercent, unless GOGC is set.
func setGCPercent() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// currentGCPercent is the collector's target in force (negative: off).
func currentGCPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	return int(s[0].Value.Uint64())
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printCommands(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		printCommands(stdout)
		return exitOK
	case "-version", "--version":
		return versionCommand(args[1:], stdout, stderr)
	}
	c, ok := findCommand(args[0])
	if !ok {
		return unknownCommand(stderr, args[0])
	}
	s := &stderrStream{Writer: stderr, stdout: stdout}
	code := c.run(args[1:], stdin, stdout, s)
	if s.helped {
		return exitOK
	}
	return code
}

// unknownCommand refuses a command name, suggesting the closest ones.
func unknownCommand(stderr io.Writer, name string) int {
	fmt.Fprintf(stderr, "libos: unknown command %q\n", name)
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	if near := tools.Closest(name, names, 1); len(near) > 0 && name != "" {
		fmt.Fprintf(stderr, "Did you mean %s?\n", near[0])
	}
	fmt.Fprintln(stderr, "Run 'libos help' for the list of commands.")
	return exitUsage
}

func printCommands(w io.Writer) {
	fmt.Fprintln(w, "usage: libos <command> [arguments]")
	fmt.Fprintln(w, "\ncommands:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nEvery command that opens a runtime directory takes --dir (default $LIBOS_DIR, else ./.libos).")
	fmt.Fprintln(w, "Run 'libos help <command>' or 'libos <command> --help' for a command's usage.")
}

// helpCommand prints the command list, or one command's usage through the
// command itself (so its flags are the ones it parses).
func helpCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		printCommands(stdout)
		return exitOK
	case 1:
	default:
		return usageError(stderr, "libos help", "want at most one command name, got %d arguments", len(args))
	}
	c, ok := findCommand(args[0])
	if !ok {
		return unknownCommand(stderr, args[0])
	}
	if c.name == "help" {
		fmt.Fprintf(stdout, "usage: %s\n\n%s\n", c.synopsis, c.summary)
		return exitOK
	}
	s := &stderrStream{Writer: stderr, stdout: stdout}
	code := c.run([]string{"--help"}, stdin, stdout, s)
	if s.helped {
		return exitOK
	}
	return code
}
