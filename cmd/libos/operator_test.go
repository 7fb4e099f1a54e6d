package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/libos/libos/internal/testfs"
)

// runBinEnv runs the built binary with extra environment variables and
// returns stdout, stderr and the exit code.
func runBinEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(libosBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

func decodeJSON(t *testing.T, what, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, s)
	}
}

// clockRun leaves an idle directory where pid 1 read the clock and exited.
func clockRun(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, stderr, code := runBin(t, "run", "base:v0", "--goal", "read the clock", "--script", "../../testdata/replay/clock.yaml", "--dir", dir); code != 0 {
		t.Fatalf("run exit %d:\n%s", code, stderr)
	}
	return dir
}

func TestReadCommandsOnAnIdleDirectory(t *testing.T) {
	dir := clockRun(t)
	before := testfs.Listing(t, dir)

	out, stderr, code := runBin(t, "inspect", "1", "--dir", dir)
	for _, want := range []string{"status      exited", "grants:", "clock:now", "budgets:", "recent calls", "get_current_time", `{"timezone":"Europe/Paris"}`} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("inspect: exit %d, lacks %q:\n%s%s", code, want, out, stderr)
		}
	}
	var d map[string]any
	out, _, _ = runBin(t, "inspect", "1", "--json", "--dir", dir)
	decodeJSON(t, "inspect --json", out, &d)
	for _, key := range []string{"pid", "parent_pid", "image", "status", "turn", "waiting_on", "goal", "grants", "budgets", "children", "context", "result_oid", "result", "recent_calls"} {
		if _, ok := d[key]; !ok {
			t.Errorf("inspect --json lacks %q", key)
		}
	}
	if d["result"].(map[string]any)["zone"] != "Europe/Paris" || len(d["recent_calls"].([]any)) != 2 {
		t.Fatalf("inspect --json %v", d)
	}
	g := d["grants"].([]any)[0].(map[string]any)
	for _, key := range []string{"id", "resource", "rights", "effect", "uses_remaining", "expires_at", "delegable"} {
		if _, ok := g[key]; !ok {
			t.Errorf("a grant lacks %q: %v", key, g)
		}
	}

	out, _, code = runBin(t, "logs", "--dir", dir)
	for _, want := range []string{"[pid 1] spawned base:v0", "state created -> runnable", "provider_call turn 0 attempt 1: completed", "tool_call get_current_time", "tool_result process_exit", "running -> exited"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("logs lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = runBin(t, "logs", "--json", "--pid", "1", "--dir", dir)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var last float64
	for _, line := range lines {
		var l map[string]any
		decodeJSON(t, "logs line", line, &l)
		for _, key := range []string{"seq", "time", "pid", "type"} {
			if _, ok := l[key]; !ok {
				t.Fatalf("log line without %s: %s", key, line)
			}
		}
		if l["seq"].(float64) < last {
			t.Fatalf("log out of order at %s", line)
		}
		last = l["seq"].(float64)
		if l["type"] == "tool_call" && l["name"] == "get_current_time" && l["arguments"].(map[string]any)["timezone"] != "Europe/Paris" {
			t.Fatalf("tool_call arguments: %s", line)
		}
	}
	out, _, _ = runBin(t, "logs", "--json", "--since", fmt.Sprint(int(last)-1), "--dir", dir)
	if n := len(strings.Split(strings.TrimSpace(out), "\n")); n != 1 {
		t.Fatalf("--since the last but one seq: %d lines\n%s", n, out)
	}

	out, _, code = runBin(t, "objects", "1", "--json", "--dir", dir)
	var metas []map[string]any
	decodeJSON(t, "objects", out, &metas)
	resultOID := ""
	for _, m := range metas {
		if m["kind"] == "result" {
			resultOID = m["oid"].(string)
		}
	}
	if code != 0 || len(metas) != 3 || resultOID == "" {
		t.Fatalf("objects: %v", metas)
	}
	if out, _, code := runBin(t, "objects", "1", "--dir", dir); code != 0 || !strings.HasPrefix(out, "OID") || !strings.Contains(out, "lost") {
		t.Fatalf("objects text: %s", out)
	}
	if out, _, code := runBin(t, "object", resultOID, "--dir", dir); code != 0 || !strings.Contains(out, `"zone": "Europe/Paris"`) {
		t.Fatalf("object: %d %s", code, out)
	}
	goalOID := d["goal"].(map[string]any)["oid"].(string)
	if out, _, code := runBin(t, "object", goalOID, "--dir", dir); code != 0 || !strings.Contains(out, "payload unavailable") {
		t.Fatalf("a lost payload says so: %d %s", code, out)
	}
	if out, _, code := runBin(t, "goal", "get", "1", "--dir", dir); code != 0 || !strings.Contains(out, "read the clock") {
		t.Fatalf("goal get: %d %s", code, out)
	}
	if out, _, code := runBin(t, "context", "1", "--dir", dir); code != 0 || !strings.Contains(out, "── system") || !strings.Contains(out, "Goal:\nread the clock") {
		t.Fatalf("context: %d %s", code, out)
	}
	if out, _, code := runBin(t, "messages", "1", "--all", "--json", "--dir", dir); code != 0 || !strings.Contains(out, `"messages":[]`) {
		t.Fatalf("messages: %d %s", code, out)
	}
	out, _, _ = runBin(t, "ps", "--json", "--dir", dir)
	var rows []map[string]any
	decodeJSON(t, "ps", out, &rows)
	if _, ok := rows[0]["age_seconds"]; !ok {
		t.Fatalf("ps --json lacks age_seconds: %v", rows)
	}
	if out, _, _ := runBin(t, "ps", "--dir", dir); !strings.Contains(out, "AGE") || !strings.Contains(out, "REASON") {
		t.Fatalf("ps columns: %s", out)
	}
	if after := testfs.Listing(t, dir); after != before {
		t.Fatalf("read commands changed the directory:\nbefore\n%s\nafter\n%s", before, after)
	}
}

func TestBadInputIsRefusedClearly(t *testing.T) {
	t.Parallel()
	dir := clockRun(t)
	missing := filepath.Join(t.TempDir(), "nope")
	before := testfs.Listing(t, dir)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"inspect", "9"}, 1, "pid 9"},
		{[]string{"inspect", "abc"}, 2, `"abc"`},
		{[]string{"inspect"}, 2, "want <pid>"},
		{[]string{"objects", "-4"}, 2, "-4"},
		{[]string{"messages", "7"}, 1, "pid 7"},
		{[]string{"context", "7"}, 1, "pid 7"},
		{[]string{"goal", "get", "7"}, 1, "pid 7"},
		{[]string{"object", "no-such-oid"}, 1, "no-such-oid"},
		{[]string{"logs", "--since", "soon"}, 2, "soon"},
		{[]string{"logs", "--pid", "-1"}, 2, "-1"},
		{[]string{"pause", "x"}, 2, `"x"`},
		{[]string{"continue", "0"}, 2, `"0"`},
		{[]string{"kill", "1", "2"}, 2, "want <pid>"},
	}
	for _, c := range cases {
		_, stderr, code := runBin(t, append(c.args, "--dir", dir)...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %s", c.args, code, stderr, c.code, c.want)
		}
		if code == 2 && !strings.Contains(stderr, "--help") {
			t.Errorf("%v: a usage error points to --help: %q", c.args, stderr)
		}
	}
	for _, args := range [][]string{{"inspect", "1"}, {"logs"}, {"objects", "1"}, {"messages", "1"}, {"context", "1"}, {"goal", "get", "1"}, {"kill", "1"}, {"pause", "1"}} {
		if _, stderr, code := runBin(t, append(args, "--dir", missing)...); code != 1 || !strings.Contains(stderr, "no runtime directory") {
			t.Errorf("%v on a missing directory: exit %d %q", args, code, stderr)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatal("a read command created a directory")
	}
	if after := testfs.Listing(t, dir); after != before {
		t.Fatal("refused commands changed the directory")
	}
	// A signal opens an idle directory to change it; for an unknown pid it
	// changes nothing the runtime records.
	logBefore, _, _ := runBin(t, "logs", "--json", "--dir", dir)
	if _, stderr, code := runBin(t, "kill", "9", "--dir", dir); code != 1 || !strings.Contains(stderr, "pid 9") {
		t.Fatalf("kill 9: exit %d %q", code, stderr)
	}
	if logAfter, _, _ := runBin(t, "logs", "--json", "--dir", dir); logAfter != logBefore {
		t.Fatalf("kill of an unknown pid changed the log:\n%s", logAfter)
	}
}

