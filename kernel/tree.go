package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
)

const prefixChildren = "k/ch/"

func childKey(parent, child int64) []byte {
	return objects.AppendPadded(childPrefix(parent), child, 20)
}
func childPrefix(parent int64) []byte { return append(pidKey(prefixChildren, parent), '/') }

// children lists the direct children of pid.
func children(tx *txn, pid int64) ([]int64, error) {
	var out []int64
	prefix := childPrefix(pid)
	err := tx.Scan(prefix, func(k, _ []byte) error {
		child, err := keyPID(k, len(prefix))
		if err != nil {
			return fmt.Errorf("children of pid %d: %w", pid, err)
		}
		out = append(out, child)
		return nil
	})
	return out, err
}

// ErrNotChild refuses an operation on a process that is not a direct child.
var ErrNotChild = errors.New("not a direct child")

func childStatus(r *procRecord) tools.ChildStatus {
	return tools.ChildStatus{PID: r.PID, Image: r.Image, GoalOID: r.GoalOID, Status: r.State, ResultOID: r.ResultOID, Reason: r.Reason}
}

// directChild loads pid and checks that parent is its direct parent.
func directChild(tx *txn, parent, pid int64) (*procRecord, error) {
	c, err := loadProc(tx, pid)
	if errors.Is(err, ErrNoProcess) || (err == nil && c.ParentPID != parent) {
		return nil, tools.Errorf(tools.CodeDenied, "pid %d: %v of pid %d", pid, ErrNotChild, parent)
	}
	return c, err
}

// spawnChild creates a child of parent: grants attenuated from the parent's,
// the children budget charged up the chain in the same batch.
func (k *Runtime) spawnChild(tx *txn, parent *procRecord, spec tools.ChildSpec) (*procRecord, error) {
	im, err := k.image(spec.Image)
	if err != nil {
		return nil, tools.Errorf(tools.CodeInvalidArguments, "image: %v", err)
	}
	if err := capabilities.Attenuate(capabilities.Live(parent.Grants, k.now()), spec.Grants); err != nil {
		return nil, err
	}
	if err := transferOneShots(parent, spec.Grants); err != nil {
		return nil, err
	}
	if spec.ToolTable != nil {
		if err := k.checkToolTable(spec.ToolTable); err != nil {
			return nil, err
		}
	}
	if err := spec.Budget.Validate(); err != nil {
		return nil, tools.Errorf(tools.CodeInvalidArguments, "budget: %v", err)
	}
	if err := charge(tx, parent, capabilities.Budget{Children: 1}); err != nil {
		return nil, err
	}
	if err := saveProc(tx, parent); err != nil {
		return nil, err
	}
	// Attenuate compares resource names, so a grant on an Object inside a
	// namespace the parent is denied would pass it; the parent's denies go
	// with the child to close that gap.
	grants := append(capabilities.CloneGrants(spec.Grants), capabilities.InheritedDenies(parent.Grants)...)
	child, err := k.createProcess(tx, im, parent.PID, spec.Goal, grants, spec.Budget)
	if err != nil {
		return nil, err
	}
	if spec.ToolTable != nil || spec.Scopes != nil {
		child.ToolTable, child.Scopes = slices.Clone(spec.ToolTable), slices.Clone(spec.Scopes)
		if err := saveProc(tx, child); err != nil {
			return nil, err
		}
	}
	if err := tx.Set(childKey(parent.PID, child.PID), nil); err != nil {
		return nil, err
	}
	tx.markCommit(commitSpawn)
	return child, nil
}

// transferOneShots takes from the parent's one-shot grants the uses it
// hands down: uses move to the child, they are not copied, so a parent with
// one use cannot give each of many children one. They come from the grants
// attenuation covers each right of each handed grant by (Covers), which are
// the grants Attenuate accepted it by: a Check could pick an unlimited grant
// the parent may not delegate, or cover only the first right. Covers reads
// the whole list, as this has no clock: an expired grant covers only a
// handed grant expired itself.
func transferOneShots(parent *procRecord, handed []capabilities.Grant) error {
	covers, err := capabilities.Covers(parent.Grants, handed)
	if err != nil {
		return err
	}
	grants, err := capabilities.TakeUses(parent.Grants, handed, covers)
	if err != nil {
		return err
	}
	parent.Grants = grants
	return nil
}

