// Package toolstest holds in-memory fakes of the syscall roles, one per
// role and composed into a whole tools.Syscalls, so that built-in tool
// families are tested without a kernel or a store.
package toolstest

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/libos/libos/tools"
)

// Syscalls is an in-memory tools.Syscalls for one calling process: each
// role is its own fake, reachable by its type name (sys.Tree, sys.Mail, …)
// to set up state and inspect what a call did. It is not safe for
// concurrent use.
type Syscalls struct {
	*Caller
	*Objects
	*Tree
	*Mail
	*Skills
	*Compactor
	*Checkpoints
	*Reviewer
}

var _ tools.Syscalls = (*Syscalls)(nil)

// New returns a fake for pid, whose namespace is proc-<pid>, holding grants.
// Its process tree knows the images base:v0 and coding:v0 (gated).
func New(pid int64, grants ...Grant) *Syscalls {
	c := NewCaller(pid, grants...)
	tree := NewTree(pid)
	return &Syscalls{
		Caller:      c,
		Objects:     NewObjects(c.Proc.Namespace, pid),
		Tree:        tree,
		Mail:        NewMail(c, tree),
		Skills:      &Skills{},
		Compactor:   &Compactor{},
		Checkpoints: NewCheckpoints(),
		Reviewer:    &Reviewer{},
	}
}

// Call runs the tool name of family as the kernel would: its arguments are
// validated against its schema (typed defaults applied), then it is invoked
// on sys. A refusal is returned as the tool error the model would see. A
// name missing from family is a mistake in the test, and panics.
func Call(family []*tools.Tool, sys tools.Syscalls, name, args string) (tools.Outcome, *tools.Error) {
	tl := find(family, name)
	b, err := tools.NewBroker(tl)
	if err != nil {
		panic(err)
	}
	_, raw, err := b.Prepare(name, json.RawMessage(args))
	if err != nil {
		return tools.Outcome{}, tools.AsError(err)
	}
	if fake, ok := sys.(*Syscalls); ok {
		fake.Tool = name
		defer func() { fake.Tool = "" }()
	}
	out, err := tl.Invoke(context.Background(), sys, raw)
	if err != nil {
		return tools.Outcome{}, tools.AsError(err)
	}
	return out, nil
}

// Resume resumes the pending action p of the tool name of family, as the
// kernel does when its wait ended.
func Resume(family []*tools.Tool, sys tools.Syscalls, name string, p tools.Pending) (tools.Outcome, *tools.Error) {
	tl := find(family, name)
	if tl.Resume == nil {
		panic("toolstest: tool " + name + " does not resume")
	}
	if fake, ok := sys.(*Syscalls); ok {
		fake.Tool = name
		defer func() { fake.Tool = "" }()
	}
	out, err := tl.Resume(context.Background(), sys, p)
	if err != nil {
		return tools.Outcome{}, tools.AsError(err)
	}
	return out, nil
}

func find(family []*tools.Tool, name string) *tools.Tool {
	for _, tl := range family {
		if tl.Name == name {
			return tl
		}
	}
	panic(fmt.Sprintf("toolstest: no tool %s", name))
}
