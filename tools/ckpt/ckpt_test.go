package ckpt

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/toolstest"
)

func restore(t *testing.T, sys tools.Syscalls, id string) (map[string]any, *tools.Error) {
	t.Helper()
	out, e := toolstest.Call(Tools(tools.Config{}), sys, "checkpoint_restore", `{"checkpoint_id":"`+id+`"}`)
	return out.Result, e
}

// Without rights, an existing checkpoint and a missing one answer alike:
// neither its existence nor its owner leaks.
func TestCheckpointExistenceStaysHidden(t *testing.T) {
	sys := toolstest.New(2)
	sys.Checkpoints.Add(1)
	_, e1 := restore(t, sys, "cp-1")
	_, e2 := restore(t, sys, "cp-999")
	if e1 == nil || e2 == nil || e1.Code != tools.CodeDenied || e2.Code != tools.CodeDenied {
		t.Fatalf("want two denials: %v / %v", e1, e2)
	}
	if strings.Replace(e1.Message, "cp-1", "ID", 1) != strings.Replace(e2.Message, "cp-999", "ID", 1) || strings.Contains(e1.Message, "process:1") {
		t.Fatalf("answers differ or name the owner:\n %s\n %s", e1.Message, e2.Message)
	}
	if len(sys.Restored) != 0 {
		t.Fatal("a denied restore ran")
	}

	// With admin on the owner's subtree the restore runs; a missing id
	// still reads as the same denial, since its owner cannot be known.
	sys.Grants = []capabilities.Grant{{Resource: "checkpoint:process:1", Rights: []capabilities.Right{capabilities.Admin}}}
	if _, e := restore(t, sys, "cp-1"); e != nil || len(sys.Restored) != 1 {
		t.Fatalf("authorized restore: %v", e)
	}
	if _, e := restore(t, sys, "cp-999"); e == nil || e.Code != tools.CodeDenied {
		t.Fatalf("missing checkpoint with rights elsewhere: %v", e)
	}
}

// TestResultJSON pins the JSON the model is shown for each checkpoint tool:
// the typed results keep the field names and shapes of the kernel's
// checkpoint records and reports.
func TestResultJSON(t *testing.T) {
	all := capabilities.Grant{Resource: "checkpoint:process:*", Rights: capabilities.AllRights}
	sys := toolstest.New(2, all)
	shown := func(name, args string) string {
		t.Helper()
		out, e := toolstest.Call(Tools(tools.Config{}), sys, name, args)
		if e != nil {
			t.Fatalf("%s: %v", name, e)
		}
		b, err := json.Marshal(tools.SuccessResult(out.Result))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, c := range []struct{ tool, args, want string }{
		{"checkpoint_list", `{}`, `{"ok":true,"result":[]}`},
		{"checkpoint_create", `{}`, `{"ok":true,"result":{"id":"cp-1","root_pid":2,"created_at":"2026-01-01T00:00:00Z","pids":[2],"objects":0,"messages":0,"marks":{"2":{"mailbox_seq":0,"tool_calls":0}}}}`},
		{"checkpoint_list", `{"pid":2}`, `{"ok":true,"result":[{"id":"cp-1","root_pid":2,"created_at":"2026-01-01T00:00:00Z","pids":[2],"objects":0,"messages":0,"marks":{"2":{"mailbox_seq":0,"tool_calls":0}}}]}`},
		{"checkpoint_restore", `{"checkpoint_id":"cp-1"}`, `{"ok":true,"result":{"checkpoint":"cp-1","restored_pids":[2],"killed_pids":[],"kept_terminal_pids":[],"not_restored_oids":[],"superseded_messages":0,"external_effects_since_checkpoint":[]}}`},
		{"checkpoint_fork", `{"checkpoint_id":"cp-1"}`, `{"ok":true,"result":{"checkpoint":"cp-1","root_pid":100,"pids":{"2":100}}}`},
	} {
		if got := shown(c.tool, c.args); got != c.want {
			t.Errorf("%s %s:\n got  %s\n want %s", c.tool, c.args, got, c.want)
		}
	}
	if len(sys.Restored) != 1 || len(sys.Forked) != 1 {
		t.Fatalf("restored %v forked %v", sys.Restored, sys.Forked)
	}
}

// Create and list name the subtree by pid (default: the caller) and need
// write and read on it; nothing is created without the right.
func TestCreateAndListRights(t *testing.T) {
	sys := toolstest.New(2, capabilities.Grant{Resource: "checkpoint:process:3", Rights: []capabilities.Right{capabilities.Read}})
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "checkpoint_create", `{"pid":3}`); e == nil || e.Code != tools.CodeDenied || !strings.Contains(e.Message, "write on checkpoint:process:3") {
		t.Fatalf("create without write: %v", e)
	}
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "checkpoint_list", `{}`); e == nil || !strings.Contains(e.Message, "checkpoint:process:2") {
		t.Fatalf("list defaults to the caller: %v", e)
	}
	if _, e := toolstest.Call(Tools(tools.Config{}), sys, "checkpoint_list", `{"pid":3}`); e != nil {
		t.Fatalf("list with read: %v", e)
	}
	if len(sys.All) != 0 {
		t.Fatal("a denied create made a checkpoint")
	}
	if !slices.Equal(sys.Checked, []string{"write checkpoint:process:3", "read checkpoint:process:2", "read checkpoint:process:3"}) {
		t.Fatalf("checked %v", sys.Checked)
	}
}

// A restore or fork an ask grant covers is held for a Human's approval, not
// answered as a missing checkpoint; approved, it runs.
func TestAskGrantHoldsRestore(t *testing.T) {
	sys := toolstest.New(2, capabilities.Grant{ID: "ask-admin", Resource: "checkpoint:process:*", Rights: []capabilities.Right{capabilities.Admin}, Effect: capabilities.Ask})
	sys.Checkpoints.Add(1)
	_, e := restore(t, sys, "cp-1")
	if e == nil || !errors.Is(e, tools.ErrApprovalRequired) || strings.Contains(e.Message, "does not exist") || len(sys.Restored) != 0 {
		t.Fatalf("restore under an ask grant: %v, want approval required", e)
	}
	// A missing checkpoint has no owner to ask about: the same hidden denial.
	if _, e := restore(t, sys, "cp-999"); e == nil || e.Code != tools.CodeDenied || errors.Is(e, tools.ErrApprovalRequired) {
		t.Fatalf("missing checkpoint: %v", e)
	}
	sys.Approved = true
	if _, e := restore(t, sys, "cp-1"); e != nil || len(sys.Restored) != 1 {
		t.Fatalf("approved restore: %v", e)
	}
}
