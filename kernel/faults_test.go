package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

// faultScript is a small tree: a parent (pid 1) hands a worker (pid 2) a
// job and a one-shot spawn grant; the worker counts in a durable Object,
// spawns a greeter (pid 3) with the grant, waits for it, reports back and
// exits; the parent receives the report, waits for the worker and exits.
// One call a turn, results without times.
const faultScript = `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - name: spawn_child_process
            arguments:
              image: base:v0
              goal: fault worker
              capabilities: [{resource: "process:spawn", rights: [write], uses_remaining: 1}]
      - tool_calls: [{name: send_process_message, arguments: {recipient_pid: 2, body: count to two}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "process:2"}}]
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: 2}}]
      - tool_calls: [{name: process_exit, arguments: {payload: {done: true}}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "process:1"}}]
      - tool_calls: [{name: create_object, arguments: {name: tally, payload: {count: 1}, durable: true}}]
      - tool_calls: [{name: write_object, arguments: {oid: "${last.oid}", expected_version: 1, payload: {count: 2}}}]
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: fault greeter}}]
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: 3}}]
      - tool_calls: [{name: send_process_message, arguments: {recipient_pid: 1, body: counted to two}}]
      - tool_calls: [{name: process_exit, arguments: {payload: {count: 2}}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {message: greeted}}]
`

// faultProvider answers from faultScript and records what each process was
// shown. The scripted turn is the number of assistant messages in the
// request: after a reopen, a quantum cut short by the fault counts as
// interrupted and the process does that turn's work again, as a model told
// so would. When the request for trigger arrives, it turns the disk fault on.
type faultProvider struct {
	replay  *llm.Replay
	fault   *errorfs.Toggle
	trigger [2]int64 // pid, scripted turn
	// rt is the runtime being run, which knows each process's script entry.
	rt *Runtime

	mu        sync.Mutex
	triggered bool
	seen      map[int64]map[string]string // pid -> tool_call_id -> content
}

func newFaultProvider(t *testing.T, fault *errorfs.Toggle, pid int64, turn int) *faultProvider {
	t.Helper()
	s, err := llm.ParseScript([]byte(faultScript))
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProvider{fault: fault, trigger: [2]int64{pid, int64(turn)}, seen: map[int64]map[string]string{}}
	if p.replay, err = llm.NewReplay(s, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *faultProvider) SpawnIndex(pid int64) (int, error) { return p.rt.SpawnIndex(pid) }

func (p *faultProvider) Name() string { return "fault-replay" }

func (p *faultProvider) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	req.Turn = 0
	p.mu.Lock()
	seen := p.seen[req.Process.PID]
	if seen == nil {
		seen = map[string]string{}
		p.seen[req.Process.PID] = seen
	}
	for _, m := range req.Messages {
		switch m.Role {
		case llm.RoleAssistant:
			req.Turn++
		case llm.RoleTool:
			seen[m.ToolCallID] = m.Content
		}
	}
	if !p.triggered && req.Process.PID == p.trigger[0] && int64(req.Turn) == p.trigger[1] {
		p.triggered = true
		p.fault.On()
	}
	p.mu.Unlock()
	return p.replay.Complete(ctx, req)
}

// walFaultOn injects ErrInjected into write-ahead-log operations of the
// given kinds while the toggle is on.
func walFaultOn(kinds ...errorfs.OpKind) *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if strings.HasSuffix(op.Path, ".log") && slices.Contains(kinds, op.Kind) {
			return errorfs.ErrInjected
		}
		return nil
	})}
}

// TestDiskFaultStopsRuntime injects a WAL write or sync error in the middle
// of a run of faultScript. The runtime must stop with an error wrapping
// objects.ErrFailed that carries the cause; the directory must then open
// with the default filesystem, hold everything that was acknowledged before
// the fault (every event delivered to OnEvent, every tool result a process
// was shown, as retained evidence paired with its tool record, every Object
// version a process was shown, terminal states, a used one-shot grant), and
// run to the same end as a run without a fault.
func TestDiskFaultStopsRuntime(t *testing.T) {
	kinds := map[string][]errorfs.OpKind{
		"write": {errorfs.OpFileWrite, errorfs.OpFileWriteAt},
		"sync":  {errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo},
	}
	// Fault points: the worker's write_object turn, its wait for the
	// greeter (after the one-shot spawn), and the parent's exit turn.
	triggers := []struct {
		pid  int64
		turn int
	}{{2, 2}, {2, 4}, {1, 4}}
	for name, ops := range kinds {
		for _, tr := range triggers {
			t.Run(fmt.Sprintf("%s/pid%d-turn%d", name, tr.pid, tr.turn), func(t *testing.T) {
				testDiskFault(t, ops, tr.pid, tr.turn)
			})
		}
	}
}

