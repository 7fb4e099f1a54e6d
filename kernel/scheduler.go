package kernel

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libos/libos/clock"
	"github.com/libos/libos/process"
	"github.com/libos/libos/quantum"
)

// scheduler feeds runnable processes to workers. It learns of state changes
// from commits (notify is called after each committed transition), so it
// never turns a wait into runnable by itself: only a timer it owns, whose
// wake is itself a committed transition guarded by the state generation.
type scheduler struct {
	k *Runtime

	mu     sync.Mutex
	queue  []int64
	queued map[int64]bool
	// queuePeak is the longest the queue has been since its arrays were
	// last made: past queueKeep, the drained queue gives them back.
	queuePeak int
	// inflight counts, by pid, the workers running the process or holding
	// it: a worker handed a stale queue entry of a process that another
	// worker runs (after a hand-off) holds it too, until its quantum skips.
	inflight map[int64]int
	// working counts the workers with a quantum to run: handed one by plan
	// or claimed by a commit (claimWorker), not yet finished (a hand-off
	// keeps the worker working).
	working int
	// pool is the running loop's workers; nil while no loop runs or once it
	// is stopping, when no worker can be claimed.
	pool    *workerPool
	requeue map[int64]bool // became runnable while in flight
	timers  timerHeap
	kick    chan struct{}
	running bool
	cancel  context.CancelFunc
	done    chan struct{}

	// claimedRuns counts the calls run on claimed workers, and
	// claimRunners the goroutines started to run them.
	claimedRuns, claimRunners atomic.Int64
}

type timer struct {
	at  time.Time
	pid int64
	gen uint64
}

type timerHeap []timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

func newScheduler(k *Runtime) *scheduler {
	return &scheduler{
		k:        k,
		queued:   map[int64]bool{},
		inflight: map[int64]int{},
		requeue:  map[int64]bool{},
		kick:     make(chan struct{}, 1),
	}
}

func (s *scheduler) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// enqueue makes pid eligible for a quantum.
func (s *scheduler) enqueue(pid int64) {
	s.mu.Lock()
	switch {
	case s.inflight[pid] > 0:
		s.requeue[pid] = true
	default:
		s.pushLocked(pid)
	}
	s.mu.Unlock()
	s.wake()
}

// share is what the scheduler knows for a worker whose commit, about to be
// made, leaves others processes runnable besides the one the worker would
// go on with (quantum.Share).
func (s *scheduler) share(ctx context.Context, others int) quantum.Share {
	s.mu.Lock()
	defer s.mu.Unlock()
	return quantum.Share{
		Waiting:     len(s.queue) + others,
		FreeWorkers: s.k.opts.Workers - s.working,
		Stopping:    !s.running || ctx.Err() != nil,
	}
}

// handOff records that the worker running from now runs to, which a commit
// of from's quantum woke and started: from is no longer in flight (queued
// if it became runnable meanwhile), to is.
func (s *scheduler) handOff(from, to int64) {
	s.mu.Lock()
	s.landedLocked(from)
	s.inflight[to]++
	s.mu.Unlock()
	s.wake()
}

// takeQueued takes the process first in the queue for a worker whose
// commit, being built, starts its quantum (Runtime.takeQueued): it counts
// as in flight, until the worker lands it, or putBack.
func (s *scheduler) takeQueued(ctx context.Context) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool == nil || ctx.Err() != nil || len(s.queue) == 0 {
		return 0, false
	}
	return s.popLocked(), true
}

// popLocked takes the process first in the queue, which is not empty, and
// counts it as in flight.
func (s *scheduler) popLocked() int64 {
	pid := s.queue[0]
	s.queue = s.queue[1:]
	delete(s.queued, pid)
	s.inflight[pid]++
	return pid
}

// putBack undoes takeQueued, for a commit that failed or did not start
// pid's quantum: pid is first in the queue again.
func (s *scheduler) putBack(pid int64) {
	s.mu.Lock()
	s.landedLocked(pid)
	if !s.queued[pid] {
		s.queued[pid] = true
		s.queue = append([]int64{pid}, s.queue...)
	}
	s.mu.Unlock()
	s.wake()
}

