package kernel

import (
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/process"
)

// grantsOf is pid's grants as stored.
func grantsOf(t *testing.T, h *harness, pid int64) []capabilities.Grant {
	t.Helper()
	var grants []capabilities.Grant
	err := h.rt.view(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err == nil {
			grants = r.Grants
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return grants
}

// grantByID is the grant id of grants; the test fails without one.
func grantByID(t *testing.T, grants []capabilities.Grant, id string) capabilities.Grant {
	t.Helper()
	for _, g := range grants {
		if g.ID == id {
			return g
		}
	}
	t.Fatalf("no grant %q in %+v", id, grants)
	return capabilities.Grant{}
}

// Handed-down uses move from the grant the hand-down is accepted by, for
// every right: a parent's one use, handed to one child, leaves none for a
// second, whatever else the parent holds that Attenuate did not accept the
// hand-down by (an unlimited grant of another right, one the parent may not
// delegate, one expired).
func TestHandDownMovesUsesFromTheCoveringGrant(t *testing.T) {
	read, write := capabilities.Read, capabilities.Write
	no := false
	expired := epoch.Add(-time.Hour)
	for _, c := range []struct {
		name   string
		rights string
		grants []capabilities.Grant
	}{
		{"a right beyond the first", "[read, write]", []capabilities.Grant{
			{ID: "rd", Resource: "clock:sleep", Rights: []capabilities.Right{read}},
			{ID: "once", Resource: "clock:sleep", Rights: []capabilities.Right{write}, UsesRemaining: capabilities.Uses(1)},
		}},
		{"an unlimited grant not delegable", "[read]", []capabilities.Grant{
			{ID: "mine", Resource: "clock:sleep", Rights: []capabilities.Right{read}, Delegable: &no},
			{ID: "once", Resource: "clock:sleep", Rights: []capabilities.Right{read}, UsesRemaining: capabilities.Uses(1)},
		}},
		{"an unlimited grant expired", "[read]", []capabilities.Grant{
			{ID: "old", Resource: "clock:sleep", Rights: []capabilities.Right{read}, ExpiresAt: &expired},
			{ID: "once", Resource: "clock:sleep", Rights: []capabilities.Right{read}, UsesRemaining: capabilities.Uses(1)},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			spawn := `{name: spawn_child_process, arguments: {image: base:v0, goal: g, capabilities: [{resource: "clock:sleep", rights: ` + c.rights + `, uses_remaining: 1}]}}`
			h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [`+spawn+`]
      - tool_calls: [`+spawn+`]
      - tool_calls: [{name: process_exit, arguments: {}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
			pid := h.spawn(append([]capabilities.Grant{spawnGrant()}, c.grants...))
			h.run()
			res := h.toolResults(pid)
			if res[0]["ok"] != true {
				t.Fatalf("the first hand-down: %v", res[0])
			}
			if errorCode(res[1]) != "denied" {
				t.Fatalf("the second hand-down of the one use: %v", res[1])
			}
			if once := grantByID(t, grantsOf(t, h, pid), "once"); once.UsesRemaining == nil || *once.UsesRemaining != 0 {
				t.Fatalf("the parent kept %+v; its one use moved to the child", once)
			}
			if got := grantByID(t, grantsOf(t, h, 2), "c1"); got.UsesRemaining == nil || *got.UsesRemaining != 1 {
				t.Fatalf("the child holds %+v, want the one use", got)
			}
		})
	}
}

// Many uses move in one step, not one at a time over copies of every grant
// (under the store's write lock).
func TestHandDownMovesManyUsesInOneStep(t *testing.T) {
	const n = 2_000_000
	parent := &procRecord{}
	parent.Grants = []capabilities.Grant{
		{ID: "ns", Resource: "object_namespace:proc-1", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow},
		{ID: "many", Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow, UsesRemaining: capabilities.Uses(n)},
	}
	handed := []capabilities.Grant{{ID: "c1", Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow, UsesRemaining: capabilities.Uses(n)}}
	held := parent.Grants
	allocs := testing.AllocsPerRun(1, func() {
		parent.Grants = held
		if err := transferOneShots(parent, handed); err != nil {
			t.Fatal(err)
		}
	})
	if got := *grantByID(t, parent.Grants, "many").UsesRemaining; got != 0 {
		t.Fatalf("the parent kept %d uses", got)
	}
	if allocs > 20 {
		t.Fatalf("handing down %d uses made %v allocations", n, allocs)
	}
}

// A child's grant ids stay unique down the tree: a child holding both its
// own ask (or deny) and the same one inherited hands the rule down once, so
// its children can still be spawned.
func TestInheritedGrantIDsNeverCollide(t *testing.T) {
	for _, effect := range []string{"ask", "deny"} {
		t.Run(effect, func(t *testing.T) {
			handDown := `{name: spawn_child_process, arguments: {image: base:v0, goal: g, capabilities: [{resource: "process:spawn", rights: [write]}, {resource: "clock:sleep", rights: [read], effect: ` + effect + `}]}}`
			spawnWaitExit := func(spawn string) string {
				return `
  - image: base:v0
    turns:
      - tool_calls: [` + spawn + `]
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: "${last.pid}"}}]
      - tool_calls: [{name: process_exit, arguments: {}}]`
			}
			h := newHarness(t, `
processes:`+spawnWaitExit(handDown)+spawnWaitExit(handDown)+
				spawnWaitExit(`{name: spawn_child_process, arguments: {image: base:v0, goal: plain}}`)+`
  - image: base:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {}}]
`)
			root := h.spawn([]capabilities.Grant{spawnGrant(), {Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}}})
			h.run()
			for pid := root; pid <= root+2; pid++ {
				if res := h.toolResults(pid); len(res) == 0 || res[0]["ok"] != true {
					t.Fatalf("pid %d's spawn: %v", pid, res)
				}
			}
			grants := grantsOf(t, h, root+3)
			if err := capabilities.ValidateGrants(grants); err != nil {
				t.Fatal(err)
			}
			var inherited []string
			for _, g := range grants {
				if strings.HasPrefix(g.ID, capabilities.InheritedDenyPrefix) {
					inherited = append(inherited, g.ID)
				}
			}
			if strings.Join(inherited, ",") != "inherited:c2" {
				t.Fatalf("the great-grandchild inherits %v, want the rule once: %+v", inherited, grants)
			}
		})
	}
}

// A child handed nothing holds nothing: its parent's ask, inherited, gives
// it no access gated on an approval (delegable or not); the call is denied
// as with no grant, and no Human is asked.
func TestInheritedAskAloneGrantsNothing(t *testing.T) {
	no := false
	for _, delegable := range []*bool{nil, &no} {
		name := "delegable"
		if delegable != nil {
			name = "not delegable"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: g}}]
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: "${last.pid}"}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: sleep, arguments: {seconds: 1}}]
      - tool_calls: [{name: process_exit, arguments: {payload: "${last}"}}]
