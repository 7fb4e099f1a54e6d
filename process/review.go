package process

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The completion review of a gated image (completion_gate: cumulative_review).
//
// A bare process_exit returns a review; the process reads and acknowledges
// every Human message, probes again for a fresh token, and submits evidence
// with that token. Decide is the whole decision; BuildReview, ReviewToken,
// DecodeEvidence and the rule list below are its parts.

// Human message statuses, as the mailbox stores them.
const (
	MessageUnread              = "unread"
	MessageAcked               = "acked"
	MessageSupersededByRestore = "superseded_by_restore"
)

// MaxHumanMessages is the most Human messages a review covers; beyond it the
// review fails closed with ErrTooManyHumanMessages.
const MaxHumanMessages = 1000

// Tool names the review refers to.
const (
	ToolProcessExit         = "process_exit"
	ToolReadObject          = "read_object"
	ToolReadProcessMessages = "read_process_messages"
)

// Acceptance check statuses.
const (
	CheckCompleted = "completed"
	CheckBlocked   = "blocked"
	CheckCancelled = "cancelled"
)

const (
	// Domain strings keep the token and the acknowledged hash from colliding
	// with any other hash of similar JSON.
	reviewTokenDomain      = "libos.completion_review.token.v1"
	acknowledgedHashDomain = "libos.completion_review.acknowledged.v1"

	continuationRule = "This read has no cursor. If the result has has_more=true, remove the ids it returned from message_ids and read again with only the remaining ids; repeating the same arguments returns the first page again. An empty message_ids means no messages."
)

// Errors the review returns instead of a review: the process stays non-terminal.
var (
	// ErrTooManyHumanMessages: more than MaxHumanMessages Human messages; the
	// review fails closed and the Host must approve a consolidated successor.
	ErrTooManyHumanMessages = errors.New("too many Human messages for a completion review")
	// ErrGoalUnavailable: the goal payload is gone and cannot be recovered, so
	// no token is issued.
	ErrGoalUnavailable = errors.New("goal unavailable")
	// ErrInvalidReviewInput: the facts given to the review are malformed.
	ErrInvalidReviewInput = errors.New("invalid completion review input")
)

// HumanMessage is what the review needs of one Human message: never its body.
type HumanMessage struct {
	ID     string `json:"id"`
	Status string `json:"status"` // unread, acked or superseded_by_restore
	// ContentSHA256 is the hex SHA-256 of the message content; required for
	// acknowledged messages, whose content is part of the review identity.
	ContentSHA256 string `json:"content_sha256,omitempty"`
}

// ReviewInput is the current state of a process as the review sees it. The
// kernel gathers it fresh for every probe and submission.
type ReviewInput struct {
	GoalOID       string
	GoalVersion   uint64
	GoalNamespace string
	GoalName      string
	// GoalSHA256 is the hex SHA-256 of the live goal payload, shown in the
	// review when known. It is not part of the token (the version is).
	GoalSHA256 string
	// HumanMessages lists every Human message of the process, in mailbox order.
	HumanMessages []HumanMessage
	// ObservedTools are the successful tool names observed so far; duplicates
	// and process_exit are allowed here and removed by the review.
	ObservedTools []string
	// GoalUnavailable, when non-empty, says why the goal payload is gone and
	// unrecoverable; the review then fails closed with ErrGoalUnavailable.
	GoalUnavailable string
	// RecoveredGoal is the goal's text recovered from retained evidence when
	// its live payload did not survive a reopen (bounded by the recovery),
	// or "". The review carries it inline: the reference's read cannot
	// return it.
	RecoveredGoal string
}

