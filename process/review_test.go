package process

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const testGoal = "0b6c1f2e-6a4d-4f7e-9c3b-2d1e0f9a8b7c"

func reviewInput() ReviewInput {
	return ReviewInput{
		GoalOID: testGoal, GoalVersion: 2, GoalNamespace: "proc-3", GoalName: "goal",
		HumanMessages: []HumanMessage{
			{ID: "m1", Status: MessageAcked, ContentSHA256: sha("first")},
			{ID: "m2", Status: MessageSupersededByRestore},
			{ID: "m3", Status: MessageAcked, ContentSHA256: sha("third")},
		},
		ObservedTools: []string{"sleep", "process_exit", "get_current_time", "sleep", " "},
	}
}

func passingEvidence() json.RawMessage {
	ev := Evidence{
		GoalOID:            testGoal,
		ReviewedMessageIDs: []string{"m3", "m1"},
		AcceptanceChecks: []AcceptanceCheck{{
			Requirement: "do it", SourceRefs: []string{testGoal, "m1", "m3"}, Status: "completed",
			EvidenceToolCalls: []string{"sleep"}, EvidenceSummary: "slept 1s",
		}},
		FinalVerification: []string{"get_current_time"},
	}
	data, _ := json.Marshal(ev)
	return data
}

func TestReviewShape(t *testing.T) {
	r, err := BuildReview(ReviewInput{GoalOID: testGoal, GoalVersion: 1, GoalNamespace: "ns", GoalName: "goal"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range top {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{
		"acknowledged_human_message_count", "acknowledged_human_message_ids", "acknowledged_human_message_reference",
		"acknowledged_human_messages_sha256", "expected_source_refs", "goal", "hints", "observed_successful_tool_calls",
		"required_evidence_shape", "review_token", "unread_human_message_ids",
	}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("review keys %q\nwant %q", keys, want)
	}
	if strings.Contains(string(data), "null") {
		t.Fatalf("an empty review has a null: %s", data)
	}
	for _, frag := range []string{
		`"goal":{"oid":"` + testGoal + `","version":1,"reference":{"tool":"read_object","arguments":{"namespace":"ns","name":"goal"}}}`,
		`"arguments":{"message_ids":[],"include_acked":true,"ack":false,"limit":0}`,
		`"unread_human_message_ids":[]`,
		`"observed_successful_tool_calls":[]`,
	} {
		if !strings.Contains(string(data), frag) {
			t.Errorf("review JSON lacks %s:\n%s", frag, data)
		}
	}
	var shape map[string]any
	if err := json.Unmarshal(r.RequiredEvidenceShape, &shape); err != nil || shape["type"] != "object" {
		t.Fatalf("required_evidence_shape is not a JSON object schema: %s (%v)", r.RequiredEvidenceShape, err)
	}
	r2, _ := BuildReview(ReviewInput{GoalOID: testGoal, GoalVersion: 1, GoalNamespace: "ns", GoalName: "goal"}, []ValidationError{{Rule: "x", Check: -1}})
	if len(r2.ValidationErrors) != 1 || r2.ReviewToken != r.ReviewToken {
		t.Fatalf("validation errors not carried, or they changed the token")
	}
}

func TestReviewFacts(t *testing.T) {
	in := reviewInput()
	before := slices.Clone(in.ObservedTools)
	r, err := BuildReview(in, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in.ObservedTools, before) {
		t.Fatal("BuildReview mutated ObservedTools")
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"expected refs", r.ExpectedSourceRefs, []string{testGoal, "m1", "m3"}},
		{"acked", r.AcknowledgedHumanMessageIDs, []string{"m1", "m3"}},
		{"count", r.AcknowledgedHumanMessageCount, 2},
		{"unread", r.UnreadHumanMessageIDs, []string{}},
		{"observed", r.ObservedSuccessfulToolCalls, []string{"get_current_time", "sleep"}},
		{"reference ids", r.AcknowledgedHumanMessageReference.Arguments, MessageReadArguments{MessageIDs: []string{"m1", "m3"}, IncludeAcked: true, Limit: 2}},
		{"token", r.ReviewToken, ReviewToken(in)},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
	// The acknowledged hash depends on the acknowledged contents only.
	other := reviewInput()
	other.HumanMessages[1].Status = MessageUnread
	r2, _ := BuildReview(other, nil)
	if r2.AcknowledgedHumanMessagesSHA256 != r.AcknowledgedHumanMessagesSHA256 || r2.ReviewToken == r.ReviewToken {
		t.Fatal("an unread message changed the acknowledged hash, or did not change the token")
	}
	other.HumanMessages[0].ContentSHA256 = sha("edited")
	r3, _ := BuildReview(other, nil)
	if r3.AcknowledgedHumanMessagesSHA256 == r2.AcknowledgedHumanMessagesSHA256 {
		t.Fatal("an acknowledged content change did not change the acknowledged hash")
	}
}

func TestReviewTokenIdentity(t *testing.T) {
	base := ReviewToken(reviewInput())
	same := []func(*ReviewInput){
		func(in *ReviewInput) { in.ObservedTools = append(in.ObservedTools, "write_object") },
		func(in *ReviewInput) { in.GoalSHA256 = sha("goal text") },
		func(in *ReviewInput) { in.GoalNamespace, in.GoalName = "elsewhere", "other" },
		func(in *ReviewInput) { in.HumanMessages[1].ContentSHA256 = sha("not acked") },
	}
	for i, f := range same {
		in := reviewInput()
		f(&in)
		if ReviewToken(in) != base {
			t.Errorf("change %d altered the token", i)
		}
	}
	differ := []func(*ReviewInput){
		func(in *ReviewInput) { in.GoalVersion++ },
		func(in *ReviewInput) { in.GoalOID = "11111111-1111-4111-8111-111111111111" },
		func(in *ReviewInput) {
			in.HumanMessages = append(in.HumanMessages, HumanMessage{ID: "m4", Status: MessageUnread})
		},
		func(in *ReviewInput) { in.HumanMessages[1].Status = MessageUnread },
		func(in *ReviewInput) { in.HumanMessages[0].ContentSHA256 = sha("edited") },
		func(in *ReviewInput) {
			in.HumanMessages[0], in.HumanMessages[2] = in.HumanMessages[2], in.HumanMessages[0]
		},
	}
	for i, f := range differ {
		in := reviewInput()
		f(&in)
		if ReviewToken(in) == base {
			t.Errorf("change %d left the token unchanged", i)
		}
	}
	if len(base) != 64 {
		t.Fatalf("token %q is not hex SHA-256", base)
	}
}

func TestReviewInputRefused(t *testing.T) {
	cases := []struct {
		name string
		edit func(*ReviewInput)
		want error
		text string
	}{
		{"no goal oid", func(in *ReviewInput) { in.GoalOID = " " }, ErrInvalidReviewInput, "goal oid"},
		{"no goal name", func(in *ReviewInput) { in.GoalName = "" }, ErrInvalidReviewInput, "namespace and name"},
		{"empty id", func(in *ReviewInput) { in.HumanMessages[0].ID = "" }, ErrInvalidReviewInput, "human_messages[0].id"},
		{"repeated id", func(in *ReviewInput) { in.HumanMessages[2].ID = "m1" }, ErrInvalidReviewInput, "listed twice"},
		{"bad status", func(in *ReviewInput) { in.HumanMessages[1].Status = "read" }, ErrInvalidReviewInput, "human_messages[1].status"},
		{"acked without hash", func(in *ReviewInput) { in.HumanMessages[0].ContentSHA256 = "" }, ErrInvalidReviewInput, "content_sha256"},
		{"acked with a bad hash", func(in *ReviewInput) { in.HumanMessages[0].ContentSHA256 = strings.Repeat("G", 64) }, ErrInvalidReviewInput, "content_sha256"},
		{"goal gone", func(in *ReviewInput) { in.GoalUnavailable = "payload lost" }, ErrGoalUnavailable, "payload lost"},
		{"too many", func(in *ReviewInput) {
			for i := range MaxHumanMessages {
				in.HumanMessages = append(in.HumanMessages, HumanMessage{ID: "x" + string(rune('a'+i%26)) + strings.Repeat("y", i/26), Status: MessageUnread})
			}
		}, ErrTooManyHumanMessages, "Host"},
	}
	for _, c := range cases {
		in := reviewInput()
		c.edit(&in)
		if _, err := BuildReview(in, nil); !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: BuildReview err = %v, want %v mentioning %q", c.name, err, c.want, c.text)
		}
		d, err := Decide(in, ReviewToken(in), passingEvidence())
		if !errors.Is(err, c.want) || d.Exit {
			t.Errorf("%s: Decide = %+v, %v; want %v and no exit", c.name, d, err, c.want)
		}
	}
}

func TestDecideOutcomes(t *testing.T) {
	in := reviewInput()
	tok := ReviewToken(in)

	probe, err := Decide(in, "", nil)
	if err != nil || probe.Exit || probe.Review.ValidationErrors != nil || probe.Review.ReviewToken != tok {
		t.Fatalf("bare probe = %+v, %v", probe, err)
	}
	nullProbe, err := Decide(in, "", json.RawMessage(" null "))
	if err != nil || nullProbe.Exit || nullProbe.Review.ValidationErrors != nil {
		t.Fatalf("probe with null evidence = %+v, %v", nullProbe, err)
	}

	d, err := Decide(in, tok, passingEvidence())
	if err != nil || !d.Exit {
		t.Fatalf("passing submission = %+v, %v", d.Review.ValidationErrors, err)
	}
	sum := sha256.Sum256(d.EvidenceJSON)
	if d.EvidenceSHA256 != hex.EncodeToString(sum[:]) {
		t.Fatal("EvidenceSHA256 is not the hash of EvidenceJSON")
	}
	var back Evidence
	if err := json.Unmarshal(d.EvidenceJSON, &back); err != nil || !reflect.DeepEqual(back, d.Evidence) {
		t.Fatalf("EvidenceJSON does not encode Evidence: %v", err)
	}
	if errs := ValidateEvidence(d.Review, d.Evidence); len(errs) != 0 {
		t.Fatalf("ValidateEvidence disagrees with Decide: %v", errs)
	}

	// One unread message blocks exit with an otherwise perfect submission.
	blocked := reviewInput()
	blocked.HumanMessages = append(blocked.HumanMessages, HumanMessage{ID: "m9", Status: MessageUnread})
	d, err = Decide(blocked, ReviewToken(blocked), passingEvidence())
	if err != nil || d.Exit || len(d.Review.ValidationErrors) != 1 || d.Review.ValidationErrors[0].Rule != RuleUnreadMessages {
		t.Fatalf("unread message: %+v, %v", d.Review.ValidationErrors, err)
	}

	// Stale and wrong tokens get the fresh review.
	for _, bad := range []string{ReviewToken(blocked), "anything at all", strings.ToUpper(tok)} {
		d, err = Decide(in, bad, passingEvidence())
		if err != nil || d.Exit || d.Review.ReviewToken != tok || d.Review.ValidationErrors[0].Rule != RuleReviewToken {
			t.Fatalf("token %q: %+v, %v", bad, d.Review.ValidationErrors, err)
		}
	}
}

// FuzzDecodeEvidence: decoding never panics; every error names a rule, a
// field and a valid check index; evidence that decodes cleanly survives a
// round trip through its canonical encoding; and Decide never exits on
// evidence that did not decode cleanly.
func FuzzDecodeEvidence(f *testing.F) {
	f.Add([]byte(passingEvidence()))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"goal_oid":"g","goal_oid":"g"}`))
	f.Add([]byte(`{"acceptance_checks":[1,{"status":null,"x":[]}]}`))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`))
	f.Add([]byte(`{"goal_oid":"\ud800","reviewed_message_ids":["\u0000"]}`))
	in := reviewInput()
	tok := ReviewToken(in)
	f.Fuzz(func(t *testing.T, raw []byte) {
		ev, errs := DecodeEvidence(raw)
		for _, e := range errs {
			if e.Rule == "" || e.Field == "" || e.Message == "" {
				t.Fatalf("incomplete error %+v", e)
			}
			if e.Check < -1 || e.Check >= max(len(ev.AcceptanceChecks), 1) {
				t.Fatalf("check index %d out of range for %d checks", e.Check, len(ev.AcceptanceChecks))
			}
		}
		d, err := Decide(in, tok, raw)
		if err != nil {
			t.Fatal(err)
		}
		if len(errs) > 0 {
			if d.Exit {
				t.Fatalf("exit with decoding errors %v", errs)
			}
			return
		}
		canon, err := json.Marshal(ev.canonical())
		if err != nil {
			t.Fatal(err)
		}
		again, errs2 := DecodeEvidence(canon)
		if len(errs2) > 0 || !reflect.DeepEqual(again.canonical(), ev.canonical()) {
			t.Fatalf("canonical form %s does not round-trip: %v", canon, errs2)
		}
		if d.Exit && d.EvidenceSHA256 == "" {
			t.Fatal("exit without an evidence hash")
		}
	})
}

// TestSharedInputsAreOnlyRead runs Step and Decide concurrently on shared
// inputs; under -race any write to them would be reported.
func TestSharedInputsAreOnlyRead(t *testing.T) {
	in := reviewInput()
	tok := ReviewToken(in)
	ev := passingEvidence()
	rec := baseRecord()
	rec.State, rec.Wait = Waiting, timerWait()
	done := make(chan error, 8)
	for range 8 {
		go func() {
			for range 100 {
				if d, err := Decide(in, tok, ev); err != nil || !d.Exit {
					done <- errors.Join(err, errors.New("no exit"))
					return
				}
				if _, err := Step(rec, Input{Kind: Wake, Gen: rec.Gen, WaitKind: WaitTimer}, t0); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
