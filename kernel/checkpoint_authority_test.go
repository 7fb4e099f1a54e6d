package kernel

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
)

// pidModel answers each process's requests with its calls in order, by the
// count of its requests (a fork keeps its source's turn numbers); past its
// list a process waits for a message that never comes.
type pidModel struct {
	mu    sync.Mutex
	calls map[int64][][2]string // name, arguments
	asked map[int64]int
}

func (m *pidModel) set(pid int64, calls ...[2]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls == nil {
		m.calls, m.asked = map[int64][][2]string{}, map[int64]int{}
	}
	m.calls[pid] = calls
}

func (m *pidModel) provider() funcProvider {
	return func(req llm.Request) (llm.Response, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		pid := req.Process.PID
		n := m.asked[pid]
		m.asked[pid]++
		id := fmt.Sprintf("c%d_%d", pid, n)
		if n >= len(m.calls[pid]) {
			return oneCall(id, "receive_process_messages", `{"sender":"human:nobody"}`), nil
		}
		return oneCall(id, m.calls[pid][n][0], m.calls[pid][n][1]), nil
	}
}

func modelHarness(t *testing.T, m *pidModel) *harness {
	return newHarness(t, "", func(o *Options) { o.Provider = m.provider() })
}

func allowGrant(resource string, rights ...capabilities.Right) capabilities.Grant {
	return capabilities.Grant{Resource: resource, Rights: rights}
}

func denyGrant(resource string, rights ...capabilities.Right) capabilities.Grant {
	return capabilities.Grant{Resource: resource, Rights: rights, Effect: capabilities.Deny}
}

// secretCheckpoint has pid 1 keep a durable secret in its namespace and
// wait, checkpointed as cp-1; it returns the secret's OID.
func secretCheckpoint(t *testing.T, h *harness, m *pidModel) string {
	t.Helper()
	m.set(1, [2]string{"create_object", `{"name":"secret","payload":{"pin":"1234"},"durable":true}`})
	h.spawn(nil)
	h.run()
	if _, err := h.rt.CreateCheckpoint(1); err != nil {
		t.Fatal(err)
	}
	m2, _ := objectPayload(t, h, 1, "secret")
	return m2.OID
}

// A fork copies the subtree's Objects to the caller's new child: a grant
// denying the caller a read of one stands against the fork, or the copy
// would be read through it.
func TestForkRefusedWhatTheCallerIsDeniedReading(t *testing.T) {
	m := &pidModel{}
	h := modelHarness(t, m)
	secretCheckpoint(t, h, m)
	m.set(2,
		[2]string{"read_object", `{"namespace":"proc-1","name":"secret"}`},
		[2]string{"checkpoint_fork", `{"checkpoint_id":"cp-1"}`})
	pid := h.spawn([]capabilities.Grant{spawnGrant(),
		allowGrant("object_namespace:*", capabilities.Read),
		denyGrant("object_namespace:proc-1", capabilities.Read),
		allowGrant("checkpoint:process:1", capabilities.Execute)})
	h.run()
	res := h.toolResults(pid)
	if errorCode(res[0]) != tools.CodeDenied {
		t.Fatalf("the direct read: %v", res[0])
	}
	if errorCode(res[1]) != tools.CodeDenied || res[1]["checkpoint"] != nil {
		t.Fatalf("the fork of a checkpoint holding what the caller is denied: %v", res[1])
	}
	if procs, _ := h.rt.Processes(); len(procs) != 2 {
		t.Fatalf("%d processes after a refused fork", len(procs))
	}
}

