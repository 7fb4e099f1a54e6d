// Package toolstest holds an in-memory fake of the syscall surface, so that
// built-in tool families are tested without a kernel or a store.
package toolstest

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/tools"
)

// Syscalls is an in-memory tools.Syscalls for one calling process. It
// implements the Object, authority and checkpoint-lookup calls; any other
// method panics through the nil embedded interface, which a test that needs
// it must set. It is not safe for concurrent use.
type Syscalls struct {
	tools.Syscalls

	Proc   tools.Self
	Grants []capabilities.Grant
	Clock  time.Time
	// Objects by OID, with their payloads.
	Objects  map[string]objects.Meta
	Payloads map[string][]byte
	// CheckpointRoots maps checkpoint ids to the root pid they snapshot.
	CheckpointRoots map[string]int64
}

// New returns a fake for pid, whose namespace is proc-<pid>, holding grants.
func New(pid int64, grants ...capabilities.Grant) *Syscalls {
	return &Syscalls{
		Proc:     tools.Self{PID: pid, Namespace: fmt.Sprintf("proc-%d", pid)},
		Grants:   grants,
		Clock:    time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Objects:  map[string]objects.Meta{},
		Payloads: map[string][]byte{},
	}
}

// Put stores an Object directly (no authority check) and returns its metadata.
func (s *Syscalls) Put(namespace, name string, payload []byte) objects.Meta {
	m := objects.Meta{OID: uuid.NewString(), Namespace: namespace, Name: name, Kind: "data", Version: 1, Tier: objects.TierDurable,
		PayloadBytes: len(payload)}
	s.Objects[m.OID], s.Payloads[m.OID] = m, payload
	return m
}

func (s *Syscalls) Self() tools.Self { return s.Proc }
func (s *Syscalls) Now() time.Time   { return s.Clock }
func (s *Syscalls) Config() tools.Config {
	return tools.Config{MaxSleepSeconds: 60}
}

// Authorize applies the real capability check; one-shot uses are consumed.
func (s *Syscalls) Authorize(right capabilities.Right, names ...string) error {
	d := capabilities.Check(s.Grants, right, names...)
	if !d.Allowed {
		return fmt.Errorf("%w: %s on %s: %s", tools.ErrDenied, right, names[0], d.Reason)
	}
	if d.OneShot {
		grants, _, err := capabilities.Reserve(s.Grants, d)
		if err != nil {
			return fmt.Errorf("%w: %v", tools.ErrDenied, err)
		}
		s.Grants = grants
	}
	return nil
}

func (s *Syscalls) StatObject(oid string) (objects.Meta, error) {
	m, ok := s.Objects[oid]
	if !ok {
		return objects.Meta{}, fmt.Errorf("%w: %s", objects.ErrNotFound, oid)
	}
	return m, nil
}

func (s *Syscalls) ReadObject(oid string) (objects.Meta, []byte, error) {
	m, err := s.StatObject(oid)
	return m, s.Payloads[oid], err
}

func (s *Syscalls) LookupObject(namespace, name string) (objects.Meta, error) {
	for _, m := range s.Objects {
		if m.Namespace == namespace && m.Name == name {
			return m, nil
		}
	}
	return objects.Meta{}, fmt.Errorf("%w: %s/%s", objects.ErrNotFound, namespace, name)
}

func (s *Syscalls) ListObjects(namespace string) ([]objects.Meta, error) {
	var out []objects.Meta
	for _, m := range s.Objects {
		if m.Namespace == namespace {
			out = append(out, m)
		}
	}
	return out, nil
}

func (s *Syscalls) CreateObject(spec objects.CreateSpec) (objects.Meta, error) {
	if _, err := s.LookupObject(spec.Namespace, spec.Name); err == nil {
		return objects.Meta{}, fmt.Errorf("%w: %s/%s", objects.ErrNameTaken, spec.Namespace, spec.Name)
	}
	m := s.Put(spec.Namespace, spec.Name, spec.Payload)
	m.Kind, m.Labels, m.Owner, m.Tier = spec.Kind, spec.Labels, spec.Owner, spec.Tier
	s.Objects[m.OID] = m
	return m, nil
}

func (s *Syscalls) WriteObject(oid string, expected uint64, spec objects.WriteSpec) (objects.Meta, error) {
	m, err := s.StatObject(oid)
	if err != nil {
		return m, err
	}
	if m.Version != expected {
		return objects.Meta{}, fmt.Errorf("%w: %s is at version %d, not %d", objects.ErrConflict, oid, m.Version, expected)
	}
	m.Version++
	if spec.Labels != nil {
		m.Labels = spec.Labels
	}
	if !spec.KeepPayload {
		s.Payloads[oid], m.PayloadBytes = spec.Payload, len(spec.Payload)
	}
	s.Objects[oid] = m
	return m, nil
}

// CheckpointRoot answers from CheckpointRoots, as the kernel does: a missing
// id is a not_found tool error.
func (s *Syscalls) CheckpointRoot(id string) (int64, error) {
	root, ok := s.CheckpointRoots[id]
	if !ok {
		return 0, tools.Errorf(tools.CodeNotFound, "checkpoint_id: no such checkpoint: %q", id)
	}
	return root, nil
}

// Call runs the tool name of family as the kernel would: its arguments are
// validated against its schema (typed defaults applied), then it is invoked
// on sys. A refusal is returned as the tool error the model would see. A
// name missing from family is a mistake in the test, and panics.
func Call(family []*tools.Tool, sys tools.Syscalls, name, args string) (tools.Outcome, *tools.Error) {
	for _, tl := range family {
		if tl.Name != name {
			continue
		}
		b, err := tools.NewBroker(tl)
		if err != nil {
			panic(err)
		}
		_, raw, err := b.Prepare(name, json.RawMessage(args))
		if err != nil {
			return tools.Outcome{}, tools.AsError(err)
		}
		out, err := tl.Invoke(context.Background(), sys, raw)
		if err != nil {
			return tools.Outcome{}, tools.AsError(err)
		}
		return out, nil
	}
	panic("toolstest: no tool " + name)
}
