package jsrunner

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrPoolClosed is returned by Close when the pool was already closed, and
// reported (as internal_failure) by calls made after Close.
var ErrPoolClosed = errors.New("jsrunner: pool is closed")

// ErrWorkerStart is wrapped by NewPool when a worker process cannot be
// started or does not complete the handshake (typically because the
// executable does not call MaybeRunWorker first).
var ErrWorkerStart = errors.New("jsrunner: worker did not start")

// PoolOptions configures a Pool. The zero value is usable.
type PoolOptions struct {
	// Workers is the number of worker processes, each running one call at a
	// time. 0 means the number of CPUs, at most 4.
	Workers int
	// Executable is the program started in worker mode; it must call
	// MaybeRunWorker first. "" means the running executable (os.Executable).
	Executable string
	// MemoryLimit is the heap a single call may use before it ends with
	// resource_limit. 0 means 64 MiB, runx's worker heap limit.
	MemoryLimit int64
	// AddressSpace is the RLIMIT_AS headroom a worker gets above its mapping
	// at start; it stops a single huge allocation that the heap watchdog
	// would see too late, by ending the worker. 0 means 2 × MemoryLimit; a
	// negative value disables it.
	AddressSpace int64
	// MaxCallDepth bounds JavaScript call depth. 0 means 10,000.
	MaxCallDepth int
	// SnapshotDir holds the private copies of paged artifacts while a run
	// reads them. "" means os.TempDir().
	SnapshotDir string
	// StartTimeout bounds a worker's start and handshake. 0 means 15 s.
	StartTimeout time.Duration
}

const (
	defaultMemoryLimit  = 64 << 20
	defaultMaxCallDepth = 10000
	defaultStartTimeout = 15 * time.Second
	// maxGoStack bounds the Go stack a worker's engine may grow, so deep
	// native recursion ends the worker quickly instead of eating memory.
	maxGoStack = 256 << 20
	// killGrace is how long past its wall limit a worker may take to answer
	// before the host kills it; the worker's own interrupt normally answers
	// well within it.
	killGrace = time.Second
	// stderrKeep bounds the head and the tail the host keeps of a worker's
	// stderr, to explain a crash.
	stderrKeep = 4 << 10
)

func (o PoolOptions) withDefaults() (PoolOptions, error) {
	if o.Workers < 0 {
		return o, fmt.Errorf("PoolOptions.Workers: %d must not be negative", o.Workers)
	}
	if o.Workers == 0 {
		o.Workers = min(max(runtime.NumCPU(), 1), 4)
	}
	if o.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("PoolOptions.Executable: find the running executable: %w", err)
		}
		o.Executable = exe
	}
	if o.MemoryLimit < 0 {
		return o, fmt.Errorf("PoolOptions.MemoryLimit: %d must not be negative", o.MemoryLimit)
	}
	if o.MemoryLimit == 0 {
		o.MemoryLimit = defaultMemoryLimit
	}
	if o.AddressSpace == 0 {
		o.AddressSpace = 2 * o.MemoryLimit
	}
	if o.MaxCallDepth < 0 {
		return o, fmt.Errorf("PoolOptions.MaxCallDepth: %d must not be negative", o.MaxCallDepth)
	}
	if o.MaxCallDepth == 0 {
		o.MaxCallDepth = defaultMaxCallDepth
	}
	if o.SnapshotDir == "" {
		o.SnapshotDir = os.TempDir()
	}
	if o.StartTimeout < 0 {
		return o, fmt.Errorf("PoolOptions.StartTimeout: %s must not be negative", o.StartTimeout)
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = defaultStartTimeout
	}
	return o, nil
}

// Pool runs javascript exports in a fixed set of worker processes.
//
// Isolation: each worker is the executable re-run in worker mode with an
// empty environment, no core dumps, no file writes and an address-space
// limit; it runs one call at a time in a fresh engine instance with a wall
// interrupt, a call-depth limit and a heap watchdog. A module that defeats
// those (a native built-in that loops or allocates without returning to the
// interpreter) ends its worker, never the host: the host kills a worker that
// overstays its wall limit, reports the call as resource_limit, and starts a
// replacement. In-process isolation could not give that guarantee, because
// a goroutine cannot be stopped and one huge allocation can exhaust the
// host.
//
// A Pool is safe for concurrent use; calls beyond Workers wait for a free
// worker. Close stops every worker.
type Pool struct {
	opts     PoolOptions
	slots    chan *slot
	bundles  *bundleCache
	instance [16]byte // keys artifact_ref, so it differs between pools

	closed    atomic.Bool
	done      chan struct{}
	closeOnce sync.Once
	spawners  sync.WaitGroup

	mu    sync.Mutex
	procs map[*workerProc]struct{}

	// callSent, when set (by tests), is called with the worker's process id
	// once a request has been written to it.
	callSent func(pid int)
}