// terminate moves r to a terminal state through in, then kills its live
// descendants and wakes a parent waiting for it, all in tx.
func (k *Runtime) terminate(tx *txn, r *procRecord, in process.Input) error {
	if err := k.step(tx, r, in); err != nil {
		return err
	}
	k.letGo(tx, r)
	if err := k.killDescendants(tx, r.PID, fmt.Sprintf("ancestor pid %d ended (%s)", r.PID, r.State)); err != nil {
		return err
	}
	if r.ParentPID == 0 {
		return nil
	}
	parent, err := loadProc(tx, r.ParentPID)
	if err != nil {
		return err
	}
	// A parent paused while waiting keeps its wait; the wake still lands.
	w := parent.Wait
	if w != nil && w.Kind == process.WaitChild && w.ChildPID == r.PID {
		return k.step(tx, parent, process.Input{Kind: process.Wake, Gen: parent.Gen, WaitKind: process.WaitChild})
	}
	return nil
}

// letGo releases what the runtime keeps in memory for r, which tx ends: an
// ended process's context and runtime-local payloads are rarely read again,
// so they leave memory once the end is durable (readable until a reopen,
// as before), and its spawn index is not asked for again.
func (k *Runtime) letGo(tx *txn, r *procRecord) {
	k.forgetContext(tx, r.PID)
	pid, goal, context, result := r.PID, r.GoalOID, r.ContextOID, r.ResultOID
	tx.AfterCommit(func() {
		k.store.SpillLocal(goal, context, result)
		k.spawnIndexes.Delete(pid)
	})
}

// wakeIfChildEnded wakes r, which has just begun to wait for a child, when
// that child has ended already (or does not exist): terminate wakes a
// waiting parent only as its child ends, so a wait that began after the end
// would never end. The tool's resume then reports the child.
func (k *Runtime) wakeIfChildEnded(tx *txn, r *procRecord) error {
	w := r.Wait
	if r.State != process.Waiting || w == nil || w.Kind != process.WaitChild {
		return nil
	}
	c, err := loadProc(tx, w.ChildPID)
	switch {
	case errors.Is(err, ErrNoProcess):
	case err != nil:
		return err
	case !c.State.Terminal():
		return nil
	}
	return k.step(tx, r, process.Input{Kind: process.Wake, Gen: r.Gen, WaitKind: process.WaitChild})
}

// killDescendants kills every live descendant of pid.
func (k *Runtime) killDescendants(tx *txn, pid int64, reason string) error {
	kids, err := children(tx, pid)
	if err != nil {
		return err
	}
	for _, c := range kids {
		live, err := mayBeLive(tx, c)
		if err != nil {
			return err
		}
		if live {
			cr, err := loadProc(tx, c)
			if err != nil {
				return err
			}
			if !cr.State.Terminal() {
				if err := k.step(tx, cr, process.Input{Kind: process.Kill, Reason: reason}); err != nil {
					return err
				}
				k.letGo(tx, cr)
			}
		}
		if err := k.killDescendants(tx, c, reason); err != nil {
			return err
		}
	}
	return nil
}

// signal applies a signal to a direct child of caller.
func (k *Runtime) signal(tx *txn, caller *procRecord, pid int64, sig string) (*procRecord, error) {
	c, err := directChild(tx, caller.PID, pid)
	if err != nil {
		return nil, err
	}
	return c, k.applySignal(tx, c, sig, fmt.Sprintf("killed by parent pid %d", caller.PID), false)
}

