package kernel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// TestContextsReadWhileTheyGrow reads contexts through the Host's views (the
// decoded context the cache shares, and the context Object's payload) while
// quanta extend them in place or move them to room made for them outside the
// lock, and checks every read is a whole, consistent
// context: a payload that is JSON with the digest its metadata names, and
// entries that only grow. Run with -race, it also checks that an extension
// writes no byte a reader of an earlier version reads.
func TestContextsReadWhileTheyGrow(t *testing.T) {
	var script strings.Builder
	script.WriteString("processes:\n")
	const procs, turns = 4, 40
	for range procs {
		script.WriteString("  - image: base:v0\n    turns:\n")
		for range turns {
			// Text makes the contexts outgrow their arrays, so that commits
			// also move into room made outside the lock (prepareReply).
			script.WriteString("      - {text: \"" + strings.Repeat("lorem ipsum ", 50) + "\", tool_calls: [{name: get_current_time, arguments: {}}]}\n")
		}
		script.WriteString("      - tool_calls: [{name: process_exit, arguments: {}}]\n")
	}
	h := newHarness(t, script.String())
	var pids []int64
	for range procs {
		pids = append(pids, h.spawn(clockGrants()))
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		if err := h.rt.RunUntilIdle(context.Background()); err != nil {
			t.Error(err)
		}
	})
	for _, pid := range pids {
		wg.Go(func() {
			seen := 0
			for {
				select {
				case <-done:
					return
				default:
				}
				v, err := h.rt.ContextOf(pid)
				if err != nil {
					t.Error(err)
					return
				}
				if v.Entries < seen {
					t.Errorf("pid %d: context read with %d entries after %d", pid, v.Entries, seen)
					return
				}
				seen = v.Entries
				meta, payload, err := h.rt.ReadObject(v.OID)
				if err != nil {
					t.Error(err)
					return
				}
				var doc contextDoc
				if err := json.Unmarshal(payload, &doc); err != nil {
					t.Errorf("pid %d: context payload at version %d is not a context: %v", pid, meta.Version, err)
					return
				}
				if sum := sha256.Sum256(payload); hex.EncodeToString(sum[:]) != meta.PayloadSHA256 {
					t.Errorf("pid %d: context payload at version %d is not the one its digest names", pid, meta.Version)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, pid := range pids {
		if got := h.info(pid).Status; got != "exited" {
			t.Fatalf("pid %d is %s, want exited", pid, got)
		}
	}
}