func TestSignalsOnAnIdleDirectory(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := runBin(t, "run", "coding:v0", "--goal", "fix the bug", "--script", "../../testdata/replay/gated.yaml", "--dir", dir); code != 3 {
		t.Fatalf("run exit %d:\n%s", code, stderr)
	}
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"pause", "1"}, "pid 1: paused"},
		{[]string{"pause", "1"}, "pid 1: paused (unchanged"},
		{[]string{"continue", "1"}, "pid 1: waiting"},
		{[]string{"kill", "1"}, "pid 1: killed"},
		{[]string{"kill", "1"}, "(unchanged: nothing to kill)"},
	}
	for _, s := range steps {
		out, stderr, code := runBin(t, append(s.args, "--dir", dir)...)
		if code != 0 || !strings.Contains(out, s.want) {
			t.Fatalf("%v: exit %d %q %s; want %q", s.args, code, out, stderr, s.want)
		}
	}
	out, _, _ := runBin(t, "ps", "--dir", dir)
	if !strings.Contains(out, "killed") || !strings.Contains(out, "killed by the Host") {
		t.Fatalf("ps after kill: %s", out)
	}
	out, _, _ = runBin(t, "kill", "1", "--json", "--dir", dir)
	var rep map[string]any
	decodeJSON(t, "kill --json", out, &rep)
	if rep["changed"] != false || rep["signal"] != "kill" {
		t.Fatalf("kill --json %v", rep)
	}
}

