package kernel

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/internal/datadriven"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/process"
)

// The kernel's data-driven scripts (testdata/*.txt) state the inputs of a
// whole runtime — model replies, Host messages and decisions, crashes — and
// the events and states they must lead to, as the pure cores' scripts do for
// one state machine. Commands:
//
//	spawn [image=I] [grant=RESOURCE=RIGHTS]... [ask=RESOURCE=RIGHTS]...   starts a root; prints its pid
//	model pid=N                 queues the next reply of pid N: one line per tool call
//	                            ("name {json}"), "text: ..." for text, "fault: STATUS" for a server fault
//	run                         runs until idle, skipping the clock ahead to timers; prints the events
//	                            since the last run
//	ready                       runs what can run now, leaving timers waiting; prints the events
//	tick d=DURATION             moves the clock on by d, then runs what can run now; prints the
//	                            time and the events
//	ps                          prints every process
//	send pid=N [interrupt]      posts the input as a Human message
//	approve pid=N | deny pid=N  decides the call pid N holds for approval
//	crash                       drops what was not synced and reopens
//
// The runtime runs on Pebble's crash-consistent in-memory filesystem, a fake
// clock that skips ahead when idle, and one worker, so a script replays the
// same way every time.

// scriptModel answers each process from the replies its script queued.
type scriptModel struct {
	mu      sync.Mutex
	replies map[int64][]scriptReply
	calls   map[int64]int
}

type scriptReply struct {
	resp  llm.Response
	fault int
}

func (m *scriptModel) Name() string { return "script" }

func (m *scriptModel) Complete(_ context.Context, req llm.Request) (llm.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pid := req.Process.PID
	queue := m.replies[pid]
	if len(queue) == 0 {
		return llm.Response{}, &llm.CallError{Settlement: llm.SettlementRejected, Permanent: true,
			Err: fmt.Errorf("script: no reply queued for pid %d", pid)}
	}
	next := queue[0]
	m.replies[pid] = queue[1:]
	if next.fault != 0 {
		return llm.Response{}, &llm.CallError{Settlement: llm.SettlementRejected, StatusCode: next.fault, Transient: true,
			Err: fmt.Errorf("script: server answered %d", next.fault)}
	}
	resp := next.resp
	for i := range resp.ToolCalls {
		m.calls[pid]++
		resp.ToolCalls[i].ID = fmt.Sprintf("c%d_%d", pid, m.calls[pid])
	}
	return resp, nil
}

type kernelScript struct {
	t      *testing.T
	clock  *clock.Fake
	fs     *vfs.MemFS
	model  *scriptModel
	rt     *Runtime
	mu     sync.Mutex
	events []Event
}

func newKernelScript(t *testing.T) *kernelScript {
	ks := &kernelScript{t: t, clock: clock.NewFake(epoch, true), fs: vfs.NewCrashableMem(), model: &scriptModel{replies: map[int64][]scriptReply{}, calls: map[int64]int{}}}
	ks.open()
	return ks
}

func (ks *kernelScript) open() {
	rt, err := Open("/rt", Options{FS: ks.fs, Clock: ks.clock, Workers: 1, Provider: ks.model,
		OnEvent: func(ev Event) {
			ks.mu.Lock()
			ks.events = append(ks.events, ev)
			ks.mu.Unlock()
		}})
	if err != nil {
		ks.t.Fatalf("open: %v", err)
	}
	ks.rt = rt
	ks.t.Cleanup(func() { rt.Close() })
}

func TestKernelScripts(t *testing.T) {
	var ks *kernelScript
	var script string
	datadriven.Run(t, "testdata/*.txt", func(t *testing.T, c *datadriven.Case) string {
		file, _, _ := strings.Cut(c.Pos, ":")
		if file != script {
			ks, script = newKernelScript(t), file
		}
		out, err := ks.run(c)
		if err != nil {
			return "error: " + err.Error()
		}
		return out
	})
}