func testDiskFault(t *testing.T, ops []errorfs.OpKind, pid int64, turn int) {
	dir := t.TempDir()
	fault := walFaultOn(ops...)
	prov := newFaultProvider(t, fault, pid, turn)
	clk := clock.NewFake(epoch, true)
	var mu sync.Mutex
	var acked []Event
	rt, err := Open(dir, Options{
		FS: errorfs.Wrap(vfs.Default, fault), Provider: prov, Clock: clk,
		OnEvent: func(ev Event) {
			mu.Lock()
			acked = append(acked, ev)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	prov.rt = rt
	root, err := rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "fault parent",
		Grants: []capabilities.Grant{{Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}}}})
	if err != nil {
		t.Fatal(err)
	}
	runErr := rt.RunUntilIdle(context.Background())
	if !prov.triggered {
		t.Fatalf("the fault was never turned on (run: %v)", runErr)
	}
	if !errors.Is(runErr, objects.ErrFailed) || !strings.Contains(runErr.Error(), "injected") {
		t.Fatalf("RunUntilIdle = %v, want an error wrapping objects.ErrFailed with the injected cause", runErr)
	}
	t.Logf("run stopped: %v", runErr)
	// The failed runtime refuses to run again and releases the directory.
	if err := rt.RunUntilIdle(context.Background()); err == nil {
		t.Fatal("a runtime whose store failed ran again")
	}
	_ = rt.Close() // may report the WAL error
	fault.Off()

	mu.Lock()
	before := slices.Clone(acked)
	mu.Unlock()
	seenBefore := prov.snapshot()

	// Reopen on the real filesystem; nothing runs yet.
	rt2, err := Open(dir, Options{Clock: clk})
	if err != nil {
		t.Fatalf("reopen after the fault: %v", err)
	}
	checkAcknowledged(t, rt2, before, seenBefore)
	if err := rt2.Close(); err != nil {
		t.Fatal(err)
	}

	// Continue to the end with the same provider, fault off.
	rt3, err := Open(dir, Options{Clock: clk, Provider: prov})
	if err != nil {
		t.Fatalf("reopen to continue: %v", err)
	}
	defer rt3.Close()
	prov.rt = rt3
	if err := rt3.RunUntilIdle(context.Background()); err != nil {
		t.Fatalf("run after the fault: %v", err)
	}
	checkFaultRunEnd(t, rt3, root, prov.snapshot())
}

func (p *faultProvider) snapshot() map[int64]map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[int64]map[string]string{}
	for pid, calls := range p.seen {
		out[pid] = map[string]string{}
		for id, c := range calls {
			out[pid][id] = c
		}
	}
	return out
}

// checkAcknowledged checks that what rt holds after a reopen includes
// everything acknowledged before the fault.
func checkAcknowledged(t *testing.T, rt *Runtime, acked []Event, seen map[int64]map[string]string) {
	t.Helper()
	durable, err := rt.Store().Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	bySeq := map[uint64]Event{}
	for _, e := range durable {
		var ev Event
		if err := json.Unmarshal(e.Data, &ev); err != nil {
			t.Fatalf("decode event %d: %v", e.Seq, err)
		}
		bySeq[e.Seq] = ev
	}
	terminal := map[int64]string{}
	for _, ev := range acked {
		got, ok := bySeq[ev.Seq]
		if !ok || got.Kind != ev.Kind || got.PID != ev.PID || got.To != ev.To || got.CallID != ev.CallID {
			t.Errorf("acknowledged event %d (%s pid %d) is not durable as delivered: %+v", ev.Seq, ev.Kind, ev.PID, got)
		}
		if ev.Kind == EventState && process.State(ev.To).Terminal() {
			terminal[ev.PID] = ev.To
		}
	}
	for pid, state := range terminal {
		info, err := rt.Process(pid)
		if err != nil || string(info.Status) != state {
			t.Errorf("pid %d ended %s before the fault and is %s after it (%v)", pid, state, info.Status, err)
		}
	}
	checkRetainedResults(t, rt, seen)
}