// GoalReference is the exact read_object call that reads the goal.
type GoalReference struct {
	Tool      string `json:"tool"`
	Arguments struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"arguments"`
}

// ReviewGoal identifies the goal without inlining it, but for a goal whose
// live payload a reopen lost, whose recovered text it carries.
type ReviewGoal struct {
	OID       string        `json:"oid"`
	Version   uint64        `json:"version"`
	SHA256    string        `json:"sha256,omitempty"`
	Reference GoalReference `json:"reference"`
	// RecoveredText is the exact initial goal recovered from retained
	// evidence, present only when the live payload is missing after a reopen.
	RecoveredText string `json:"recovered_text,omitempty"`
}

// MessageReadArguments are the read_process_messages arguments that re-read
// the acknowledged Human messages without changing them.
type MessageReadArguments struct {
	MessageIDs   []string `json:"message_ids"`
	IncludeAcked bool     `json:"include_acked"`
	Ack          bool     `json:"ack"`
	Limit        int      `json:"limit"`
}

// MessageReference is the exact call to re-read the acknowledged messages, and
// how to continue when the result is split.
type MessageReference struct {
	Tool             string               `json:"tool"`
	Arguments        MessageReadArguments `json:"arguments"`
	ContinuationRule string               `json:"continuation_rule"`
}

// Review is the completion review returned under completion_review. Every list
// is non-nil, so it encodes as [] rather than null.
type Review struct {
	ReviewToken                       string            `json:"review_token"`
	Goal                              ReviewGoal        `json:"goal"`
	ExpectedSourceRefs                []string          `json:"expected_source_refs"`
	UnreadHumanMessageIDs             []string          `json:"unread_human_message_ids"`
	AcknowledgedHumanMessageIDs       []string          `json:"acknowledged_human_message_ids"`
	AcknowledgedHumanMessageCount     int               `json:"acknowledged_human_message_count"`
	AcknowledgedHumanMessagesSHA256   string            `json:"acknowledged_human_messages_sha256"`
	AcknowledgedHumanMessageReference MessageReference  `json:"acknowledged_human_message_reference"`
	ObservedSuccessfulToolCalls       []string          `json:"observed_successful_tool_calls"`
	Hints                             []string          `json:"hints"`
	RequiredEvidenceShape             json.RawMessage   `json:"required_evidence_shape"`
	ValidationErrors                  []ValidationError `json:"validation_errors,omitempty"`
}

// ValidationError is one failed rule of a submission.
type ValidationError struct {
	Rule string `json:"rule"`
	// Check is the index in acceptance_checks the error is about, or -1.
	Check int `json:"check"`
	// Field is the path inside completion_evidence (e.g.
	// "acceptance_checks[2].status"), or the argument name (e.g. "review_token").
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e ValidationError) String() string {
	return fmt.Sprintf("%s (check %d, %s): %s", e.Rule, e.Check, e.Field, e.Message)
}

// tokenMessage is one Human message as it enters the token.
type tokenMessage struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	ContentSHA256 string `json:"content_sha256,omitempty"`
}

// ReviewToken returns the hex SHA-256 of the canonical JSON of the review's
// identity: the goal OID and version, every Human message's id and status in
// mailbox order, and the content hash of each acknowledged one. A goal version
// change, a new Human message or an ACK changes it; tool calls and Human
// output do not, since they are not part of it.
func ReviewToken(in ReviewInput) string {
	identity := struct {
		Domain        string         `json:"domain"`
		GoalOID       string         `json:"goal_oid"`
		GoalVersion   uint64         `json:"goal_version"`
		HumanMessages []tokenMessage `json:"human_messages"`
	}{Domain: reviewTokenDomain, GoalOID: in.GoalOID, GoalVersion: in.GoalVersion, HumanMessages: make([]tokenMessage, 0, len(in.HumanMessages))}
	for _, m := range in.HumanMessages {
		tm := tokenMessage{ID: m.ID, Status: m.Status}
		if m.Status == MessageAcked {
			tm.ContentSHA256 = m.ContentSHA256
		}
		identity.HumanMessages = append(identity.HumanMessages, tm)
	}
	return hashJSON(identity)
}

// hashJSON is the hex SHA-256 of v's JSON encoding. encoding/json writes
// struct fields in declaration order and sorts map keys, so the encoding of
// the types used here is canonical.
func hashJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		// Only the package's own plain types reach here; they always encode.
		panic(fmt.Sprintf("process: encode %T: %v", v, err))
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// checkReviewInput refuses what the review cannot stand on.
func checkReviewInput(in ReviewInput) error {
	if in.GoalUnavailable != "" {
		return fmt.Errorf("%w: %s; restore a checkpoint or establish a supported successor goal", ErrGoalUnavailable, in.GoalUnavailable)
	}
	if n := len(in.HumanMessages); n > MaxHumanMessages {
		return fmt.Errorf("%w: the process has %d Human messages, more than %d; the review fails closed: ask the Host to approve a consolidated successor process",
			ErrTooManyHumanMessages, n, MaxHumanMessages)
	}
	if strings.TrimSpace(in.GoalOID) == "" {
		return fmt.Errorf("%w: goal oid: required", ErrInvalidReviewInput)
	}
	if in.GoalNamespace == "" || in.GoalName == "" {
		return fmt.Errorf("%w: goal namespace and name: required for the goal reference", ErrInvalidReviewInput)
	}
	seen := make(map[string]bool, len(in.HumanMessages))
	for i, m := range in.HumanMessages {
		if m.ID == "" {
			return fmt.Errorf("%w: human_messages[%d].id: required", ErrInvalidReviewInput, i)
		}
		if seen[m.ID] {
			return fmt.Errorf("%w: human_messages[%d].id: %q listed twice", ErrInvalidReviewInput, i, m.ID)
		}
		seen[m.ID] = true
		switch m.Status {
		case MessageUnread, MessageSupersededByRestore:
		case MessageAcked:
			if !isSHA256Hex(m.ContentSHA256) {
				return fmt.Errorf("%w: human_messages[%d].content_sha256: an acknowledged message needs the 64-hex-digit SHA-256 of its content", ErrInvalidReviewInput, i)
			}
		default:
			return fmt.Errorf("%w: human_messages[%d].status: %q must be %s, %s or %s", ErrInvalidReviewInput, i, m.Status, MessageUnread, MessageAcked, MessageSupersededByRestore)
		}
	}
	return nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// observedTools returns the unique successful tool names, sorted, without
// process_exit and blanks.
func observedTools(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if strings.TrimSpace(n) != "" && n != ToolProcessExit {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// BuildReview builds the review of in, with errs as its validation_errors
// (nil for a probe). It fails closed with ErrGoalUnavailable,
// ErrTooManyHumanMessages or ErrInvalidReviewInput instead of issuing a token.
func BuildReview(in ReviewInput, errs []ValidationError) (Review, error) {
	if err := checkReviewInput(in); err != nil {
		return Review{}, err
	}
	unread, acked := []string{}, []string{}
	type ackedMessage struct {
		ID            string `json:"id"`
		ContentSHA256 string `json:"content_sha256"`
	}
	ackedHashed := []ackedMessage{}
	for _, m := range in.HumanMessages {
		switch m.Status {
		case MessageUnread:
			unread = append(unread, m.ID)
		case MessageAcked:
			acked = append(acked, m.ID)
			ackedHashed = append(ackedHashed, ackedMessage{m.ID, m.ContentSHA256})
		}
	}
	ackedSHA256 := hashJSON(struct {
		Domain   string         `json:"domain"`
		Messages []ackedMessage `json:"messages"`
	}{acknowledgedHashDomain, ackedHashed})
	r := Review{
		ReviewToken: ReviewToken(in),
		Goal: ReviewGoal{
			OID:           in.GoalOID,
			Version:       in.GoalVersion,
			SHA256:        in.GoalSHA256,
			RecoveredText: in.RecoveredGoal,
		},
		ExpectedSourceRefs:              append([]string{in.GoalOID}, acked...),
		UnreadHumanMessageIDs:           unread,
		AcknowledgedHumanMessageIDs:     acked,
		AcknowledgedHumanMessageCount:   len(acked),
		AcknowledgedHumanMessagesSHA256: ackedSHA256,
		AcknowledgedHumanMessageReference: MessageReference{
			Tool: ToolReadProcessMessages,
			Arguments: MessageReadArguments{
				MessageIDs:   slices.Clone(acked),
				IncludeAcked: true,
				Ack:          false,
				Limit:        len(acked),
			},
			ContinuationRule: continuationRule,
		},
		ObservedSuccessfulToolCalls: observedTools(in.ObservedTools),
	}
	r.Goal.Reference.Tool = ToolReadObject
	r.Goal.Reference.Arguments.Namespace = in.GoalNamespace
	r.Goal.Reference.Arguments.Name = in.GoalName
	r.Hints = reviewHints(r)
	r.RequiredEvidenceShape = evidenceShape(r)
	if len(errs) > 0 {
		r.ValidationErrors = slices.Clone(errs)
	}
	return r, nil
}

func reviewHints(r Review) []string {
	var hints []string
	if n := len(r.UnreadHumanMessageIDs); n > 0 {
		hints = append(hints, fmt.Sprintf(
			"%d unread Human message(s) block exit: read them with %s (message_ids from unread_human_message_ids, ack=true), merge what they ask into your work, then call %s again with no token and no evidence. Acknowledging changes review_token, so this review's token cannot be used.",
			n, ToolReadProcessMessages, ToolProcessExit))
	}
	if r.Goal.RecoveredText != "" {
		hints = append(hints, "The goal's payload did not survive a reopen, so goal.reference cannot read it: goal.recovered_text is the exact initial goal, recovered from retained evidence; give each explicit deliverable its own acceptance check.")
	} else {
		hints = append(hints, "Re-read the goal with goal.reference (by namespace and name; the goal OID is not a name); give each explicit deliverable its own acceptance check.")
	}
	if r.AcknowledgedHumanMessageCount > 0 {
		hints = append(hints, "Re-read the acknowledged Human messages with acknowledged_human_message_reference (include_acked=true, ack=false); list them all in reviewed_message_ids and cite each in some check's source_refs.")
	} else {
		hints = append(hints, "No Human message is acknowledged: reviewed_message_ids is [] and the goal OID is the only source ref.")
	}
	if len(r.ObservedSuccessfulToolCalls) == 0 {
		hints = append(hints, "No successful tool call has been observed: a completed check and final_verification must cite observed tool names, so do and verify the work first.")
	} else {
		hints = append(hints, "Cite only names from observed_successful_tool_calls in evidence_tool_calls and final_verification.")
	}
	if len(r.UnreadHumanMessageIDs) == 0 {
		hints = append(hints, fmt.Sprintf("Then call %s alone with this review_token and completion_evidence; only status \"exited\" means the process has ended.", ToolProcessExit))
	}
	return hints
}

func jsonList(ids []string) string {
	data, _ := json.Marshal(ids)
	return string(data)
}

// evidenceShape describes completion_evidence for this review as a JSON
// Schema, with the exact goal OID, source refs and tool names filled in.
func evidenceShape(r Review) json.RawMessage {
	stringsOf := func(values []string) map[string]any {
		return map[string]any{"type": "string", "enum": values}
	}
	shape := map[string]any{
		"type":                 "object",
		"additionalProperties": false,
		"required":             []string{"goal_oid", "reviewed_message_ids", "acceptance_checks", "final_verification"},
		"description":          "Across all checks, source_refs must cover every expected_source_ref and cite no other.",
		"properties": map[string]any{
			"goal_oid": map[string]any{"type": "string", "const": r.Goal.OID},
			"reviewed_message_ids": map[string]any{
				"type": "array", "items": stringsOf(r.AcknowledgedHumanMessageIDs), "uniqueItems": true,
				"description": "exactly acknowledged_human_message_ids, in any order ([] when none is acknowledged)",
			},
			"acceptance_checks": map[string]any{
				"type": "array", "minItems": 1,
				"items": map[string]any{
					"type":                 "object",
					"additionalProperties": false,
					"required":             []string{"requirement", "source_refs", "status", "evidence_tool_calls", "evidence_summary"},
					"properties": map[string]any{
						"requirement": map[string]any{"type": "string", "minLength": 1, "description": "one explicit deliverable"},
						"source_refs": map[string]any{"type": "array", "minItems": 1, "items": stringsOf(r.ExpectedSourceRefs), "description": "where the requirement comes from: the goal OID or acknowledged Human message ids"},
						"status":      map[string]any{"type": "string", "enum": []string{CheckCompleted, CheckBlocked, CheckCancelled}},
						"evidence_tool_calls": map[string]any{
							"type": "array", "items": stringsOf(r.ObservedSuccessfulToolCalls),
							"description": "observed successful tool names; a completed check cites at least one, a blocked or cancelled one may cite none",
						},
						"evidence_summary": map[string]any{"type": "string", "minLength": 1, "description": "the concrete results; for blocked or cancelled, the exact reason"},
					},
				},
			},
			"final_verification": map[string]any{"type": "array", "minItems": 1, "items": stringsOf(r.ObservedSuccessfulToolCalls), "description": "the observed successful tool names that verify the final state"},
		},
	}
	data, err := json.Marshal(shape)
	if err != nil {
		panic(fmt.Sprintf("process: encode evidence shape: %v", err))
	}
	return data
}

// Decision is the outcome of a gated process_exit.
type Decision struct {
	// Exit is true only when every rule passed: the caller commits the exit.
	Exit bool
	// Review is the fresh review to return when Exit is false (with
	// validation_errors after a failed submission, none after a bare probe).
	Review Review
	// Evidence is the decoded evidence, set when Exit.
	Evidence Evidence
	// EvidenceJSON is the canonical encoding of Evidence, set when Exit; it is
	// what EvidenceSHA256 hashes and what the caller stores.
	EvidenceJSON json.RawMessage
	// EvidenceSHA256 is the hex SHA-256 of EvidenceJSON, set when Exit.
	EvidenceSHA256 string
}

// Rules a submission can fail besides the evidence rules (see ValidateEvidence).
const (
	RuleReviewToken    = "review_token_current"
	RuleUnreadMessages = "no_unread_human_messages"
)

// Decide is the whole gated-exit decision for the current input in, the
// submitted token ("" for none) and the raw completion_evidence (nil or JSON
// null for none).
//
// A bare probe (no token, no evidence) returns the fresh review without
// validation errors. Any other call is a submission: it exits only when the
// token is the current one, no Human message is unread, and the evidence
// passes every rule; otherwise the fresh review carries every failed rule.
// A stale or wrong token is refused like any other failure: the review holds
// the token to use. The error is non-nil only when no review can be issued.
func Decide(in ReviewInput, token string, evidence json.RawMessage) (Decision, error) {
	review, err := BuildReview(in, nil)
	if err != nil {
		return Decision{}, err
	}
	noEvidence := isAbsent(evidence)
	if token == "" && noEvidence {
		return Decision{Review: review}, nil
	}
	var errs []ValidationError
	switch {
	case token == "":
		errs = append(errs, ValidationError{Rule: RuleReviewToken, Check: -1, Field: "review_token",
			Message: "missing: submit the review_token of this review together with completion_evidence"})
	case token != review.ReviewToken:
		errs = append(errs, ValidationError{Rule: RuleReviewToken, Check: -1, Field: "review_token",
			Message: "stale or wrong: it does not match this review (the token changes with the goal version, each new Human message and each ACK); use the review_token of this review"})
	}
	if len(review.UnreadHumanMessageIDs) > 0 {
		errs = append(errs, ValidationError{Rule: RuleUnreadMessages, Check: -1, Field: "unread_human_message_ids",
			Message: fmt.Sprintf("%d unread Human message(s) block exit: read and acknowledge every id in unread_human_message_ids, then probe again", len(review.UnreadHumanMessageIDs))})
	}
	var ev Evidence
	if noEvidence {
		errs = append(errs, ValidationError{Rule: RuleRequired, Check: -1, Field: "completion_evidence",
			Message: "required with a review_token: an object with goal_oid, reviewed_message_ids, acceptance_checks and final_verification"})
	} else {
		var decodeErrs []ValidationError
		ev, decodeErrs = DecodeEvidence(evidence)
		errs = append(errs, decodeErrs...)
		errs = append(errs, validateEvidence(review, ev, decodeErrs)...)
	}
	if len(errs) > 0 {
		review.ValidationErrors = errs
		return Decision{Review: review}, nil
	}
	canonical := ev.canonical()
	data, err := json.Marshal(canonical)
	if err != nil {
		return Decision{}, fmt.Errorf("encode completion evidence: %w", err)
	}
	sum := sha256.Sum256(data)
	return Decision{Exit: true, Review: review, Evidence: canonical, EvidenceJSON: data, EvidenceSHA256: hex.EncodeToString(sum[:])}, nil
}