// landed records that a worker is done with pid without reporting it: it
// went on into another process (Runtime.takeQueued).
func (s *scheduler) landed(pid int64) {
	s.mu.Lock()
	s.landedLocked(pid)
	s.mu.Unlock()
	s.wake()
}

// claimWorker takes a free worker for pid, whose call a commit being built
// starts (Runtime.startWoken), when one is free beyond those the queued
// processes want. The commit then runs the call on it once durable
// (workerPool.runClaimed), or gives it back (release). It returns nil when
// no worker is free or no loop runs.
func (s *scheduler) claimWorker(ctx context.Context, pid int64) *workerPool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool == nil || ctx.Err() != nil || s.k.opts.Workers-s.working <= len(s.queue) {
		return nil
	}
	s.working++
	s.inflight[pid]++
	return s.pool
}

// release gives back a worker claimed for pid, by a commit that failed or
// whose start of pid had nothing to run: pid is queued if it became
// runnable meanwhile, as a worker's landing does.
func (s *scheduler) release(pid int64) {
	s.mu.Lock()
	s.working--
	s.landedLocked(pid)
	s.mu.Unlock()
	s.wake()
}

// notify is called after a committed transition of pid.
func (s *scheduler) notify(pid int64, state process.State, w *process.Wait, gen uint64) {
	switch {
	case state == process.Runnable:
		s.enqueue(pid)
	case state == process.Waiting && w != nil && !w.Until.IsZero():
		// A sleep, a provider backoff, or a child wait's deadline: each
		// ends at a time (a child's end may come first; the generation
		// fence then skips the timer).
		s.mu.Lock()
		heap.Push(&s.timers, timer{at: w.Until, pid: pid, gen: gen})
		s.mu.Unlock()
		s.wake()
	}
}

// load seeds the queue and timers from the records of live processes.
func (s *scheduler) load() error {
	return s.k.view(func(tx *txn) error {
		return scanLive(tx, func(e liveEntry) error {
			var w *process.Wait
			if e.Wait != "" {
				w = &process.Wait{Kind: e.Wait, Until: e.Until}
			}
			s.notify(e.PID, e.State, w, e.Gen)
			return nil
		})
	})
}

// workResult is a worker's end: pid is the process it ran last, which a
// hand-off may have made another than the one it was given.
type workResult struct {
	pid int64
	err error
}

// run is the scheduler loop of RunUntilIdle and RunReady. Each turn hands
// queued processes to free workers, then does one of: fire the timers that
// are due, drop the next timer if its wait is over, end when idle with
// nothing to wait for (or, untilTimers, with only timers to wait for), or
// wait for the next thing to happen.
func (s *scheduler) run(ctx context.Context, untilTimers bool) error {
	ctx, cancel, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer s.end(cancel)
	if err := s.load(); err != nil {
		return err
	}
	pool := s.startWorkers(ctx)
	defer pool.stop()
	for {
		if pool.fatal != nil {
			return pool.fatal
		}
		if err := ctx.Err(); err != nil {
			select {
			case <-s.k.closed:
				// Close stopped the run, not the caller's context.
				return fmt.Errorf("%w: %w", ErrClosed, err)
			default:
				return err
			}
		}
		var due []timer
		var next *timer
		due, next = s.plan(pool.size, pool.work)
		idle := s.idle()
		switch {
		case len(due) > 0:
			pool.fire(due)
		case idle && next != nil && !s.k.timerLive(*next):
			// The process left that wait (killed, woken otherwise): its
			// timer must not keep an otherwise idle runtime running.
			s.dropTimer(*next)
		case idle && (next == nil || untilTimers):
			return nil
		default:
			s.await(ctx, cancel, pool, idle, next)
		}
	}
}

// workerPool is one run's workers: each runs the quanta of the pids sent on
// work and answers on results. Only the loop's goroutine touches fatal.
type workerPool struct {
	s       *scheduler
	size    int
	work    chan int64
	results chan workResult
	// claims hands a claimed run to an idle goroutine of runClaims; stopped
	// ends them.
	claims  chan claimedRun
	stopped chan struct{}
	wg      sync.WaitGroup
	fatal   error // the error that ends the run
}

