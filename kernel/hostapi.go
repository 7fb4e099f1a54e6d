package kernel

import (
	"encoding/json"
	"fmt"

	"github.com/libos/libos/process"
)

// CallKey names one tool call of a process: its turn and call id.
type CallKey struct {
	Turn   int
	CallID string
}

// InspectWithArguments is Inspect for a Host that follows the event log and
// keeps the arguments of recent tool calls itself (an HTTP server that
// streams the log does): the arguments known gives are used as they are, and
// only the calls it lacks are looked up in the log, read backwards from its
// newest event. A nil known looks every call up.
func (k *Runtime) InspectWithArguments(pid int64, known func(CallKey) (json.RawMessage, bool)) (ProcessDetail, error) {
	var d ProcessDetail
	err := k.view(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		d = ProcessDetail{
			PID: r.PID, Image: r.Image, Status: r.State, Reason: r.Reason, Turn: r.Turn,
			PauseRequested: r.PauseRequested, HostHold: r.HostHold, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
			ResultOID: r.ResultOID, Budgets: budgetLines(r.Limits, r.Used), Grants: []GrantView{},
		}
		if r.ParentPID != 0 {
			parent := r.ParentPID
			d.ParentPID = &parent
		}
		for _, g := range r.Grants {
			d.Grants = append(d.Grants, grantView(g))
		}
		if r.Wait != nil {
			d.WaitingOn = &WaitDetail{Wait: *r.Wait.Clone()}
			if r.Wait.PendingID != "" {
				if p, err := loadPending(tx, pid, r.Wait.PendingID); err == nil {
					d.WaitingOn.Tool, d.WaitingOn.CallID, d.WaitingOn.StartedAt = p.Tool, p.CallID, p.StartedAt
					var a approvalData
					if r.Wait.Kind == process.WaitApproval && json.Unmarshal(p.Data, &a) == nil {
						d.WaitingOn.Arguments = p.Args
						d.WaitingOn.Needs = fmt.Sprintf("%s on %s (grant %s asks)", a.Right, a.Resource, a.GrantID)
					}
				}
			}
			if r.Wait.Kind == process.WaitProvider {
				d.Reason = r.Wait.Reason
			}
		}
		if meta, err := tx.Stat(r.GoalOID); err == nil {
			d.Goal = ObjectRef{OID: meta.OID, Version: meta.Version}
		} else {
			d.Goal = ObjectRef{OID: r.GoalOID}
		}
		if d.Children, err = children(tx, pid); err != nil {
			return err
		}
		if d.Children == nil {
			d.Children = []int64{}
		}
		if c, rebuilt, err := k.readContext(tx, r); err == nil {
			d.Context = contextSummary(c, rebuilt)
		} else {
			d.Context = ContextSummary{OID: r.ContextOID}
		}
		d.Result, d.ResultError = resultData(tx, r)
		d.RecentCalls, err = recentCalls(tx, pid, RecentCalls)
		return err
	})
	if err != nil {
		return ProcessDetail{}, err
	}
	var missing []CallView
	var at []int
	for i, c := range d.RecentCalls {
		if args, ok := lookupKnown(known, CallKey{Turn: c.Turn, CallID: c.CallID}); ok {
			d.RecentCalls[i].Arguments = args
			continue
		}
		missing = append(missing, c)
		at = append(at, i)
	}
	if len(missing) > 0 {
		k.fillArguments(pid, missing)
		for j, i := range at {
			d.RecentCalls[i].Arguments = missing[j].Arguments
		}
	}
	return d, nil
}

func lookupKnown(known func(CallKey) (json.RawMessage, bool), key CallKey) (json.RawMessage, bool) {
	if known == nil {
		return nil, false
	}
	return known(key)
}
