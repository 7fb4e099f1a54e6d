package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libos/libos/kernel"
)

// Notifier tells the server's scheduler loop and event streams that the
// runtime committed an event. Wire OnEvent into kernel.Options.OnEvent (it
// costs one atomic load while nobody waits).
type Notifier struct {
	armed atomic.Bool
	mu    sync.Mutex
	ch    chan struct{}
}

// NewNotifier returns a Notifier.
func NewNotifier() *Notifier { return &Notifier{ch: make(chan struct{})} }

// OnEvent is a kernel.Options.OnEvent: it wakes every waiter.
func (n *Notifier) OnEvent(kernel.Event) {
	if !n.armed.Load() {
		return
	}
	n.mu.Lock()
	if n.armed.Load() {
		close(n.ch)
		n.ch = make(chan struct{})
		n.armed.Store(false)
	}
	n.mu.Unlock()
}

// c is closed at the next event.
func (n *Notifier) c() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.armed.Store(true)
	return n.ch
}

// RunScheduler runs the runtime's scheduler until ctx ends: whenever the
// runtime is idle it waits for a change (a process started, a message, a
// decision, a signal; through the API, the control socket or the Notifier)
// and runs again. It returns nil when ctx ends, or the error that stopped
// the scheduler.
func (s *Server) RunScheduler(ctx context.Context) error {
	poll := time.NewTicker(s.opts.PollInterval)
	defer poll.Stop()
	for {
		kicked, noted := s.kicked(), s.opts.Notifier.c()
		err := s.rt.RunUntilIdle(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		seen := s.rt.Store().LastEventSeq()
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-kicked:
				break wait
			case <-noted:
				break wait
			case <-poll.C:
				if s.rt.Store().LastEventSeq() != seen {
					break wait
				}
			}
		}
	}
}

// hubCapacity is how many recent log entries the shared reader keeps for
// the streams; a stream further behind reads the log itself.
const hubCapacity = 8192

// hubResetGap is how far behind the log the shared reader may be for a
// request to wait while it catches up; further behind, it catches up in the
// background and requests read the runtime directly meanwhile.
const hubResetGap = hubCapacity

// Bounds of the per-process index of recent tool call arguments.
const (
	indexCalls    = 2 * kernel.RecentCalls
	indexArgBytes = 16 << 10
)

// hubEntry is one log entry, encoded once for every stream.
type hubEntry struct {
	seq  uint64
	pid  int64
	data []byte
}

// pidIndex is what the reader learned of one process from the log.
type pidIndex struct {
	// touched is the seq of the last entry about the process.
	touched uint64
	// calls are the arguments of its latest tool calls.
	calls []indexedCall
}

type indexedCall struct {
	key  kernel.CallKey
	args json.RawMessage
}

// hub reads the event log once for everyone: for the streams (while any is
// open it follows the log; their entries are encoded once) and for the
// caches of the read endpoints, which it tells what changed.
type hub struct {
	rt       *kernel.Runtime
	notifier *Notifier
	poll     time.Duration

	readMu sync.Mutex // one reader at a time

	mu      sync.Mutex
	subs    int
	entries []hubEntry
	// entries hold every entry with a seq in (base, last].
	base, last uint64
	// epoch changes when the reader starts again, or reads an entry whose
	// effect on the processes it cannot place (a checkpoint restore): every
	// cache is then stale.
	epoch uint64
	pids  map[int64]*pidIndex
	// dirty are the pids of the entries that change a listing row
	// (spawned, state, quantum, approval) since the listing was last read.
	dirty map[int64]bool
	// approvalSeq is the seq of the last entry that changes the approvals:
	// a process entering or leaving an approval wait, or a decision.
	approvalSeq uint64
	inApproval  map[int64]bool
	changed     chan struct{} // closed when last moves
	stop        chan struct{} // closes the background reader
	done        chan struct{}
	closed      bool
	catching    bool // a background read catches up
	wg          sync.WaitGroup
}

// newHub returns a hub that indexes the log from its start (in the
// background when it is long).
func newHub(rt *kernel.Runtime, n *Notifier, poll time.Duration) *hub {
	return &hub{rt: rt, notifier: n, poll: poll, changed: make(chan struct{}),
		pids: map[int64]*pidIndex{}, dirty: map[int64]bool{}, inApproval: map[int64]bool{}}
}

// lastSeq catches up and returns the last seq read; ok is false while the
// reader catches up in the background.
func (h *hub) lastSeq() (seq uint64, ok bool) {
	ok = h.sync()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last, ok
}

// subscribe starts the background reader for the first stream.
func (h *hub) subscribe() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.subs++
	if h.subs == 1 {
		h.stop, h.done = make(chan struct{}), make(chan struct{})
		go h.read(h.stop, h.done)
	}
	return true
}

// subscribers is how many streams are open.
func (h *hub) subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.subs
}

func (h *hub) unsubscribe() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs--
	if h.subs == 0 && h.stop != nil {
		close(h.stop)
		h.stop = nil
	}
}