// holdRun starts a run of hold.yaml (the root waits for a Human message, its
// child naps) and waits until it is there.
func holdRun(t *testing.T, dir string) (*exec.Cmd, *bytes.Buffer, *lockedBuffer) {
	t.Helper()
	holder := exec.Command(libosBin, "run", "base:v0", "--goal", "hold", "--grant", "process:spawn=write",
		"--script", "../../testdata/replay/hold.yaml", "--dir", dir)
	var out bytes.Buffer
	var errBuf lockedBuffer
	holder.Stdout, holder.Stderr = &out, &errBuf
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	waitFor(t, func() bool { return strings.Contains(errBuf.String(), "[pid 1] running -> waiting (human)") })
	return holder, &out, &errBuf
}

func TestReadCommandsAndSignalsOnALiveRuntime(t *testing.T) {
	dir := t.TempDir()
	holder, holderOut, holderErr := holdRun(t, dir)

	var d map[string]any
	out, stderr, code := runBin(t, "inspect", "1", "--json", "--dir", dir)
	decodeJSON(t, "inspect live: "+stderr, out, &d)
	if code != 0 || d["status"] != "waiting" || d["waiting_on"].(map[string]any)["kind"] != "human" || d["waiting_on"].(map[string]any)["tool"] != "receive_process_messages" {
		t.Fatalf("inspect live: %v", d)
	}
	if kids := d["children"].([]any); len(kids) != 1 || kids[0] != 2.0 {
		t.Fatalf("children %v", kids)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"logs", "--pid", "2"}, "[pid 2] spawned base:v0"},
		{[]string{"objects", "2"}, "llm_context:2"},
		{[]string{"goal", "get", "2"}, "\n\nsleep"},
		{[]string{"context", "1"}, "spawn_child_process"},
		{[]string{"messages", "1"}, "0 unread of 0 messages"},
		{[]string{"ps"}, "AGE"},
	} {
		out, stderr, code := runBin(t, append(c.args, "--dir", dir)...)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Fatalf("%v live: exit %d %q %s; want %q", c.args, code, out, stderr, c.want)
		}
	}

	// Pausing the root leaves the napping child to keep the runtime up.
	if out, stderr, code := runBin(t, "pause", "1", "--dir", dir); code != 0 || !strings.Contains(out, "pid 1: paused") {
		t.Fatalf("pause live: %d %q %s", code, out, stderr)
	}
	if out, _, _ := runBin(t, "ps", "--json", "--dir", dir); !strings.Contains(out, `"status":"paused"`) {
		t.Fatalf("ps after pause: %s", out)
	}
	if out, stderr, code := runBin(t, "continue", "1", "--dir", dir); code != 0 || !strings.Contains(out, "pid 1: waiting") {
		t.Fatalf("continue live: %d %q %s", code, out, stderr)
	}

	// logs --follow sees what happens next, and ends with exit 0 on SIGINT.
	follow := exec.Command(libosBin, "logs", "--follow", "--json", "--dir", dir)
	var followOut lockedBuffer
	follow.Stdout = &followOut
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer follow.Process.Kill()
	waitFor(t, func() bool { return strings.Contains(followOut.String(), `"type":"spawned"`) })
	if _, stderr, code := runBin(t, "send", "1", "go ahead", "--from", "tester", "--dir", dir); code != 0 {
		t.Fatalf("send: %s", stderr)
	}
	if err := holder.Wait(); err != nil {
		t.Fatalf("holder: %v\n%s", err, holderErr.String())
	}
	if out := decodeOutcome(t, holderOut.String()); out["status"] != "exited" {
		t.Fatalf("outcome %v", out)
	}
	waitFor(t, func() bool { return strings.Contains(followOut.String(), `"to":"exited"`) })
	for _, want := range []string{`"type":"message"`, `"action":"posted"`, `"body":"go ahead"`, `"action":"read_acked"`, `"type":"tool_result"`, `"name":"signal_child_process"`} {
		if !strings.Contains(followOut.String(), want) {
			t.Errorf("follow lacks %s", want)
		}
	}
	follow.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- follow.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("logs --follow after SIGINT: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("logs --follow did not end on SIGINT")
	}
	// Each seq is printed once although the follow went from live to idle.
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(followOut.String()), "\n") {
		var l map[string]any
		decodeJSON(t, "follow line", line, &l)
		key := fmt.Sprint(l["seq"], l["type"])
		if seen[key] {
			t.Fatalf("printed twice: %s", line)
		}
		seen[key] = true
	}
}