// Each forked process is a spawn of the caller's: a caller denied
// process:spawn, or the read of another image, forks nothing.
func TestForkNeedsTheRightToSpawn(t *testing.T) {
	m := &pidModel{}
	h := modelHarness(t, m)
	m.set(1,
		[2]string{"spawn_child_process", `{"image":"base:v0","goal":"c"}`},
		[2]string{"checkpoint_create", `{}`},
		[2]string{"checkpoint_fork", `{"checkpoint_id":"cp-1"}`})
	pid := h.spawn([]capabilities.Grant{denyGrant("process:spawn", capabilities.Write),
		allowGrant("checkpoint:process:1", capabilities.Write, capabilities.Execute)})
	h.run()
	res := h.toolResults(pid)
	if errorCode(res[0]) != tools.CodeDenied || res[1]["ok"] != true {
		t.Fatalf("spawn %v, checkpoint %v", res[0], res[1])
	}
	if errorCode(res[2]) != tools.CodeDenied || !strings.Contains(errorMessage(res[2]), "process:spawn") {
		t.Fatalf("a fork by a process denied spawning: %v", res[2])
	}

	m2 := &pidModel{}
	h2 := modelHarness(t, m2)
	m2.set(1, [2]string{"receive_process_messages", `{"sender":"human:nobody"}`})
	h2.rt.Spawn(SpawnSpec{Image: "coding:v0", Goal: "code"})
	h2.run()
	if _, err := h2.rt.CreateCheckpoint(1); err != nil {
		t.Fatal(err)
	}
	m2.set(2, [2]string{"checkpoint_fork", `{"checkpoint_id":"cp-1"}`})
	forker := h2.spawn([]capabilities.Grant{spawnGrant(), denyGrant("image:coding:v0", capabilities.Read),
		allowGrant("checkpoint:process:1", capabilities.Execute)})
	h2.run()
	if res := h2.toolResults(forker); errorCode(res[0]) != tools.CodeDenied || !strings.Contains(errorMessage(res[0]), "image:coding:v0") {
		t.Fatalf("a fork of an image the caller is denied: %v", res[0])
	}
}

// A restore rewrites and removes the subtree's Objects: a grant denying the
// caller a write of one stands against the restore.
func TestRestoreRefusedWhatTheCallerIsDeniedWriting(t *testing.T) {
	m := &pidModel{}
	h := modelHarness(t, m)
	oid := secretCheckpoint(t, h, m)
	m.set(2,
		[2]string{"write_object", `{"oid":"` + oid + `","expected_version":1,"payload":{"pin":"0000"}}`},
		[2]string{"checkpoint_restore", `{"checkpoint_id":"cp-1"}`})
	pid := h.spawn([]capabilities.Grant{
		allowGrant("object_namespace:proc-1", capabilities.Read),
		denyGrant("object:"+oid, capabilities.Write),
		allowGrant("checkpoint:process:1", capabilities.Admin)})
	h.run()
	res := h.toolResults(pid)
	if errorCode(res[0]) != tools.CodeDenied {
		t.Fatalf("the direct write: %v", res[0])
	}
	if errorCode(res[1]) != tools.CodeDenied {
		t.Fatalf("a restore rewriting what the caller is denied writing: %v", res[1])
	}
}

// A pause the Host put on a process outlives a restore of it.
func TestRestoreKeepsTheHostsPause(t *testing.T) {
	m := &pidModel{}
	h := modelHarness(t, m)
	m.set(1,
		[2]string{"spawn_child_process", `{"image":"base:v0","goal":"child"}`},
		[2]string{"checkpoint_create", `{"pid":2}`},
		[2]string{"receive_process_messages", `{"sender":"human:boss"}`},
		[2]string{"checkpoint_restore", `{"checkpoint_id":"cp-1"}`})
	m.set(2,
		[2]string{"receive_process_messages", `{"sender":"human:boss"}`},
		[2]string{"process_exit", `{"message":"ran although the Host paused me"}`})
	h.spawn([]capabilities.Grant{spawnGrant(), allowGrant("checkpoint:process:*", capabilities.Write, capabilities.Admin)})
	h.run()
	if _, err := h.rt.Signal(2, SignalPause); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: 1, From: "boss", Body: "go on"}); err != nil {
		t.Fatal(err)
	}
	h.run()
	if res := h.toolResults(1); res[3]["ok"] != true {
		t.Fatalf("the restore: %v", res[3])
	}
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: 2, From: "boss", Body: "work"}); err != nil {
		t.Fatal(err)
	}
	h.run()
	if info := h.info(2); info.Status != process.Paused {
		t.Fatalf("the restored child: %s (%s), want paused by the Host still", info.Status, info.Reason)
	}
}

