package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
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

// hubEntry is one log entry, encoded once for every stream.
type hubEntry struct {
	seq  uint64
	pid  int64
	data []byte
}

// hub reads the event log once for every stream while any stream is open,
// keeping the latest entries encoded.
type hub struct {
	rt       *kernel.Runtime
	notifier *Notifier
	poll     time.Duration

	mu      sync.Mutex
	subs    int
	entries []hubEntry
	// entries hold every entry with a seq in (base, last].
	base, last uint64
	changed    chan struct{} // closed when last moves
	stop       chan struct{} // closes the reader
	done       chan struct{}
	closed     bool
}

func newHub(rt *kernel.Runtime, n *Notifier, poll time.Duration) *hub {
	return &hub{rt: rt, notifier: n, poll: poll, changed: make(chan struct{})}
}

func (h *hub) lastSeq() (uint64, error) { return h.rt.Store().LastEventSeq(), nil }

// subscribe starts the reader for the first stream.
func (h *hub) subscribe() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.subs++
	if h.subs == 1 {
		if h.done != nil {
			// The previous reader may still be finishing.
			done := h.done
			h.mu.Unlock()
			<-done
			h.mu.Lock()
		}
		last := h.rt.Store().LastEventSeq()
		h.entries, h.base, h.last = nil, last, last
		h.stop, h.done = make(chan struct{}), make(chan struct{})
		go h.read(h.stop, h.done)
	}
	return true
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
}

// read follows the log until stop, at most once per 10 ms so a busy
// runtime's events are read in batches.
func (h *hub) read(stop, done chan struct{}) {
	defer close(done)
	poll := time.NewTicker(h.poll)
	defer poll.Stop()
	for {
		noted := h.notifier.c()
		h.catchUp()
		select {
		case <-stop:
			return
		case <-noted:
		case <-poll.C:
		}
		select {
		case <-stop:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (h *hub) catchUp() {
	h.mu.Lock()
	after := h.last
	h.mu.Unlock()
	if h.rt.Store().LastEventSeq() <= after {
		return
	}
	var add []hubEntry
	for {
		page, err := h.rt.EventLog(kernel.EventQuery{After: after, Limit: 1000})
		if err != nil {
			break // the next wake tries again
		}
		for _, l := range page.Entries {
			b, err := json.Marshal(l)
			if err != nil {
				continue
			}
			add = append(add, hubEntry{seq: l.Seq, pid: l.PID, data: b})
		}
		after = page.LastSeq
		if !page.More {
			break
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if after <= h.last {
		return
	}
	h.entries = append(h.entries, add...)
	if over := len(h.entries) - hubCapacity; over > 0 {
		// Drop whole seqs: the window must hold every entry of a seq.
		cut := h.entries[over-1].seq
		i := sort.Search(len(h.entries), func(i int) bool { return h.entries[i].seq > cut })
		h.entries = append([]hubEntry(nil), h.entries[i:]...)
		h.base = cut
	}
	h.last = after
	close(h.changed)
	h.changed = make(chan struct{})
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
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			writeError(w, errInvalid("pid %q: must be a positive integer", v))
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
