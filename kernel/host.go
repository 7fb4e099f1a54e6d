package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

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
	from := strings.TrimSpace(h.From)
	if from == "" {
		from = "host"
	}
	kind := mailbox.KindNormal
	if h.Interrupt {
		kind = mailbox.KindInterrupt
	}
	var stored mailbox.Message
	err := k.update(func(tx *objects.Txn) error {
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
	if key == "" || strings.ContainsRune(key, 0) {
		return errors.New("meta key: must be non-empty without NUL bytes")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("meta %s: %w", key, err)
	}
	return k.update(func(tx *objects.Txn) error { return tx.Set([]byte(prefixHostMeta+key), b) })
}

// GetMeta loads a Host value stored with PutMeta; objects.ErrNotFound when absent.
func (k *Runtime) GetMeta(key string, v any) error {
	return k.store.View(func(tx *objects.Txn) error {
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
	return k.update(func(tx *objects.Txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		if r.State.Terminal() {
			return nil
		}
		return k.terminate(tx, r, process.Input{Kind: process.Kill, Reason: reason})
	})
}

// SetGoal restates a process's goal: a new version of its goal Object (which
// changes the completion review's token). It is how a Host answers a goal
// lost to a reopen.
func (k *Runtime) SetGoal(pid int64, goal string) (objects.Meta, error) {
	if strings.TrimSpace(goal) == "" {
		return objects.Meta{}, errors.New("goal: required")
	}
	var meta objects.Meta
	err := k.update(func(tx *objects.Txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		if r.State.Terminal() {
			return fmt.Errorf("pid %d has ended (%s); its goal cannot change", pid, r.State)
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