// A child's wall time passes within its parent's: it may not be given more
// than the parent has left, nor a fork more than its caller has.
func TestChildWallTimeBoundedByTheParents(t *testing.T) {
	m := &pidModel{}
	h := modelHarness(t, m)
	m.set(1, [2]string{"spawn_child_process", `{"image":"base:v0","goal":"work"}`})
	pid, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", Budget: capabilities.Budget{WallSeconds: 10}, Grants: []capabilities.Grant{spawnGrant()}})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	if res := h.toolResults(pid); res[0]["ok"] != true {
		t.Fatalf("spawn: %v", res[0])
	}
	if child := h.info(2); child.Limits.WallSeconds == 0 || child.Limits.WallSeconds > 10 {
		t.Fatalf("the child of a parent with 10 s of wall time may run %d s", child.Limits.WallSeconds)
	}
}

// list_objects leaves out an Object an ask grant guards: the listing is not
// held for a Human, and without one the Object is not shown.
func TestListObjectsHidesAskGuardedObjects(t *testing.T) {
	m := &pidModel{}
	h := modelHarness(t, m)
	const secret = "11111111-2222-4333-8444-777777777777"
	sharedObject(t, h, objects.CreateSpec{OID: secret, Name: "salary", Payload: []byte("1")})
	m.set(1, [2]string{"list_objects", `{"namespace":"shared"}`})
	pid := h.spawn([]capabilities.Grant{allowGrant("object_namespace:shared", capabilities.Read),
		{Resource: "object:" + secret, Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Ask}})
	h.run()
	res := h.toolResults(pid)
	if shown, _ := json.Marshal(res[0]); res[0]["ok"] != true || strings.Contains(string(shown), "salary") {
		t.Fatalf("list_objects: %s", shown)
	}
}

// A compressor's Objects hold the context of the process it compacts: a
// process denied that process's namespace is denied its compressor's too,
// whatever pattern allows it the rest.
func TestCompressorObjectsAnswerToTheCompactedNamespace(t *testing.T) {
	m := &pidModel{}
	h := modelHarness(t, m)
	m.set(1,
		[2]string{"create_object", `{"name":"secret","payload":{"pin":"7319"}}`},
		[2]string{"read_object", `{"namespace":"proc-1","name":"secret"}`},
		[2]string{"compact_process_context", `{"force":true,"preserve_recent_entries":0,"target_tokens":256,"max_chunks":1}`})
	m.set(2, [2]string{"process_exit", `{"payload":{"goal":"g","constraints":[],"user_preferences":[],"completed":["read 7319"],"pending":[],"key_references":[],"recent_decisions":[],"risks":[],"uncertainties":[],"next_steps":[]}}`})
	h.spawn(compactionGrants())
	h.run()
	m.set(3,
		[2]string{"read_object", `{"namespace":"proc-1","name":"secret"}`},
		[2]string{"read_object", `{"namespace":"proc-2","name":"goal"}`},
		[2]string{"list_objects", `{"namespace":"proc-2"}`},
		[2]string{"read_object", `{"namespace":"proc-3","name":"goal"}`})
	reader := h.spawn([]capabilities.Grant{allowGrant("object_namespace:*", capabilities.Read), denyGrant("object_namespace:proc-1", capabilities.Read)})
	h.run()
	res := h.toolResults(reader)
	if info := h.info(2); info.Image != compressorImage {
		t.Fatalf("pid 2 is %s, want the compressor", info.Image)
	}
	for i := 0; i < 3; i++ {
		if errorCode(res[i]) != tools.CodeDenied {
			t.Errorf("call %d of a process denied proc-1: %v", i, res[i])
		}
	}
	if res[3]["ok"] != true {
		t.Fatalf("its own goal, which the pattern allows: %v", res[3])
	}
}

// A process the Host paused, restored to a wait on a child that has ended
// since, is woken by that exit once the Host lets it go on.
func TestRestoreOfAHostPausedWaitSeesTheChildsExit(t *testing.T) {
	m := &pidModel{}
	h := modelHarness(t, m)
	m.set(1,
		[2]string{"spawn_child_process", `{"image":"base:v0","goal":"c"}`},
		[2]string{"wait_child_process", `{"child_pid":2}`},
		[2]string{"process_exit", `{"message":"done"}`})
	m.set(2,
		[2]string{"receive_process_messages", `{"sender":"human:boss"}`},
		[2]string{"process_exit", `{"message":"child done"}`})
	h.spawn([]capabilities.Grant{spawnGrant()})
	h.run()
	cp, err := h.rt.CreateCheckpoint(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.Signal(1, SignalPause); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: 2, From: "boss", Body: "go"}); err != nil {
		t.Fatal(err)
	}
	h.run()
	if _, err := h.rt.RestoreCheckpoint(cp.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.Signal(1, SignalContinue); err != nil {
		t.Fatal(err)
	}
	h.run()
	if info := h.info(1); info.Status != process.Exited {
		t.Fatalf("pid 1: %s waiting on %q, want exited", info.Status, info.WaitingOn)
	}
}

