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
func (k *Runtime) update(fn func(tx *objects.Txn) error) error {
	if !failpoint.Enabled {
		return k.store.Update(fn)
	}
	var kinds []string
	err := k.store.Update(func(tx *objects.Txn) error {
		k.commitKinds.Store(tx, &kinds)
		defer k.commitKinds.Delete(tx)
		if err := fn(tx); err != nil {
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
