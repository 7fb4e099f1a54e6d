package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/libos/libos/llm"
	"github.com/libos/libos/process"
	"github.com/libos/libos/quantum"
)

// maxRecoveredGoalChars bounds a goal recovered from retained evidence.
const maxRecoveredGoalChars = 32000

const historyLostNotice = "(runtime notice) The runtime was reopened with full-I/O retention off, so this process's earlier conversation history was lost. Re-read the state you depend on before acting."

// recover brings a reopened directory to a consistent state before any
// quantum runs, in a fixed order per process: a process found running had a
// quantum of unknown settlement, so it returns to runnable with its call
// recorded as unknown (charged at its reservation) and a notice; a sleep in
// progress is not resumed or restarted but woken at once with an unknown
// settlement. Context payloads are rebuilt lazily from evidence.
func (k *Runtime) recover() error {
	if err := k.buildLiveIndex(); err != nil {
		return fmt.Errorf("index live processes: %w", err)
	}
	var pids []int64
	err := k.view(func(tx *txn) error {
		return scanLive(tx, func(e liveEntry) error {
			sleeping := e.Wait == process.WaitTimer && (e.State == process.Waiting || e.State == process.Paused)
			// A provider wait without a time waits for the Host: a reopen is
			// the Host trying again. A backoff keeps its time.
			providerHeld := e.Wait == process.WaitProvider && e.Until.IsZero() && e.State == process.Waiting
			if e.State == process.Running || e.State.Terminal() || sleeping || providerHeld {
				pids = append(pids, e.PID)
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	for _, pid := range pids {
		err := k.update(func(tx *txn) error {
			r, err := loadProc(tx, pid)
			if err != nil {
				return err
			}
			switch {
			case r.State.Terminal():
				// It was killed while its outside effect ran, and the runtime
				// stopped before recording the effect's result: the call is
				// answered as for a running process, and the process stays
				// killed.
				if r.Dispatch == nil {
					return nil
				}
				return k.settleInterruptedEffect(tx, r)
			case r.State == process.Running:
				if r.Dispatch != nil {
					return k.recoverEffect(tx, r)
				}
				var cr callRecord
				if b, err := tx.Get(callKey(pid, r.Turn)); err == nil {
					if err := json.Unmarshal(b, &cr); err != nil {
						return fmt.Errorf("decode call record of pid %d: %w", pid, err)
					}
					cr.Status, cr.Settlement, cr.FinishedAt = "unknown", string(llm.SettlementUnknown), k.now()
					if err := putRecord(tx, callKey(pid, r.Turn), &cr); err != nil {
						return err
					}
					r.Turn++
				}
				r.ReservedTokens = 0
				r.InterruptedTurn = true
				if err := k.emit(tx, Event{Kind: EventRecovered, PID: pid, Reason: "quantum interrupted; provider call settlement unknown"}); err != nil {
					return err
				}
				return k.recoverRunning(tx, r)
			case r.State == process.Waiting, r.State == process.Paused:
				if r.Wait.Kind == process.WaitProvider {
					return k.askProviderAgain(tx, r, EventRecovered)
				}
				p, err := loadPending(tx, pid, r.Wait.PendingID)
				if err != nil {
					return err
				}
				p.Recovered = true
				if err := savePending(tx, p); err != nil {
					return err
				}
				if err := k.emit(tx, Event{Kind: EventRecovered, PID: pid, Reason: "sleep interrupted by reopen; settlement unknown"}); err != nil {
					return err
				}
				return k.step(tx, r, process.Input{Kind: process.Wake, Gen: r.Gen, WaitKind: process.WaitTimer})
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("recover pid %d: %w", pid, err)
		}
	}
	return nil
}

// askProviderAgain ends r's provider wait so that its next quantum asks the
// provider again, with its count of failures reset: what a reopen does, and
// what RetryProvider does for a Host that fixed what the wait was for.
func (k *Runtime) askProviderAgain(tx *txn, r *procRecord, kind string) error {
	r.ProviderFailures = 0
	if err := k.emit(tx, Event{Kind: kind, PID: r.PID, Reason: "provider wait: asking the provider again"}); err != nil {
		return err
	}
	return k.step(tx, r, process.Input{Kind: process.Wake, Gen: r.Gen, WaitKind: process.WaitProvider})
}

// rebuildContext reconstructs a context whose runtime-local payload was lost
// from the retained evidence of the process.
func (k *Runtime) rebuildContext(tx *txn, r *procRecord) ([]Entry, error) {
	if !k.retain {
		return []Entry{{Role: llm.RoleUser, Kind: "notice", Content: historyLostNotice}}, nil
	}
	var entries []Entry
	err := tx.Scan(retainPrefix(r.PID), func(_, v []byte) error {
		var item retained
		if err := json.Unmarshal(v, &item); err != nil {
			return fmt.Errorf("decode evidence of pid %d: %w", r.PID, err)
		}
		switch {
		case item.Kind == evidenceKindReset:
			entries = entries[:0]
		case item.Kind == evidenceKindEntry && item.Entry != nil:
			entries = append(entries, *item.Entry)
		}
		return nil
	})
	return entries, err
}

// recoveredGoal returns the text of the goal Object's current version
// from retained evidence (the initial goal, or a restated one), or why it
// cannot.
func (k *Runtime) recoveredGoal(tx *txn, r *procRecord) (string, error) {
	if !k.retain {
		return "", errors.New("full-I/O retention is off")
	}
	meta, err := tx.Stat(r.GoalOID)
	if err != nil {
		return "", err
	}
	// The version's own evidence, else evidence of the same text: a
	// checkpoint's restore writes a version of the goal the evidence knows
	// under an earlier version.
	goal, found, sameText := "", false, ""
	err = tx.Scan(retainPrefix(r.PID), func(_, v []byte) error {
		var item retained
		if err := json.Unmarshal(v, &item); err != nil {
			return err
		}
		version := item.GoalVersion
		if item.Kind == evidenceKindHeader {
			version = 1
		}
		if item.Kind != evidenceKindHeader && item.Kind != evidenceKindGoal {
			return nil
		}
		switch {
		case version == meta.Version:
			goal, found = item.Goal, true
		case meta.PayloadSHA256 != "" && sha([]byte(item.Goal)) == meta.PayloadSHA256:
			sameText = item.Goal
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if !found && sameText != "" {
		goal, found = sameText, true
	}
	if !found {
		return "", fmt.Errorf("no retained evidence holds goal version %d", meta.Version)
	}
	if n := len([]rune(goal)); n > maxRecoveredGoalChars {
		return "", fmt.Errorf("the retained goal has %d characters, more than the %d that may be recovered", n, maxRecoveredGoalChars)
	}
	return goal, nil
}

// recoverEffect settles a quantum that crashed while a call's outside effect
// ran: the call is answered with an unknown settlement (the effect may have
// happened), later calls of the batch as not started; nothing is re-run.
func (k *Runtime) recoverEffect(tx *txn, r *procRecord) error {
	if err := k.settleInterruptedEffect(tx, r); err != nil {
		return err
	}
	return k.recoverRunning(tx, r)
}

// recoverRunning makes a process found running runnable again, or paused
// when a pause was asked for and acknowledged before the runtime stopped: the
// quantum it would have taken effect at the end of never ended.
func (k *Runtime) recoverRunning(tx *txn, r *procRecord) error {
	if err := k.step(tx, r, process.Input{Kind: process.Recover}); err != nil {
		return err
	}
	return k.pauseIfRequested(tx, r)
}

// settleInterruptedEffect answers r's call whose outside effect was in
// flight when the runtime stopped as of unknown settlement, and the calls
// after it as not started.
func (k *Runtime) settleInterruptedEffect(tx *txn, r *procRecord) error {
	return k.settleStoppedBatch(tx, r, quantum.Crashed, "outside effect interrupted; settlement unknown")
}

// settleStoppedBatch settles r's batch, stopped at its outside effect, with
// the core's answer to in (Crashed: the effect ran or may have; Stopped:
// it never started).
func (k *Runtime) settleStoppedBatch(tx *txn, r *procRecord, in quantum.InputKind, reason string) error {
	b := r.Dispatch
	r.Dispatch = nil
	c, err := k.loadContext(tx, r)
	if err != nil {
		return err
	}
	// A stopped batch invokes nothing, so it needs no image: one the Host
	// no longer configures does not keep the directory from opening.
	if _, err := k.dispatch(context.Background(), tx, r, c, nil, b, quantum.Input{Kind: in}); err != nil {
		return err
	}
	return k.emit(tx, Event{Kind: EventRecovered, PID: r.PID, Reason: reason})
}
