package process

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Evidence is completion_evidence: what a gated process submits to exit.
type Evidence struct {
	GoalOID            string            `json:"goal_oid"`
	ReviewedMessageIDs []string          `json:"reviewed_message_ids"`
	AcceptanceChecks   []AcceptanceCheck `json:"acceptance_checks"`
	FinalVerification  []string          `json:"final_verification"`
}

// AcceptanceCheck is one requirement and the evidence that it was met (or why
// it was not).
type AcceptanceCheck struct {
	Requirement       string   `json:"requirement"`
	SourceRefs        []string `json:"source_refs"`
	Status            string   `json:"status"` // completed, blocked or cancelled
	EvidenceToolCalls []string `json:"evidence_tool_calls"`
	EvidenceSummary   string   `json:"evidence_summary"`
}

// canonical returns a deep copy with every nil list made empty, so that the
// encoding (and its hash) does not depend on how the evidence was built.
func (e Evidence) canonical() Evidence {
	c := Evidence{
		GoalOID:            e.GoalOID,
		ReviewedMessageIDs: nonNil(e.ReviewedMessageIDs),
		AcceptanceChecks:   make([]AcceptanceCheck, len(e.AcceptanceChecks)),
		FinalVerification:  nonNil(e.FinalVerification),
	}
	for i, ch := range e.AcceptanceChecks {
		ch.SourceRefs = nonNil(ch.SourceRefs)
		ch.EvidenceToolCalls = nonNil(ch.EvidenceToolCalls)
		c.AcceptanceChecks[i] = ch
	}
	return c
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return slices.Clone(s)
}

// Rules a submission is checked against; each ValidationError names one.
const (
	// Decoding (DecodeEvidence).
	RuleSyntax         = "syntax"          // not JSON
	RuleType           = "type"            // a value of the wrong JSON type
	RuleRequired       = "required"        // a field is missing
	RuleUnknownField   = "unknown_field"   // a field the shape does not have
	RuleDuplicateField = "duplicate_field" // a field given twice

	// Content (ValidateEvidence).
	RuleGoalOID              = "goal_oid_exact"
	RuleReviewedMessages     = "reviewed_message_ids_exact"
	RuleChecksNonEmpty       = "acceptance_checks_nonempty"
	RuleRequirement          = "requirement_nonblank"
	RuleSourceRefsNonEmpty   = "source_refs_nonempty"
	RuleSourceRefsKnown      = "source_refs_known"
	RuleStatus               = "status_enum"
	RuleSummary              = "evidence_summary_nonblank"
	RuleCompletedCitesTool   = "completed_cites_tool"
	RuleEvidenceToolObserved = "evidence_tool_calls_observed"
	RuleReasonStated         = "blocked_reason_stated"
	RuleSourceRefsCover      = "source_refs_cover_expected"
	RuleFinalNonEmpty        = "final_verification_nonempty"
	RuleFinalObserved        = "final_verification_observed"
)

const (
	evidenceField = "completion_evidence"
	// maxEvidenceDepth bounds nesting; the shape itself is three levels deep.
	maxEvidenceDepth = 32
)

// jsonNode is a decoded JSON value that keeps object keys in order and
// duplicates, which map decoding would hide.
type jsonNode struct {
	kind   string // "null", "boolean", "number", "string", "array", "object"
	str    string
	items  []jsonNode
	fields []jsonField
}

type jsonField struct {
	key string
	val jsonNode
}

func parseJSON(raw []byte) (jsonNode, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	n, err := parseValue(dec, 0)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return jsonNode{}, errors.New("unexpected end of JSON input")
	}
	if err != nil {
		return jsonNode{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jsonNode{}, errors.New("unexpected data after the JSON value")
	}
	return n, nil
}

