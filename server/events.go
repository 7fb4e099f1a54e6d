package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/process"
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

// hubCapacity and hubWindowBytes bound the recent log entries the shared
// reader keeps for the streams; a stream further behind reads the log
// itself. The window serves streams a few batches behind (a reconnect, a
// slow client): 8 MiB holds the 8,192 entries of an ordinary log (a few
// hundred bytes each), while a burst of large entries (messages, tool
// results of up to hundreds of KB) cannot make it hold more.
const (
	hubCapacity    = 8192
	hubWindowBytes = 8 << 20
)

// streamBatchBytes bounds what a stream takes from the window, or writes,
// at once (one entry larger than it goes alone); a buffer grown past
// streamKeepBytes is let go after it is written.
const (
	streamBatchBytes = 256 << 10
	streamKeepBytes  = 64 << 10
)

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
	at   cursor
	pid  int64
	data []byte
}

// cursor is a place in the stream. One event seq may yield several log
// entries (a provider call and the model's output), numbered from 0 in
// sub; a cursor is after entry sub of seq, or after all of them (wholeSeq).
type cursor struct {
	seq uint64
	sub int
}

const wholeSeq = math.MaxInt

// before reports whether c is before entry e.
func (c cursor) before(e cursor) bool { return e.seq > c.seq || (e.seq == c.seq && e.sub > c.sub) }

// appendID appends an entry's SSE id: its seq for the first entry of a seq,
// seq.n for the n-th after it.
func (c cursor) appendID(b []byte) []byte {
	b = strconv.AppendUint(b, c.seq, 10)
	if c.sub > 0 {
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(c.sub), 10)
	}
	return b
}

// parseEventID parses an SSE id (a Last-Event-ID): after that entry.
func parseEventID(v string) (cursor, bool) {
	seqPart, subPart, dotted := strings.Cut(v, ".")
	seq, err := strconv.ParseUint(seqPart, 10, 64)
	if err != nil {
		return cursor{}, false
	}
	if !dotted {
		if seq == 0 {
			return cursor{sub: wholeSeq}, true // no entry has seq 0
		}
		return cursor{seq: seq}, true
	}
	sub, err := strconv.Atoi(subPart)
	if err != nil || sub < 1 || seq == 0 {
		return cursor{}, false
	}
	return cursor{seq: seq, sub: sub}, true
}

// numbered gives each of a page's entries its place: pages never split the
// entries of one seq.
func numbered(entries []kernel.LogEntry, each func(at cursor, l kernel.LogEntry)) {
	sub := 0
	for i, l := range entries {
		if i > 0 && entries[i-1].Seq == l.Seq {
			sub++
		} else {
			sub = 0
		}
		each(cursor{seq: l.Seq, sub: sub}, l)
	}
}

