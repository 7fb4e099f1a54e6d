package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/process"
	"github.com/libos/libos/quantum"
	"github.com/libos/libos/tools"
)

// ErrNoApproval says no call of the process waits for the decision given:
// it was answered already, never asked, or the pid has no such call.
var ErrNoApproval = errors.New("no pending approval")

// ErrInvalidDecision says a decision's own fields break a rule (a deny
// reason too long or not UTF-8); nothing was decided.
var ErrInvalidDecision = errors.New("invalid approval decision")

// MaxDenyReasonChars bounds a deny reason, which the model reads in the
// call's result, as a Human message's body is bounded.
const MaxDenyReasonChars = mailbox.MaxBodyChars

// EventApproval is an approval asked for, approved or denied.
const EventApproval = "approval"

// ApprovalRequiredError refuses a call an ask grant covers: the kernel holds
// the call until a Human approves or denies it. It wraps
// tools.ErrApprovalRequired.
type ApprovalRequiredError struct {
	GrantID  string
	Right    capabilities.Right
	Resource string
}

func (e *ApprovalRequiredError) Error() string {
	return fmt.Sprintf("%v: %s on %s (grant %s asks)", tools.ErrApprovalRequired, e.Right, e.Resource, e.GrantID)
}

// Unwrap returns tools.ErrApprovalRequired.
func (e *ApprovalRequiredError) Unwrap() error { return tools.ErrApprovalRequired }

