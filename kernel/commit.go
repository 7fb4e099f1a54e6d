package kernel

import (
	"github.com/libos/libos/internal/failpoint"
	"github.com/libos/libos/objects"
)

// Commit kinds, as failpoints name them: "before-commit:<kind>" fires when a
// batch holding that kind of change is staged but not yet durable,
// "after-commit:<kind>" once it is durable.
const (
	commitToolResult  = "tool_result"
	commitExit        = "exit"
	commitSpawn       = "spawn"
	commitMessagePost = "message_post"
	commitMessageAck  = "message_ack"
	commitQuantum     = "quantum_start"
	commitCompaction  = "compaction_writeback"
	commitCheckpoint  = "checkpoint"
)

// update is the kernel's only way to commit: one synced batch per call.
// With failpoints compiled in, it fires the failpoints of the kinds of
// change the batch holds.
//
// Context changes are staged on their llmContext during fn and written once,
// at the end, so a context Object's version advances once per commit.
func (k *Runtime) update(fn func(tx *objects.Txn) error) error {
	if k.opts.ReadOnly {
		return ErrReadOnly
	}
	var kinds []string
	err := k.store.Update(func(tx *objects.Txn) error {
		st := &txState{}
		k.txStates.Store(tx, st)
		defer k.txStates.Delete(tx)
		if failpoint.Enabled {
			k.commitKinds.Store(tx, &kinds)
			defer k.commitKinds.Delete(tx)
		}
		if err := fn(tx); err != nil {
			return err
		}
		if err := k.flushContexts(tx, st); err != nil {
			return err
		}
		for _, kind := range kinds {
			failpoint.Hit("before-commit:" + kind)
		}
		return nil
	})
	if err == nil {
		for _, kind := range kinds {
			failpoint.Hit("after-commit:" + kind)
		}
	}
	return err
}

// txState is what one transaction staged beside its writes.
type txState struct {
	dirty      []dirtyContext
	afterFlush []func() error
}

// afterFlush runs fn once tx's contexts are written (their versions final).
func (k *Runtime) afterFlush(tx *objects.Txn, fn func() error) {
	v, ok := k.txStates.Load(tx)
	if !ok {
		panic("kernel: afterFlush outside k.update")
	}
	st := v.(*txState)
	st.afterFlush = append(st.afterFlush, fn)
}

type dirtyContext struct {
	r *procRecord
	c *llmContext
}

// stageContext registers c (of r) to be written when tx's function ends.
func (k *Runtime) stageContext(tx *objects.Txn, r *procRecord, c *llmContext) {
	v, ok := k.txStates.Load(tx)
	if !ok {
		panic("kernel: context staged outside k.update")
	}
	st := v.(*txState)
	for _, d := range st.dirty {
		if d.c == c {
			return
		}
	}
	st.dirty = append(st.dirty, dirtyContext{r: r, c: c})
}

func (k *Runtime) flushContexts(tx *objects.Txn, st *txState) error {
	for _, d := range st.dirty {
		if err := k.writeContext(tx, d.r, d.c); err != nil {
			return err
		}
		if err := saveProc(tx, d.r); err != nil {
			return err
		}
	}
	for _, fn := range st.afterFlush {
		if err := fn(); err != nil {
			return err
		}
	}
	return nil
}

// markCommit records that tx holds a change of kind (failpoint builds only).
func (k *Runtime) markCommit(tx *objects.Txn, kind string) {
	if !failpoint.Enabled {
		return
	}
	if v, ok := k.commitKinds.Load(tx); ok {
		kinds := v.(*[]string)
		for _, have := range *kinds {
			if have == kind {
				return
			}
		}
		*kinds = append(*kinds, kind)
	}
}