func (ks *kernelScript) run(c *datadriven.Case) (string, error) {
	switch c.Cmd {
	case "spawn":
		return ks.spawn(c)
	case "model":
		return "", ks.queue(c)
	case "run":
		if err := ks.rt.RunUntilIdle(context.Background()); err != nil {
			return "", err
		}
		return ks.drain(), nil
	case "ready":
		if err := ks.rt.RunReady(context.Background()); err != nil {
			return "", err
		}
		return ks.drain(), nil
	case "tick":
		v, _ := c.Arg("d")
		d, err := time.ParseDuration(v)
		if err != nil {
			return "", fmt.Errorf("tick: d: %w", err)
		}
		ks.clock.Advance(d)
		if err := ks.rt.RunReady(context.Background()); err != nil {
			return "", err
		}
		return fmt.Sprintf("clock +%s\n%s", ks.clock.Now().Sub(epoch), ks.drain()), nil
	case "ps":
		return ks.ps()
	case "send":
		pid, err := pidArg(c)
		if err != nil {
			return "", err
		}
		_, interrupt := c.Arg("interrupt")
		m, err := ks.rt.PostHumanMessage(HumanMessage{To: pid, From: "ana", Body: c.Input, Interrupt: interrupt})
		if err != nil {
			return "", err
		}
		return "posted " + m.Kind, nil
	case "approve", "deny":
		pid, err := pidArg(c)
		if err != nil {
			return "", err
		}
		list, err := ks.rt.Approvals()
		if err != nil {
			return "", err
		}
		for _, a := range list {
			if a.PID != pid {
				continue
			}
			if c.Cmd == "approve" {
				return "approved " + a.CallID + " " + a.Tool, ks.rt.Approve(ApprovalRef{PID: pid, CallID: a.CallID})
			}
			reason, _ := c.Arg("reason")
			return "denied " + a.CallID + " " + a.Tool, ks.rt.DenyApproval(ApprovalRef{PID: pid, CallID: a.CallID}, reason)
		}
		return "", fmt.Errorf("pid %d holds no call for approval", pid)
	case "checkpoint":
		pid, err := pidArg(c)
		if err != nil {
			return "", err
		}
		cp, err := ks.rt.CreateCheckpoint(pid)
		if err != nil {
			return "", err
		}
		return "checkpoint " + cp.ID + "\n" + ks.drain(), nil
	case "restore":
		id, _ := c.Arg("id")
		report, err := ks.rt.RestoreCheckpoint(id)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "restored %v\n", report.Restored)
		for _, e := range report.EffectsSince {
			fmt.Fprintf(&b, "effect since: pid %d %s %s ok=%v code=%s\n", e.PID, e.CallID, e.Tool, e.OK, e.Code)
		}
		return b.String() + ks.drain(), nil
	case "crash":
		crashed := ks.fs.CrashClone(vfs.CrashCloneCfg{})
		ks.rt.Close()
		ks.fs = crashed
		ks.drain()
		ks.open()
		return ks.drain(), nil
	}
	return "", fmt.Errorf("unknown command %q", c.Cmd)
}

func pidArg(c *datadriven.Case) (int64, error) {
	v, ok := c.Arg("pid")
	if !ok {
		return 0, fmt.Errorf("%s: pid=N required", c.Cmd)
	}
	var pid int64
	_, err := fmt.Sscan(v, &pid)
	return pid, err
}

func (ks *kernelScript) spawn(c *datadriven.Case) (string, error) {
	spec := SpawnSpec{Image: "base:v0", Goal: "script"}
	if v, ok := c.Arg("image"); ok {
		spec.Image = v
	}
	for i, a := range c.Args {
		effect := map[string]capabilities.Effect{"grant": capabilities.Allow, "ask": capabilities.Ask, "deny": capabilities.Deny}[a.Key]
		if effect == "" {
			continue
		}
		g, err := capabilities.ParseGrantSpec(fmt.Sprintf("g%d", i), a.Val, effect, epoch)
		if err != nil {
			return "", err
		}
		spec.Grants = append(spec.Grants, g)
	}
	pid, err := ks.rt.Spawn(spec)
	if err != nil {
		return "", err
	}
	ks.drain()
	return fmt.Sprintf("pid %d", pid), nil
}

