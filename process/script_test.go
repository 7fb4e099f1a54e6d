package process

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/libos/libos/internal/datadriven"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scriptState is what a process script carries from case to case: a process
// record for the state machine, and the review facts for the completion review.
type scriptState struct {
	rec       Record
	now       time.Time
	review    ReviewInput
	lastToken string // the token of the last probe or token command
	probed    string // the token the last probe returned
	earlier   string // the token the probe before that returned
}

func newScriptState() *scriptState {
	return &scriptState{now: t0}
}

func TestScripts(t *testing.T) {
	var st *scriptState
	var script string
	datadriven.Run(t, "testdata/*.txt", func(t *testing.T, c *datadriven.Case) string {
		file, _, _ := strings.Cut(c.Pos, ":")
		if file != script {
			st, script = newScriptState(), file
		}
		out, err := st.run(c)
		if err != nil {
			t.Fatalf("%s: %v", c.Pos, err)
		}
		return out
	})
}

func (st *scriptState) run(c *datadriven.Case) (string, error) {
	switch c.Cmd {
	// The state machine.
	case "new":
		st.rec = Record{State: Created, CreatedAt: st.now, UpdatedAt: st.now}
		for _, a := range c.Args {
			n, err := strconv.ParseInt(a.Val, 10, 64)
			if err != nil {
				return "", err
			}
			switch a.Key {
			case "pid":
				st.rec.PID = n
			case "parent":
				st.rec.ParentPID = n
			default:
				return "", fmt.Errorf("new: unknown %q", a.Key)
			}
		}
		return formatRecord(st.rec), nil
	case "step":
		in, err := st.parseInput(c)
		if err != nil {
			return "", err
		}
		st.now = st.now.Add(time.Second)
		next, err := Step(st.rec, in, st.now)
		if err != nil {
			return errorLine(err), nil
		}
		from := stateName(st.rec)
		st.rec = next
		return fmt.Sprintf("%s -> %s\n%s", from, stateName(next), formatRecord(next)), nil

	// The completion review.
	case "goal":
		for _, a := range c.Args {
			switch a.Key {
			case "oid":
				st.review.GoalOID = a.Val
			case "version":
				v, err := strconv.ParseUint(a.Val, 10, 64)
				if err != nil {
					return "", err
				}
				st.review.GoalVersion = v
			case "namespace":
				st.review.GoalNamespace = a.Val
			case "name":
				st.review.GoalName = a.Val
			case "sha256":
				st.review.GoalSHA256 = a.Val
			default:
				return "", fmt.Errorf("goal: unknown %q", a.Key)
			}
		}
		return "ok", nil
	case "goal-unavailable":
		st.review.GoalUnavailable = c.Input
		return "ok", nil
	case "human":
		id, _ := c.Arg("id")
		status, ok := c.Arg("status")
		if !ok {
			status = MessageUnread
		}
		st.review.HumanMessages = append(st.review.HumanMessages, HumanMessage{ID: id, Status: status, ContentSHA256: sha(c.Input)})
		return "ok", nil
	case "many-humans":
		v, _ := c.Arg("n")
		n, err := strconv.Atoi(v)
		if err != nil {
			return "", err
		}
		for range n {
			id := fmt.Sprintf("bulk-%d", len(st.review.HumanMessages))
			st.review.HumanMessages = append(st.review.HumanMessages, HumanMessage{ID: id, Status: MessageAcked, ContentSHA256: sha(id)})
		}
		return fmt.Sprintf("%d Human messages", len(st.review.HumanMessages)), nil
	case "content":
		// content id=X: replace the content of message X with the input.
		id, _ := c.Arg("id")
		for i := range st.review.HumanMessages {
			if st.review.HumanMessages[i].ID == id {
				st.review.HumanMessages[i].ContentSHA256 = sha(c.Input)
				return "ok", nil
			}
		}
		return "", fmt.Errorf("content: no message %q", id)
	case "ack", "supersede", "unread":
		status := map[string]string{"ack": MessageAcked, "supersede": MessageSupersededByRestore, "unread": MessageUnread}[c.Cmd]
		for _, id := range c.Words() {
			found := false
			for i := range st.review.HumanMessages {
				if st.review.HumanMessages[i].ID == id {
					st.review.HumanMessages[i].Status, found = status, true
				}
			}
			if !found {
				return "", fmt.Errorf("%s: no message %q", c.Cmd, id)
			}
		}
		return "ok", nil
	case "observe":
		st.review.ObservedTools = append(st.review.ObservedTools, c.Words()...)
		return "ok", nil
	case "token":
		tok := ReviewToken(st.review)
		return st.noteToken(tok), nil
	case "probe":
		d, err := Decide(st.review, "", nil)
		if err != nil {
			return errorLine(err), nil
		}
		st.earlier, st.probed = st.probed, d.Review.ReviewToken
		return st.noteToken(d.Review.ReviewToken) + "\n" + summarizeReview(d.Review), nil
	case "review":
		r, err := BuildReview(st.review, nil)
		if err != nil {
			return errorLine(err), nil
		}
		data, err := json.MarshalIndent(r, "", "  ")
		return string(data), err
	case "submit":
		tokArg, _ := c.Arg("token")
		var tok string
		switch tokArg {
		case "probed":
			tok = st.probed
		case "earlier":
			tok = st.earlier
		case "current":
			tok = ReviewToken(st.review)
		case "", "none":
		default:
			tok = tokArg
		}
		var ev json.RawMessage
		if c.Input != "" {
			ev = json.RawMessage(c.Input)
		}
		d, err := Decide(st.review, tok, ev)
		if err != nil {
			return errorLine(err), nil
		}
		if d.Exit {
			return fmt.Sprintf("exit evidence_sha256=%s\n%s", d.EvidenceSHA256, d.EvidenceJSON), nil
		}
		fresh := "review_token is the current one"
		if d.Review.ReviewToken != ReviewToken(st.review) {
			fresh = "review_token IS NOT CURRENT"
		}
		return fmt.Sprintf("completion_review_required (%s)\n%s", fresh, formatValidationErrors(d.Review.ValidationErrors)), nil
	case "decode":
		ev, errs := DecodeEvidence(json.RawMessage(c.Input))
		data, err := json.Marshal(ev)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%s\n%s", data, formatValidationErrors(errs)), nil
	}
	return "", fmt.Errorf("unknown command %q", c.Cmd)
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func (st *scriptState) noteToken(tok string) string {
	change := "first"
	switch {
	case st.lastToken == "":
	case st.lastToken == tok:
		change = "unchanged"
	default:
		change = "changed"
	}
	st.lastToken = tok
	return fmt.Sprintf("token %s… %s", tok[:12], change)
}

func (st *scriptState) parseInput(c *datadriven.Case) (Input, error) {
	w := c.Words()
	if len(w) == 0 {
		return Input{}, errors.New("step: want an input kind")
	}
	in := Input{Kind: InputKind(w[0]), Reason: c.Input}
	var wait Wait
	hasWait := false
	for _, a := range c.Args[1:] {
		switch a.Key {
		case "gen":
			if a.Val == "current" {
				in.Gen = st.rec.Gen
				continue
			}
			n, err := strconv.ParseUint(a.Val, 10, 64)
			if err != nil {
				return in, err
			}
			in.Gen = n
		case "kind":
			in.WaitKind = WaitKind(a.Val)
		case "result":
			in.ResultOID = a.Val
		case "wait":
			wait.Kind, hasWait = WaitKind(a.Val), true
		case "until":
			ts, err := time.Parse(time.RFC3339, a.Val)
			if err != nil {
				return in, err
			}
			wait.Until = ts
		case "child":
			n, err := strconv.ParseInt(a.Val, 10, 64)
			if err != nil {
				return in, err
			}
			wait.ChildPID = n
		case "filter":
			wait.Filter = json.RawMessage(a.Val)
		case "pending":
			wait.PendingID = a.Val
		case "floor":
			n, err := strconv.ParseUint(a.Val, 10, 64)
			if err != nil {
				return in, err
			}
			in.Floor = n
		case "attempt":
			n, err := strconv.Atoi(a.Val)
			if err != nil {
				return in, err
			}
			wait.Attempt = n
		default:
			return in, fmt.Errorf("step: unknown %q", a.Key)
		}
	}
	if hasWait {
		if wait.Kind == WaitProvider {
			// A provider wait's reason is the case's body, as a failure's is.
			wait.Reason, in.Reason = c.Input, ""
		}
		in.Wait = &wait
	}
	return in, nil
}

func formatRecord(r Record) string {
	parts := []string{fmt.Sprintf("pid=%d state=%s gen=%d", r.PID, r.State, r.Gen)}
	if r.PausedFrom != "" {
		parts = append(parts, "paused_from="+string(r.PausedFrom))
	}
	if r.Wait != nil {
		data, _ := json.Marshal(r.Wait)
		parts = append(parts, "wait="+string(data))
	}
	if r.Reason != "" {
		parts = append(parts, fmt.Sprintf("reason=%q", r.Reason))
	}
	if r.ResultOID != "" {
		parts = append(parts, "result_oid="+r.ResultOID)
	}
	parts = append(parts, "updated_at="+r.UpdatedAt.Format(time.TimeOnly))
	return strings.Join(parts, " ")
}

func errorLine(err error) string {
	kind := "error"
	for _, s := range []error{ErrInvalidTransition, ErrStaleGeneration, ErrWaitMismatch, ErrInvalidInput, ErrInvalidRecord, ErrTooManyHumanMessages, ErrGoalUnavailable, ErrInvalidReviewInput} {
		if errors.Is(err, s) {
			kind = s.Error()
		}
	}
	return fmt.Sprintf("error (%s): %v", kind, err)
}

func summarizeReview(r Review) string {
	list := func(s []string) string {
		if len(s) <= 6 {
			return jsonList(s)
		}
		return fmt.Sprintf("%s … %s (%d)", strings.TrimSuffix(jsonList(s[:3]), "]"), strings.TrimPrefix(jsonList(s[len(s)-1:]), "["), len(s))
	}
	lines := []string{
		fmt.Sprintf("goal oid=%s version=%d reference=%s(%s/%s)", r.Goal.OID, r.Goal.Version, r.Goal.Reference.Tool, r.Goal.Reference.Arguments.Namespace, r.Goal.Reference.Arguments.Name),
		"expected_source_refs=" + list(r.ExpectedSourceRefs),
		"unread=" + list(r.UnreadHumanMessageIDs),
		fmt.Sprintf("acknowledged=%s count=%d sha256=%s…", list(r.AcknowledgedHumanMessageIDs), r.AcknowledgedHumanMessageCount, r.AcknowledgedHumanMessagesSHA256[:12]),
		"observed=" + list(r.ObservedSuccessfulToolCalls),
		fmt.Sprintf("validation_errors=%d", len(r.ValidationErrors)),
	}
	return strings.Join(lines, "\n")
}

func formatValidationErrors(errs []ValidationError) string {
	if len(errs) == 0 {
		return "no validation errors"
	}
	lines := make([]string, len(errs))
	for i, e := range errs {
		lines[i] = "- " + e.String()
	}
	return strings.Join(lines, "\n")
}
