package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/process"
)

// knowledge is what the harness learned from acknowledged events; the model
// and the Host draw pids and checkpoint ids from it. It only grows, so a
// crash never makes a choice depend on what the crash lost.
type knowledge struct {
	pids        []int64
	image       map[int64]string
	parent      map[int64]int64
	forked      map[int64]bool
	checkpoints []string
	// posted are messages whose post was acknowledged, by id.
	posted map[string]postedMessage
	// postOrder lists posted message ids in order.
	postOrder []string
	// restores counts restores (messages may be superseded, and calls
	// answered again, by a restore): each the event log reports, and each
	// the Host or a process's checkpoint_restore may make, as it is asked
	// for, since a restored process may make its next call before the
	// restore's event reaches the simulation. It is only compared with
	// zero.
	restores int
	// approvedSpawns counts, per process, the spawns a Human approved: an
	// ask grant on process:spawn allows exactly those.
	approvedSpawns map[int64]int
}

type postedMessage struct {
	to     int64
	sender string
	body   string
}

func newKnowledge() knowledge {
	return knowledge{image: map[int64]string{}, parent: map[int64]int64{}, forked: map[int64]bool{}, posted: map[string]postedMessage{},
		approvedSpawns: map[int64]int{}}
}

func (k *knowledge) observe(ev kernel.Event) {
	switch ev.Kind {
	case kernel.EventSpawn:
		if _, ok := k.image[ev.PID]; !ok {
			k.pids = append(k.pids, ev.PID)
		}
		k.image[ev.PID], k.parent[ev.PID] = ev.Image, ev.Parent
		if strings.HasPrefix(ev.Reason, "forked from") {
			k.forked[ev.PID] = true
		}
	case kernel.EventApproval:
		if ev.Tool == "spawn_child_process" && strings.HasPrefix(ev.Reason, "approved") {
			k.approvedSpawns[ev.PID]++
		}
	case kernel.EventCheckpoint:
		if id, ok := strings.CutPrefix(ev.Reason, "created "); ok && !slices.Contains(k.checkpoints, id) {
			k.checkpoints = append(k.checkpoints, id)
		}
		if strings.HasPrefix(ev.Reason, "restored ") {
			k.restores++
		}
	}
}

func (k *knowledge) post(id string, m postedMessage) {
	if _, ok := k.posted[id]; !ok {
		k.postOrder = append(k.postOrder, id)
	}
	k.posted[id] = m
}

// hostActions are the Host's moves between episodes: Human messages,
// kills, checkpoints, goals. At the end (final) the Host kills what is left
// so the run terminates.
func (w *world) hostActions(final bool) {
	procs, err := w.rt.Processes()
	if err != nil {
		if !w.isDead() && !w.toggle.fired() {
			w.fail("host-read", fmt.Sprintf("Processes: %v", err))
		}
		return
	}
	var live []kernel.ProcessInfo
	for _, p := range procs {
		if !p.Status.Terminal() {
			live = append(live, p)
		}
	}
	if final {
		for _, p := range live {
			if p.ParentPID == 0 {
				err := w.rt.Kill(p.PID, "the simulation's step bound")
				w.tracef("host kill %d (step bound): %v", p.PID, errString(err))
			}
		}
		return
	}
	if len(live) == 0 {
		return
	}
	if w.hsched.level != HostFaultsOff && w.resumeHeld(live) {
		return
	}
	// A process waiting for the outside world gets a Human message; a
	// process that waited two episodes in a row gets killed now and then.
	for _, p := range live {
		if w.isDead() {
			return
		}
		if p.Status == process.Waiting && p.Wait != nil && (p.Wait.Kind == process.WaitHuman || p.Wait.Kind == process.WaitMessage) && w.chance(0.7) {
			w.postHuman(p.PID, w.chance(0.2))
		}
	}
	w.decideApprovals()
	for n := w.intn(3); n > 0 && !w.isDead(); n-- {
		p := live[w.intn(len(live))]
		switch r := w.intn(100); {
		case r < 35:
			w.postHuman(p.PID, w.chance(0.3))
		case r < 45:
			cp, err := w.rt.CreateCheckpoint(p.PID)
			w.tracef("host checkpoint create %d -> %s %v", p.PID, cp.ID, errString(err))
		case r < 55:
			if id := w.pickCheckpoint(); id != "" {
				rep, err := w.restore(id)
				w.tracef("host checkpoint restore %s -> restored %v killed %v kept %v superseded %d: %v", id, rep.Restored, rep.Killed, rep.KeptTerminal, rep.SupersededMessages, errString(err))
			}
		case r < 62:
			if id := w.pickCheckpoint(); id != "" {
				rep, err := w.rt.ForkCheckpoint(id)
				w.tracef("host checkpoint fork %s -> root %d: %v", id, rep.RootPID, errString(err))
			}
		case r < 68 && w.step > 3:
			err := w.rt.Kill(p.PID, "killed by the simulated Host")
			w.tracef("host kill %d: %v", p.PID, errString(err))
		case r < 75:
			meta, err := w.rt.SetGoal(p.PID, "restated goal "+w.unique())
			w.tracef("host goal set %d -> version %d: %v", p.PID, meta.Version, errString(err))
		case r < 80 && w.step < w.cfg.MaxSteps/2:
			if err := w.spawnRoot(); err != nil {
				w.fail("host-spawn", err.Error())
			}
		}
	}
}

