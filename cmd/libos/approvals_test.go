package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libos/libos/kernel"
)

// The operator's approval loop on an idle directory: run stops with the
// root waiting for approval, approvals lists the held call, approve lets
// resume run it; deny answers it with the reason instead.
func TestApproveAndDenyHeldCalls(t *testing.T) {
	t.Parallel()
	script := filepath.Join("..", "..", "testdata", "replay", "approval.yaml")
	start := func(t *testing.T) (dir, callID string) {
		dir = t.TempDir()
		stdout, stderr, code := runBin(t, "run", "base:v0", "--goal", "g", "--dir", dir, "--script", script,
			"--grant", "process:spawn=write", "--ask", "process:spawn=write")
		if out := decodeOutcome(t, stdout); code != exitWaiting || out["status"] != "waiting" {
			t.Fatalf("run: exit %d, %v\n%s", code, out, stderr)
		}
		if !strings.Contains(stderr, "waits for approval of call") || !strings.Contains(stderr, "libos approve 1 ") {
			t.Fatalf("run does not say how to decide the held call:\n%s", stderr)
		}
		stdout, stderr, code = runBin(t, "approvals", "--dir", dir, "--json")
		var list []struct {
			PID      int64  `json:"pid"`
			CallID   string `json:"call_id"`
			Tool     string `json:"tool"`
			Resource string `json:"resource"`
		}
		if code != 0 || json.Unmarshal([]byte(stdout), &list) != nil || len(list) != 1 || list[0].Tool != "spawn_child_process" || list[0].Resource != "process:spawn" {
			t.Fatalf("approvals: exit %d, %s %s", code, stdout, stderr)
		}
		if text, _, _ := runBin(t, "approvals", "--dir", dir); !strings.Contains(text, "write on process:spawn") {
			t.Fatalf("approvals table: %s", text)
		}
		// inspect says what waits and why.
		if text, _, _ := runBin(t, "inspect", "1", "--dir", dir); !strings.Contains(text, "which needs write on process:spawn (grant") ||
			!strings.Contains(text, `"image":"base:v0"`) {
			t.Fatalf("inspect while held: %s", text)
		}
		return dir, list[0].CallID
	}

	t.Run("approve", func(t *testing.T) {
		dir, call := start(t)
		if _, stderr, code := runBin(t, "approve", "1", "call_unknown", "--dir", dir); code != exitFailed || !strings.Contains(stderr, "call_unknown") {
			t.Fatalf("approving an unknown call: exit %d, %s", code, stderr)
		}
		if _, stderr, code := runBin(t, "approve", "1", "--dir", dir); code != exitUsage || !strings.Contains(stderr, "<pid> <call_id>") {
			t.Fatalf("approve without a call id: exit %d, %s", code, stderr)
		}
		if out, stderr, code := runBin(t, "approve", "1", call, "--dir", dir); code != 0 || !strings.Contains(out, "approved") {
			t.Fatalf("approve: exit %d, %s %s", code, out, stderr)
		}
		if _, stderr, code := runBin(t, "approve", "1", call, "--dir", dir); code != exitFailed || !strings.Contains(stderr, "no pending approval") {
			t.Fatalf("approving twice: exit %d, %s", code, stderr)
		}
		stdout, stderr, code := runBin(t, "resume", "--dir", dir)
		out := decodeOutcome(t, stdout)
		if code != 0 || out["status"] != "exited" || out["result"].(map[string]any)["pid"] != float64(2) {
			t.Fatalf("resume after approval: exit %d, %v\n%s", code, out, stderr)
		}
	})
	t.Run("deny", func(t *testing.T) {
		dir, call := start(t)
		if _, stderr, code := runBin(t, "deny", "1", call, "--reason", "no children today", "--dir", dir); code != 0 {
			t.Fatalf("deny: exit %d, %s", code, stderr)
		}
		stdout, _, code := runBin(t, "resume", "--dir", dir)
		out := decodeOutcome(t, stdout)
		result, _ := out["result"].(map[string]any)
		e, _ := result["error"].(map[string]any)
		if code != 0 || e["code"] != "denied" || !strings.Contains(e["message"].(string), "no children today") {
			t.Fatalf("resume after denial: exit %d, %v", code, out)
		}
		if ps, _, _ := runBin(t, "ps", "--dir", dir, "--json"); strings.Contains(ps, `"pid":2`) {
			t.Fatalf("a denied spawn ran: %s", ps)
		}
	})
}

