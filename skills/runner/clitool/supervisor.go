package clitool

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// SupervisorEnv is the environment variable that turns a process into a
// cli-tool supervisor. The runtime starts a supervisor with this variable
// set (and GORACE, see supervisorEnv); the tool's environment travels in the
// request.
const SupervisorEnv = "LIBOS_CLITOOL_SUPERVISOR"

// supervisorGuardArg is passed to supervisors so that an executable that
// does not call MaybeRunSupervisor does nothing harmful: a Go test binary
// runs no tests, and a CLI rejects the unknown flag.
const supervisorGuardArg = "-test.run=^$"

// The supervisor's channels to the runtime, after stdin, stdout and stderr
// (which are the tool's).
const (
	supervisorRequestFD = 3 // the request line, then EOF or a byte: terminate
	supervisorEventsFD  = 4 // treeEvent lines
)

// supervisorHook records that this program calls MaybeRunSupervisor first,
// so that re-executing it as a supervisor is safe.
var supervisorHook atomic.Bool

// supervisorExecutable is the program re-executed as a supervisor.
var supervisorExecutable = sync.OnceValues(os.Executable)

// MaybeRunSupervisor turns the current process into a cli-tool supervisor
// when it was started as one (SupervisorEnv set) and never returns in that
// case; otherwise it returns immediately and records that the program can
// be re-executed as a supervisor. Call it first in main (jsrunner's
// MaybeRunWorker does) and in TestMain of test binaries that run cli-tools.
//
// On Linux each call then runs under its own supervisor: the running program
// started again as a child subreaper, which starts the tool, receives every
// orphan of the tool's tree and, when the tool ends, kills and reaps every
// descendant left, including those that left the process group with setsid.
// A program that does not call MaybeRunSupervisor runs tools directly, and
// only their process group is tracked.
func MaybeRunSupervisor() {
	if os.Getenv(SupervisorEnv) != "1" {
		supervisorHook.Store(true)
		return
	}
	os.Exit(runSupervisor())
}

// supervised reports whether calls run under a supervisor process.
func supervised() bool {
	if !canSupervise || !supervisorHook.Load() {
		return false
	}
	_, err := supervisorExecutable()
	return err == nil
}

// Supervision selects which process supervises a call's process tree. Both
// choices run the same supervision (runTree): the process group, SIGTERM then
// SIGKILL, and, as a child subreaper, the sweep of every descendant left.
type Supervision uint8

const (
	// SupervisorProcess, the default, runs each call under its own
	// supervisor process (see MaybeRunSupervisor), or directly when the
	// program cannot be re-executed. A long-lived program (libos run, serve,
	// the kernel) must use it: a subreaper inherits every orphan below it and
	// its sweep kills every descendant, so making the runtime itself one
	// would hand it the orphans of unrelated children (javascript workers,
	// concurrent calls) and the duty to reap them for as long as it lives.
	SupervisorProcess Supervision = iota
	// InProcess makes the calling process itself the child subreaper that
	// supervises the call, saving the start of a second copy of the program.
	// It is for a program that runs one cli-tool call and exits (libos skill
	// run): while the call runs the program must have no other child, since
	// every child of the process is reaped and swept with the tool's tree;
	// in-process calls are serialized, and the process stays a subreaper.
	// What it cannot do is outlive the program: a program killed outright
	// takes its tool with it (parent-death signal), but a descendant that
	// left the group is no longer found. Without Linux subreapers it runs
	// the tool directly.
	InProcess
)

// treePlace is where a call's tree is supervised.
type treePlace uint8

const (
	treeDirect     treePlace = iota // from this process, the process group only
	treeSupervisor                  // from a supervisor process
	treeInProcess                   // from this process, a child subreaper
)

// placeFor chooses where a call with supervision s runs.
func placeFor(s Supervision) treePlace {
	switch {
	case s == InProcess && canSupervise:
		return treeInProcess
	case supervised():
		return treeSupervisor
	}
	return treeDirect
}

// inProcessTrees is held while an in-process tree is supervised.
var inProcessTrees sync.Mutex

// becomeSubreaperOnce makes this process a subreaper for its in-process
// calls; the attribute is process-wide and is kept.
var becomeSubreaperOnce = sync.OnceValue(becomeSubreaper)

// runSupervisor is the supervisor's main: read the request, become a
// subreaper, run the tree, report.
func runSupervisor() int {
	requests := os.NewFile(supervisorRequestFD, "cli-tool request")
	events := os.NewFile(supervisorEventsFD, "cli-tool events")
	if requests == nil || events == nil {
		fmt.Fprintln(os.Stderr, "cli-tool supervisor: started without its request and event channels")
		return 2
	}
	// Inherited descriptors are not close-on-exec; the tool must not hold
	// the supervisor's channels.
	syscall.CloseOnExec(supervisorRequestFD)
	syscall.CloseOnExec(supervisorEventsFD)
	enc := json.NewEncoder(events)
	emit := func(e treeEvent) {
		// A runtime that stopped listening learns nothing more either way.
		_ = enc.Encode(e)
	}
	br := bufio.NewReader(requests)
	line, err := br.ReadBytes('\n')
	if err != nil {
		emit(treeEvent{Op: opFailed, Message: fmt.Sprintf("cli-tool supervisor: reading the request: %v", err)})
		return 2
	}
	var req treeRequest
	if err := json.Unmarshal(line, &req); err != nil {
		emit(treeEvent{Op: opFailed, Message: fmt.Sprintf("cli-tool supervisor: decoding the request: %v", err)})
		return 2
	}
	if err := becomeSubreaper(); err != nil {
		emit(treeEvent{Op: opFailed, Message: fmt.Sprintf("cli-tool supervisor: %v", err)})
		return 2
	}
	// Anything after the request, or its end (the runtime closed the channel
	// or died), asks for termination.
	terminate := make(chan struct{})
	go func() {
		_, _ = br.ReadByte()
		close(terminate)
	}()
	runTree(req, []*os.File{os.Stdin, os.Stdout, os.Stderr}, true, terminate, emit, func() {})
	return 0
}