func TestKillALiveRoot(t *testing.T) {
	dir := t.TempDir()
	holder, holderOut, _ := holdRun(t, dir)
	out, stderr, code := runBin(t, "kill", "1", "--dir", dir)
	if code != 0 || !strings.Contains(out, "pid 1: killed") || !strings.Contains(out, "pid 2: killed") {
		t.Fatalf("kill live: %d %q %s", code, out, stderr)
	}
	holder.Wait()
	if got := holder.ProcessState.ExitCode(); got != 1 {
		t.Fatalf("the run of a killed root exits 1, got %d", got)
	}
	if o := decodeOutcome(t, holderOut.String()); o["status"] != "killed" {
		t.Fatalf("outcome %v", o)
	}
}

func TestCLIConventions(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, _, code := runBin(t, args...)
		if code != 0 || !strings.HasPrefix(out, "libos ") {
			t.Errorf("%v: exit %d %q", args, code, out)
		}
	}
	for _, args := range [][]string{{"help", "inspect"}, {"inspect", "--help"}, {"inspect", "-h"}} {
		out, stderr, code := runBin(t, args...)
		if code != 0 || !strings.Contains(out, "usage: libos inspect <pid>") || !strings.Contains(out, "-json") || stderr != "" {
			t.Errorf("%v: exit %d %q %q", args, code, out, stderr)
		}
	}
	for _, name := range []string{"logs", "kill", "run", "checkpoint", "goal", "ps", "send", "bench"} {
		if out, _, code := runBin(t, "help", name); code != 0 || !strings.Contains(out, "usage: libos "+name) {
			t.Errorf("help %s: exit %d %q", name, code, out)
		}
	}
	if out, _, code := runBin(t, "help"); code != 0 || !strings.Contains(out, "inspect") || !strings.Contains(out, "LIBOS_DIR") {
		t.Errorf("help: %d %q", code, out)
	}
	_, stderr, code := runBin(t, "inspekt", "1")
	if code != 2 || !strings.Contains(stderr, "Did you mean inspect?") {
		t.Errorf("did you mean: %d %q", code, stderr)
	}
	if _, stderr, code := runBin(t, "help", "lgos"); code != 2 || !strings.Contains(stderr, "logs") {
		t.Errorf("help of a mistyped command: %d %q", code, stderr)
	}
	_, stderr, code = runBin(t, "ps", "--bogus")
	if lines := strings.Split(strings.TrimSpace(stderr), "\n"); code != 2 || len(lines) != 2 || !strings.Contains(lines[0], "-bogus") || !strings.Contains(lines[1], "libos ps --help") {
		t.Errorf("a usage error is one line and a pointer: %d %q", code, stderr)
	}

	dir := clockRun(t)
	out, stderr, code := runBinEnv(t, []string{"LIBOS_DIR=" + dir}, "ps")
	if code != 0 || !strings.Contains(out, "exited") {
		t.Fatalf("LIBOS_DIR: %d %q %s", code, out, stderr)
	}
	if _, stderr, code := runBinEnv(t, []string{"LIBOS_DIR=" + dir}, "ps", "--dir", filepath.Join(dir, "nope")); code != 1 || !strings.Contains(stderr, "no runtime directory") {
		t.Fatalf("--dir beats LIBOS_DIR: %d %s", code, stderr)
	}
	if out, stderr, code := runBin(t, "checkpoint", "create", "1", "--dir", dir); code != 0 {
		t.Fatalf("checkpoint create: %d %q %s", code, out, stderr)
	}
	out, _, code = runBin(t, "checkpoint", "list", "--dir", dir)
	if code != 0 || !strings.HasPrefix(out, "ID") || !strings.Contains(out, "ROOT") || !strings.Contains(out, "cp-1") {
		t.Fatalf("checkpoint list header: %d %q", code, out)
	}
	if out, _, code := runBin(t, "checkpoint", "list", "--json", "--dir", dir); code != 0 || !strings.HasPrefix(strings.TrimSpace(out), "[") {
		t.Fatalf("checkpoint list --json: %d %q", code, out)
	}
}

