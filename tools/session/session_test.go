package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/process"
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

// A sleep resumes with the time that passed, or, after a reopen, with an
// unknown settlement rather than a claimed elapsed time.
func TestSleepResumes(t *testing.T) {
	sys := toolstest.New(2, capabilities.Grant{Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}})
	family := Tools(tools.Config{MaxSleepSeconds: 60})
	out, e := invoke(t, sys, "sleep", `{"seconds":1.5}`)
	if e != nil || out.Block == nil {
		t.Fatalf("sleep: %+v %v", out, e)
	}
	p := tools.Pending{ID: "p1", Data: out.Block.Data, StartedAt: sys.Clock}
	sys.Clock = sys.Clock.Add(1600 * time.Millisecond)
	res, e := toolstest.Resume(family, sys, "sleep", p)
	if e != nil || res.Result["requested_seconds"] != 1.5 || res.Result["elapsed_seconds"] != 1.6 {
		t.Fatalf("resumed sleep: %v %v", res.Result, e)
	}
	p.Recovered = true
	res, e = toolstest.Resume(family, sys, "sleep", p)
	if e == nil || e.Code != tools.CodeSettlementUnknown || !e.EffectStarted || res.Result != nil || !strings.Contains(e.Message, "1.5 seconds") {
		t.Fatalf("recovered sleep: %v %v", res.Result, e)
	}
	if !slices.Equal(sys.Checked, []string{"read clock:sleep"}) {
		t.Fatalf("checked %v", sys.Checked)
	}
}

// compact_process_context hands its validated arguments, defaults applied,
// to the kernel's compactor, and its resume to the compactor too.
func TestCompactionGoesToTheCompactor(t *testing.T) {
	sys := toolstest.New(2)
	family := Tools(tools.Config{MaxSleepSeconds: 60})
	out, e := invoke(t, sys, "compact_process_context", `{"target_tokens":1000}`)
	want := tools.CompactionRequest{TargetTokens: 1000, PreserveRecentEntries: 8, MaxChunks: 8}
	if e != nil || out.Result["reason"] != "context_under_target" || len(sys.Started) != 1 || sys.Started[0] != want {
		t.Fatalf("start: %v %v %+v", out.Result, e, sys.Started)
	}
	if _, e := toolstest.Resume(family, sys, "compact_process_context", tools.Pending{ID: "p"}); e != nil || len(sys.Resumed) != 1 {
		t.Fatalf("resume: %v %+v", e, sys.Resumed)
	}
	if len(sys.Checked) != 0 {
		t.Fatalf("the tool checked authority itself (%v); the kernel checks each stage", sys.Checked)
	}
}

// A one-phase exit stores a payload or a message as the caller's result,
// payload first; review arguments are refused on such an image.
func TestExitResultPrecedence(t *testing.T) {
	sys := toolstest.New(2)
	out, e := invoke(t, sys, "process_exit", `{"payload":{"done":true},"message":"ignored"}`)
	if e != nil || out.Exit == nil || out.Result["status"] != "exited" {
		t.Fatalf("exit with a payload: %+v %v", out, e)
	}
	if got := string(sys.Payloads[out.Exit.ResultOID]); got != `{"done":true}` || sys.Metas[out.Exit.ResultOID].Namespace != "proc-2" {
		t.Fatalf("result %s in %+v", got, sys.Metas[out.Exit.ResultOID])
	}
	out, e = invoke(t, sys, "process_exit", `{"message":"bye"}`)
	if e != nil || string(sys.Payloads[out.Exit.ResultOID]) != `{"message":"bye"}` {
		t.Fatalf("exit with a message: %+v %v", out, e)
	}
	out, e = invoke(t, sys, "process_exit", `{}`)
	if e != nil || out.Exit == nil || out.Result["result_oid"] != nil {
		t.Fatalf("bare exit: %+v %v", out, e)
	}
	if _, e := invoke(t, sys, "process_exit", `{"review_token":"t"}`); e == nil || e.Code != tools.CodeInvalidArguments {
		t.Fatalf("a review token on a one-phase image: %v", e)
	}
	if sys.Reviewer.Calls != 0 {
		t.Fatal("a one-phase image ran the completion review")
	}
}

// A gated image's exit is a review first: a bare call returns the review,
// a stale token is refused with a fresh review, and nothing exits.
func TestGatedExitRunsTheReview(t *testing.T) {
	sys := toolstest.New(2)
	sys.Proc.Gated = true
	sys.Reviewer.Input = process.ReviewInput{GoalOID: "00000000-0000-4000-8000-000000000001", GoalVersion: 1, GoalNamespace: "proc-2", GoalName: "goal"}
	out, e := invoke(t, sys, "process_exit", `{"message":"done"}`)
	if e != nil || out.Exit != nil || out.Result["status"] != "completion_review_required" {
		t.Fatalf("bare gated exit: %+v %v", out, e)
	}
	review := out.Result["completion_review"].(process.Review)
	if review.ReviewToken == "" {
		t.Fatal("the review carries no token")
	}
	out, e = invoke(t, sys, "process_exit", `{"message":"done","review_token":"stale","completion_evidence":{}}`)
	if e != nil || out.Exit != nil || out.Result["status"] != "completion_review_required" || sys.Reviewer.Calls != 2 {
		t.Fatalf("stale token: %+v %v", out, e)
	}
	if len(sys.Metas) != 0 {
		t.Fatal("a refused exit stored a result")
	}
}