`)
			root := h.spawn([]capabilities.Grant{spawnGrant(),
				{ID: "q", Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Ask, Delegable: delegable}})
			h.run()
			if list, _ := h.rt.Approvals(); len(list) != 0 {
				t.Fatalf("the child's sleep was held for a Human: %+v", list)
			}
			child := root + 1
			if info := h.info(child); info.Status != process.Exited {
				t.Fatalf("child %s on %q (%s)", info.Status, info.WaitingOn, info.Reason)
			}
			if got := h.result(child); errorCode(got) != "denied" {
				t.Fatalf("the child's sleep: %v", got)
			}
			// It still holds the ask, inherited: it narrows what the child may
			// be handed later, and what it hands down.
			if g := grantByID(t, grantsOf(t, h, child), "inherited:q"); g.Effect != capabilities.Ask {
				t.Fatalf("inherited %+v", g)
			}
		})
	}
}

// An inherited ask narrows an allow the child was handed: the parent, asked
// for reads of any Object, hands down reads of its namespace (Attenuate
// compares names, so it lets that through), and the child's read of an
// Object there waits for a Human, then runs once approved.
func TestInheritedAskNarrowsAHandedAllow(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: create_object, arguments: {name: note, kind: note, payload: "hi"}}]
      - tool_calls: [{name: spawn_child_process, arguments: {image: base:v0, goal: g, capabilities: [{resource: "object_namespace:proc-1", rights: [read]}]}}]
      - tool_calls: [{name: wait_child_process, arguments: {child_pid: "${last.pid}"}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
  - image: base:v0
    turns:
      - tool_calls: [{name: read_object, arguments: {namespace: "proc-1", name: note}}]
      - tool_calls: [{name: process_exit, arguments: {payload: "${last}"}}]
`)
	root := h.spawn([]capabilities.Grant{spawnGrant(),
		{ID: "q", Resource: "object:*", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Ask}})
	h.run()
	child := root + 1
	approveHeld(t, h, child, "read_object")
	if got := h.result(child); got["ok"] != true {
		t.Fatalf("the approved read: %v", got)
	}
}

// An agent task costs its caller one use of a one-shot scope grant, the
// one the child is handed, also when the caller holds an expired unlimited
// grant of the scope: the use its own check reserved goes back, as the use
// handed down moves, on the grants in force.
func TestAgentTaskHandsDownItsScopeUseBesideAnExpiredGrant(t *testing.T) {
	runner := strings.Replace(oracleRunner("[process_exit]"), "  type: agent-task\n", "  type: agent-task\n  scopes: [oracle.ask]\n", 1)
	script := oracleScript(`      - tool_calls:
          - name: process_exit
            arguments: {payload: {answer: noon}}
`)
	h, _ := taskHarness(t, runner, script)
	expired := epoch.Add(-time.Hour)
	old := scopeGrant("oracle.ask")
	old.ID, old.ExpiresAt = "old", &expired
	once := scopeGrant("oracle.ask", 2)
	once.ID = "once"
	pid, err := h.rt.Spawn(SpawnSpec{Image: "skilled:v0", Goal: "ask the oracle", Grants: []capabilities.Grant{spawnGrant(), old, once}})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	for _, r := range h.toolResults(pid) {
		if r["_tool"] == "oracle" && r["ok"] != true {
			t.Fatalf("the oracle call: %v", r)
		}
	}
	if g := grantByID(t, grantsOf(t, h, pid), "once"); g.UsesRemaining == nil || *g.UsesRemaining != 1 {
		t.Fatalf("the caller holds %+v, want 1 use left: the task costs one", g)
	}
	for _, g := range grantsOf(t, h, pid+1) {
		if g.Resource == "scope:oracle.ask" && (g.UsesRemaining == nil || *g.UsesRemaining != 1) {
			t.Fatalf("the child holds %+v, want one use", g)
		}
	}
}
