package clitool

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// supervisorSlack is how long, beyond the grace period and the sweep, a
// supervisor asked to terminate its tool may take to report before it is
// killed.
const supervisorSlack = 5 * time.Second

// process supervises one call's process tree, through a supervisor process
// or from this process (see treePlace and runTree).
type process struct {
	timeout time.Duration
	stdinW  *os.File
	stdoutR *os.File
	stderrR *os.File
	stdout  *capture
	stderr  *capture
	drains  sync.WaitGroup
	// stdoutIncomplete is set when the drain had to stop before EOF.
	stdoutIncomplete bool

	// events carries the tree's events and is closed when its supervision
	// is over (the supervisor exited, or runTree returned).
	events <-chan treeEvent
	// stop asks for the tool's termination; it may be called again.
	stop func()
	// kill ends an unresponsive supervisor, and with it (by its parent-death
	// signal) the tool; nil when there is no supervisor process.
	kill func()
	// finish reaps the supervisor once events is closed; nil without one.
	finish func() error

	// What supervise observed.
	started      bool
	end          *treeEvent
	spawnFailure string
	failure      string
}

// start creates the pipes and starts the tree where place says.
func (p *process) start(path string, argv, env []string, dir string, place treePlace) error {
	if place == treeInProcess {
		// The process-wide subreaper reaps and sweeps every child of this
		// process, so two in-process trees would take each other's.
		inProcessTrees.Lock()
		if err := becomeSubreaperOnce(); err != nil {
			inProcessTrees.Unlock()
			return fmt.Errorf("%w: %v", ErrInternal, err)
		}
	}
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
		if place == treeInProcess {
			inProcessTrees.Unlock()
		}
	}
	pipe := func() (*os.File, *os.File, error) {
		r, w, err := os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	stdinR, stdinW, err := pipe()
	if err != nil {
		closeAll()
		return fmt.Errorf("%w: creating pipes: %v", ErrInternal, err)
	}
	stdoutR, stdoutW, err := pipe()
	if err != nil {
		closeAll()
		return fmt.Errorf("%w: creating pipes: %v", ErrInternal, err)
	}
	stderrR, stderrW, err := pipe()
	if err != nil {
		closeAll()
		return fmt.Errorf("%w: creating pipes: %v", ErrInternal, err)
	}
	req := treeRequest{Path: []byte(path), Argv: toBytes(argv), Env: toBytes(env), Dir: []byte(dir), Grace: int64(TerminateGrace)}
	stdio := []*os.File{stdinR, stdoutW, stderrW}
	// The child holds its own copies; the parent keeps only its ends so that
	// EOF on stdout/stderr means every writer is gone.
	closeChildEnds := func() {
		for _, f := range stdio {
			f.Close()
		}
	}
	switch place {
	case treeSupervisor:
		err := p.startSupervisor(req, stdio)
		closeChildEnds()
		if err != nil {
			stdinW.Close()
			stdoutR.Close()
			stderrR.Close()
			return err
		}
	case treeInProcess:
		p.startLocal(req, stdio, true, closeChildEnds, inProcessTrees.Unlock)
	default:
		p.startLocal(req, stdio, false, closeChildEnds, func() {})
	}
	p.stdinW, p.stdoutR, p.stderrR = stdinW, stdoutR, stderrR
	p.stdout, p.stderr = newCapture(MaxRetainedBytes), newCapture(MaxRetainedBytes)
	p.drains.Add(2)
	go p.drain(p.stdoutR, p.stdout, &p.stdoutIncomplete)
	go p.drain(p.stderrR, p.stderr, nil)
	return nil
}

// startLocal runs the tree from a goroutine of this process, as the
// supervisor process runs it: with subreaper set this process is a child
// subreaper and the whole tree is tracked, otherwise only the tool's process
// group is. done runs once the tree's supervision is over.
func (p *process) startLocal(req treeRequest, stdio []*os.File, subreaper bool, spawned, done func()) {
	events := make(chan treeEvent, 4) // runTree emits at most two
	stop := make(chan struct{})
	var once sync.Once
	p.events = events
	p.stop = func() { once.Do(func() { close(stop) }) }
	go func() {
		defer close(events)
		defer done()
		runTree(req, stdio, subreaper, stop, func(e treeEvent) { events <- e }, spawned)
	}()
}