// A one-shot grant's last use, spent by a call's own check, still counts
// for what the call shows and probes: the grants as the call found them.
func TestOneShotLastUseCountsForTheCallsProbes(t *testing.T) {
	m := &pidModel{}
	h := modelHarness(t, m)
	sharedObject(t, h, objects.CreateSpec{Name: "notes", Payload: []byte("1")})
	one := func() *int { n := 1; return &n }
	m.set(1, [2]string{"list_objects", `{"namespace":"shared"}`})
	lister := h.spawn([]capabilities.Grant{{Resource: "object_namespace:shared", Rights: []capabilities.Right{capabilities.Read}, UsesRemaining: one()}})
	m.set(2, [2]string{"create_object", `{"namespace":"shared","name":"more","payload":2}`})
	creator := h.spawn([]capabilities.Grant{{Resource: "object_namespace:shared", Rights: []capabilities.Right{capabilities.Read, capabilities.Write}, UsesRemaining: one()}})
	h.run()
	if shown, _ := json.Marshal(h.toolResults(lister)[0]); !strings.Contains(string(shown), `"name":"notes"`) {
		t.Fatalf("list_objects on a grant's last use: %s", shown)
	}
	if res := h.toolResults(creator)[0]; res["ok"] != true {
		t.Fatalf("create_object on a grant's last use: %v", res)
	}
}

// A call approved after the process's wall time ran out is refused, naming
// wall_seconds, as its next provider call would be; a spawn then is refused
// naming it too.
func TestApprovedCallAfterTheWallBudgetIsRefused(t *testing.T) {
	m := &pidModel{}
	h := modelHarness(t, m)
	m.set(1,
		[2]string{"get_current_time", `{}`},
		[2]string{"process_exit", `{}`})
	pid, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", Grants: []capabilities.Grant{askClock()}, Budget: capabilities.Budget{WallSeconds: 10}})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	if info := h.info(pid); info.WaitingOn != process.WaitApproval {
		t.Fatalf("not held: %+v", info)
	}
	h.clock.Advance(time.Hour)
	list, _ := h.rt.Approvals()
	if err := h.rt.Approve(ApprovalRef{PID: pid, CallID: list[0].CallID, ID: list[0].ID}); err != nil {
		t.Fatal(err)
	}
	h.run()
	res := h.toolResults(pid)
	if errorCode(res[0]) != tools.CodeBudgetExhausted || !strings.Contains(errorMessage(res[0]), "wall_seconds") {
		t.Fatalf("the approved call an hour past a 10 s wall budget: %v", res[0])
	}
}

// A fork of a capture taken during a provider call holds no reservation:
// the call in flight was the source's.
func TestForkOfAMidCallCaptureReservesNothing(t *testing.T) {
	var h *harness
	var cpID string
	first := true
	h = newHarness(t, "", func(o *Options) {
		o.Provider = funcProvider(func(req llm.Request) (llm.Response, error) {
			if req.Process.PID == 1 && first {
				first = false
				cp, err := h.rt.CreateCheckpoint(1)
				if err != nil {
					return llm.Response{}, err
				}
				cpID = cp.ID
			}
			return oneCall("w", "receive_process_messages", `{"sender":"human:nobody"}`), nil
		})
	})
	h.spawn(nil)
	h.run()
	rep, err := h.rt.ForkCheckpoint(cpID)
	if err != nil {
		t.Fatal(err)
	}
	h.rt.view(func(tx *txn) error {
		f, err := loadProc(tx, rep.RootPID)
		if err == nil && f.ReservedTokens != 0 {
			t.Errorf("the fork holds a reservation of %d tokens it never made", f.ReservedTokens)
		}
		return err
	})
}
