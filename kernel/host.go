package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

// HumanMessage is a message a Host posts on behalf of a person.
type HumanMessage struct {
	To        int64
	From      string // the person's name; "" means "host"
	Body      string
	Subject   string
	Interrupt bool
	Channel   string
}

// PostHumanMessage delivers a Human message durably and wakes the recipient
// if it waits for one. Invalid input changes nothing.
func (k *Runtime) PostHumanMessage(h HumanMessage) (mailbox.Message, error) {
	// A Human message says something: an empty one (a forgotten or unset
	// shell variable) would still wake a receive and be read as an answer.
	if strings.TrimSpace(h.Body) == "" {
		return mailbox.Message{}, fmt.Errorf("post a Human message to pid %d: %w", h.To,
			&mailbox.FieldError{Field: "body", Rule: "must not be empty or only white space"})
	}
	from := strings.TrimSpace(h.From)
	if from == "" {
		from = "host"
	}
	kind := mailbox.KindNormal
	if h.Interrupt {
		kind = mailbox.KindInterrupt
	}
	var stored mailbox.Message
	err := k.update(func(tx *txn) error {
		var err error
		stored, err = k.post(tx, mailbox.Message{
			Recipient: h.To, Sender: mailbox.SenderHumanPrefix + from, Kind: kind, Channel: h.Channel, Subject: h.Subject, Body: h.Body,
		})
		return err
	})
	if err != nil {
		return mailbox.Message{}, fmt.Errorf("post a Human message to pid %d: %w", h.To, err)
	}
	return stored, nil
}

const prefixHostMeta = "k/host/"

// PutMeta stores a Host value (JSON) in the runtime directory, for example
// the provider settings a later resume continues with. Secrets do not belong here.
func (k *Runtime) PutMeta(key string, v any) error {
	if err := checkMetaKey(key); err != nil {
		return fmt.Errorf("meta key: %w", err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("meta %s: %w", key, err)
	}
	return k.update(func(tx *txn) error { return tx.Set([]byte(prefixHostMeta+key), b) })
}

// checkMetaKey holds a Host metadata key to the store's rule for raw keys.
func checkMetaKey(key string) error {
	if key == "" || strings.ContainsRune(key, 0) {
		return errors.New("must be non-empty without NUL bytes")
	}
	return nil
}

// checkGoal holds a goal the Host gives to what the model can read: text,
// not blank.
func checkGoal(goal string) error {
	switch {
	case strings.TrimSpace(goal) == "":
		return errors.New("goal: required (not blank)")
	case !utf8.ValidString(goal):
		return errors.New("goal: must be UTF-8 text")
	case strings.ContainsRune(goal, 0):
		return errors.New("goal: must not hold NUL bytes")
	}
	return nil
}

// GetMeta loads a Host value stored with PutMeta; objects.ErrNotFound when absent.
func (k *Runtime) GetMeta(key string, v any) error {
	return k.view(func(tx *txn) error {
		b, err := tx.Get([]byte(prefixHostMeta + key))
		if err != nil {
			return fmt.Errorf("meta %s: %w", key, err)
		}
		return json.Unmarshal(b, v)
	})
}

// Kill ends a process and all its descendants, as a Host decision.
func (k *Runtime) Kill(pid int64, reason string) error {
	if strings.TrimSpace(reason) == "" {
		reason = "killed by the Host"
	}
	return k.hostSignal(pid, SignalKill, reason)
}

// Host signals.
const (
	SignalKill     = "kill"     // end the process and its whole subtree
	SignalPause    = "pause"    // stop scheduling it (a running quantum finishes first)
	SignalContinue = "continue" // undo a pause
)

// ErrBadSignal refuses a signal name that is not kill, pause or continue.
var ErrBadSignal = errors.New("unknown signal")

// SignalReport is what a Host signal left behind: the signalled process and,
// for kill, its descendants, each with its state after the signal.
type SignalReport struct {
	PID    int64  `json:"pid"`
	Signal string `json:"signal"`
	// Changed is false when the signal found nothing to do (a process
	// already ended, paused or not paused).
	Changed   bool          `json:"changed"`
	Processes []SignalState `json:"processes"`
}

// SignalState is one process's state after a signal.
type SignalState struct {
	PID            int64         `json:"pid"`
	Status         process.State `json:"status"`
	PauseRequested bool          `json:"pause_requested,omitempty"`
	Reason         string        `json:"reason,omitempty"`
}

// Signal sends a Host signal to pid: kill ends it and every descendant,
// pause stops it from being scheduled (a running quantum finishes first and
// pauses at its end), continue undoes a pause. Unlike a process's own
// signal_child_process, the Host may signal any process.
func (k *Runtime) Signal(pid int64, sig string) (SignalReport, error) {
	switch sig {
	case SignalKill, SignalPause, SignalContinue:
	default:
		return SignalReport{}, fmt.Errorf("%w %q: must be %s, %s or %s", ErrBadSignal, sig, SignalKill, SignalPause, SignalContinue)
	}
	before, err := k.signalStates(pid, sig)
	if err != nil {
		return SignalReport{}, err
	}
	if err := k.hostSignal(pid, sig, "killed by the Host"); err != nil {
		return SignalReport{}, fmt.Errorf("%s pid %d: %w", sig, pid, err)
	}
	after, err := k.signalStates(pid, sig)
	if err != nil {
		return SignalReport{}, err
	}
	rep := SignalReport{PID: pid, Signal: sig, Processes: after}
	for i := range after {
		if i >= len(before) || before[i] != after[i] {
			rep.Changed = true
		}
	}
	return rep, nil
}

func (k *Runtime) hostSignal(pid int64, sig, killReason string) error {
	if sig == SignalContinue {
		sig = "resume" // the kernel's name for it
	}
	return k.update(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		return k.applySignal(tx, r, sig, killReason, true)
	})
}