func (s *scheduler) startWorkers(ctx context.Context) *workerPool {
	n := s.k.opts.Workers
	// results holds one answer for each worker that is working, planned or
	// claimed, so a worker never waits to report.
	p := &workerPool{s: s, size: n, work: make(chan int64, n), results: make(chan workResult, n),
		claims: make(chan claimedRun), stopped: make(chan struct{})}
	for i := 0; i < n; i++ {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			withStackRoom(func() {
				for pid := range p.work {
					last, err := s.k.quanta(ctx, pid)
					p.results <- workResult{pid: last, err: err}
				}
			})
		}()
	}
	s.mu.Lock()
	s.pool = p
	s.mu.Unlock()
	return p
}

// runClaimed runs phase, the call a durable commit started, on the worker
// that commit claimed for it (scheduler.claimWorker), going on as a worker
// does. stop waits for it: the claim counts as working until its result is
// taken.
//
// A claimed run goes to a goroutine that ran one before and waits for the
// next, when there is one: a new goroutine would grow its stack, copying it
// each time it doubles, to the depth of a quantum on every claim.
func (p *workerPool) runClaimed(ctx context.Context, phase quantumPhase) {
	p.s.claimedRuns.Add(1)
	select {
	case p.claims <- claimedRun{ctx: ctx, phase: phase}:
		return
	default:
	}
	p.s.claimRunners.Add(1)
	p.wg.Add(1)
	go p.runClaims(claimedRun{ctx: ctx, phase: phase})
}

// claimedRun is a call a commit started on a worker it claimed.
type claimedRun struct {
	ctx   context.Context
	phase quantumPhase
}

// runClaims runs c, then the claimed runs handed to it, until the pool
// stops: stop closes stopped only once every claim's result is in, so no
// claim is handed over after that.
func (p *workerPool) runClaims(c claimedRun) {
	defer p.wg.Done()
	withStackRoom(func() {
		for {
			last, err := p.s.k.runOnWorker(c.ctx, c.phase, true)
			p.results <- workResult{pid: last, err: err}
			select {
			case c = <-p.claims:
			case <-p.stopped:
				return
			}
		}
	})
}

// withStackRoom runs f, a worker's loop, with stackRoom bytes of its stack
// in use below it. The collector halves a goroutine's stack when less than
// a quarter of it is in use, which a worker's is while it waits or makes a
// provider call; the next commit then grows it back, copying it, under the
// store's write lock (2% of a quantum's CPU and 6% of the lock, with a
// collection every few hundred quanta). With the room in use, the stack a
// quantum grew to stays.
//
//go:noinline
func withStackRoom(f func()) {
	var room [stackRoom]byte
	inUse(room[:])
	f()
}

// stackRoom is a quarter of the stack a quantum grows a worker's to.
const stackRoom = 16 << 10

// inUse keeps room from being optimized away.
//
//go:noinline
func inUse(room []byte) { room[0] = 1 }

// finish takes a quantum's end: its process is queued again if it became
// runnable meanwhile, and the first error ends the run.
func (p *workerPool) finish(res workResult) {
	s := p.s
	s.mu.Lock()
	s.working--
	s.landedLocked(res.pid)
	s.mu.Unlock()
	if res.err != nil && p.fatal == nil {
		p.fatal = res.err
	}
}

// landedLocked takes one worker's hold of pid out of flight, and once no
// worker holds it, queues it if it became runnable meanwhile. s.mu is held.
func (s *scheduler) landedLocked(pid int64) {
	if s.inflight[pid]--; s.inflight[pid] > 0 {
		return
	}
	delete(s.inflight, pid)
	if s.requeue[pid] {
		delete(s.requeue, pid)
		s.pushLocked(pid)
	}
}

// pushLocked queues pid unless it is queued already.
func (s *scheduler) pushLocked(pid int64) {
	if s.queued[pid] {
		return
	}
	s.queued[pid] = true
	s.queue = append(s.queue, pid)
	s.queuePeak = max(s.queuePeak, len(s.queue))
}

// queueKeep is the queue length whose arrays a drained queue keeps: a
// burst of spawns would otherwise leave an idle runtime holding the
// largest queue it ever had (a slice and a map never shrink).
const queueKeep = 1024