// slot is one place in the pool; it holds a live worker or nil when the
// worker must be (re)started before use.
type slot struct {
	proc *workerProc
}

// NewPool starts opts.Workers workers and waits for their handshake.
func NewPool(opts PoolOptions) (*Pool, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Pool{
		opts:    o,
		slots:   make(chan *slot, o.Workers),
		bundles: newBundleCache(),
		done:    make(chan struct{}),
		procs:   make(map[*workerProc]struct{}),
	}
	if _, err := rand.Read(p.instance[:]); err != nil {
		return nil, fmt.Errorf("jsrunner: pool instance key: %w", err)
	}
	started := make([]*slot, o.Workers)
	errs := make([]error, o.Workers)
	var wg sync.WaitGroup
	for i := range started {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wp, err := p.startWorker()
			started[i], errs[i] = &slot{proc: wp}, err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range started {
			if s.proc != nil {
				s.proc.stop()
			}
		}
		return nil, err
	}
	for _, s := range started {
		p.slots <- s
	}
	return p, nil
}

// Close stops every worker. Calls in flight end with internal_failure.
// A second Close returns ErrPoolClosed.
func (p *Pool) Close() error {
	err := ErrPoolClosed
	p.closeOnce.Do(func() {
		err = nil
		p.mu.Lock()
		p.closed.Store(true)
		procs := make([]*workerProc, 0, len(p.procs))
		for wp := range p.procs {
			procs = append(procs, wp)
		}
		p.mu.Unlock()
		close(p.done)
		// Idle workers exit when their stdin closes; busy ones are killed
		// once the shared grace period is over.
		for _, wp := range procs {
			_ = wp.stdin.Close()
		}
		grace := time.NewTimer(2 * time.Second)
		defer grace.Stop()
		for _, wp := range procs {
			select {
			case <-wp.exited:
			case <-grace.C:
				grace.Reset(0)
				wp.kill("pool closed")
				<-wp.exited
			}
			_ = wp.outF.Close()
		}
		p.spawners.Wait()
		p.bundles.close()
	})
	return err
}

// workerProc is the host's handle on one worker process. Only the holder of
// its slot reads and writes its pipes.
type workerProc struct {
	cmd    *exec.Cmd
	stdin  *os.File
	stdout *bufio.Reader
	outF   *os.File
	stderr *stderrLog
	// compiled holds the bundle hashes this worker has been sent.
	compiled map[string]struct{}

	exited  chan struct{}
	waitErr error

	killOnce   sync.Once
	killReason atomic.Pointer[string]
	reqBuf     []byte

	// overstay kills the worker when a call outlives its wall limit by
	// killGrace; one timer serves every call. killAt (monoNow's clock, 0
	// between calls) and wall describe the call it is armed for, so a
	// firing meant for an earlier call is ignored. It is never stopped,
	// only moved later by the next call: a stop followed by a re-arm would
	// make the Go runtime wake a thread sleeping in its poller every call.
	overstay *time.Timer
	killAt   atomic.Int64
	wall     atomic.Int64
}

// monoBase anchors monoNow, a monotonic clock in nanoseconds that wall
// clock changes cannot move.
var monoBase = time.Now()

func monoNow() int64 { return int64(time.Since(monoBase)) }

// armOverstay starts the wall-limit kill timer for a call of timeout.
func (wp *workerProc) armOverstay(timeout time.Duration) {
	wp.wall.Store(int64(timeout))
	wp.killAt.Store(monoNow() + int64(timeout+killGrace))
	wp.overstay.Reset(timeout + killGrace)
}

func (wp *workerProc) disarmOverstay() {
	wp.killAt.Store(0)
}

func (wp *workerProc) overstayed() {
	at := wp.killAt.Load()
	if at == 0 || monoNow() < at {
		return
	}
	wp.kill(fmt.Sprintf("wall time limit of %s exceeded; the worker did not stop and was killed", time.Duration(wp.wall.Load())))
}