// A zone is read once: the second call gets the first one's Location, and a
// refused name stays refused.
func TestZonesAreResolvedOnce(t *testing.T) {
	a, err := LoadIANA("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadIANA("Asia/Shanghai")
	if err != nil || a != b {
		t.Fatalf("the second load read the zone again (%p, %p, %v)", a, b, err)
	}
	for range 2 {
		if _, err := LoadIANA("Mars/Olympus_Mons"); err == nil || !strings.Contains(err.Error(), "not an IANA time zone name") {
			t.Fatalf("an unknown zone: %v", err)
		}
		if _, err := LoadIANA("Local"); err == nil {
			t.Fatal("Local is not an IANA zone")
		}
	}
	// Made-up names past every bound leave real zones their room.
	for i := range maxZones + maxRefusedZones {
		if _, err := LoadIANA(fmt.Sprintf("Mars/Crater_%d", i)); err == nil {
			t.Fatal("a made-up zone resolved")
		}
	}
	c, _ := LoadIANA("Europe/Paris")
	d, err := LoadIANA("Europe/Paris")
	if err != nil || c != d {
		t.Fatalf("after many made-up names, a real zone is read at every call (%p, %p, %v)", c, d, err)
	}
}

// TestTimezoneArgDecodesAsJSON: the timezone read without a decoder is the
// one encoding/json decodes, for canonical arguments (through the tool's
// schema) and for any others, escapes, controls and bad UTF-8 included.
func TestTimezoneArgDecodesAsJSON(t *testing.T) {
	tool := getCurrentTime()
	raws := []string{`{}`, `{"timezone":"Asia/Shanghai"}`, `{"timezone":"A\u0042"}`, `{"timezone":"a\"b"}`,
		`{"timezone":"<&>"}`, "{\"timezone\":\"a\x01b\"}", "{\"timezone\":\"\xff\"}", `{"timezone":"é/ü"}`,
		`{"timezone":"x\\y"}`, `{"timezone" : "UTC"}`, `{"timezone":"UTC","x":1}`, `{"timezone":"UTC"`, `[]`}
	for _, raw := range raws {
		inputs := []json.RawMessage{json.RawMessage(raw)}
		if canonical, err := tool.Schema.Normalize(json.RawMessage(raw)); err == nil {
			inputs = append(inputs, canonical)
		}
		for _, in := range inputs {
			var want struct {
				Timezone string `json:"timezone"`
			}
			werr := json.Unmarshal(in, &want)
			got, err := timezoneArg(in)
			if (err != nil) != (werr != nil) || got != want.Timezone {
				t.Errorf("timezoneArg(%q) = %q, %v; encoding/json: %q, %v", in, got, err, want.Timezone, werr)
			}
		}
	}
}

// A result_oid an ask grant covers holds the exit for a Human's approval,
// as any call an ask grant covers: it is not answered as a missing Object.
func TestExitResultOIDUnderAskIsHeld(t *testing.T) {
	sys := toolstest.New(2, capabilities.Grant{ID: "ask-read", Resource: "object_namespace:shared", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Ask})
	doc := sys.Put("shared", "doc", []byte(`"s"`))
	_, e := invoke(t, sys, "process_exit", `{"result_oid":"`+doc.OID+`"}`)
	if e == nil || !errors.Is(e, tools.ErrApprovalRequired) || strings.Contains(e.Message, "does not exist") {
		t.Fatalf("exit with a result under an ask grant: %v, want approval required", e)
	}
	sys.Approved = true
	if out, e := invoke(t, sys, "process_exit", `{"result_oid":"`+doc.OID+`"}`); e != nil || out.Exit == nil || out.Exit.ResultOID != doc.OID {
		t.Fatalf("approved exit: %+v %v", out, e)
	}
}

// A message result is stored as written: <, > and & are not escaped.
func TestExitMessageKeepsHTMLCharacters(t *testing.T) {
	sys := toolstest.New(2)
	out, e := invoke(t, sys, "process_exit", `{"message":"a&b<c>"}`)
	if e != nil || string(sys.Payloads[out.Exit.ResultOID]) != `{"message":"a&b<c>"}` {
		t.Fatalf("exit with a message: %s %v", sys.Payloads[out.Exit.ResultOID], e)
	}
}