// fire wakes the processes whose timers are due.
func (p *workerPool) fire(due []timer) {
	for _, t := range due {
		if err := p.s.k.fireTimer(t.pid, t.gen); err != nil {
			p.fatal = err
		}
	}
}

// stop lets the quanta in flight end and the workers return.
func (p *workerPool) stop() {
	p.s.mu.Lock()
	p.s.pool = nil
	p.s.mu.Unlock()
	close(p.work)
	for p.s.busy() {
		p.finish(<-p.results)
	}
	close(p.stopped)
	p.wg.Wait()
}

// dropTimer removes t if it is still the next timer.
func (s *scheduler) dropTimer(t timer) {
	s.mu.Lock()
	if len(s.timers) > 0 && s.timers[0] == t {
		heap.Pop(&s.timers)
	}
	s.mu.Unlock()
}

// await blocks until a quantum ends, a process is queued, the next timer is
// due, or the run is stopped. An idle runtime on a skipping clock jumps to
// its next timer instead of waiting for it.
func (s *scheduler) await(ctx context.Context, cancel context.CancelFunc, pool *workerPool, idle bool, next *timer) {
	var timerCh <-chan struct{}
	if next != nil {
		if idle {
			if sk, ok := s.k.clock.(clock.Skipper); ok {
				sk.SkipTo(next.at)
			}
		}
		timerCh = s.k.clock.At(next.at)
	}
	select {
	case res := <-pool.results:
		pool.finish(res)
	case <-s.kick:
	case <-timerCh:
	case <-ctx.Done():
	case <-s.k.closed:
		cancel()
	}
}

// stopAndWait cancels a running loop and waits for it to return.
func (s *scheduler) stopAndWait() {
	s.mu.Lock()
	running, cancel, done := s.running, s.cancel, s.done
	s.mu.Unlock()
	if running {
		cancel()
		<-done
	}
}

// timerLive reports whether t's process still waits in the wait t was armed
// for.
func (k *Runtime) timerLive(t timer) bool {
	live := false
	err := k.view(func(tx *txn) error {
		r, err := loadProc(tx, t.pid)
		if err != nil {
			return err
		}
		live = r.State == process.Waiting && r.Gen == t.gen && r.Wait != nil && !r.Wait.Until.IsZero()
		return nil
	})
	return err != nil || live
}

// plan hands queued processes to free workers and takes the timers that
// are due; it returns the due timers and the next timer still to come, if
// any.
func (s *scheduler) plan(workers int, work chan<- int64) ([]timer, *timer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.working < workers && len(s.queue) > 0 {
		s.working++
		work <- s.popLocked()
	}
	if len(s.queue) == 0 && s.queuePeak > queueKeep {
		s.queue, s.queued, s.queuePeak = nil, map[int64]bool{}, 0
	}
	now := s.k.clock.Now()
	var due []timer
	for len(s.timers) > 0 && !s.timers[0].at.After(now) {
		due = append(due, heap.Pop(&s.timers).(timer))
	}
	var next *timer
	if len(s.timers) > 0 {
		t := s.timers[0]
		next = &t
	}
	return due, next
}

// idle reports whether no quantum runs and none is queued.
func (s *scheduler) idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.working == 0 && len(s.queue) == 0
}

// othersWorking reports whether a worker besides the caller's has a
// quantum to run.
func (s *scheduler) othersWorking() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.working > 1
}

// busy reports whether a worker has a quantum to run.
func (s *scheduler) busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.working > 0
}

// begin marks the loop running, with a context that stop cancels; a second
// loop or a closed runtime is refused.
func (s *scheduler) begin(ctx context.Context) (context.Context, context.CancelFunc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil, nil, ErrRunning
	}
	select {
	case <-s.k.closed:
		return nil, nil, ErrClosed
	default:
	}
	ctx, cancel := context.WithCancel(ctx)
	s.running, s.cancel, s.done = true, cancel, make(chan struct{})
	s.queue, s.queued, s.timers = nil, map[int64]bool{}, nil
	return ctx, cancel, nil
}

// end marks the loop stopped and releases stopAndWait.
func (s *scheduler) end(cancel context.CancelFunc) {
	cancel()
	s.mu.Lock()
	s.running = false
	close(s.done)
	s.mu.Unlock()
}