// kill ends the worker, recording why for the report of the call in flight.
func (wp *workerProc) kill(reason string) {
	wp.killOnce.Do(func() {
		wp.killReason.Store(&reason)
		_ = wp.cmd.Process.Kill()
	})
}

// stop closes the worker's stdin so it exits, and kills it if it does not.
func (wp *workerProc) stop() {
	_ = wp.stdin.Close()
	select {
	case <-wp.exited:
	case <-time.After(2 * time.Second):
		wp.kill("pool closed")
		<-wp.exited
	}
	_ = wp.outF.Close()
}

func (wp *workerProc) alive() bool {
	select {
	case <-wp.exited:
		return false
	default:
		return wp.killReason.Load() == nil
	}
}

// stderrLog keeps the first and the last bytes a worker writes to stderr:
// a Go runtime crash states its cause first and dumps goroutines after.
type stderrLog struct {
	mu   sync.Mutex
	head []byte
	tail []byte
}

func (t *stderrLog) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(b)
	if room := stderrKeep - len(t.head); room > 0 {
		take := min(room, len(b))
		t.head = append(t.head, b[:take]...)
		b = b[take:]
	}
	t.tail = append(t.tail, b...)
	if len(t.tail) > stderrKeep {
		t.tail = append(t.tail[:0], t.tail[len(t.tail)-stderrKeep:]...)
	}
	return n, nil
}

func (t *stderrLog) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.tail) == 0 {
		return string(t.head)
	}
	return string(t.head) + "\n…\n" + string(t.tail)
}

func (p *Pool) startWorker() (*workerProc, error) {
	// The worker's stdin, stdout and stderr: a read end and a write end each.
	var ends [3][2]*os.File
	closeAll := func() {
		for _, pair := range ends {
			for _, f := range pair {
				if f != nil {
					f.Close()
				}
			}
		}
	}
	for i, name := range []string{"stdin", "stdout", "stderr"} {
		r, w, err := blockingPipe()
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("%w: %s pipe: %w", ErrWorkerStart, name, err)
		}
		ends[i] = [2]*os.File{r, w}
	}
	inR, inW, outR, outW, errR, errW := ends[0][0], ends[0][1], ends[1][0], ends[1][1], ends[2][0], ends[2][1]
	cmd := exec.Command(p.opts.Executable, workerArgs...)
	// Empty, not nil: nil would hand the worker this process's environment.
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.Stdin = inR
	cmd.Stdout = outW
	// A file, not a writer: os/exec would make the pipe itself, in the
	// poller (see blockingPipe).
	cmd.Stderr = errW
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		closeAll()
		return nil, fmt.Errorf("%w: start %s: %w", ErrWorkerStart, p.opts.Executable, err)
	}
	inR.Close()
	outW.Close()
	errW.Close()
	tail := &stderrLog{}
	stderrDone := make(chan struct{})
	go func() {
		// The worker's exit closes its end, and nothing else holds it.
		_, _ = io.Copy(tail, errR)
		errR.Close()
		close(stderrDone)
	}()
	// A blocking read wakes straight from the kernel when the answer
	// arrives, without the poller's hand-off. It cannot hang: every path
	// that stops waiting first ends the worker, which closes the pipe.
	wp := &workerProc{
		cmd:      cmd,
		stdin:    inW,
		outF:     outR,
		stdout:   bufio.NewReaderSize(outR, 64<<10),
		stderr:   tail,
		compiled: make(map[string]struct{}),
		exited:   make(chan struct{}),
	}
	wp.overstay = time.AfterFunc(time.Hour, wp.overstayed)
	wp.overstay.Stop()
	go func() {
		wp.waitErr = cmd.Wait()
		// Whoever waits for the exit reads what the worker said last.
		<-stderrDone
		close(wp.exited)
	}()
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		wp.kill("pool closed")
		<-wp.exited
		inW.Close()
		outR.Close()
		return nil, ErrPoolClosed
	}
	p.procs[wp] = struct{}{}
	p.mu.Unlock()

	fail := func(format string, args ...any) (*workerProc, error) {
		wp.kill("handshake failed")
		<-wp.exited
		outR.Close()
		inW.Close()
		p.forget(wp)
		msg := fmt.Sprintf(format, args...)
		if s := strings.TrimSpace(wp.stderr.String()); s != "" {
			msg += "; worker stderr: " + lastLines(s, 5)
		}
		return nil, fmt.Errorf("%w: %s (does %s call jsrunner.MaybeRunWorker first?)", ErrWorkerStart, msg, p.opts.Executable)
	}
	frame, err := appendFrame(nil, configMsg{
		Op:           "config",
		HeapLimit:    p.opts.MemoryLimit,
		AddressSpace: max(p.opts.AddressSpace, 0),
		MaxGoStack:   maxGoStack,
	})
	if err != nil {
		return fail("encode config: %v", err)
	}
	if _, err := inW.Write(frame); err != nil {
		return fail("send config: %v", err)
	}
	timer := time.AfterFunc(p.opts.StartTimeout, func() { wp.kill("handshake timed out") })
	var ready readyMsg
	_, err = readFrame(wp.stdout, &ready)
	timer.Stop()
	switch {
	case err != nil:
		if r := wp.killReason.Load(); r != nil {
			return fail("no handshake within %s", p.opts.StartTimeout)
		}
		return fail("read handshake: %v", err)
	case ready.Op != "ready":
		return fail("worker refused its configuration: %s", ready.Message)
	}
	return wp, nil
}