func parseValue(dec *json.Decoder, depth int) (jsonNode, error) {
	if depth > maxEvidenceDepth {
		return jsonNode{}, fmt.Errorf("nested deeper than %d levels", maxEvidenceDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jsonNode{}, err
	}
	switch v := tok.(type) {
	case nil:
		return jsonNode{kind: "null"}, nil
	case bool:
		return jsonNode{kind: "boolean"}, nil
	case json.Number:
		return jsonNode{kind: "number", str: string(v)}, nil
	case string:
		return jsonNode{kind: "string", str: v}, nil
	case json.Delim:
		switch v {
		case '[':
			n := jsonNode{kind: "array", items: []jsonNode{}}
			for dec.More() {
				item, err := parseValue(dec, depth+1)
				if err != nil {
					return jsonNode{}, err
				}
				n.items = append(n.items, item)
			}
			if _, err := dec.Token(); err != nil {
				return jsonNode{}, err
			}
			return n, nil
		case '{':
			n := jsonNode{kind: "object"}
			for dec.More() {
				keyTok, err := dec.Token()
				if err != nil {
					return jsonNode{}, err
				}
				key, ok := keyTok.(string)
				if !ok {
					return jsonNode{}, fmt.Errorf("object key %v is not a string", keyTok)
				}
				val, err := parseValue(dec, depth+1)
				if err != nil {
					return jsonNode{}, err
				}
				n.fields = append(n.fields, jsonField{key, val})
			}
			if _, err := dec.Token(); err != nil {
				return jsonNode{}, err
			}
			return n, nil
		}
	}
	return jsonNode{}, fmt.Errorf("unexpected JSON token %v", tok)
}

// isAbsent reports whether raw gives no evidence at all (nothing, or null).
func isAbsent(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

// objectDecoder walks the fields of one JSON object, reporting unknown,
// duplicate and missing fields.
type objectDecoder struct {
	path  string // prefix for field paths: "" for the top, "acceptance_checks[2]." inside a check
	check int
	known []string
	seen  map[string]bool
	errs  *[]ValidationError
}

func (d *objectDecoder) add(rule, field, format string, args ...any) {
	*d.errs = append(*d.errs, ValidationError{Rule: rule, Check: d.check, Field: field, Message: fmt.Sprintf(format, args...)})
}

// fields calls visit for each known field given once, in input order.
func (d *objectDecoder) fields(obj jsonNode, what string, visit func(key, path string, val jsonNode)) {
	d.seen = map[string]bool{}
	for _, f := range obj.fields {
		path := d.path + f.key
		if !isPlainKey(f.key) {
			// Keep the path readable and non-empty for odd keys such as "" or "a.b".
			path = strings.TrimSuffix(d.path, ".") + fmt.Sprintf("[%q]", f.key)
		}
		switch {
		case !slices.Contains(d.known, f.key):
			d.add(RuleUnknownField, path, "unknown field %q: %s has only %s", f.key, what, strings.Join(d.known, ", "))
		case d.seen[f.key]:
			d.add(RuleDuplicateField, path, "field %q is given more than once", f.key)
		default:
			d.seen[f.key] = true
			visit(f.key, path, f.val)
		}
	}
	for _, k := range d.known {
		if !d.seen[k] {
			d.add(RuleRequired, d.path+k, "required field %q is missing from %s", k, what)
		}
	}
}

func isPlainKey(key string) bool {
	if key == "" {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func (d *objectDecoder) str(path string, val jsonNode) string {
	if val.kind != "string" {
		d.add(RuleType, path, "must be a string, not %s", an(val.kind))
		return ""
	}
	return val.str
}

func (d *objectDecoder) strs(path string, val jsonNode) []string {
	if val.kind != "array" {
		d.add(RuleType, path, "must be an array of strings, not %s", an(val.kind))
		return nil
	}
	out := make([]string, 0, len(val.items))
	for i, item := range val.items {
		if item.kind != "string" {
			d.add(RuleType, fmt.Sprintf("%s[%d]", path, i), "must be a string, not %s", an(item.kind))
			continue
		}
		out = append(out, item.str)
	}
	return out
}

func an(kind string) string {
	if kind == "array" || kind == "object" {
		return "an " + kind
	}
	if kind == "null" {
		return "null"
	}
	return "a " + kind
}

// DecodeEvidence decodes completion_evidence strictly: it must be a JSON
// object with exactly goal_oid (string), reviewed_message_ids (array of
// strings), acceptance_checks (array of objects with exactly requirement,
// source_refs, status, evidence_tool_calls and evidence_summary) and
// final_verification (array of strings). Every unknown, duplicate, missing or
// mistyped field is reported, each naming its path and (for a check) its
// index; what did decode is returned alongside.
func DecodeEvidence(raw json.RawMessage) (Evidence, []ValidationError) {
	var errs []ValidationError
	var ev Evidence
	if isAbsent(raw) {
		errs = append(errs, ValidationError{Rule: RuleRequired, Check: -1, Field: evidenceField,
			Message: "required: an object with goal_oid, reviewed_message_ids, acceptance_checks and final_verification"})
		return ev, errs
	}
	root, err := parseJSON(raw)
	if err != nil {
		errs = append(errs, ValidationError{Rule: RuleSyntax, Check: -1, Field: evidenceField, Message: "not valid JSON: " + err.Error()})
		return ev, errs
	}
	top := &objectDecoder{check: -1, known: []string{"goal_oid", "reviewed_message_ids", "acceptance_checks", "final_verification"}, errs: &errs}
	if root.kind != "object" {
		top.add(RuleType, evidenceField, "must be a JSON object, not %s", an(root.kind))
		return ev, errs
	}
	top.fields(root, evidenceField, func(key, path string, val jsonNode) {
		switch key {
		case "goal_oid":
			ev.GoalOID = top.str(path, val)
		case "reviewed_message_ids":
			ev.ReviewedMessageIDs = top.strs(path, val)
		case "final_verification":
			ev.FinalVerification = top.strs(path, val)
		case "acceptance_checks":
			if val.kind != "array" {
				top.add(RuleType, path, "must be an array of check objects, not %s", an(val.kind))
				return
			}
			ev.AcceptanceChecks = make([]AcceptanceCheck, len(val.items))
			for i, item := range val.items {
				ev.AcceptanceChecks[i] = decodeCheck(i, item, &errs)
			}
		}
	})
	return ev, errs
}

func decodeCheck(i int, item jsonNode, errs *[]ValidationError) AcceptanceCheck {
	var ch AcceptanceCheck
	prefix := fmt.Sprintf("acceptance_checks[%d]", i)
	d := &objectDecoder{path: prefix + ".", check: i, known: []string{"requirement", "source_refs", "status", "evidence_tool_calls", "evidence_summary"}, errs: errs}
	if item.kind != "object" {
		d.add(RuleType, prefix, "must be a check object, not %s", an(item.kind))
		return ch
	}
	d.fields(item, prefix, func(key, path string, val jsonNode) {
		switch key {
		case "requirement":
			ch.Requirement = d.str(path, val)
		case "source_refs":
			ch.SourceRefs = d.strs(path, val)
		case "status":
			ch.Status = d.str(path, val)
		case "evidence_tool_calls":
			ch.EvidenceToolCalls = d.strs(path, val)
		case "evidence_summary":
			ch.EvidenceSummary = d.str(path, val)
		}
	})
	return ch
}

// ValidateEvidence checks decoded evidence against review, returning every
// failed content rule:
//
//   - goal_oid is exactly the review's goal OID;
//   - reviewed_message_ids is exactly the acknowledged set, in any order, each
//     once ([] when nothing is acknowledged);
//   - acceptance_checks is not empty; each check has a non-blank requirement,
//     non-empty source_refs that are all expected refs, a status of completed,
//     blocked or cancelled, and a non-blank evidence_summary;
//   - a completed check cites at least one tool; every cited tool of any
//     check is an observed successful tool;
//   - a blocked or cancelled check's summary states the reason (it is more
//     than the status word);
//   - the source_refs of all checks together cover every expected ref;
//   - final_verification is not empty and holds only observed tool names.
func ValidateEvidence(review Review, ev Evidence) []ValidationError {
	return validateEvidence(review, ev, nil)
}

// validateEvidence skips the rules about fields that failed to decode, so
// each problem is reported once, by its decoding rule.
func validateEvidence(review Review, ev Evidence, decodeErrs []ValidationError) []ValidationError {
	for _, e := range decodeErrs {
		if e.Field == evidenceField {
			return nil
		}
	}
	undecoded := func(path string) bool {
		for _, e := range decodeErrs {
			if e.Field == path || strings.HasPrefix(e.Field, path+"[") || strings.HasPrefix(e.Field, path+".") ||
				strings.HasPrefix(path, e.Field+"[") || strings.HasPrefix(path, e.Field+".") {
				return true
			}
		}
		return false
	}
	var errs []ValidationError
	add := func(rule string, check int, field, format string, args ...any) {
		errs = append(errs, ValidationError{Rule: rule, Check: check, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	expected := review.ExpectedSourceRefs
	observed := review.ObservedSuccessfulToolCalls

	if !undecoded("goal_oid") && ev.GoalOID != review.Goal.OID {
		add(RuleGoalOID, -1, "goal_oid", "must be exactly the goal OID %q, not %q", review.Goal.OID, ev.GoalOID)
	}
	if !undecoded("reviewed_message_ids") {
		if problem := exactSetProblem(ev.ReviewedMessageIDs, review.AcknowledgedHumanMessageIDs); problem != "" {
			add(RuleReviewedMessages, -1, "reviewed_message_ids", "must list exactly the acknowledged Human message ids %s (in any order, each once): %s",
				jsonList(review.AcknowledgedHumanMessageIDs), problem)
		}
	}
	failedAt := func(path string) bool {
		return slices.ContainsFunc(decodeErrs, func(e ValidationError) bool { return e.Field == path })
	}
	if !failedAt("acceptance_checks") && len(ev.AcceptanceChecks) == 0 {
		add(RuleChecksNonEmpty, -1, "acceptance_checks", "must hold at least one check; give each explicit deliverable its own")
	}
	// Coverage is judged only when every check's source_refs decoded.
	refsComplete := !failedAt("acceptance_checks")
	covered := map[string]bool{}
	for i, ch := range ev.AcceptanceChecks {
		p := fmt.Sprintf("acceptance_checks[%d].", i)
		if undecoded(p + "source_refs") {
			refsComplete = false
		}
		if !undecoded(p+"requirement") && strings.TrimSpace(ch.Requirement) == "" {
			add(RuleRequirement, i, p+"requirement", "must not be blank: state the deliverable this check is about")
		}
		if !undecoded(p + "source_refs") {
			if len(ch.SourceRefs) == 0 {
				add(RuleSourceRefsNonEmpty, i, p+"source_refs", "must cite at least one of the expected_source_refs %s", jsonList(expected))
			}
			if unknown := missingFrom(ch.SourceRefs, expected); len(unknown) > 0 {
				add(RuleSourceRefsKnown, i, p+"source_refs", "%s not among the expected_source_refs %s", jsonList(unknown), jsonList(expected))
			}
			for _, ref := range ch.SourceRefs {
				covered[ref] = true
			}
		}
		statusOK := !undecoded(p + "status")
		if statusOK && ch.Status != CheckCompleted && ch.Status != CheckBlocked && ch.Status != CheckCancelled {
			add(RuleStatus, i, p+"status", "%q must be %s", ch.Status, "completed, blocked or cancelled")
			statusOK = false
		}
		summaryOK := !undecoded(p + "evidence_summary")
		if summaryOK && strings.TrimSpace(ch.EvidenceSummary) == "" {
			add(RuleSummary, i, p+"evidence_summary", "must not be blank: describe the concrete results (or, if blocked or cancelled, the exact reason)")
			summaryOK = false
		}
		toolsOK := !undecoded(p + "evidence_tool_calls")
		if toolsOK {
			if statusOK && ch.Status == CheckCompleted && len(ch.EvidenceToolCalls) == 0 {
				add(RuleCompletedCitesTool, i, p+"evidence_tool_calls", "a completed check must cite at least one observed successful tool name from %s", jsonList(observed))
			}
			if unseen := missingFrom(ch.EvidenceToolCalls, observed); len(unseen) > 0 {
				add(RuleEvidenceToolObserved, i, p+"evidence_tool_calls", "%s not among the observed successful tool names %s", jsonList(unseen), jsonList(observed))
			}
		}
		if statusOK && summaryOK && ch.Status != CheckCompleted && onlyStatusWord(ch.EvidenceSummary) {
			add(RuleReasonStated, i, p+"evidence_summary", "a %s check's summary must state the exact reason, not only %q", ch.Status, ch.Status)
		}
	}
	if refsComplete && len(ev.AcceptanceChecks) > 0 {
		var uncovered []string
		for _, ref := range expected {
			if !covered[ref] {
				uncovered = append(uncovered, ref)
			}
		}
		if len(uncovered) > 0 {
			add(RuleSourceRefsCover, -1, "acceptance_checks", "the source_refs of all checks together must cover every expected_source_ref; not cited: %s", jsonList(uncovered))
		}
	}
	if !undecoded("final_verification") {
		if len(ev.FinalVerification) == 0 {
			add(RuleFinalNonEmpty, -1, "final_verification", "must list at least one observed successful tool name from %s that verifies the final state", jsonList(observed))
		}
		if unseen := missingFrom(ev.FinalVerification, observed); len(unseen) > 0 {
			add(RuleFinalObserved, -1, "final_verification", "%s not among the observed successful tool names %s", jsonList(unseen), jsonList(observed))
		}
	}
	return errs
}

// missingFrom returns the values not in allowed, each once, in input order.
func missingFrom(values, allowed []string) []string {
	var out []string
	for _, v := range values {
		if !slices.Contains(allowed, v) && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// exactSetProblem describes how got differs from the set want, or "".
func exactSetProblem(got, want []string) string {
	var problems []string
	var repeated []string
	seen := map[string]bool{}
	for _, id := range got {
		if seen[id] && !slices.Contains(repeated, id) {
			repeated = append(repeated, id)
		}
		seen[id] = true
	}
	var missing []string
	for _, id := range want {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, "missing "+jsonList(missing))
	}
	if extra := missingFrom(got, want); len(extra) > 0 {
		problems = append(problems, "not acknowledged "+jsonList(extra))
	}
	if len(repeated) > 0 {
		problems = append(problems, "repeated "+jsonList(repeated))
	}
	return strings.Join(problems, "; ")
}

// onlyStatusWord reports whether a summary says no more than a status word.
func onlyStatusWord(summary string) bool {
	s := strings.ToLower(strings.Trim(summary, " \t\r\n.!:;-_*\"'"))
	switch s {
	case CheckBlocked, CheckCancelled, "canceled", "n/a", "na", "none":
		return true
	}
	return false
}