// An approval says when the call runs: in the next quantum of a process a
// runtime runs, once a paused process is continued, and once a runtime runs
// an idle directory; it never promises a next quantum nothing schedules.
// heldCall runs approval.yaml into a new directory until its spawn is held
// for approval: the directory and the held call's id.
func heldCall(t *testing.T) (dir, callID string) {
	t.Helper()
	dir = t.TempDir()
	script := filepath.Join("..", "..", "testdata", "replay", "approval.yaml")
	if _, stderr, code := runBin(t, "run", "base:v0", "--goal", "g", "--dir", dir, "--script", script,
		"--grant", "process:spawn=write", "--ask", "process:spawn=write"); code != exitWaiting {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	var list []struct {
		CallID string `json:"call_id"`
	}
	out, _, _ := runBin(t, "approvals", "--json", "--dir", dir)
	decodeJSON(t, "approvals", out, &list)
	if len(list) == 0 {
		t.Fatalf("no call held: %s", out)
	}
	return dir, list[0].CallID
}

func TestApprovalSaysWhenTheCallRuns(t *testing.T) {
	t.Parallel()
	approve := func(t *testing.T, dir, call, want string) {
		t.Helper()
		out, stderr, code := runBin(t, "approve", "1", call, "--dir", dir)
		if code != 0 || !strings.Contains(out, want) || (!strings.Contains(want, "next quantum") && strings.Contains(out, "next quantum")) {
			t.Fatalf("approve: exit %d %q %s; want %q", code, out, stderr, want)
		}
	}

	dir, call := heldCall(t)
	approve(t, dir, call, "approved; it runs when a runtime runs the directory (libos resume --dir "+shellQuote(dir)+", or libos serve --dir "+shellQuote(dir)+")")

	dir, call = heldCall(t)
	if _, stderr, code := runBin(t, "pause", "1", "--dir", dir); code != 0 {
		t.Fatalf("pause: %s", stderr)
	}
	approve(t, dir, call, "it runs once the process is continued (libos continue 1 --dir "+shellQuote(dir)+") and a runtime runs the directory")

	// Served, the directory is live.
	dir, call = heldCall(t)
	s := startServe(t, "--dir", dir, "--quiet")
	if _, stderr, code := runBin(t, "pause", "1", "--dir", dir); code != 0 {
		t.Fatalf("pause: %s", stderr)
	}
	approve(t, dir, call, "approved; it runs once the process is continued (libos continue 1 --dir "+shellQuote(dir)+")")
	if code := s.stop(); code != 0 {
		t.Fatalf("serve: exit %d\n%s", code, s.stderr)
	}
	dir, call = heldCall(t)
	s = startServe(t, "--dir", dir, "--quiet")
	approve(t, dir, call, "approved; it runs in the process's next quantum")
	s.stop()
}

// A deny reason has the kernel's bound; the CLI says so in its flag's words
// and decides nothing.
func TestDenyReasonIsBounded(t *testing.T) {
	t.Parallel()
	dir, callID := heldCall(t)
	long := strings.Repeat("é", kernel.MaxDenyReasonChars+1)
	if _, stderr, code := runBin(t, "deny", "1", callID, "--reason", long, "--dir", dir); code != exitUsage ||
		!strings.Contains(stderr, fmt.Sprintf("--reason: must be at most %d characters, got %d", kernel.MaxDenyReasonChars, kernel.MaxDenyReasonChars+1)) {
		t.Fatalf("deny with a long reason: exit %d %.300s", code, stderr)
	}
	if out, _, _ := runBin(t, "approvals", "--json", "--dir", dir); !strings.Contains(out, callID) {
		t.Fatalf("the refused deny decided the call: %s", out)
	}
	if _, stderr, code := runBin(t, "deny", "1", callID, "--reason", long[:2*kernel.MaxDenyReasonChars], "--dir", dir); code != 0 {
		t.Fatalf("deny with a reason at the bound: exit %d %.300s", code, stderr)
	}
}