func (p *Pool) forget(wp *workerProc) {
	p.mu.Lock()
	delete(p.procs, wp)
	p.mu.Unlock()
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// acquire takes a slot with a live worker, starting one if needed.
func (p *Pool) acquire(ctx context.Context) (*slot, *Failure) {
	if p.closed.Load() {
		return nil, failf(CodeInternalFailure, "%v", ErrPoolClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, contextFailure(err, "waiting for a worker")
	}
	var s *slot
	select {
	case s = <-p.slots:
	case <-p.done:
		return nil, failf(CodeInternalFailure, "%v", ErrPoolClosed)
	case <-ctx.Done():
		return nil, contextFailure(ctx.Err(), "waiting for a worker")
	}
	if s.proc != nil && !s.proc.alive() {
		p.retire(s.proc)
		s.proc = nil
	}
	if s.proc == nil {
		wp, err := p.startWorker()
		if err != nil {
			p.slots <- s
			return nil, failf(CodeInternalFailure, "start a worker: %v", err)
		}
		s.proc = wp
	}
	return s, nil
}

// release hands a slot back. A slot whose worker died or was killed is
// refilled in the background, so the next call does not pay for the start.
func (p *Pool) release(s *slot) {
	if s.proc != nil && s.proc.alive() {
		p.slots <- s
		return
	}
	old := s.proc
	s.proc = nil
	p.mu.Lock()
	if p.closed.Load() {
		p.mu.Unlock()
		if old != nil {
			p.retire(old)
		}
		p.slots <- s
		return
	}
	// Added under the lock that Close takes before it waits, so Close
	// either sees this refill or prevents it.
	p.spawners.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.spawners.Done()
		if old != nil {
			p.retire(old)
		}
		if wp, err := p.startWorker(); err == nil {
			s.proc = wp
		}
		p.slots <- s
	}()
}

// retire waits for a dead or killed worker and forgets it.
func (p *Pool) retire(wp *workerProc) {
	wp.kill("retired")
	<-wp.exited
	_ = wp.stdin.Close()
	_ = wp.outF.Close()
	p.forget(wp)
}

func contextFailure(err error, during string) *Failure {
	if errors.Is(err, context.DeadlineExceeded) {
		return failf(CodeResourceLimit, "the caller's deadline passed while %s", during)
	}
	return failf(CodeExecutionFailed, "cancelled by the caller while %s: %v", during, err)
}

// call is one export invocation as the host sends it.
type call struct {
	bundle  *bundle
	export  string
	module  string
	env     map[string]string
	timeout time.Duration
	inputs  []byte
	paged   bool
}

// callResult is a worker's answer to one call.
type callResult struct {
	fail       *Failure
	control    []byte // paged calls: the runx_page value, nil when absent
	hasControl bool
	otherKeys  int
	notObject  bool
	output     []byte
}

// invoke runs one call on a worker from the pool.
func (p *Pool) invoke(ctx context.Context, c *call) callResult {
	s, f := p.acquire(ctx)
	if f != nil {
		return callResult{fail: f}
	}
	defer p.release(s)
	res, retry := p.invokeOn(ctx, s.proc, c, false)
	if retry {
		// The bundle was evicted from the worker's cache; send it again.
		res, _ = p.invokeOn(ctx, s.proc, c, true)
	}
	return res
}

func (p *Pool) invokeOn(ctx context.Context, wp *workerProc, c *call, forceCode bool) (callResult, bool) {
	_, known := wp.compiled[c.bundle.hash]
	var code []byte
	if forceCode || !known {
		code = c.bundle.code
	}
	meta := runMsg{
		Op:         "run",
		Bundle:     c.bundle.hash,
		CodeLen:    len(code),
		Export:     c.export,
		Env:        c.env,
		TimeoutNS:  int64(c.timeout),
		MaxDepth:   p.opts.MaxCallDepth,
		OutputMax:  MaxOutputBytes,
		Paged:      c.paged,
		ModuleName: c.module,
	}
	frame, err := appendFrame(wp.reqBuf[:0], &meta, code, c.inputs)
	if err != nil {
		return callResult{fail: failf(CodeInternalFailure, "encode request: %v", err)}, false
	}
	if cap(frame) <= 1<<20 {
		wp.reqBuf = frame
	}
	wp.compiled[c.bundle.hash] = struct{}{}

	wp.armOverstay(c.timeout)
	stopCtx := func() bool { return false }
	if ctx.Done() != nil {
		// A context that can never be cancelled needs no watch.
		stopCtx = context.AfterFunc(ctx, func() { wp.kill("cancelled: " + context.Cause(ctx).Error()) })
	}
	var res resultMsg
	body, err := func() ([]byte, error) {
		if _, err := wp.stdin.Write(frame); err != nil {
			return nil, err
		}
		if p.callSent != nil {
			p.callSent(wp.cmd.Process.Pid)
		}
		return readFrame(wp.stdout, &res)
	}()
	wp.disarmOverstay()
	stopCtx()
	if err != nil {
		return callResult{fail: p.workerLost(ctx, wp, err)}, false
	}
	switch res.Status {
	case statusNeedBundle:
		if forceCode {
			return callResult{fail: failf(CodeInternalFailure, "worker asked again for a bundle it was just sent")}, false
		}
		return callResult{}, true
	case statusOK:
		if res.ControlLen < 0 || res.ControlLen > len(body) {
			return callResult{fail: failf(CodeInternalFailure, "worker sent a malformed result")}, false
		}
		out := callResult{hasControl: res.HasControl, otherKeys: res.OtherKeys, notObject: res.NotObject}
		if res.HasControl {
			out.control = body[:res.ControlLen]
		}
		out.output = body[res.ControlLen:]
		return out, false
	case statusFailed:
		return callResult{fail: &Failure{Code: res.Code, Message: res.Message}}, false
	default:
		wp.kill("protocol error")
		return callResult{fail: failf(CodeInternalFailure, "worker protocol error: %s", res.Message)}, false
	}
}

// workerLost explains a worker that stopped answering mid-call.
func (p *Pool) workerLost(ctx context.Context, wp *workerProc, ioErr error) *Failure {
	wp.kill("lost")
	<-wp.exited
	if r := wp.killReason.Load(); r != nil && *r != "lost" {
		switch {
		case strings.HasPrefix(*r, "wall time"):
			return failf(CodeResourceLimit, "%s", *r)
		case strings.HasPrefix(*r, "cancelled"):
			return contextFailure(ctx.Err(), "the module ran")
		case p.closed.Load():
			return failf(CodeInternalFailure, "%v", ErrPoolClosed)
		}
	}
	if p.closed.Load() {
		return failf(CodeInternalFailure, "%v", ErrPoolClosed)
	}
	stderr := wp.stderr.String()
	low := strings.ToLower(stderr)
	switch {
	case strings.Contains(low, "out of memory") || strings.Contains(low, "cannot allocate memory") ||
		strings.Contains(low, "failed to allocate") || strings.Contains(low, "address space"):
		return failf(CodeResourceLimit, "memory limit exceeded: the worker ran out of its %d MiB address-space headroom and was replaced", p.opts.AddressSpace>>20)
	case strings.Contains(low, "stack exceeds") || strings.Contains(low, "stack overflow"):
		return failf(CodeResourceLimit, "native stack limit of %d MiB exceeded (runaway recursion); the worker was replaced", maxGoStack>>20)
	}
	msg := fmt.Sprintf("the worker exited during the call (%v; %v)", ioErr, wp.waitErr)
	if s := strings.TrimSpace(stderr); s != "" {
		msg += "; stderr: " + truncateMessage(lastLines(s, 8))
	}
	return &Failure{Code: CodeInternalFailure, Message: msg}
}