// pidIndex is what the reader learned of one process from the log.
type pidIndex struct {
	// touched is the seq of the last entry that changed the process's
	// detail: one about it, or a charge of a descendant's.
	touched uint64
	// parent is its parent's pid (0 for a root), from its spawn entry.
	parent int64
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
	bytes   int // of the entries' data
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
	// a state entry of a process that holds or held an approval wait, or a
	// decision.
	approvalSeq uint64
	// inApproval are the processes that hold an approval wait (paused ones
	// included), as of the last state entry of each, corrected by every read
	// of the approvals.
	inApproval map[int64]bool
	changed    chan struct{} // closed when last moves
	stop       chan struct{} // closes the background reader
	done       chan struct{}
	closed     bool
	catching   bool // a background read catches up
	wg         sync.WaitGroup
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
			numbered(page.Entries, func(at cursor, l kernel.LogEntry) {
				if b, err := json.Marshal(l); err == nil {
					add = append(add, hubEntry{at: at, pid: l.PID, data: b})
				}
			})
		}
		h.mu.Lock()
		for _, l := range page.Entries {
			h.index(l)
		}
		if streaming {
			h.entries = append(h.entries, add...)
			for _, e := range add {
				h.bytes += len(e.data)
			}
			h.trim()
		} else {
			// Nobody streams: the window is empty and starts here.
			h.entries, h.bytes, h.base = nil, 0, page.LastSeq
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

// trim drops the oldest entries past the window's bounds, whole seqs at a
// time: the window holds every entry of a seq. h.mu is held.
func (h *hub) trim() {
	n, bytes, i := len(h.entries), h.bytes, 0
	for i < n && (n-i > hubCapacity || bytes > hubWindowBytes) {
		bytes -= len(h.entries[i].data)
		i++
	}
	for i > 0 && i < n && h.entries[i].at.seq == h.entries[i-1].at.seq {
		bytes -= len(h.entries[i].data)
		i++
	}
	if i == 0 {
		return
	}
	h.base = h.entries[i-1].at.seq
	// A new array: the old one would keep the dropped entries' data.
	h.entries = append([]hubEntry(nil), h.entries[i:]...)
	h.bytes = bytes
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
	// A spawn and the calls of a turn charge the budgets of every ancestor,
	// which their details show.
	charged := func(pid int64) {
		for a, steps := h.pids[pid].parent, 0; a != 0 && steps < len(h.pids); steps++ {
			a = touch(a).parent
		}
	}
	p := touch(l.PID)
	switch l.Type {
	case kernel.LogSpawned:
		p.parent = l.ParentPID
		if l.ParentPID != 0 {
			h.dirty[l.ParentPID] = true
		}
		h.dirty[l.PID] = true
		charged(l.PID)
	case kernel.LogState:
		h.dirty[l.PID] = true
		// Approvals lists a process whose wait is an approval until it ends;
		// a pause keeps the wait, and the state entry names it.
		holds := l.Wait == string(process.WaitApproval) && !process.State(l.To).Terminal()
		if holds || h.inApproval[l.PID] {
			h.approvalSeq = l.Seq
		}
		if holds {
			h.inApproval[l.PID] = true
		} else {
			delete(h.inApproval, l.PID)
		}
	case kernel.LogApproval:
		h.dirty[l.PID], h.approvalSeq = true, l.Seq
	case kernel.LogQuantum:
		h.dirty[l.PID] = true
		charged(l.PID)
	case kernel.LogProviderCall, kernel.LogModelOutput, kernel.LogToolResult:
		charged(l.PID)
	case kernel.LogToolCall:
		charged(l.PID)
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
	case kernel.LogSignal, kernel.LogMessage, kernel.LogGoalSet:
		// The process's detail only (a pause requested of a running process
		// or withdrawn, its mailbox, its goal): touched above.
	default:
		// A checkpoint restore or fork, a recovery, or a kind this server
		// does not know: its effect on the processes is not placed, so
		// every cache is stale.
		h.epoch++
	}
}

// approvals reads the runtime's approvals with the reader held, and makes
// them the processes known to hold an approval wait: an entry whose effect
// the reader could not place (a restore's state entries do not name the
// wait) leaves the set wrong only until the next read, which the epoch it
// moved forces. The version is the reader's, which the list is at least as
// new as.
func (h *hub) approvals() ([]kernel.Approval, version, error) {
	h.readMu.Lock()
	defer h.readMu.Unlock()
	list, err := h.rt.Approvals()
	if err != nil {
		return nil, version{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.inApproval)
	for _, a := range list {
		h.inApproval[a.PID] = true
	}
	return list, version{touched: h.approvalSeq, epoch: h.epoch}, nil
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

// since returns the entries after pos (of pid, or every pid when 0), at
// most maxBytes of them (one larger entry goes alone), the place they
// reach, whether more follow it, and a channel closed when more arrive; ok
// is false when pos is older than the window.
func (h *hub) since(pos cursor, pid int64, maxBytes int) (out []hubEntry, reached cursor, more bool, changed <-chan struct{}, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if pos.seq < h.base || (pos.seq == h.base && pos.sub != wholeSeq) {
		return nil, pos, false, h.changed, false
	}
	if pos.seq > h.last || (pos.seq == h.last && pos.sub == wholeSeq) {
		return nil, pos, false, h.changed, true
	}
	i := sort.Search(len(h.entries), func(i int) bool { return pos.before(h.entries[i].at) })
	size := 0
	for j, e := range h.entries[i:] {
		if pid != 0 && e.pid != pid {
			continue
		}
		if len(out) > 0 && size+len(e.data) > maxBytes {
			return out, h.entries[i+j-1].at, true, h.changed, true
		}
		out = append(out, e)
		size += len(e.data)
	}
	return out, cursor{seq: h.last, sub: wholeSeq}, false, h.changed, true
}

// events streams the event log as Server-Sent Events: one event per log
// entry, its data the entry as logs --json prints it, its id the entry's
// seq, or seq.n for the n-th entry after the first of one seq (a provider
// call's model output). It starts after ?since=SEQ (every entry of SEQ), or
// after the entry whose id a reconnecting client sends as Last-Event-ID.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	pos := cursor{sub: wholeSeq}
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, errInvalid("since %q: must be an event seq (a non-negative integer)", v))
			return
		}
		pos.seq = n
	}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		c, ok := parseEventID(v)
		if !ok {
			writeError(w, errInvalid("Last-Event-ID %q: must be an event id this stream sent (SEQ, or SEQ.N with N at least 1)", v))
			return
		}
		pos = c
	}
	var pid int64
	if v := q.Get("pid"); v != "" {
		n, e := parsePID(v)
		if e != nil {
			writeError(w, e)
			return
		}
		// A stream of a pid no process has would show nothing for ever.
		if _, err := s.rt.Process(n); err != nil {
			writeError(w, kernelError(err))
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
		if cap(buf) > streamKeepBytes {
			buf = nil // a large entry's buffer is not kept for the stream's life
		} else {
			buf = buf[:0]
		}
		return err == nil && rc.Flush() == nil
	}
	add := func(at cursor, data []byte) bool {
		buf = append(buf, "id: "...)
		buf = at.appendID(buf)
		buf = append(buf, "\ndata: "...)
		buf = append(buf, data...)
		buf = append(buf, "\n\n"...)
		return len(buf) < streamBatchBytes || flush()
	}
	if !flush() {
		return
	}
	keepAlive := time.NewTicker(keepAliveInterval)
	defer keepAlive.Stop()
	for {
		entries, reached, more, changed, ok := s.hub.since(pos, pid, streamBatchBytes)
		if !ok {
			// Behind the shared window: read the log itself, from the seq
			// of a partly sent one.
			after := pos.seq
			if pos.sub != wholeSeq {
				after--
			}
			page, err := s.rt.EventLog(kernel.EventQuery{PID: pid, After: after, Limit: 500})
			if err != nil {
				return
			}
			sent := true
			numbered(page.Entries, func(at cursor, l kernel.LogEntry) {
				if !sent || !pos.before(at) {
					return
				}
				if b, err := json.Marshal(l); err == nil {
					sent = add(at, b)
				}
			})
			if end := (cursor{seq: page.LastSeq, sub: wholeSeq}); pos.before(end) {
				pos = end
			}
			if !sent || !flush() {
				return
			}
			if page.More || len(page.Entries) > 0 {
				continue
			}
		} else {
			for _, e := range entries {
				if !add(e.at, e.data) {
					return
				}
			}
			pos = reached
			if !flush() {
				return
			}
			if more {
				continue
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