// approvalData is what a pending approval holds beside its call.
type approvalData struct {
	GrantID     string    `json:"grant_id"`
	Right       string    `json:"right"`
	Resource    string    `json:"resource"`
	RequestedAt time.Time `json:"requested_at"`
	// Decision is "" while pending, then "approved" or "denied".
	Decision string `json:"decision,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// Approval is a call waiting for a Human's decision.
type Approval struct {
	// ID names this hold of the call: a model may use a call id again on a
	// later turn, and a decision given with the ID decides only this hold
	// (ApprovalRef).
	ID          string          `json:"id"`
	PID         int64           `json:"pid"`
	CallID      string          `json:"call_id"`
	Tool        string          `json:"tool"`
	Arguments   json.RawMessage `json:"arguments"`
	Resource    string          `json:"resource"`
	Rights      []string        `json:"rights"`
	GrantID     string          `json:"grant_id"`
	RequestedAt time.Time       `json:"requested_at"`
}

// approvalBlock is the wait a call the need refused enters.
func (k *Runtime) approvalBlock(need *ApprovalRequiredError) *tools.Block {
	data, _ := json.Marshal(approvalData{GrantID: need.GrantID, Right: string(need.Right), Resource: need.Resource, RequestedAt: k.now()})
	return &tools.Block{Wait: process.Wait{Kind: process.WaitApproval}, Data: data}
}

// Approvals lists every call waiting for a Human's decision, by pid.
func (k *Runtime) Approvals() ([]Approval, error) {
	var out []Approval
	err := k.view(func(tx *txn) error {
		return tx.Scan([]byte(prefixProc), func(_, v []byte) error {
			var r procRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("decode process record: %w", err)
			}
			if r.Wait == nil || r.Wait.Kind != process.WaitApproval || r.State.Terminal() {
				return nil
			}
			p, a, err := loadApproval(tx, &r)
			if err != nil {
				return err
			}
			out = append(out, Approval{ID: p.ID, PID: r.PID, CallID: p.CallID, Tool: p.Tool, Arguments: p.Args, Resource: a.Resource,
				Rights: []string{a.Right}, GrantID: a.GrantID, RequestedAt: a.RequestedAt})
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, err
}

func loadApproval(tx *txn, r *procRecord) (*pendingAction, approvalData, error) {
	var a approvalData
	p, err := loadPending(tx, r.PID, r.Wait.PendingID)
	if err != nil {
		return nil, a, err
	}
	if err := json.Unmarshal(p.Data, &a); err != nil {
		return nil, a, fmt.Errorf("decode approval %s of pid %d: %w", p.ID, r.PID, err)
	}
	return p, a, nil
}

// ApprovalRef names the held call a decision is for: its process and call
// id, and, unless empty, the hold's ID (Approval.ID). With the ID, a
// decision repeated after the hold was answered (a retry, a double submit)
// is refused even when the model has since made another call under the
// same call id, which it would otherwise decide unseen.
type ApprovalRef struct {
	PID    int64
	CallID string
	ID     string
}

// Approve lets the held call ref names run: its next quantum runs it once,
// with its ask grants counting as allow. The decision is durable before the
// call runs, so it survives a reopen.
func (k *Runtime) Approve(ref ApprovalRef) error {
	return k.decideApproval(ref, "approved", "")
}

// DenyApproval answers the held call ref names with a denied tool error
// carrying reason; the call never runs.
func (k *Runtime) DenyApproval(ref ApprovalRef, reason string) error {
	return k.decideApproval(ref, "denied", reason)
}

func (k *Runtime) decideApproval(ref ApprovalRef, decision, reason string) error {
	pid, callID := ref.PID, ref.CallID
	if !utf8.ValidString(reason) {
		return fmt.Errorf("%w: reason: must be UTF-8 text", ErrInvalidDecision)
	}
	if n := utf8.RuneCountInString(reason); n > MaxDenyReasonChars {
		return fmt.Errorf("%w: reason: must be at most %d characters, got %d", ErrInvalidDecision, MaxDenyReasonChars, n)
	}
	return k.update(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		if r.State.Terminal() || r.Wait == nil || r.Wait.Kind != process.WaitApproval {
			return fmt.Errorf("%w: pid %d has no call waiting for approval (it is %s)", ErrNoApproval, pid, r.State)
		}
		p, a, err := loadApproval(tx, r)
		if err != nil {
			return err
		}
		if p.CallID != callID {
			return fmt.Errorf("%w: call %q of pid %d does not wait for approval (call %q does)", ErrNoApproval, callID, pid, p.CallID)
		}
		if ref.ID != "" && p.ID != ref.ID {
			return fmt.Errorf("%w: approval %s of pid %d is not the hold that waits (answered already, or never one); call %q waits now under approval %s",
				ErrNoApproval, ref.ID, pid, callID, p.ID)
		}
		a.Decision, a.Reason = decision, reason
		if p.Data, err = json.Marshal(a); err != nil {
			return err
		}
		if err := savePending(tx, p); err != nil {
			return err
		}
		if err := k.emit(tx, Event{Kind: EventApproval, PID: pid, CallID: callID, Tool: p.Tool, Reason: decision + optional(": ", reason),
			Detail: map[string]any{"decision": decision, "resource": a.Resource, "right": a.Right, "grant_id": a.GrantID}}); err != nil {
			return err
		}
		return k.step(tx, r, process.Input{Kind: process.Wake, Gen: r.Gen, WaitKind: process.WaitApproval})
	})
}

func optional(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}

// resumeApproval ends an approval wait: a denied call is answered with a
// denied error; an approved one is dispatched again as a batch of one, with
// its approval, and may return an outside effect to run.
func (k *Runtime) resumeApproval(ctx context.Context, tx *txn, r *procRecord, p *pendingAction, c *llmContext) (effectFunc, error) {
	var a approvalData
	if err := json.Unmarshal(p.Data, &a); err != nil {
		return nil, fmt.Errorf("decode approval %s of pid %d: %w", p.ID, r.PID, err)
	}
	p.State = pendingStateCompleted
	if err := savePending(tx, p); err != nil {
		return nil, err
	}
	r.ResumePending = ""
	call := llm.ToolCall{ID: p.CallID, Name: p.Tool, Arguments: p.Args}
	if a.Decision != "approved" {
		te := &tools.Error{Code: tools.CodeDenied, Message: fmt.Sprintf("%s on %s: a Human denied this call%s", a.Right, a.Resource, optional(": ", a.Reason))}
		if err := k.recordCall(tx, r, c, r.Turn-1, call, tools.ErrorResult(te), false, te.Code, nil); err != nil {
			return nil, err
		}
		pid := r.PID
		tx.AfterCommit(func() { k.sched.enqueue(pid) })
		return nil, saveProc(tx, r)
	}
	im, err := k.image(r.Image)
	if err != nil {
		return nil, err
	}
	if err := k.step(tx, r, process.Input{Kind: process.Dispatch}); err != nil {
		return nil, err
	}
	r.ApprovedCall = call.ID
	b := quantum.NewBatch(r.Turn-1, []quantum.Call{quantum.Call(call)}, false)
	return k.dispatch(ctx, tx, r, c, im, b, quantum.Input{Kind: quantum.Continue})
}
