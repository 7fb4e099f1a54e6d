package kernel

import (
	"encoding/json"
	"fmt"
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

// encodedText is the encoding of a detail's "text", a reply's words, made
// before the commit (replyAhead) for the text of: an event's encoding uses it
// when its detail's text is still of (Event.appendJSONWith).
type encodedText struct {
	of   string
	json []byte
}

// emit appends ev to the durable log in tx and hands it to OnEvent after
// the commit.
func (k *Runtime) emit(tx *txn, ev Event) error { return k.emitWith(tx, ev, nil) }

// emitWith is emit, with the detail's text encoded before (nil: none).
func (k *Runtime) emitWith(tx *txn, ev Event, text *encodedText) error {
	ev.Time = k.clock.Now()
	size := eventEncodingSize
	if text != nil {
		size += len(text.json)
	}
	data, err := ev.appendJSONWith(make([]byte, 0, size), text)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", ev.Kind, err)
	}
	seq, err := tx.AppendEventJSON(ev.Kind, data)
	if err != nil {
		return fmt.Errorf("append %s event: %w", ev.Kind, err)
	}
	if k.opts.OnEvent != nil {
		// A copy for the hook, so that ev itself stays off the heap.
		done := ev
		done.Seq = seq
		tx.AfterCommit(func() { k.opts.OnEvent(done) })
	}
	return nil
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