// applySignal applies kill (the whole subtree), pause or resume to c, from a
// parent or the Host (byHost); a terminal process is left as it is. A pause
// the Host put on is the Host's to lift: a parent's resume is refused.
func (k *Runtime) applySignal(tx *txn, c *procRecord, sig, killReason string, byHost bool) error {
	if c.State.Terminal() {
		return nil
	}
	var err error
	switch sig {
	case "kill":
		err = k.terminate(tx, c, process.Input{Kind: process.Kill, Reason: killReason})
	case "pause":
		if byHost && !c.HostHold {
			c.HostHold = true
			if err := saveProc(tx, c); err != nil {
				return err
			}
		}
		if c.State == process.Running {
			// A running quantum finishes first; it pauses at its end. The
			// event tells log readers of a change no state event shows.
			requested := c.PauseRequested
			c.PauseRequested = true
			if err = saveProc(tx, c); err == nil && !requested {
				err = k.emit(tx, Event{Kind: EventSignal, PID: c.PID, Reason: "pause requested: the running quantum pauses at its end"})
			}
		} else if c.State != process.Paused {
			err = k.step(tx, c, process.Input{Kind: process.Pause})
		}
	case "resume":
		if c.HostHold && !byHost {
			return tools.Errorf(tools.CodeDenied, "child_pid %d: the Host paused it; only the Host can let it go on", c.PID)
		}
		requested := c.PauseRequested
		c.PauseRequested, c.HostHold = false, false
		if c.State == process.Paused {
			err = k.step(tx, c, process.Input{Kind: process.Resume})
		} else {
			err = saveProc(tx, c)
			if err == nil && requested {
				err = k.emit(tx, Event{Kind: EventSignal, PID: c.PID, Reason: "pause request withdrawn"})
			}
		}
	default:
		return tools.Errorf(tools.CodeInvalidArguments, "signal: %q must be kill, pause or resume", sig)
	}
	return err
}

// canMessage reports whether sender may send to recipient: itself, its parent
// or a direct child.
func canMessage(tx *txn, sender *procRecord, recipient int64) error {
	if recipient == sender.PID || recipient == sender.ParentPID {
		return nil
	}
	if _, err := tx.Get(childKey(sender.PID, recipient)); err == nil {
		return nil
	}
	return tools.Errorf(tools.CodeDenied, "recipient_pid %d: a process may send only to itself, its parent or a direct child", recipient)
}

// post stores m and wakes its recipient when the recipient waits for a
// matching message: the post and the wake are one batch.
func (k *Runtime) post(tx *txn, m mailbox.Message) (mailbox.Message, error) {
	rec, err := loadProc(tx, m.Recipient)
	if err != nil {
		return mailbox.Message{}, tools.Errorf(tools.CodeNotFound, "recipient_pid %d: %w", m.Recipient, err)
	}
	if rec.State.Terminal() {
		return mailbox.Message{}, tools.Errorf(tools.CodeFailed, "recipient_pid %d (%s): %w; its mailbox is closed", m.Recipient, rec.State, ErrEnded)
	}
	stored, err := mailbox.Post(tx.Txn, m, k.now())
	if err != nil {
		return mailbox.Message{}, err
	}
	if err := k.emitPosted(tx, stored); err != nil {
		return mailbox.Message{}, err
	}
	tx.markCommit(commitMessagePost)
	w := rec.Wait
	if w != nil && (w.Kind == process.WaitMessage || w.Kind == process.WaitHuman) && (rec.State == process.Waiting || rec.State == process.Paused) {
		var f mailbox.Filter
		if err := json.Unmarshal(w.Filter, &f); err != nil {
			return mailbox.Message{}, fmt.Errorf("decode wait filter of pid %d: %w", rec.PID, err)
		}
		if f.Matches(&stored) {
			if err := k.step(tx, rec, process.Input{Kind: process.Wake, Gen: rec.Gen, WaitKind: w.Kind}); err != nil {
				return mailbox.Message{}, err
			}
		}
	}
	return stored, nil
}
