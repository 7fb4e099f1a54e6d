package kernel

import (
	"errors"
	"fmt"

	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

const prefixEvidence = "k/evid/"

func evidenceKey(pid int64) []byte { return pidKey(prefixEvidence, pid) }

// reviewInput is the completion review's view of r, read fresh in tx.
func (k *Runtime) reviewInput(tx *txn, r *procRecord) (process.ReviewInput, error) {
	meta, payload, err := tx.Read(r.GoalOID)
	in := process.ReviewInput{
		GoalOID: meta.OID, GoalVersion: meta.Version, GoalNamespace: meta.Namespace, GoalName: meta.Name,
		ObservedTools: r.ObservedTools,
	}
	switch {
	case errors.Is(err, objects.ErrPayloadLost):
		goal, rerr := k.recoveredGoal(tx, r)
		if rerr != nil {
			in.GoalUnavailable = fmt.Sprintf("the payload of goal %s version %d did not survive a reopen and cannot be recovered (%v): restore a checkpoint, or have the Host restate the goal (libos goal set %d TEXT)", meta.OID, meta.Version, rerr, r.PID)
		} else {
			in.GoalSHA256, in.RecoveredGoal = sha([]byte(goal)), goal
		}
	case err != nil:
		return in, fmt.Errorf("completion review of pid %d: goal: %w", r.PID, err)
	default:
		in.GoalSHA256 = sha(payload)
	}
	err = mailbox.List(tx.Txn, r.PID, func(m *mailbox.Message) error {
		if m.FromHuman() {
			in.HumanMessages = append(in.HumanMessages, process.HumanMessage{ID: m.ID, Status: m.Status, ContentSHA256: m.ContentSHA256()})
		}
		return nil
	})
	if err != nil {
		return in, fmt.Errorf("completion review of pid %d: mailbox: %w", r.PID, err)
	}
	return in, nil
}
