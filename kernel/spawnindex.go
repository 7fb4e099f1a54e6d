package kernel

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/libos/libos/objects"
)

// A process's spawn index is its place among the processes spawned with its
// image in its process tree. Only the replay provider reads it (to pick a
// script entry), so the kernel keeps it beside the process record, under its
// own key, and never shows it to the process or puts it in a request.
const prefixSpawnIndex = "k/si/"

func spawnIndexKey(pid int64) []byte { return pidKey(prefixSpawnIndex, pid) }

// assignSpawnIndex gives pid the next index of image in root's tree. The
// count is per tree, so every root started in a shared directory reads its
// script from the start; it is a store sequence, so a spawn lost in a crash
// gives its index back.
func assignSpawnIndex(tx *txn, pid, root int64, image string) error {
	n, err := tx.NextSequence(fmt.Sprintf("image:%d:%s", root, image))
	if err != nil {
		return err
	}
	return tx.Set(spawnIndexKey(pid), strconv.AppendUint(nil, n-1, 10))
}

// copySpawnIndex gives a fork the index of the process it copies, so it goes
// on with the same script entry. The count of the tree is not advanced.
func copySpawnIndex(tx *txn, from, to int64) error {
	b, err := tx.Get(spawnIndexKey(from))
	if err != nil {
		return fmt.Errorf("spawn index of pid %d: %w", from, err)
	}
	return tx.Set(spawnIndexKey(to), b)
}

// SpawnIndex returns the spawn index of process pid; the Runtime is the
// llm.SpawnIndexer of a replay provider answering its processes.
//
// It reads with a peek, which waits for no sync: a process's index never
// changes once its spawn committed, and a provider asks for it in a call,
// which starts only once that commit is durable. A view would wait for the
// sync of whatever commit came last, another process's, which held a new
// child's first call until its parent's commit was durable.
func (k *Runtime) SpawnIndex(pid int64) (int, error) {
	if n, ok := k.spawnIndexes.Load(pid); ok {
		return n.(int), nil
	}
	var n uint64
	err := k.peek(func(tx *txn) error {
		b, err := tx.Get(spawnIndexKey(pid))
		if errors.Is(err, objects.ErrNotFound) {
			return fmt.Errorf("%w: pid %d has no spawn index", ErrNoProcess, pid)
		}
		if err != nil {
			return err
		}
		n, err = strconv.ParseUint(string(b), 10, 31)
		return err
	})
	if err != nil {
		return 0, err
	}
	k.spawnIndexes.Store(pid, int(n))
	return int(n), nil
}