func (ks *kernelScript) queue(c *datadriven.Case) error {
	pid, err := pidArg(c)
	if err != nil {
		return err
	}
	var r scriptReply
	for _, line := range strings.Split(c.Input, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasPrefix(line, "text:"):
			r.resp.Text = strings.TrimSpace(strings.TrimPrefix(line, "text:"))
		case strings.HasPrefix(line, "fault:"):
			if _, err := fmt.Sscan(strings.TrimPrefix(line, "fault:"), &r.fault); err != nil {
				return fmt.Errorf("fault: %w", err)
			}
		default:
			name, args, _ := strings.Cut(line, " ")
			if args == "" {
				args = "{}"
			}
			if !json.Valid([]byte(args)) {
				return fmt.Errorf("arguments of %s: not JSON: %s", name, args)
			}
			r.resp.ToolCalls = append(r.resp.ToolCalls, llm.ToolCall{Name: name, Arguments: json.RawMessage(args)})
		}
	}
	ks.model.mu.Lock()
	ks.model.replies[pid] = append(ks.model.replies[pid], r)
	ks.model.mu.Unlock()
	return nil
}

// drain returns the events since the last call, one line each, with what
// a script can rely on: no OIDs, no wall-clock values.
func (ks *kernelScript) drain() string {
	ks.mu.Lock()
	evs := ks.events
	ks.events = nil
	ks.mu.Unlock()
	var lines []string
	for _, ev := range evs {
		if line := scriptEventLine(ev); line != "" {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

func scriptEventLine(ev Event) string {
	p := fmt.Sprintf("pid %d: ", ev.PID)
	switch ev.Kind {
	case EventSpawn:
		return p + "spawned " + ev.Image
	case EventState:
		line := p + ev.From + " -> " + ev.To
		if ev.Wait != "" {
			line += " (" + ev.Wait + ")"
		}
		if ev.Reason != "" {
			line += ": " + ev.Reason
		}
		return line
	case EventProvider:
		d, _ := ev.Detail.(map[string]any)
		line := fmt.Sprintf("%sprovider call %d attempt %v: %v", p, ev.Turn, d["attempt"], d["outcome"])
		if d["disposition"] != nil {
			line += fmt.Sprintf(" (%v)", d["disposition"])
		}
		return line
	case EventToolDone:
		status := "ok"
		if ev.OK != nil && !*ev.OK {
			status = "error " + ev.Code
		}
		return fmt.Sprintf("%s%s %s %s", p, ev.CallID, ev.Tool, status)
	case EventApproval:
		d, _ := ev.Detail.(map[string]any)
		return fmt.Sprintf("%sapproval %v: %s %s on %v", p, d["decision"], ev.CallID, ev.Tool, d["resource"])
	case EventRecovered:
		return p + "recovered: " + ev.Reason
	case EventMessage:
		return ""
	}
	return ""
}

func (ks *kernelScript) ps() (string, error) {
	infos, err := ks.rt.Processes()
	if err != nil {
		return "", err
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].PID < infos[j].PID })
	var lines []string
	for _, p := range infos {
		line := fmt.Sprintf("pid %d %s %s", p.PID, p.Image, p.Status)
		if p.WaitingOn != "" {
			line += " on " + string(p.WaitingOn)
		}
		if p.Status == process.Failed || p.Status == process.Killed || p.WaitingOn == process.WaitProvider {
			line += ": " + p.Reason
		}
		line += fmt.Sprintf(" tool_calls=%d llm_calls=%d", p.Used.ToolCalls, p.Used.LLMCalls)
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n"), nil
}
