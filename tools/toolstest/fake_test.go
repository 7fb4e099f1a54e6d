package toolstest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

func requiring(name string, op authority.Op, p authority.Params) []*tools.Tool {
	return []*tools.Tool{{
		Name:   name,
		Schema: schema.Object(map[string]*schema.Schema{}),
		Invoke: func(_ context.Context, sys tools.Syscalls, _ json.RawMessage) (tools.Outcome, error) {
			return tools.Outcome{Result: map[string]any{}}, sys.Require(op, p)
		},
	}}
}

// A tool may require only the operations its entry in the authority table
// lists: the fake refuses any other, so a family's tests fail when a tool
// checks authority the table does not state.
func TestRequireFollowsTheTable(t *testing.T) {
	sys := New(2, capabilities.Grant{Resource: "*", Rights: capabilities.AllRights})
	if _, e := Call(requiring("get_current_time", authority.ClockNow, authority.Params{}), sys, "get_current_time", `{}`); e != nil {
		t.Fatalf("a listed operation: %v", e)
	}
	if _, e := Call(requiring("get_current_time", authority.ObjectList, authority.Params{Namespace: "proc-2"}), sys, "get_current_time", `{}`); e == nil || !strings.Contains(e.Message, "does not list") {
		t.Fatalf("an operation the tool's entry lacks: %v", e)
	}
	if _, e := Call(requiring("no_entry", authority.ClockNow, authority.Params{}), sys, "no_entry", `{}`); e == nil || !strings.Contains(e.Message, "does not list") {
		t.Fatalf("a tool without an entry: %v", e)
	}
	// Outside a call, any operation of the table may be required.
	if err := sys.Require(authority.ObjectList, authority.Params{Namespace: "proc-2"}); err != nil {
		t.Fatal(err)
	}
	if len(sys.Checked) != 2 || sys.Checked[1] != "read object_namespace:proc-2" {
		t.Fatalf("checked %v", sys.Checked)
	}
}

// One-shot grants are consumed, and a refusal names the right and the most
// specific resource, as the kernel's does.
func TestRequireConsumesOneShots(t *testing.T) {
	sys := New(2, capabilities.Grant{ID: "once", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, UsesRemaining: capabilities.Uses(1)})
	if err := sys.Require(authority.ClockNow, authority.Params{}); err != nil {
		t.Fatal(err)
	}
	err := sys.Require(authority.ClockNow, authority.Params{})
	if err == nil || !strings.Contains(err.Error(), "read on clock:now") {
		t.Fatalf("second use: %v", err)
	}
}

// An ask grant asks, as the kernel's check does: the refusal wraps
// tools.ErrApprovalRequired and names the grant; once Approved, it allows.
func TestRequireAsksUnderAnAskGrant(t *testing.T) {
	sys := New(2, capabilities.Grant{ID: "ask-now", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Ask})
	err := sys.Require(authority.ClockNow, authority.Params{})
	if !errors.Is(err, tools.ErrApprovalRequired) || errors.Is(err, tools.ErrDenied) || !strings.Contains(err.Error(), "grant ask-now asks") {
		t.Fatalf("ask: %v", err)
	}
	if g, ok := sys.Holding(authority.ClockNow, authority.Params{}); !ok || g.ID != "ask-now" {
		t.Fatalf("holding %+v %v", g, ok)
	}
	sys.Approved = true
	if err := sys.Require(authority.ClockNow, authority.Params{}); err != nil {
		t.Fatalf("approved: %v", err)
	}
}