// A follower of an idle directory prints the events of runs that start and
// end between its looks for a live runtime: they are in the store.
func TestLogsFollowSeesShortRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rt")
	script := filepath.Join("..", "..", "testdata", "replay", "clock.yaml")
	if _, stderr, code := runBin(t, "run", "base:v0", "--goal", "first", "--script", script, "--dir", dir); code != 0 {
		t.Fatalf("first run: %s", stderr)
	}
	follow := exec.Command(libosBin, "logs", "--follow", "--json", "--dir", dir)
	var out lockedBuffer
	follow.Stdout = &out
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer follow.Process.Kill()
	waitFor(t, func() bool { return strings.Contains(out.String(), `"to":"exited"`) })
	for i := 2; i <= 4; i++ {
		if _, stderr, code := runBin(t, "run", "base:v0", "--goal", "short", "--script", script, "--dir", dir); code != 0 {
			t.Fatalf("run %d: %s", i, stderr)
		}
	}
	waitFor(t, func() bool { return strings.Count(out.String(), `"to":"exited"`) == 4 })
}

// A pid no process has is "no such process", as for inspect, and not an
// empty log or list: on an idle directory and on a live one, and logs -f
// ends at once instead of waiting for events that never come.
func TestMissingPidIsNoSuchProcess(t *testing.T) {
	t.Parallel()
	idle := clockRun(t)
	if _, stderr, code := runBin(t, "checkpoint", "create", "1", "--dir", idle); code != 0 {
		t.Fatalf("checkpoint create: %s", stderr)
	}
	live := t.TempDir()
	holdRun(t, live)
	for _, dir := range []string{idle, live} {
		for _, args := range [][]string{{"logs", "--pid", "99"}, {"logs", "-f", "--pid", "99"}, {"logs", "--json", "--pid", "99"}, {"checkpoint", "list", "99"}} {
			cmd := exec.Command(libosBin, append(args, "--dir", dir)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("%v: still running after 20 s", args)
			}
			if code := cmd.ProcessState.ExitCode(); code != exitFailed || stdout.Len() != 0 || !strings.Contains(stderr.String(), "no such process: pid 99") {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
			}
		}
		// A pid that exists still reads.
		if out, stderr, code := runBin(t, "logs", "--pid", "1", "--dir", dir); code != 0 || !strings.Contains(out, "[pid 1] spawned") {
			t.Errorf("logs --pid 1: exit %d %q %s", code, out, stderr)
		}
		if _, stderr, code := runBin(t, "checkpoint", "list", "1", "--dir", dir); code != 0 {
			t.Errorf("checkpoint list 1: exit %d %s", code, stderr)
		}
	}
	if out, _, _ := runBin(t, "checkpoint", "list", "1", "--dir", idle); !strings.Contains(out, "cp-1") {
		t.Errorf("checkpoint list 1 lost its checkpoint: %s", out)
	}
}
