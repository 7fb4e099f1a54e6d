package kernel

import (
	"slices"
	"testing"

	"github.com/libos/libos/process"
)

// livePIDs reads the index of live processes.
func livePIDs(t *testing.T, h *harness) []int64 {
	t.Helper()
	var pids []int64
	err := h.rt.view(func(tx *txn) error {
		return scanLive(tx, func(e liveEntry) error {
			r, err := loadProc(tx, e.PID)
			if err != nil {
				return err
			}
			if got := liveEntryOf(r); got != e {
				t.Errorf("live entry %+v, record says %+v", e, got)
			}
			pids = append(pids, e.PID)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// The index of live processes follows every state a record is written in,
// and a directory written before the index existed gets it at its next
// open, with its runnable processes still scheduled.
func TestLiveIndex(t *testing.T) {
	h := newHarness(t, clockScript)
	first := h.spawn(clockGrants())
	second := h.spawn(clockGrants())
	if got := livePIDs(t, h); !slices.Equal(got, []int64{first, second}) {
		t.Fatalf("live after spawning: %v", got)
	}
	h.run()
	if got := livePIDs(t, h); len(got) != 0 {
		t.Fatalf("live after every process exited: %v", got)
	}
	third := h.spawn(clockGrants())
	// Forget the index, as a directory from before it did.
	err := h.rt.update(func(tx *txn) error {
		if err := tx.Delete(liveKey(third)); err != nil {
			return err
		}
		return tx.Delete([]byte(keyLiveIndex))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.rt.Close(); err != nil {
		t.Fatal(err)
	}
	h.open(clockScript)
	if got := livePIDs(t, h); !slices.Equal(got, []int64{third}) {
		t.Fatalf("live after the index was rebuilt: %v", got)
	}
	h.run()
	if st := h.info(third).Status; st != process.Exited {
		t.Fatalf("pid %d after a reopen that rebuilt the index: %s", third, st)
	}
}