func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	if h.stop != nil {
		close(h.stop)
		h.stop = nil
	}
	done := h.done
	h.mu.Unlock()
	if done != nil {
		<-done
	}
	h.wg.Wait()
}

// streamBatch is the shortest time between two reads of the log for the
// streams: a busy runtime's entries go out in batches, a few writes a second
// per stream rather than one per entry.
const streamBatch = 100 * time.Millisecond

// read follows the log until stop, at most once per streamBatch.
func (h *hub) read(stop, done chan struct{}) {
	defer close(done)
	poll := time.NewTicker(h.poll)
	defer poll.Stop()
	for {
		noted := h.notifier.c()
		h.sync()
		select {
		case <-stop:
			return
		case <-noted:
		case <-poll.C:
		}
		select {
		case <-stop:
			return
		case <-time.After(streamBatch):
		}
	}
}

// sync reads the log up to its current end. It reports false, and leaves
// a background read to catch up, when the reader is further behind than a
// request should wait for (the caller then reads the runtime directly).
func (h *hub) sync() bool {
	end := h.rt.Store().LastEventSeq()
	h.mu.Lock()
	last := h.last
	if end > last && end-last > hubResetGap {
		if !h.catching && !h.closed {
			h.catching = true
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				h.readMu.Lock()
				h.readTo(h.rt.Store().LastEventSeq())
				h.readMu.Unlock()
				h.mu.Lock()
				h.catching = false
				h.mu.Unlock()
			}()
		}
		h.mu.Unlock()
		return false
	}
	h.mu.Unlock()
	if end <= last {
		return true
	}
	h.readMu.Lock()
	defer h.readMu.Unlock()
	h.readTo(end)
	return true
}

// readTo reads the log up to end. h.readMu is held.
func (h *hub) readTo(end uint64) {
	h.mu.Lock()
	after := h.last
	h.mu.Unlock()
	for after < end {
		page, err := h.rt.EventLog(kernel.EventQuery{After: after, Limit: 1000})
		if err != nil || page.LastSeq <= after {
			return // the next sync tries again
		}
		h.mu.Lock()
		streaming := h.subs > 0
		h.mu.Unlock()
		var add []hubEntry
		if streaming {
			add = make([]hubEntry, 0, len(page.Entries))
			for _, l := range page.Entries {
				b, err := json.Marshal(l)
				if err != nil {
					continue
				}
				add = append(add, hubEntry{seq: l.Seq, pid: l.PID, data: b})
			}
		}
		h.mu.Lock()
		for _, l := range page.Entries {
			h.index(l)
		}
		if streaming {
			h.entries = append(h.entries, add...)
			if over := len(h.entries) - hubCapacity; over > 0 {
				// Drop whole seqs: the window must hold every entry of a seq.
				cut := h.entries[over-1].seq
				i := sort.Search(len(h.entries), func(i int) bool { return h.entries[i].seq > cut })
				h.entries = append([]hubEntry(nil), h.entries[i:]...)
				h.base = cut
			}
		} else {
			// Nobody streams: the window is empty and starts here.
			h.entries, h.base = nil, page.LastSeq
		}
		h.last = page.LastSeq
		close(h.changed)
		h.changed = make(chan struct{})
		h.mu.Unlock()
		after = page.LastSeq
		if !page.More {
			return
		}
	}
}

// index records what l changed. h.mu is held.
func (h *hub) index(l kernel.LogEntry) {
	touch := func(pid int64) *pidIndex {
		p := h.pids[pid]
		if p == nil {
			p = &pidIndex{}
			h.pids[pid] = p
		}
		p.touched = l.Seq
		return p
	}
	p := touch(l.PID)
	switch l.Type {
	case kernel.LogSpawned:
		if l.ParentPID != 0 {
			touch(l.ParentPID)
			h.dirty[l.ParentPID] = true
		}
		h.dirty[l.PID] = true
	case kernel.LogState:
		h.dirty[l.PID] = true
		if l.To == "waiting" && l.Wait == "approval" {
			h.inApproval[l.PID], h.approvalSeq = true, l.Seq
		} else if h.inApproval[l.PID] {
			delete(h.inApproval, l.PID)
			h.approvalSeq = l.Seq
		}
	case kernel.LogApproval:
		h.dirty[l.PID], h.approvalSeq = true, l.Seq
	case kernel.LogQuantum:
		h.dirty[l.PID] = true
	case kernel.LogToolCall:
		args := l.Arguments
		if args == nil {
			args = l.Detail["arguments_summary"]
		}
		if l.Turn != nil && args != nil && len(args) <= indexArgBytes {
			if len(p.calls) == indexCalls {
				p.calls = append(p.calls[:0], p.calls[1:]...)
			}
			p.calls = append(p.calls, indexedCall{key: kernel.CallKey{Turn: *l.Turn, CallID: l.CallID}, args: args})
		}
	case kernel.LogProviderCall, kernel.LogModelOutput, kernel.LogToolResult, kernel.LogMessage, kernel.LogGoalSet:
	default:
		// A checkpoint restore or fork, a recovery, or a kind this server
		// does not know: its effect on the processes is not placed.
		h.epoch++
	}
}

