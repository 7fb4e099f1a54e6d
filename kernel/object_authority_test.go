package kernel

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
)

// sharedObject creates an Object as the Host would, in the namespace
// "shared" unless spec names one: durable, of kind data unless spec says.
func sharedObject(t *testing.T, h *harness, spec objects.CreateSpec) objects.Meta {
	t.Helper()
	if spec.Namespace == "" {
		spec.Namespace = "shared"
	}
	if spec.Kind == "" {
		spec.Kind = "data"
	}
	spec.Owner, spec.Tier = "0", objects.TierDurable
	var meta objects.Meta
	err := h.rt.update(func(tx *txn) error {
		var err error
		meta, err = tx.Create(spec)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return meta
}

func objectGrant(resource string, effect capabilities.Effect, rights ...capabilities.Right) capabilities.Grant {
	return capabilities.Grant{Resource: resource, Rights: rights, Effect: effect}
}

// list_objects leaves out an Object its caller is denied: read_object
// answers it as missing, and the listing would give away its name, labels
// and payload hash.
func TestListObjectsHidesDeniedObjects(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - {name: read_object, arguments: {namespace: shared, name: salary}}
          - {name: list_objects, arguments: {namespace: shared}}
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
	const secret, open = "11111111-2222-4333-8444-555555555555", "11111111-2222-4333-8444-666666666666"
	for oid, name := range map[string]string{secret: "salary", open: "menu"} {
		sharedObject(t, h, objects.CreateSpec{OID: oid, Name: name, Labels: map[string]string{"note": name}, Payload: []byte("123456")})
	}
	pid := h.spawn([]capabilities.Grant{
		objectGrant("object_namespace:shared", capabilities.Allow, capabilities.Read),
		objectGrant("object:"+secret, capabilities.Deny, capabilities.Read)})
	h.run()
	res := h.toolResults(pid)
	if errorCode(res[0]) != tools.CodeNotFound {
		t.Fatalf("read_object of the denied Object: %v", res[0])
	}
	listed, _ := res[1]["objects"].([]any)
	if shown, _ := json.Marshal(res[1]); len(listed) != 1 || strings.Contains(string(shown), "salary") {
		t.Fatalf("list_objects shows %v, want only the Object the caller may read", res[1])
	}
}

// A page of list_objects counts only the Objects its caller may read: a
// denied one neither takes a place in the page nor makes has_more true, and
// next_after names a shown Object, never a hidden one.
func TestListObjectsPageSkipsDeniedObjects(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - {name: list_objects, arguments: {namespace: shared, limit: 2}}
          - {name: list_objects, arguments: {namespace: shared, limit: 2, after: b}}
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
	oids := map[string]string{
		"a": "11111111-2222-4333-8444-000000000001", "b": "11111111-2222-4333-8444-000000000002",
		"c": "11111111-2222-4333-8444-000000000003", "d": "11111111-2222-4333-8444-000000000004",
		"e": "11111111-2222-4333-8444-000000000005"}
	for name, oid := range oids {
		sharedObject(t, h, objects.CreateSpec{OID: oid, Name: name, Payload: []byte("1")})
	}
	pid := h.spawn([]capabilities.Grant{
		objectGrant("object_namespace:shared", capabilities.Allow, capabilities.Read),
		objectGrant("object:"+oids["a"], capabilities.Deny, capabilities.Read),
		objectGrant("object:"+oids["d"], capabilities.Deny, capabilities.Read),
		objectGrant("object:"+oids["e"], capabilities.Deny, capabilities.Read)})
	h.run()
	res := h.toolResults(pid)
	names := func(r map[string]any) string {
		var out []string
		for _, o := range r["objects"].([]any) {
			out = append(out, o.(map[string]any)["name"].(string))
		}
		return strings.Join(out, ",")
	}
	if names(res[0]) != "b,c" || res[0]["has_more"] != false {
		t.Fatalf("first page: %v, want b,c and no more (d and e are hidden)", res[0])
	}
	if names(res[1]) != "c" || res[1]["has_more"] != false || res[1]["next_after"] != nil {
		t.Fatalf("page after b: %v, want c alone", res[1])
	}
}

// A process cannot create an Object under a name the kernel gives its own in
// a process namespace: the compaction job found by its name, or the goal of
// a pid to come, whose spawn it would block for good.
func TestCreateObjectRefusesTheKernelsNames(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - {name: create_object, arguments: {name: "context_compaction_job:1", payload: {state: completed}}}
          - {name: create_object, arguments: {namespace: proc-2, name: goal, payload: "mine"}}
          - {name: create_object, arguments: {namespace: proc-1, name: "llm_context:7", payload: 1}}
          - {name: create_object, arguments: {namespace: proc-1, name: "transcript:1", payload: 1}}
          - {name: create_object, arguments: {namespace: proc-1, name: "my goal", payload: 1}}
          - {name: create_object, arguments: {namespace: shared, name: goal, payload: 1}}
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: "child"}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
	pid := h.spawn([]capabilities.Grant{spawnGrant(), objectGrant("image:base:v0", capabilities.Allow, capabilities.Read),
		objectGrant("object_namespace:*", capabilities.Allow, capabilities.Read, capabilities.Write)})
	h.run()
	res := h.toolResults(pid)
	for i := 0; i < 4; i++ {
		if errorCode(res[i]) != tools.CodeDenied || !strings.Contains(errorMessage(res[i]), "a name the runtime gives its own Objects") {
			t.Errorf("create_object %d: %v, want it refused", i, res[i])
		}
	}
	for i := 4; i < 6; i++ {
		if res[i]["ok"] != true {
			t.Errorf("create_object %d, a name of the process's own: %v", i, res[i])
		}
	}
	if res[6]["ok"] != true {
		t.Fatalf("spawn after the refused squat: %v", res[6])
	}
}

// A restore gives a captured Object its labels as captured, removing those
// written since: a nil label map would have left them in place.
func TestRestoreDropsLabelsWrittenSince(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: create_object, arguments: {name: notes, payload: {v: "a"}}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
      - tool_calls: [{name: read_object, arguments: {namespace: "proc-1", name: notes}}]
      - tool_calls: [{name: write_object, arguments: {oid: "${last.oid}", expected_version: 1, payload: {v: "b"}, labels: {status: "approved"}}}]
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:other"}}]
`)
	pid := h.spawn(nil)
	h.run()
	cp, err := h.rt.CreateCheckpoint(pid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "h", Body: "go on"}); err != nil {
		t.Fatal(err)
	}
	h.run()
	if m, _ := objectPayload(t, h, pid, "notes"); m.Labels["status"] != "approved" {
		t.Fatalf("before the restore: %+v", m)
	}
	if _, err := h.rt.RestoreCheckpoint(cp.ID); err != nil {
		t.Fatal(err)
	}
	if m, p := objectPayload(t, h, pid, "notes"); p != `{"v":"a"}` || len(m.Labels) != 0 {
		t.Fatalf("after the restore: %s with labels %v, want the captured payload and no labels", p, m.Labels)
	}
}

// A fork keeps the names of a process's own Objects: only the kernel's
// names carry their pid and follow it to the fork.
func TestForkKeepsTheProcesssObjectNames(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls:
          - {name: create_object, arguments: {name: "invoice:1", payload: 1}}
          - {name: create_object, arguments: {name: "invoice:2", payload: 2}}
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:h"}}]
`)
	pid := h.spawn(nil)
	h.run()
	fork := forkNow(t, h, pid).PIDs[pid]
	for _, name := range []string{"invoice:1", "invoice:2"} {
		if _, p := objectPayload(t, h, fork, name); p == "" {
			t.Errorf("the fork has no %s", name)
		}
	}
	if info := h.info(fork); info.Status.Terminal() || info.Status == process.Running {
		t.Fatalf("the fork: %+v", info)
	}
}

// A result a child hands up from its own child is readable by the parent,
// as wait_child_process promises of every result_oid it names.
func TestParentReadsAResultHandedUp(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: c, capabilities: [{resource: "process:spawn", rights: [write]}]}}]
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: 2}}]
      - tool_calls: [{name: read_object, arguments: {oid: "${last.result_oid}"}}]
      - tool_calls: [{name: process_exit, arguments: {message: done}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: gc}}]
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: 3}}]
      - tool_calls: [{name: process_exit, arguments: {result_oid: "${last.result_oid}"}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: {report: "`+strings.Repeat("x", 20000)+`"}}}]
`)
	pid := h.spawn([]capabilities.Grant{spawnGrant()})
	h.run()
	res := h.toolResults(pid)
	if res[1]["result_oid"] == nil || res[2]["ok"] != true || res[2]["oid"] != res[1]["result_oid"] {
		t.Fatalf("wait %v, then the read of its result_oid %v", res[1], res[2])
	}
}