// signalStates reads pid and, for kill, its descendants in pid order.
func (k *Runtime) signalStates(pid int64, sig string) ([]SignalState, error) {
	var out []SignalState
	err := k.view(func(tx *txn) error {
		queue := []int64{pid}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			r, err := loadProc(tx, p)
			if err != nil {
				return err
			}
			out = append(out, SignalState{PID: r.PID, Status: r.State, PauseRequested: r.PauseRequested, Reason: r.Reason})
			if sig == SignalKill {
				kids, err := children(tx, p)
				if err != nil {
					return err
				}
				queue = append(queue, kids...)
			}
		}
		return nil
	})
	return out, err
}

// emitPosted records a posted message in the event log, under the
// recipient's pid.
func (k *Runtime) emitPosted(tx *txn, m mailbox.Message) error {
	return k.emit(tx, Event{Kind: EventMessage, PID: m.Recipient, Detail: map[string]any{
		"action": "posted", "message_id": m.ID, "sender": m.Sender, "message_kind": m.Kind,
		"subject": m.Subject, "body": m.Body,
	}})
}

// emitRead records a read of pid's mailbox: the messages it returned and
// those it acknowledged. A read that returned nothing leaves no event.
func (k *Runtime) emitRead(tx *txn, pid int64, page mailbox.Page) error {
	if len(page.Messages) == 0 {
		return nil
	}
	ids := make([]string, len(page.Messages))
	for i, m := range page.Messages {
		ids[i] = m.ID
	}
	action := "read"
	if len(page.AckedIDs) > 0 {
		action = "read_acked"
	}
	return k.emit(tx, Event{Kind: EventMessage, PID: pid, Reason: action, Detail: map[string]any{
		"action": action, "message_ids": ids, "acked_ids": page.AckedIDs,
	}})
}

// SetGoal restates a process's goal: a new version of its goal Object (which
// changes the completion review's token). It is how a Host answers a goal
// lost to a reopen.
func (k *Runtime) SetGoal(pid int64, goal string) (objects.Meta, error) {
	if err := checkGoal(goal); err != nil {
		return objects.Meta{}, err
	}
	var meta objects.Meta
	err := k.update(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		if r.State.Terminal() {
			return fmt.Errorf("pid %d (%s): %w; its goal cannot change", pid, r.State, ErrEnded)
		}
		cur, err := tx.Stat(r.GoalOID)
		if err != nil {
			return err
		}
		meta, err = tx.Write(r.GoalOID, cur.Version, objects.WriteSpec{Payload: []byte(goal)})
		if err != nil {
			return err
		}
		if k.retain {
			r.RetainSeq++
			if err := putJSON(tx, retainKey(pid, r.RetainSeq), retained{Kind: evidenceKindGoal, Goal: goal, GoalVersion: meta.Version}); err != nil {
				return err
			}
			if err := saveProc(tx, r); err != nil {
				return err
			}
		}
		return k.emit(tx, Event{Kind: EventGoalSet, PID: pid, Reason: fmt.Sprintf("goal version %d", meta.Version)})
	})
	return meta, err
}
