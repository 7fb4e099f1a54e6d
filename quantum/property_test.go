package quantum

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"testing"
)

// TestEveryCallAnsweredOnce drives random batches with random outcomes,
// messages, reloads and crashes, and checks the batch's promises: every call
// is answered exactly once (the call a wait ended on is answered when the
// wait ends), no call runs after the batch ended, and the batch always ends.
func TestEveryCallAnsweredOnce(t *testing.T) {
	for seed := int64(0); seed < 3000; seed++ {
		if err := randomBatch(rand.New(rand.NewSource(seed))); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

func randomBatch(rng *rand.Rand) error {
	n := rng.Intn(6)
	calls := make([]Call, n)
	for i := range calls {
		calls[i] = Call{ID: fmt.Sprint(i), Name: fmt.Sprintf("t%d", i)}
	}
	b := NewBatch(1, calls, rng.Intn(2) == 0)
	answered := make([]int, n)
	invoked := make([]bool, n)
	var seq uint64
	in := Input{Kind: Continue}
	for steps := 0; ; steps++ {
		if steps > 10*n+10 {
			return fmt.Errorf("batch did not end after %d steps", steps)
		}
		effects, err := b.Step(in)
		if err != nil {
			return err
		}
		last := effects[len(effects)-1]
		for _, e := range effects {
			switch e.Kind {
			case Record, NotStarted, SettlementUnknown:
				answered[e.Call]++
			case Invoke:
				if b.EndedBy != "" {
					return fmt.Errorf("call %d invoked after %s ended the batch", e.Call, b.EndedBy)
				}
				invoked[e.Call] = true
			}
		}
		switch last.Kind {
		case CheckMessages:
			in = Input{Kind: Seen}
			for range rng.Intn(3) / 2 {
				seq++
				kind := "normal"
				if rng.Intn(3) == 0 {
					kind = KindInterrupt
				}
				in.Notices = append(in.Notices, Notice{Seq: seq, Kind: kind})
			}
		case Invoke:
			in = Input{Kind: Invoked, Outcome: Outcome{Kind: OutcomeKind(rng.Intn(6)), EndsBatch: rng.Intn(4) == 0}}
		case StartEffect:
			if rng.Intn(2) == 0 {
				data, _ := json.Marshal(b)
				b = new(Batch)
				if err := json.Unmarshal(data, b); err != nil {
					return err
				}
			}
			switch rng.Intn(5) {
			case 0:
				in = Input{Kind: Crashed} // answered by SettlementUnknown
			case 4:
				in = Input{Kind: Stopped} // answered by NotStarted
			case 1:
				in = Input{Kind: EffectDone, Running: false}
				answered[last.Call]++ // the kernel records the result first
			default:
				in = Input{Kind: EffectDone, Running: true}
				answered[last.Call]++
			}
		case End:
			if e := last.Ending; e.Kind == Wait {
				if answered[e.Call] != 0 || !invoked[e.Call] {
					return fmt.Errorf("the call a wait ended on (%d) was answered %d times, invoked %v", e.Call, answered[e.Call], invoked[e.Call])
				}
				answered[e.Call]++
			}
			return checkAnswered(b, answered)
		case Abandon:
			if in.Kind == EffectDone {
				// A killed process keeps its remaining calls unanswered: it runs
				// nothing more and its context is never sent again.
				return nil
			}
			return checkAnswered(b, answered)
		default:
			return fmt.Errorf("batch stopped on %s", last.Kind)
		}
		if last.Kind != StartEffect {
			if _, err := b.Step(Input{Kind: Crashed}); err == nil {
				return fmt.Errorf("a crash was accepted outside an effect (phase %s)", b.Phase())
			}
		}
	}
}

func checkAnswered(b *Batch, answered []int) error {
	for i, a := range answered {
		if a != 1 {
			return fmt.Errorf("call %d answered %d times (ended by %q)", i, a, b.EndedBy)
		}
	}
	if _, err := b.Step(Input{Kind: Continue}); err == nil {
		return fmt.Errorf("an ended batch took another input")
	}
	return nil
}