// startSupervisor starts this program again as the call's supervisor (see
// MaybeRunSupervisor) with stdio as its standard streams, which it hands to
// the tool.
func (p *process) startSupervisor(req treeRequest, stdio []*os.File) error {
	exe, err := supervisorExecutable()
	if err != nil {
		return fmt.Errorf("%w: finding the program to supervise the call: %v", ErrInternal, err)
	}
	line, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%w: encoding the supervisor request: %v", ErrInternal, err)
	}
	line = append(line, '\n')
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("%w: creating the supervisor request pipe: %v", ErrInternal, err)
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return fmt.Errorf("%w: creating the supervisor event pipe: %v", ErrInternal, err)
	}
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       []string{exe, supervisorGuardArg},
		Env:        supervisorEnv(),
		Dir:        "/",
		Stdin:      stdio[0],
		Stdout:     stdio[1],
		Stderr:     stdio[2],
		ExtraFiles: []*os.File{reqR, evW}, // supervisorRequestFD, supervisorEventsFD
		// Its own group keeps a terminal's signals for the host away from
		// it; the host ends calls through their context.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	err = cmd.Start()
	reqR.Close()
	evW.Close()
	if err != nil {
		reqW.Close()
		evR.Close()
		return fmt.Errorf("%w: starting the cli-tool supervisor %s: %v", ErrInternal, exe, err)
	}

	events := make(chan treeEvent, 4)
	p.events = events
	go func() {
		defer close(events)
		defer evR.Close()
		sc := bufio.NewScanner(evR)
		for sc.Scan() {
			var e treeEvent
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				e = treeEvent{Op: opFailed, Message: fmt.Sprintf("the cli-tool supervisor sent an undecodable event: %v", err)}
			}
			events <- e
		}
	}()

	stop := make(chan struct{})
	var once sync.Once
	p.stop = func() { once.Do(func() { close(stop) }) }
	go func() {
		// The request, then EOF, which asks the supervisor to terminate the
		// tool (after the tool's end it is ignored).
		_, _ = reqW.Write(line)
		<-stop
		reqW.Close()
	}()
	p.kill = func() { _ = cmd.Process.Kill() }
	p.finish = func() error {
		p.stop()
		return cmd.Wait()
	}
	return nil
}

// supervisorEnv is a supervisor's whole environment: the tool's own travels
// in the request.
func supervisorEnv() []string {
	// A race-enabled build sleeps a second before it exits, and every call
	// would wait for it; other builds ignore GORACE.
	race := "atexit_sleep_ms=0"
	if host := os.Getenv("GORACE"); host != "" {
		race = host + " " + race
	}
	return []string{SupervisorEnv + "=1", "GORACE=" + race}
}

func (p *process) drain(r *os.File, c *capture, incomplete *bool) {
	defer p.drains.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		c.Write(buf[:n])
		if err != nil {
			if incomplete != nil && !errors.Is(err, io.EOF) {
				*incomplete = true
			}
			return
		}
	}
}

// supervise feeds stdin, enforces the timeout and the context, and returns
// once the tree's supervision is over (the tool reaped, its group and, under
// a supervisor, every other descendant gone) and the output is drained. It
// returns ErrTimeout or ErrAborted when the tool was terminated for that
// reason, nil otherwise; what it observed is left in p.
func (p *process) supervise(ctx context.Context, stdin []byte) error {
	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		if len(stdin) > 0 {
			// A process that exits without reading makes this fail with
			// EPIPE; not reading stdin is the process's choice.
			_, _ = p.stdinW.Write(stdin)
		}
		p.stdinW.Close()
	}()

	timer := time.NewTimer(p.timeout)
	defer timer.Stop()
	done := ctx.Done()
	var requested error
	var backstop <-chan time.Time
	terminate := func(why error) {
		if requested != nil {
			return
		}
		requested = why
		p.stop()
		if p.kill != nil {
			backstop = time.After(TerminateGrace + sweepLimit + supervisorSlack)
		}
	}
	for events := p.events; events != nil; {
		select {
		case e, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			switch e.Op {
			case opStarted:
				p.started = true
			case opSpawnFailed:
				p.spawnFailure = e.Message
			case opEnded:
				p.end = &e
			default:
				p.failure = e.Message
			}
		case <-timer.C:
			terminate(ErrTimeout)
		case <-done:
			done = nil
			terminate(ErrAborted)
		case <-backstop:
			backstop = nil
			p.kill()
			p.failure = fmt.Sprintf("the cli-tool supervisor did not end the call within %s of being asked to and was killed", TerminateGrace+sweepLimit+supervisorSlack)
		}
	}
	if p.finish != nil {
		if err := p.finish(); err != nil && p.end == nil && p.failure == "" && p.spawnFailure == "" {
			p.failure = fmt.Sprintf("the cli-tool supervisor ended without a result: %v", err)
		}
	}
	if p.end == nil && p.failure == "" && p.spawnFailure == "" {
		p.failure = "the cli-tool supervisor ended without a result"
	}

	p.stop()
	p.stdinW.Close()
	<-stdinDone
	deadline := time.Now().Add(drainGrace)
	_ = p.stdoutR.SetReadDeadline(deadline)
	_ = p.stderrR.SetReadDeadline(deadline)
	p.drains.Wait()
	p.stdoutR.Close()
	p.stderrR.Close()
	if p.end != nil && p.end.Terminated {
		return requested
	}
	return nil
}