// checkRetainedResults checks that every tool result a process was shown is
// retained evidence with the same content, that tool records and retained
// results pair up with the recorded hash, that no call is recorded twice,
// and that the Object versions processes were shown are durable.
func checkRetainedResults(t *testing.T, rt *Runtime, seen map[int64]map[string]string) {
	t.Helper()
	procs, err := rt.Processes()
	if err != nil {
		t.Fatal(err)
	}
	err = rt.view(func(tx *txn) error {
		for _, p := range procs {
			results := map[string]string{}
			if err := tx.Scan(retainPrefix(p.PID), func(_, v []byte) error {
				var item retained
				if err := json.Unmarshal(v, &item); err != nil {
					return err
				}
				if item.Kind == evidenceKindEntry && item.Entry != nil && item.Entry.Role == llm.RoleTool {
					if _, dup := results[item.Entry.ToolCallID]; dup {
						t.Errorf("pid %d: call %s has two retained results", p.PID, item.Entry.ToolCallID)
					}
					results[item.Entry.ToolCallID] = item.Entry.Content
				}
				return nil
			}); err != nil {
				return err
			}
			recorded := map[string]bool{}
			if err := tx.Scan(fmt.Appendf(nil, "%s%020d/", prefixToolRec, p.PID), func(_, v []byte) error {
				var tr toolRecord
				if err := json.Unmarshal(v, &tr); err != nil {
					return err
				}
				if recorded[tr.CallID] {
					t.Errorf("pid %d: call %s recorded twice", p.PID, tr.CallID)
				}
				recorded[tr.CallID] = true
				if c, ok := results[tr.CallID]; !ok || sha([]byte(c)) != tr.ResultSHA256 {
					t.Errorf("pid %d: call %s (%s) has no retained result with the recorded hash", p.PID, tr.CallID, tr.Tool)
				}
				return nil
			}); err != nil {
				return err
			}
			if len(recorded) != len(results) {
				t.Errorf("pid %d: %d tool records, %d retained results", p.PID, len(recorded), len(results))
			}
			for id, content := range seen[p.PID] {
				if results[id] != content {
					t.Errorf("pid %d was shown the result of call %s, which is not retained as shown:\n  shown:    %s\n  retained: %s", p.PID, id, content, results[id])
				}
				var obj struct {
					OID     string `json:"oid"`
					Version uint64 `json:"version"`
				}
				if json.Unmarshal([]byte(content), &obj) == nil && obj.OID != "" && obj.Version > 0 {
					m, err := tx.Stat(obj.OID)
					if err != nil || m.Version < obj.Version {
						t.Errorf("pid %d was shown object %s at version %d; durable: version %d (%v)", p.PID, obj.OID, obj.Version, m.Version, err)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkFaultRunEnd checks the end of faultScript's run: the three
// processes exited, each spawned once; every message acked by exactly one
// durable read; the worker's tally durable at version 2; its one-shot used.
func checkFaultRunEnd(t *testing.T, rt *Runtime, root int64, seen map[int64]map[string]string) {
	t.Helper()
	checkRetainedResults(t, rt, seen)
	procs, err := rt.Processes()
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 3 {
		t.Fatalf("%d processes, want 3: %+v", len(procs), procs)
	}
	for _, p := range procs {
		if p.Status != process.Exited {
			t.Errorf("pid %d %s: %s", p.PID, p.Status, p.Reason)
		}
	}
	// The result payload is runtime-local: an exit that reached the disk
	// although its sync failed is recovered without it, so the durable
	// hash is what is compared.
	const rootResult = `{"done":true}`
	info, _ := rt.Process(root)
	meta, payload, err := rt.ReadObject(info.ResultOID)
	switch {
	case errors.Is(err, objects.ErrPayloadLost):
	case err != nil || string(payload) != rootResult:
		t.Errorf("root result %q (%v), want %s", payload, err, rootResult)
	}
	if meta.PayloadSHA256 != sha([]byte(rootResult)) {
		t.Errorf("root result hash %s, want the hash of %s", meta.PayloadSHA256, rootResult)
	}
	events, err := rt.Store().Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	spawns := map[int64]int{}
	for _, e := range events {
		var ev Event
		if json.Unmarshal(e.Data, &ev) == nil && ev.Kind == EventSpawn {
			spawns[ev.PID]++
		}
	}
	if len(spawns) != 3 || spawns[1] != 1 || spawns[2] != 1 || spawns[3] != 1 {
		t.Errorf("spawn events %v, want one each for pids 1, 2 and 3", spawns)
	}
	err = rt.view(func(tx *txn) error {
		acks := map[string]int{}
		for _, p := range procs {
			if err := tx.Scan(retainPrefix(p.PID), func(_, v []byte) error {
				var item retained
				if err := json.Unmarshal(v, &item); err != nil {
					return err
				}
				if item.Kind != evidenceKindEntry || item.Entry == nil || item.Entry.Role != llm.RoleTool {
					return nil
				}
				var page struct {
					Acked []string `json:"acked_message_ids"`
				}
				_ = json.Unmarshal([]byte(item.Entry.Content), &page)
				for _, id := range page.Acked {
					acks[id]++
				}
				return nil
			}); err != nil {
				return err
			}
		}
		total := 0
		for _, p := range procs {
			if err := mailbox.List(tx.Txn, p.PID, func(m *mailbox.Message) error {
				total++
				if m.Status != mailbox.StatusAcked || acks[m.ID] != 1 {
					t.Errorf("message %s to pid %d: %s, acked by %d reads", m.ID, p.PID, m.Status, acks[m.ID])
				}
				return nil
			}); err != nil {
				return err
			}
		}
		if total != 2 {
			t.Errorf("%d messages, want 2 (the job and the report)", total)
		}
		tally, err := tx.Lookup(Namespace(2), "tally")
		if err != nil {
			return err
		}
		_, payload, err := tx.Read(tally.OID)
		if err != nil || tally.Version != 2 || string(payload) != `{"count":2}` {
			t.Errorf("tally version %d payload %q (%v), want version 2 {\"count\":2}", tally.Version, payload, err)
		}
		worker, err := loadProc(tx, 2)
		if err != nil {
			return err
		}
		for _, g := range worker.Grants {
			if g.Resource == "process:spawn" && (g.UsesRemaining == nil || *g.UsesRemaining != 0) {
				t.Errorf("the worker's one-shot spawn grant: %s uses left, want 0", usesLeft(g.UsesRemaining))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func usesLeft(n *int) string {
	if n == nil {
		return "unlimited"
	}
	return fmt.Sprint(*n)
}