// version is what a cache of pid's answers is keyed on.
type version struct{ touched, epoch uint64 }

// pidVersion catches up and returns pid's version; ok is false while the
// reader catches up in the background.
func (h *hub) pidVersion(pid int64) (v version, ok bool) {
	ok = h.sync()
	h.mu.Lock()
	defer h.mu.Unlock()
	v = version{epoch: h.epoch}
	if p := h.pids[pid]; p != nil {
		v.touched = p.touched
	}
	return v, ok
}

// approvalVersion catches up and returns the version of the approvals; ok
// is false while the reader catches up in the background.
func (h *hub) approvalVersion() (version, bool) {
	ok := h.sync()
	h.mu.Lock()
	defer h.mu.Unlock()
	return version{touched: h.approvalSeq, epoch: h.epoch}, ok
}

// takeDirty returns the pids whose rows changed since the last call, and
// the epoch.
func (h *hub) takeDirty() (map[int64]bool, uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.dirty
	h.dirty = map[int64]bool{}
	return d, h.epoch
}

// arguments returns the arguments of pid's call k when the reader saw it.
func (h *hub) arguments(pid int64) func(kernel.CallKey) (json.RawMessage, bool) {
	h.mu.Lock()
	var calls []indexedCall
	if p := h.pids[pid]; p != nil {
		calls = slices.Clone(p.calls)
	}
	h.mu.Unlock()
	return func(k kernel.CallKey) (json.RawMessage, bool) {
		for _, c := range calls {
			if c.key == k {
				return c.args, true
			}
		}
		return nil, false
	}
}

// since returns the entries after pos (of pid, or every pid when 0), the
// seq they reach and a channel closed when more arrive; ok is false when
// pos is older than the window.
func (h *hub) since(pos uint64, pid int64) (out []hubEntry, reached uint64, changed <-chan struct{}, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if pos < h.base {
		return nil, pos, h.changed, false
	}
	if pos >= h.last {
		return nil, pos, h.changed, true
	}
	i := sort.Search(len(h.entries), func(i int) bool { return h.entries[i].seq > pos })
	if pid == 0 {
		out = make([]hubEntry, 0, len(h.entries)-i)
	}
	for _, e := range h.entries[i:] {
		if pid == 0 || e.pid == pid {
			out = append(out, e)
		}
	}
	return out, h.last, h.changed, true
}

// events streams the event log as Server-Sent Events: one event per log
// entry, its id the entry's seq, its data the entry as logs --json prints
// it. It starts after ?since=SEQ, or after the Last-Event-ID a reconnecting
// client sends.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var pos uint64
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, errInvalid("since %q: must be an event seq (a non-negative integer)", v))
			return
		}
		pos = n
	}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, errInvalid("Last-Event-ID %q: must be an event seq (a non-negative integer)", v))
			return
		}
		pos = n
	}
	var pid int64
	if v := q.Get("pid"); v != "" {
		n, e := parsePID(v)
		if e != nil {
			writeError(w, e)
			return
		}
		pid = n
	}
	select {
	case s.streams <- struct{}{}:
		defer func() { <-s.streams }()
	default:
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: "too_many_streams",
			Message: fmt.Sprintf("%d event streams are open, the most served at once; try again later", s.opts.MaxStreams)})
		return
	}
	if !s.hub.subscribe() {
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "the server is closing"})
		return
	}
	defer s.hub.unsubscribe()

	rc := http.NewResponseController(w)
	// A stream lives longer than a server's read timeout, which would
	// otherwise end it.
	rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	buf := []byte("retry: 2000\n\n")
	flush := func() bool {
		if len(buf) == 0 {
			return true
		}
		rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		_, err := w.Write(buf)
		buf = buf[:0]
		return err == nil && rc.Flush() == nil
	}
	add := func(seq uint64, data []byte) {
		buf = append(buf, "id: "...)
		buf = strconv.AppendUint(buf, seq, 10)
		buf = append(buf, "\ndata: "...)
		buf = append(buf, data...)
		buf = append(buf, "\n\n"...)
	}
	if !flush() {
		return
	}
	keepAlive := time.NewTicker(keepAliveInterval)
	defer keepAlive.Stop()
	for {
		entries, reached, changed, ok := s.hub.since(pos, pid)
		if !ok {
			// Behind the shared window: read the log itself.
			page, err := s.rt.EventLog(kernel.EventQuery{PID: pid, After: pos, Limit: 500})
			if err != nil {
				return
			}
			for _, l := range page.Entries {
				b, err := json.Marshal(l)
				if err == nil {
					add(l.Seq, b)
				}
			}
			pos = page.LastSeq
			if !flush() {
				return
			}
			if page.More || len(page.Entries) > 0 {
				continue
			}
		} else {
			for _, e := range entries {
				add(e.seq, e.data)
			}
			pos = reached
			if !flush() {
				return
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		case <-changed:
		case <-keepAlive.C:
			buf = append(buf, ": keep-alive\n\n"...)
			if !flush() {
				return
			}
		}
	}
}
