package tools_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

// A broker refuses, at construction, the tools that would fail only later:
// a nil tool, a name no chat-completions server takes, an operation the
// authority table does not have.
func TestNewBrokerRefusesToolsThatCannotWork(t *testing.T) {
	tool := func(name string, ops ...authority.Op) *tools.Tool {
		return &tools.Tool{Name: name, Schema: schema.Object(nil), Ops: ops,
			Invoke: func(context.Context, tools.Syscalls, json.RawMessage) (tools.Outcome, error) {
				return tools.Outcome{}, nil
			}}
	}
	for _, tc := range []struct {
		tool *tools.Tool
		want string
	}{
		{nil, "tool 0 is nil"},
		{tool("charge card"), "1 to 64 letters"},
		{tool("charge.card"), "1 to 64 letters"},
		{tool(strings.Repeat("a", 65)), "1 to 64 letters"},
		{tool("charge", "payments.charge"), `ops: "payments.charge"`},
	} {
		if _, err := tools.NewBroker(tc.tool); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewBroker(%v): %v, want an error saying %q", tc.tool, err, tc.want)
		}
	}
	if _, err := tools.NewBroker(tool("charge_card-2", authority.ScopeUse)); err != nil {
		t.Fatalf("a valid tool: %v", err)
	}
}
