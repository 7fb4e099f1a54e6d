package kernel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Event kinds of the durable event log.
const (
	EventSpawn      = "process.spawned"
	EventState      = "process.state"
	EventQuantum    = "quantum.started"
	EventProvider   = "provider.call"
	EventToolCall   = "tool.call"
	EventToolDone   = "tool.result"
	EventRecovered  = "runtime.recovered"
	EventCheckpoint = "checkpoint"
	EventGoalSet    = "goal.set"
	// EventMessage is a mailbox change: a message posted, read or acknowledged.
	EventMessage = "message"
	// EventSignal is a signal that changed no state: a pause requested of a
	// running process (it pauses when its quantum ends), or withdrawn; or
	// the Host's retry of a provider wait (RetryProvider).
	EventSignal = "process.signal"
)

// Event is one entry of the runtime's event log, as a Host observes it.
type Event struct {
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	PID     int64     `json:"pid,omitempty"`
	Parent  int64     `json:"parent,omitempty"`
	Image   string    `json:"image,omitempty"`
	From    string    `json:"from,omitempty"`
	To      string    `json:"to,omitempty"`
	Wait    string    `json:"wait,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Turn    int       `json:"turn,omitempty"`
	Tool    string    `json:"tool,omitempty"`
	CallID  string    `json:"call_id,omitempty"`
	Args    string    `json:"args,omitempty"`    // short summary of the arguments
	OK      *bool     `json:"ok,omitempty"`      // tool results
	Code    string    `json:"code,omitempty"`    // error code of a failed tool call
	Summary string    `json:"summary,omitempty"` // short summary of a result or error
	Detail  any       `json:"detail,omitempty"`
}

// emit appends ev to the durable log in tx and hands it to OnEvent after
// the commit.
//
// The event is encoded when the commit's batch is built, after the store's
// write lock is let go: its values are never changed once emitted (a
// detail is built for its event; what it holds of a record, the record
// gives up or copies before it changes it), as the OnEvent hook after the
// commit relies on too. With LIBOS_CHECK_CACHES=1 it is also encoded here,
// and the later encoding must be the same bytes.
func (k *Runtime) emit(tx *txn, ev Event) error {
	// One allocation holds the event, its encoder's outcome and the
	// encoder: emit runs under the write lock several times a quantum.
	le := &loggedEvent{ev: ev}
	le.ev.Time = k.clock.Now()
	if k.records.check {
		var err error
		if le.now, err = le.ev.appendJSON(make([]byte, 0, eventEncodingSize)); err != nil {
			return fmt.Errorf("encode %s event: %w", ev.Kind, err)
		}
	}
	seq, err := tx.AppendEventFunc(ev.Kind, le)
	if err != nil {
		return fmt.Errorf("append %s event: %w", ev.Kind, err)
	}
	if k.events != nil {
		qe := &queuedEvent{le: le, seq: seq}
		// Queued under the write lock, so in commit order; delivered once
		// durable.
		tx.OnApplied(func() { k.events.add(qe) })
		tx.AfterCommit(func() { k.events.ready(qe) })
	}
	return nil
}

// eventQueue hands committed events to OnEvent one call at a time and in
// commit order. Commits finish on their own goroutines, so the one that
// committed second may run its hooks first: each event takes its place when
// its commit is handed on (in commit order) and is delivered when it and
// every event before it are durable. Whichever goroutine finds the head
// ready delivers, without a lock held, so an OnEvent that commits (a Host
// call from the hook) queues its own events behind and never waits on
// itself.
type eventQueue struct {
	deliver func(Event)

	mu       sync.Mutex
	queued   []*queuedEvent // in commit order; the head is delivered next
	draining bool           // a goroutine is delivering
	// settled is signalled when a delivering goroutine stops (see flush).
	settled sync.Cond
}

type queuedEvent struct {
	le    *loggedEvent
	seq   uint64
	ready bool
}

func newEventQueue(deliver func(Event)) *eventQueue {
	q := &eventQueue{deliver: deliver}
	q.settled.L = &q.mu
	return q
}

func (q *eventQueue) add(qe *queuedEvent) {
	q.mu.Lock()
	q.queued = append(q.queued, qe)
	q.mu.Unlock()
}

func (q *eventQueue) ready(qe *queuedEvent) {
	q.mu.Lock()
	qe.ready = true
	if q.draining {
		q.mu.Unlock()
		return
	}
	q.draining = true
	for {
		n := 0
		for n < len(q.queued) && q.queued[n].ready {
			n++
		}
		if n == 0 {
			q.draining = false
			q.settled.Broadcast()
			q.mu.Unlock()
			return
		}
		batch := slices.Clone(q.queued[:n])
		q.queued = slices.Delete(q.queued, 0, n)
		q.mu.Unlock()
		if !q.deliverAll(batch) {
			return
		}
		q.mu.Lock()
	}
}

// deliverAll hands batch to OnEvent in order. A panic in OnEvent is
// recovered and loses that event to OnEvent only (the log keeps it): it runs
// in a commit's hooks, and going on up it would stop the hooks after it
// (the scheduler's, and the deliveries of the commit's later events), while
// the commit is durable already.
//
// It reports whether it delivered them all. It does not when OnEvent ends
// its goroutine (runtime.Goexit), which recover cannot stop: the events
// after that one go back to the head of the queue for the commit's later
// hooks, which run all the same (objects.Txn.AfterCommit), and Close does
// not wait on this goroutine.
func (q *eventQueue) deliverAll(batch []*queuedEvent) (finished bool) {
	next := 0
	defer func() {
		if !finished {
			q.mu.Lock()
			q.queued = append(slices.Clone(batch[next+1:]), q.queued...)
			q.draining = false
			q.settled.Broadcast()
			q.mu.Unlock()
		}
	}()
	for ; next < len(batch); next++ {
		qe := batch[next]
		done := qe.le.ev
		done.Seq = qe.seq
		if qe.le.refused != nil {
			done.Detail = qe.le.refused
		}
		q.deliverOne(done)
	}
	return true
}

func (q *eventQueue) deliverOne(ev Event) {
	defer func() { _ = recover() }()
	q.deliver(ev)
}

// flush waits until no goroutine delivers: every event of a commit that
// finished is delivered (the one that delivered last found the head not
// ready). Close calls it, so a Host sees every event before Close returns.
func (q *eventQueue) flush() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.draining {
		q.settled.Wait()
	}
}

// loggedEvent is an event emitted in a transaction, encoded when the
// batch is built.
type loggedEvent struct {
	ev Event
	// now is the event's encoding when it was emitted, kept only with
	// LIBOS_CHECK_CACHES=1: the later encoding must be the same bytes.
	now []byte
	// refused is the detail logged in place of one the encoder refused;
	// the hook, which runs after the encoder, gets it too.
	refused map[string]any
}

// AppendEvent writes the event's data when the batch is built.
func (le *loggedEvent) AppendEvent(dst []byte) ([]byte, error) {
	data, err := le.ev.appendJSON(dst)
	switch {
	case le.now != nil && (err != nil || !bytes.Equal(data[len(dst):], le.now)):
		return nil, fmt.Errorf("%s event changed after it was emitted: %s, then %s (%v)", le.ev.Kind, le.now, data[len(dst):], err)
	case err != nil:
		// A detail value the encoder refuses (a defect the check above
		// finds in tests): the event is kept, saying so.
		le.refused = map[string]any{"encoding_error": err.Error()}
		bare := le.ev
		bare.Detail = le.refused
		if data, err = bare.appendJSON(dst); err != nil {
			data, _ = json.Marshal(map[string]any{"kind": le.ev.Kind, "pid": le.ev.PID, "encoding_error": err.Error()})
			data = append(dst, data...)
		}
	}
	return data, nil
}

func boolPtr(b bool) *bool { return &b }

// summarize shortens s to at most n bytes for progress lines.
func summarize(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

// maxLoggedArguments bounds the arguments a tool.call event keeps in full;
// larger ones (which the call's schema refuses anyway) are described.
const maxLoggedArguments = 64 << 10

// loggedArguments is a call's arguments as the event log keeps them.
func loggedArguments(args json.RawMessage) json.RawMessage {
	if len(args) > maxLoggedArguments || !json.Valid(args) {
		return truncatedArgs(args)
	}
	return args
}
