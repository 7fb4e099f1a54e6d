package session

import (
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/toolstest"
)

func invoke(t *testing.T, sys tools.Syscalls, name, args string) (tools.Outcome, *tools.Error) {
	t.Helper()
	return toolstest.Call(Tools(tools.Config{MaxSleepSeconds: 60}), sys, name, args)
}

// process_exit with another process's result_oid answers alike whether the
// Object exists or not: neither existence nor its namespace leaks.
func TestExitResultOIDHidesExistence(t *testing.T) {
	sys := toolstest.New(2)
	secret := sys.Put("proc-1", "secret", []byte(`"s"`))
	const missing = "00000000-0000-4000-8000-000000000000"
	_, e1 := invoke(t, sys, "process_exit", `{"result_oid":"`+secret.OID+`"}`)
	_, e2 := invoke(t, sys, "process_exit", `{"result_oid":"`+missing+`"}`)
	if e1 == nil || e2 == nil || e1.Code != tools.CodeDenied || e2.Code != tools.CodeDenied {
		t.Fatalf("want two denials: %v / %v", e1, e2)
	}
	if strings.Replace(e1.Message, secret.OID, "X", 1) != strings.Replace(e2.Message, missing, "X", 1) || strings.Contains(e1.Message, "proc-1") {
		t.Fatalf("answers differ or name the owner:\n %s\n %s", e1.Message, e2.Message)
	}

	// With a grant on the Object, it becomes the result; a missing one is
	// reported missing to a caller who may read it.
	sys.Grants = []capabilities.Grant{{Resource: "object:" + secret.OID, Rights: []capabilities.Right{capabilities.Read}},
		{Resource: "object:" + missing, Rights: []capabilities.Right{capabilities.Read}}}
	if out, e := invoke(t, sys, "process_exit", `{"result_oid":"`+secret.OID+`"}`); e != nil || out.Exit == nil || out.Exit.ResultOID != secret.OID {
		t.Fatalf("authorized exit: %+v %v", out, e)
	}
	if _, e := invoke(t, sys, "process_exit", `{"result_oid":"`+missing+`"}`); e == nil || e.Code != tools.CodeNotFound {
		t.Fatalf("authorized missing result: %v", e)
	}
}

func TestGetCurrentTimeAndSleepArguments(t *testing.T) {
	sys := toolstest.New(2, capabilities.Grant{Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}})
	out, e := invoke(t, sys, "get_current_time", `{"timezone":"Asia/Shanghai"}`)
	if e != nil || out.Result["timezone"] != "Asia/Shanghai" || !strings.HasSuffix(out.Result["iso8601"].(string), "+08:00") {
		t.Fatalf("time: %v %v", out.Result, e)
	}
	if _, e := invoke(t, sys, "get_current_time", `{"timezone":"Mars/Olympus"}`); e == nil || e.Code != tools.CodeInvalidArguments {
		t.Fatalf("bad zone: %v", e)
	}
	for _, args := range []string{`{"seconds":61}`, `{"seconds":-1}`, `{}`} {
		if _, e := invoke(t, sys, "sleep", args); e == nil || e.Code != tools.CodeInvalidArguments {
			t.Fatalf("sleep %s: %v", args, e)
		}
	}
	if _, e := invoke(t, sys, "sleep", `{"seconds":5}`); e == nil || e.Code != tools.CodeDenied || !strings.Contains(e.Message, "clock:sleep") {
		t.Fatalf("sleep without authority: %v", e)
	}
	sys.Grants = append(sys.Grants, capabilities.Grant{Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}})
	if out, e := invoke(t, sys, "sleep", `{"seconds":5}`); e != nil || out.Block == nil || !out.Block.Wait.Until.Equal(sys.Clock.Add(5e9)) {
		t.Fatalf("sleep: %+v %v", out, e)
	}
}
