package crashtest

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// randomKills is how many invocations in a row the randomized loop kills:
// a short loop by default, the full one with LIBOS_LONG_TESTS=1.
var randomKills = func() int {
	if os.Getenv("LIBOS_LONG_TESTS") == "1" {
		return 50
	}
	return 12
}()

// maxKillDelay bounds the random delay before SIGKILL.
const maxKillDelay = 30 * time.Millisecond

// TestRandomCrashLoop runs the tree scenario and kills every invocation of
// the binary (run, resume, checkpoint create and send alike) with SIGKILL
// after a random delay of 0-30 ms, without failpoints, resuming each time,
// until it has killed randomKills invocations; a scenario that ends
// meanwhile starts again in a new directory. Invocations after the last
// kill run to the end. Every scenario must pass the invariants of
// checkFinal and checkSnapshot and end with the same final results as the
// uninterrupted run (summary): the result payload hashes and statuses of
// the root, worker and greeter, every mailbox (ids, senders, bodies,
// statuses), the worker's Object and its durable payload, the completed
// two-stage compaction and the root's context generation, one checkpoint.
func TestRandomCrashLoop(t *testing.T) {
	want := uninterrupted(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))
	kills, rounds, invocations := 0, 0, 0
	for kills < randomKills {
		rounds++
		r := newRunner(t, tree)
		counted := 0
		arm := func(string) arming {
			for ; counted < len(r.invs); counted++ {
				if r.invs[counted].killed {
					kills++
				}
			}
			invocations++
			if kills >= randomKills {
				return arming{}
			}
			return arming{killAfter: time.Duration(rng.Int64N(int64(maxKillDelay))) + 1}
		}
		got := play(t, r, arm, 8*randomKills)
		for ; counted < len(r.invs); counted++ {
			if r.invs[counted].killed {
				kills++
			}
		}
		if got.err != nil {
			// The CLI's gap between spawning and recording the root is
			// pinned by TestResumeAfterRunKilledBeforeRootRecorded; this
			// loop is after the kernel's recovery, so it starts again.
			t.Logf("round %d: %v; starting a new round", rounds, got.err)
			continue
		}
		if diff := diffSummaries(want, got.summary); diff != nil {
			t.Fatalf("round %d: %s\n%s", rounds, diff[0], got.r.transcript())
		}
		_, interrupted, _ := got.r.model.stats()
		t.Logf("round %d: %d invocations, %d interrupted model turns", rounds, len(got.r.log), interrupted)
	}
	t.Logf("%d kills over %d invocations in %d rounds", kills, invocations, rounds)
}
