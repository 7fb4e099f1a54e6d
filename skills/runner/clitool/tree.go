package clitool

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// sweepLimit bounds how long a supervisor spends killing and reaping the
// descendants left after the tool ended.
const sweepLimit = 5 * time.Second

// treeRequest is what the runtime asks to run: one tool process and
// everything it starts. Strings travel as bytes because arguments,
// environment values and paths need not be UTF-8.
type treeRequest struct {
	Path  []byte   `json:"path"`
	Argv  [][]byte `json:"argv"`
	Env   [][]byte `json:"env"`
	Dir   []byte   `json:"dir"`
	Grace int64    `json:"grace_ns"`
}

// Events of a tree, in order: started or spawn_failed, then ended. failed
// may replace any of them when the supervision itself broke.
const (
	opStarted     = "started"
	opSpawnFailed = "spawn_failed"
	opEnded       = "ended"
	opFailed      = "failed"
)

// treeEvent reports what happened to the tree.
type treeEvent struct {
	Op string `json:"op"`
	// PID is the tool's process id (and process group id), for started.
	PID int `json:"pid,omitempty"`
	// Message explains spawn_failed and failed; for ended it says which
	// descendants could not be ended ("" when none).
	Message string `json:"message,omitempty"`
	// Status is the tool's wait status, for ended.
	Status uint32 `json:"status,omitempty"`
	// Terminated is true when the tool was still running when termination
	// was asked for, so its end is the runtime's doing.
	Terminated bool `json:"terminated,omitempty"`
}

func byteStrings(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// toolExit is how awaitTool saw the tool end. When reaped is false the tool
// is a zombie still holding its pid (and so its process group id).
type toolExit struct {
	reaped bool
	status syscall.WaitStatus
	err    error
}

// runTree starts the tool in its own process group with stdio as its
// standard streams and supervises it: when terminate closes while the tool
// runs (a timeout or an abort), its group gets SIGTERM and, once the grace
// period ends, SIGKILL; the grace ends early once the tool and every process
// awaitOthers waits for have exited. Once the tool has
// ended, whatever is left of its group is killed and, when
// subreaper is set (the caller is a child subreaper whose only children are
// this tree), every other descendant is killed and reaped too. Only then is
// the ended event emitted. spawned runs right after the spawn attempt.
func runTree(req treeRequest, stdio []*os.File, subreaper bool, terminate <-chan struct{}, emit func(treeEvent), spawned func()) {
	var chld chan os.Signal
	if subreaper {
		// Orphans reparented to the caller announce their exit with SIGCHLD.
		chld = make(chan os.Signal, 1)
		signal.Notify(chld, syscall.SIGCHLD)
		defer signal.Stop(chld)
	}
	fds := make([]uintptr, len(stdio))
	for i, f := range stdio {
		fds[i] = f.Fd()
	}
	pid, err := syscall.ForkExec(string(req.Path), byteStrings(req.Argv), &syscall.ProcAttr{
		Dir:   string(req.Dir),
		Env:   byteStrings(req.Env),
		Files: fds,
		Sys:   toolProcAttr(subreaper),
	})
	runtime.KeepAlive(stdio)
	spawned()
	if err != nil {
		emit(treeEvent{Op: opSpawnFailed, Message: fmt.Sprintf("starting %s in %s: %v", req.Path, req.Dir, err)})
		return
	}
	emit(treeEvent{Op: opStarted, PID: pid})

	exited := make(chan toolExit, 1)
	go func() { exited <- awaitTool(pid, chld) }()
	var end toolExit
	terminated := false
	select {
	case end = <-exited:
	case <-terminate:
		select {
		case end = <-exited: // it ended by itself just before
		default:
			terminated = true
			_ = syscall.Kill(-pid, syscall.SIGTERM)
			grace := time.NewTimer(time.Duration(req.Grace))
			select {
			case end = <-exited:
				// The grace is the group's, not the tool's: what the tool
				// started may still be cleaning up after the SIGTERM.
				if end.err == nil {
					awaitOthers(pid, subreaper, chld, grace.C)
				}
			case <-grace.C:
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				end = <-exited
			}
			grace.Stop()
		}
	}
	// What is left of the group goes with it. Until the leader is reaped its
	// pid stays allocated, so the group id cannot name anyone else.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if end.err == nil && !end.reaped {
		end.reaped, end.err = true, wait4(pid, &end.status)
	}
	ended := treeEvent{Op: opEnded, Status: uint32(end.status), Terminated: terminated}
	if subreaper {
		if err := sweep(chld, time.Now().Add(sweepLimit)); err != nil {
			ended.Message = err.Error()
		}
	}
	if end.err != nil {
		emit(treeEvent{Op: opFailed, Message: fmt.Sprintf("the status of process %d is unavailable: %v", pid, end.err)})
		return
	}
	emit(ended)
}

// othersPoll is how often awaitOthers looks for the processes it waits for:
// a grandchild's exit signals its own parent, not the caller.
const othersPoll = 10 * time.Millisecond

// awaitOthers returns once no process of the terminated tool's group is left
// running and, with subreaper, no other descendant of the caller either, or
// when grace fires. The tool itself has exited and is left unreaped where
// awaitTool can do so, which keeps its group id from naming another group.
func awaitOthers(pgid int, subreaper bool, chld <-chan os.Signal, grace <-chan time.Time) {
	poll := time.NewTicker(othersPoll)
	defer poll.Stop()
	for lingering(pgid, subreaper) {
		select {
		case <-grace:
			return
		case <-chld: // awaitTool has returned: the signals are free to take
		case <-poll.C:
		}
	}
}

// wait4 reaps pid, retrying when interrupted.
func wait4(pid int, status *syscall.WaitStatus) error {
	for {
		_, err := syscall.Wait4(pid, status, 0, nil)
		if err != syscall.EINTR {
			return err
		}
	}
}
