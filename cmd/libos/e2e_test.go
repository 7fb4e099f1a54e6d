package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var libosBin string

func TestMain(m *testing.M) {
	raiseParallel()
	dir, err := os.MkdirTemp("", "libos-e2e")
	if err != nil {
		panic(err)
	}
	libosBin = filepath.Join(dir, "libos")
	out, err := exec.Command("go", "build", "-o", libosBin, ".").CombinedOutput()
	if err != nil {
		panic("build libos: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runBin runs the built binary and returns stdout, stderr and the exit code.
func runBin(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runBinEnv(t, nil, args...)
}

func decodeOutcome(t *testing.T, stdout string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 1 {
		t.Fatalf("stdout must be one JSON line, got %q", stdout)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	return m
}

func TestRunReplayScript(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr, code := runBin(t, "run", "base:v0", "--goal", "read the clock", "--script", "../../testdata/replay/clock.yaml", "--dir", dir)
	if code != 0 {
		t.Fatalf("exit %d\nstderr:\n%s", code, stderr)
	}
	out := decodeOutcome(t, stdout)
	result := out["result"].(map[string]any)
	if out["status"] != "exited" || out["image"] != "base:v0" || result["zone"] != "Europe/Paris" || result["pid"] != out["pid"] {
		t.Fatalf("outcome %v", out)
	}
	if _, ok := out["reason"]; ok {
		t.Fatal("reason is only for failed or killed processes")
	}
	for _, want := range []string{"call get_current_time", "get_current_time ok", "call process_exit", "running -> exited"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

func TestRunFlagsAfterAndBeforeImage(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := runBin(t, "run", "--dir", dir, "--script", "../../testdata/replay/clock.yaml", "base:v0", "--goal", "g")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

func TestRunDeniedAndExhausted(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr, code := runBin(t, "run", "base:v0", "--goal", "g", "--script", "../../testdata/replay/denied_sleep.yaml", "--dir", dir, "--deny", "clock:sleep=read")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if out := decodeOutcome(t, stdout); out["result"].(map[string]any)["message"] != "denied" {
		t.Fatalf("outcome %v", out)
	}
	stdout, _, code = runBin(t, "run", "base:v0", "--goal", "g", "--script", "../../testdata/replay/exhausted.yaml", "--dir", dir)
	out := decodeOutcome(t, stdout)
	if code != 1 || out["status"] != "failed" || !strings.Contains(out["reason"].(string), "replay script exhausted") || out["result"] != nil {
		t.Fatalf("exit %d outcome %v", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	cases := [][]string{
		{"run", "--goal", "g", "--script", "../../testdata/replay/clock.yaml", "--dir", dir},
		{"run", "base:v0", "--script", "../../testdata/replay/clock.yaml", "--dir", dir},
		{"run", "base:v0", "--goal", "g", "--script", "missing.yaml", "--dir", dir},
		{"run", "base:v0", "--goal", "g", "--script", "../../testdata/replay/clock.yaml", "--grant", "clock:now", "--dir", dir},
		{"run", "base:v0", "--goal", "g", "--script", "../../testdata/replay/clock.yaml", "--grant", "clock:now=fly", "--dir", dir},
		{"run", "nope:v1", "--goal", "g", "--script", "../../testdata/replay/clock.yaml", "--dir", dir},
		{"run", "base:v0", "--goal", "g", "--provider", "carrier-pigeon", "--dir", dir},
		{"run", "base:v0", "--goal", "g", "--bogus", "--dir", dir},
		{"frobnicate"},
		{},
	}
	for _, args := range cases {
		_, stderr, code := runBin(t, args...)
		if code != 2 || strings.TrimSpace(stderr) == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 with a message", args, code, stderr)
		}
	}
	// Refused command lines create nothing on disk.
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Fatalf("a refused command line wrote %d entries into the runtime directory", len(entries))
	}
}

func TestMalformedScript(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("processes:\n  - image: base:v0\n    turns:\n      - tool_calls: [{arguments: {}}]\n"), 0o600)
	_, stderr, code := runBin(t, "run", "base:v0", "--goal", "g", "--script", bad, "--dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, "name") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
}

func TestDemo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stdout, stderr, code := runBin(t, "demo", "--dir", dir)
	if code != 0 {
		t.Fatalf("demo exit %d:\n%s", code, stderr)
	}
	out := decodeOutcome(t, stdout)
	result := out["result"].(map[string]any)
	if out["status"] != "exited" || result["summary"] != "demo finished" || result["compacted"] != true || result["compressor_pid"] != out["pid"].(float64)+2 {
		t.Fatalf("demo outcome %v", out)
	}
	for _, want := range []string{"attempt 1: failed", "(provider)", "attempt 2: completed", "call get_current_time", "error invalid_arguments", "call activate_skill", "call create_object", "call spawn_child_process",
		"spawned base:v0 (parent 1)", "call send_process_message", "(child)", "call wait_child_process", "call read_process_messages", "call sleep", "cancelled",
		"(timer)", "call compact_process_context", "spawned context-compressor:v0", "call process_exit"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("demo stderr lacks %q:\n%s", want, stderr)
		}
	}
	// The hint names the binary as it was started and the root's pid.
	if want := libosBin + " inspect 1 --dir " + dir; !strings.Contains(stderr, want) || strings.Contains(stderr, "go build") {
		t.Errorf("demo stderr lacks %q:\n%s", want, stderr)
	}
	// The demo runs again in the same directory; its root is pid 4.
	_, stderr, code = runBin(t, "demo", "--dir", dir)
	if code != 0 {
		t.Fatalf("second demo exit %d:\n%s", code, stderr)
	}
	if want := libosBin + " inspect 4 --dir " + dir; !strings.Contains(stderr, want) {
		t.Errorf("second demo stderr lacks %q:\n%s", want, stderr)
	}
}

func TestDirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	// Hold the directory with a run that waits on a long sleep.
	script := filepath.Join(t.TempDir(), "slow.yaml")
	os.WriteFile(script, []byte("processes:\n  - image: base:v0\n    turns:\n      - tool_calls: [{name: sleep, arguments: {seconds: 60}}]\n"), 0o600)
	holder := exec.Command(libosBin, "run", "base:v0", "--goal", "g", "--script", script, "--dir", dir)
	var holderErr lockedBuffer
	holder.Stderr = &holderErr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	waitFor(t, func() bool { return strings.Contains(holderErr.String(), "(timer)") })
	_, stderr, code := runBin(t, "run", "base:v0", "--goal", "g", "--script", "../../testdata/replay/clock.yaml", "--dir", dir)
	if code != 1 || !strings.Contains(stderr, "in use") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
}

func TestParentChildThroughBinary(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr, code := runBin(t, "run", "base:v0", "--goal", "delegate", "--grant", "process:spawn=write",
		"--script", "../../testdata/replay/parent_child.yaml", "--dir", dir)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	out := decodeOutcome(t, stdout)
	result := out["result"].(map[string]any)
	if result["child"] != 2.0 || !strings.HasPrefix(result["child_said"].(string), "hello at ") {
		t.Fatalf("outcome %v", out)
	}
	ps, _, code := runBin(t, "ps", "--json", "--dir", dir)
	var rows []map[string]any
	if code != 0 || json.Unmarshal([]byte(ps), &rows) != nil || len(rows) != 2 {
		t.Fatalf("ps: exit %d %q", code, ps)
	}
	if rows[0]["parent_pid"] != nil || rows[1]["parent_pid"] != 1.0 || rows[1]["status"] != "exited" || rows[0]["image"] != "base:v0" {
		t.Fatalf("ps rows %v", rows)
	}
}

func TestGatedReviewWithSendAndResume(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr, code := runBin(t, "run", "coding:v0", "--goal", "fix the bug", "--script", "../../testdata/replay/gated.yaml", "--dir", dir)
	if code != 3 {
		t.Fatalf("a root waiting for a Human exits 3, got %d:\n%s", code, stderr)
	}
	if out := decodeOutcome(t, stdout); out["status"] != "waiting" {
		t.Fatalf("outcome %v", out)
	}
	if !strings.Contains(stderr, "completion_review_required") {
		t.Fatalf("the bare probe must show a review:\n%s", stderr)
	}
	sent, stderr, code := runBin(t, "send", "1", "please also update the docs", "--from", "alice", "--dir", dir)
	if code != 0 || !regexp.MustCompile(`^pid 1: normal message msg_1_\d+ from human:alice posted\n$`).MatchString(sent) {
		t.Fatalf("send: exit %d %q %s", code, sent, stderr)
	}
	stdout, stderr, code = runBin(t, "resume", "--dir", dir)
	if code != 0 {
		t.Fatalf("resume exit %d:\n%s", code, stderr)
	}
	out := decodeOutcome(t, stdout)
	if out["status"] != "exited" || out["result"].(map[string]any)["done"] != true {
		t.Fatalf("outcome %v", out)
	}
	if strings.Count(stderr, "completion_review_required") < 2 {
		t.Fatalf("the second probe and the stale submission return reviews:\n%s", stderr)
	}
}

func TestSendAndPsReachAHeldDirectory(t *testing.T) {
	dir := t.TempDir()
	holder := exec.Command(libosBin, "run", "base:v0", "--goal", "hold", "--grant", "process:spawn=write",
		"--script", "../../testdata/replay/hold.yaml", "--dir", dir)
	var holderOut bytes.Buffer
	var holderErr lockedBuffer
	holder.Stdout, holder.Stderr = &holderOut, &holderErr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	waitFor(t, func() bool { return strings.Contains(holderErr.String(), "[pid 1] running -> waiting (human)") })
	ps, stderr, code := runBin(t, "ps", "--json", "--dir", dir)
	if code != 0 || !strings.Contains(ps, `"waiting_on":"human"`) {
		t.Fatalf("ps through the socket: exit %d %q %s", code, ps, stderr)
	}
	if _, stderr, code := runBin(t, "send", "1", "go ahead", "--from", "tester", "--dir", dir); code != 0 {
		t.Fatalf("send through the socket: exit %d %s", code, stderr)
	}
	if err := holder.Wait(); err != nil {
		t.Fatalf("holder: %v\n%s", err, holderErr.String())
	}
	if out := decodeOutcome(t, holderOut.String()); out["result"].(map[string]any)["got"] != "go ahead" {
		t.Fatalf("outcome %v", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "control.sock")); !os.IsNotExist(err) {
		t.Fatalf("the control socket must be removed on exit: %v", err)
	}
}

func TestPsAndSendNeverCreateADirectory(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	for _, args := range [][]string{{"ps", "--dir", missing}, {"send", "1", "hi", "--dir", missing}, {"resume", "--dir", missing}} {
		_, stderr, code := runBin(t, args...)
		if code != 1 || !strings.Contains(stderr, "no runtime directory") {
			t.Errorf("%v: exit %d %q", args, code, stderr)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatal("a runtime directory was created")
	}
}

func TestBenchCommand(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runBin(t, "bench", "--processes", "5", "--rounds", "2", "--parents", "2", "--parallel-rounds", "2",
		"--cas-writes", "20", "--ended-processes", "4", "--alive-processes", "2", "--js-calls", "2", "--startup-runs", "1",
		"--reopen-processes", "3", "--reopen-objects", "10", "--json")
	var out struct {
		Rows []struct {
			Key, Name, Unit, Baseline, Goal string
			Value, BaselineValue, Ratio     float64
			Met                             bool
		}
		Scenarios []struct {
			Name    string
			Metrics map[string]float64
		}
		GOGC int
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &out) != nil || len(out.Scenarios) != 11 {
		t.Fatalf("bench: exit %d %q %s", code, stdout, stderr)
	}
	if os.Getenv("GOGC") == "" && out.GOGC != gcPercent {
		t.Errorf("bench ran with GOGC=%d, want the binary's %d", out.GOGC, gcPercent)
	}
	// Every row of the performance goals, each with its goal.
	var keys []string
	for _, r := range out.Rows {
		keys = append(keys, r.Key)
		if r.Name == "" || r.Goal == "" || r.Unit == "" {
			t.Errorf("incomplete row %+v", r)
		}
	}
	want := []string{"quanta/s", "commits/quantum", "lock-ms/quantum", "large-context-lock-ms", "large-context-wait-lock-ms", "cas/s", "heap-B/ended-process", "heap-B/alive-process",
		"js-median-µs", "js-p99-µs", "version-ms", "skill-run-ms", "reopen-ms", "roundtrips/s", "parallel-roundtrips/s"}
	if !slices.Equal(keys, want) {
		t.Errorf("rows %v, want %v", keys, want)
	}
	metrics := out.Scenarios[0].Metrics
	if metrics["quanta/s"] <= 0 || metrics["commits/quantum"] > 2 || metrics["raw-sets/s"] <= 0 {
		t.Fatalf("quanta figures %v", metrics)
	}
	stdout, stderr, code = runBin(t, "bench", "--scenarios", "store_lock,spawn_wait", "--processes", "3", "--rounds", "2")
	if code != 0 || !strings.Contains(stdout, "store write lock held a quantum") || !strings.Contains(stdout, "round trips/s, 1 parent") ||
		!strings.Contains(stdout, "BASELINE (same run)") {
		t.Fatalf("bench table: exit %d\n%s%s", code, stdout, stderr)
	}
	// A GOGC in the environment wins over the binary's.
	stdout, stderr, code = runBinEnv(t, []string{"GOGC=50"}, "bench", "--scenarios", "cas", "--cas-writes", "20")
	if code != 0 || !strings.Contains(stdout, "collector: GOGC=50\n") {
		t.Fatalf("bench with GOGC=50: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, stderr, code := runBin(t, "bench", "--scenarios", "quanta,nope"); code != exitUsage {
		t.Fatalf("unknown scenario: exit %d %s", code, stderr)
	}
}

func TestSkilledProcessCallsASkill(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr, code := runBin(t, "run", "skilled:v0", "--goal", "count words", "--script", "../../testdata/replay/skills.yaml",
		"--skills", "../../testdata/skills/agent", "--dir", dir)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	out := decodeOutcome(t, stdout)
	if r := out["result"].(map[string]any); r["words"] != 5.0 || r["longest"] != "quick" {
		t.Fatalf("outcome %v", out)
	}
	// The skill folders are recorded: a resume of the same directory reloads them.
	if _, stderr, code := runBin(t, "resume", "--dir", dir); code != 0 {
		t.Fatalf("resume exit %d:\n%s", code, stderr)
	}
	_, stderr, code = runBin(t, "run", "skilled:v0", "--goal", "g", "--script", "../../testdata/replay/skills.yaml", "--skills", t.TempDir(), "--dir", dir)
	if code != 2 || !strings.Contains(stderr, "--skills") {
		t.Fatalf("an empty skills folder: exit %d %s", code, stderr)
	}
}

func TestCheckpointAndGoalCommands(t *testing.T) {
	dir := t.TempDir()
	if _, stderr, code := runBin(t, "run", "coding:v0", "--goal", "fix the bug", "--script", "../../testdata/replay/gated.yaml", "--dir", dir); code != 3 {
		t.Fatalf("run exit %d:\n%s", code, stderr)
	}
	id, stderr, code := runBin(t, "checkpoint", "create", "1", "--dir", dir)
	if code != 0 || strings.TrimSpace(id) != "cp-1" {
		t.Fatalf("create prints the id alone: exit %d %q %s", code, id, stderr)
	}
	list, _, code := runBin(t, "checkpoint", "list", "--json", "--dir", dir)
	var cps []map[string]any
	if code != 0 || json.Unmarshal([]byte(list), &cps) != nil || len(cps) != 1 || cps[0]["root_pid"] != 1.0 {
		t.Fatalf("list: %d %q", code, list)
	}
	if out, _, code := runBin(t, "checkpoint", "inspect", "cp-1", "--dir", dir); code != 0 || !strings.Contains(out, `"objects"`) {
		t.Fatalf("inspect: %d %q", code, out)
	}
	if out, stderr, code := runBin(t, "goal", "set", "1", "fix the bug and add a test", "--dir", dir); code != 0 || !strings.Contains(out, "version 2") {
		t.Fatalf("goal set: %d %q %s", code, out, stderr)
	}
	out, stderr, code := runBin(t, "checkpoint", "restore", "cp-1", "--json", "--dir", dir)
	if code != 0 || !strings.Contains(out, `"restored_pids":[1]`) {
		t.Fatalf("restore: %d %q %s", code, out, stderr)
	}
	out, _, code = runBin(t, "checkpoint", "fork", "cp-1", "--json", "--dir", dir)
	var fork map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &fork) != nil || fork["root_pid"] != 2.0 {
		t.Fatalf("fork: %d %q", code, out)
	}
	for _, args := range [][]string{{"checkpoint", "restore", "cp-9", "--dir", dir}, {"goal", "set", "7", "x", "--dir", dir}} {
		if _, stderr, code := runBin(t, args...); code != 1 || stderr == "" {
			t.Errorf("%v: exit %d %q", args, code, stderr)
		}
	}
	if _, _, code := runBin(t, "checkpoint", "frobnicate", "--dir", dir); code != 2 {
		t.Errorf("unknown verb: exit %d", code)
	}
}

// A new run refuses a directory whose live processes an earlier run started
// with another model: it would drive them with its own (a replay script with
// nothing for them fails them for good). With the same settings it runs
// beside them.
func TestRunRefusesToDriveAnotherRunsProcesses(t *testing.T) {
	dir := t.TempDir()
	hold := []string{"run", "base:v0", "--goal", "hold", "--script", "../../testdata/replay/hold.yaml", "--dir", dir}
	if _, stderr, code := runBin(t, hold...); code != exitWaiting {
		t.Fatalf("the first run: exit %d, want %d (waiting)\n%s", code, exitWaiting, stderr)
	}
	_, stderr, code := runBin(t, "run", "base:v0", "--goal", "time", "--script", "../../testdata/replay/clock.yaml", "--dir", dir)
	if code != exitUsage || !strings.Contains(stderr, "have not ended (pid 1)") || !strings.Contains(stderr, "libos resume --dir") {
		t.Fatalf("a run with another script: exit %d\n%s", code, stderr)
	}
	if ps, _, _ := runBin(t, "ps", "--json", "--dir", dir); !strings.Contains(ps, `"waiting_on":"human"`) || strings.Contains(ps, `"pid":2`) {
		t.Fatalf("the refused run changed the directory: %s", ps)
	}
	if _, stderr, code := runBin(t, hold...); code != exitWaiting {
		t.Fatalf("a run with the same settings: exit %d\n%s", code, stderr)
	}
}
