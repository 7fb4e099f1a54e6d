package process

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

func BenchmarkStep(b *testing.B) {
	r := baseRecord()
	r.State = Runnable
	now := t0
	for b.Loop() {
		var err error
		if r, err = Step(r, Input{Kind: Dispatch}, now); err != nil {
			b.Fatal(err)
		}
		if r, err = Step(r, Input{Kind: Yield}, now); err != nil {
			b.Fatal(err)
		}
		now = now.Add(time.Millisecond)
	}
	b.ReportMetric(2*float64(b.N)/b.Elapsed().Seconds(), "transitions/s")
}

// benchReview is a process with n acknowledged Human messages, each cited by
// its own acceptance check.
func benchReview(n int) (ReviewInput, json.RawMessage) {
	in := ReviewInput{GoalOID: testGoal, GoalVersion: 3, GoalNamespace: "proc-3", GoalName: "goal",
		ObservedTools: []string{"get_current_time", "sleep", "write_object", "read_object"}}
	ev := Evidence{GoalOID: testGoal, ReviewedMessageIDs: []string{}, FinalVerification: []string{"read_object"}}
	ev.AcceptanceChecks = append(ev.AcceptanceChecks, AcceptanceCheck{Requirement: "goal", SourceRefs: []string{testGoal},
		Status: "completed", EvidenceToolCalls: []string{"write_object"}, EvidenceSummary: "written"})
	for i := range n {
		id := fmt.Sprintf("msg-%04d", i)
		in.HumanMessages = append(in.HumanMessages, HumanMessage{ID: id, Status: MessageAcked, ContentSHA256: sha(id)})
		ev.ReviewedMessageIDs = append(ev.ReviewedMessageIDs, id)
		ev.AcceptanceChecks = append(ev.AcceptanceChecks, AcceptanceCheck{Requirement: "follow-up " + id, SourceRefs: []string{id},
			Status: "completed", EvidenceToolCalls: []string{"get_current_time"}, EvidenceSummary: "done"})
	}
	raw, _ := json.Marshal(ev)
	return in, raw
}

func BenchmarkReviewToken(b *testing.B) {
	for _, n := range []int{0, 1000} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			in, _ := benchReview(n)
			for b.Loop() {
				ReviewToken(in)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

func BenchmarkDecideExit(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("messages=%d", n), func(b *testing.B) {
			in, raw := benchReview(n)
			tok := ReviewToken(in)
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				d, err := Decide(in, tok, raw)
				if err != nil || !d.Exit {
					b.Fatalf("no exit: %v %v", err, d.Review.ValidationErrors)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

func BenchmarkDecodeEvidence(b *testing.B) {
	_, raw := benchReview(100)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, errs := DecodeEvidence(raw); len(errs) > 0 {
			b.Fatal(errs)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decodes/s")
}