func (w *world) pickCheckpoint() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.know.checkpoints) == 0 || w.rng.IntN(8) == 0 {
		return "cp-999"
	}
	return w.know.checkpoints[w.rng.IntN(len(w.know.checkpoints))]
}

// postHuman posts a Human message with a unique body; an acknowledged post
// is a message that may never be lost.
func (w *world) postHuman(to int64, interrupt bool) {
	w.mu.Lock()
	body := "human note " + w.unique()
	w.mu.Unlock()
	m, err := w.rt.PostHumanMessage(kernel.HumanMessage{To: to, From: "sim", Body: body, Interrupt: interrupt})
	w.mu.Lock()
	defer w.mu.Unlock()
	w.traceLocked(fmt.Sprintf("host message to %d interrupt=%v -> %s: %s", to, interrupt, m.ID, errString(err)))
	if err == nil && !w.dead {
		w.know.post(m.ID, postedMessage{to: to, sender: m.Sender, body: body})
	}
}

func (w *world) allEnded() bool {
	procs, err := w.rt.Processes()
	if err != nil {
		return false
	}
	for _, p := range procs {
		if !p.Status.Terminal() {
			return false
		}
	}
	return true
}

// decideApprovals approves or denies, now and then, the calls held for a
// Human, and now and then decides a call that no longer waits.
func (w *world) decideApprovals() {
	list, err := w.rt.Approvals()
	if err != nil {
		return
	}
	for _, a := range list {
		if w.isDead() || !w.chance(0.7) {
			continue
		}
		if w.chance(0.6) {
			err = w.rt.Approve(kernel.ApprovalRef{PID: a.PID, CallID: a.CallID, ID: a.ID})
			w.tracef("host approve %d %s (%s): %v", a.PID, a.CallID, a.Tool, errString(err))
			if err == nil {
				w.mu.Lock()
				w.approved[a.CallID] = true
				w.mu.Unlock()
			}
		} else {
			err = w.rt.DenyApproval(kernel.ApprovalRef{PID: a.PID, CallID: a.CallID, ID: a.ID}, "the simulated Host says no")
			w.tracef("host deny %d %s (%s): %v", a.PID, a.CallID, a.Tool, errString(err))
		}
		if err == nil {
			w.mu.Lock()
			w.result.Approvals++
			w.mu.Unlock()
		}
		if err == nil && w.chance(0.2) {
			// A second decision of the same call must be refused.
			if again := w.rt.Approve(kernel.ApprovalRef{PID: a.PID, CallID: a.CallID, ID: a.ID}); again == nil {
				w.fail("approval-once", fmt.Sprintf("call %s of pid %d was decided twice", a.CallID, a.PID))
			}
		}
	}
}

// wasApproved reports whether the Host approved call.
func (w *world) wasApproved(call string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.approved[call]
}

// restore has the Host restore checkpoint id, counted as a restore before
// it begins (knowledge.restores).
func (w *world) restore(id string) (kernel.RestoreReport, error) {
	w.mu.Lock()
	w.know.restores++
	w.mu.Unlock()
	return w.rt.RestoreCheckpoint(id)
}
