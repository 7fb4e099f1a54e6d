package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runxSample is the copy of runx's sample packages (MIT; LICENSE and NOTICE
// beside it) that these tests run unchanged.
var runxSample = filepath.Join("..", "..", "testdata", "runx")

func requireRunxSample(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(runxSample, "LICENSE")); err != nil {
		t.Fatalf("the runx sample is missing from %s: %v", runxSample, err)
	}
}

func skillTest(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runSkillCommand(append([]string{"test"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// TestSkillTestRunxSample runs every harness case of the runx sample: each
// case whose runner type libos runs passes, the graph cases are skipped
// with the type named, and nothing fails.
func TestSkillTestRunxSample(t *testing.T) {
	requireRunxSample(t)
	code, out, errs := skillTest(t, runxSample, "--json", "--workspace", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	var rep skillTestReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report %q: %v", out, err)
	}
	if rep.Schema != skillTestSchema {
		t.Fatalf("schema = %q", rep.Schema)
	}
	want := map[string]string{
		"hello-world/hello-world-smoke":                                   casePass,
		"echo/echo-alpha":                                                 casePass,
		"echo/echo-beta":                                                  casePass,
		"helpdesk/account-access-escalates-without-draft":                 casePass,
		"helpdesk/missing-request-fails":                                  casePass,
		"helpdesk/safe-how-to-reply-draft":                                casePass,
		"issue-intake/bounded-docs-fix":                                   casePass,
		"issue-intake/feature-needs-decomposition":                        casePass,
		"issue-intake/reply-only-question":                                casePass,
		"issue-intake/request-review-before-mutation":                     casePass,
		"ghostwrite/ghostwrite-prepares-external-handoff-without-sending": casePass,
		"ghostwrite/ghostwrite-draft-binds-writing-context":               caseSkipped,
		"ghostwrite/ghostwrite-invented-claim-is-withheld":                caseSkipped,
		"ghostwrite/ghostwrite-draft-binds-evidence":                      caseSkipped,
		"ghostwrite/ghostwrite-packages-without-claiming-delivery":        caseSkipped,
	}
	got := map[string]caseResult{}
	for _, c := range rep.Cases {
		got[c.Name] = c
	}
	for name, status := range want {
		c, ok := got[name]
		if !ok {
			t.Errorf("case %s missing from %s", name, out)
			continue
		}
		if c.Status != status {
			t.Errorf("case %s: %s (%s), want %s", name, c.Status, c.Reason, status)
		}
		if status == caseSkipped && !strings.Contains(c.Reason, `runner type "graph" is not supported`) {
			t.Errorf("case %s: skip reason %q does not name the graph type", name, c.Reason)
		}
	}
	if len(rep.Cases) != len(want) || rep.Passed != 11 || rep.Failed != 0 || rep.Skipped != 4 {
		t.Fatalf("report %+v", rep)
	}
}

// TestSkillTestLines prints one line per case and filters by runner.
func TestSkillTestLines(t *testing.T) {
	requireRunxSample(t)
	code, out, _ := skillTest(t, filepath.Join(runxSample, "fixtures", "skills", "echo"), "--workspace", t.TempDir())
	if code != 0 || out != "pass echo/echo-alpha\npass echo/echo-beta\n2 passed, 0 failed, 0 skipped\n" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	code, out, _ = skillTest(t, filepath.Join(runxSample, "skills", "ghostwrite"), "--runner", "handoff", "--workspace", t.TempDir())
	if code != 0 || out != "pass ghostwrite/ghostwrite-prepares-external-handoff-without-sending\n1 passed, 0 failed, 0 skipped\n" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	// A misspelt runner runs nothing, and fails rather than pass.
	code, out, _ = skillTest(t, filepath.Join(runxSample, "skills", "ghostwrite"), "--runner", "handof", "--workspace", t.TempDir())
	if code != 1 || out != "fail --runner handof: no package tested has a runner of that name\n0 passed, 1 failed, 0 skipped\n" {
		t.Fatalf("a runner no package has: exit %d, stdout %q", code, out)
	}
}

// TestSkillTestFailures reports the first difference and exits 1.
func TestSkillTestFailures(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("SKILL.md", "---\nname: checks\n---\nManual.\n")
	write("X.yaml", `skill: checks
harness:
  cases:
    - name: exact-ok
      inputs: {message: hi}
      expect: {status: sealed, output: {exact: {message: hi, n: 2}}}
    - name: subset-wrong
      inputs: {message: hi}
      expect: {status: sealed, output: {subset: {n: 3}}}
    - name: status-wrong
      inputs: {}
      expect: {status: sealed}
runners:
  echo:
    default: true
    type: cli-tool
    command: sh
    args: ["-c", "printf '{\"message\":\"%s\",\"n\":2}' \"$RUNX_INPUT_MESSAGE\""]
    inputs:
      message: {type: string, required: true}
`)
	code, out, _ := skillTest(t, dir, "--workspace", dir)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stdout %q", code, out)
	}
	for _, want := range []string{
		"pass checks/exact-ok\n",
		"fail checks/subset-wrong: output.n: want 3, got 2\n",
		`fail checks/status-wrong: status: want sealed, got failure (invalid_request: runner echo: invalid inputs: input "message" is required)`,
		"1 passed, 2 failed, 0 skipped\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout %q lacks %q", out, want)
		}
	}
}

// TestSkillCheckShowsRunxFormat shows front matter metadata, the manifest's
// identity and catalog, and unsupported runners with their type.
func TestSkillCheckShowsRunxFormat(t *testing.T) {
	requireRunxSample(t)
	var out, errb bytes.Buffer
	code := runSkillCommand([]string{"check", filepath.Join(runxSample, "skills", "ghostwrite")}, strings.NewReader(""), &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out.String(), errb.String())
	}
	var rep struct {
		Status   string                     `json:"status"`
		Metadata map[string]json.RawMessage `json:"metadata"`
		Manifest struct {
			File    string          `json:"file"`
			Version string          `json:"version"`
			Catalog json.RawMessage `json:"catalog"`
		} `json:"manifest"`
		Runners []struct {
			Name        string `json:"name"`
			Type        string `json:"type"`
			Unsupported bool   `json:"unsupported"`
		} `json:"runners"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	var runx bytes.Buffer
	if err := json.Compact(&runx, rep.Metadata["runx"]); err != nil {
		t.Fatal(err)
	}
	if runx.String() != `{"category":"content"}` || rep.Manifest.File != "X.yaml" || rep.Manifest.Version != "0.3.2" || len(rep.Manifest.Catalog) == 0 {
		t.Fatalf("report %s", out.String())
	}
	got := ""
	for _, r := range rep.Runners {
		got += r.Name + ":" + r.Type + ":" + map[bool]string{true: "unsupported", false: "runs"}[r.Unsupported] + " "
	}
	if got != "draft:graph:unsupported package:graph:unsupported handoff:javascript:runs " {
		t.Fatalf("runners %q", got)
	}
}

// TestSkillRunUnsupportedRunner refuses a graph runner by its type.
func TestSkillRunUnsupportedRunner(t *testing.T) {
	requireRunxSample(t)
	var out, errb bytes.Buffer
	code := runSkillCommand([]string{"run", filepath.Join(runxSample, "skills", "ghostwrite")}, strings.NewReader(""), &out, &errb)
	if code != 1 || !strings.Contains(out.String(), `"code":"invalid_request","message":"runner type \"graph\" is not supported"`) {
		t.Fatalf("exit %d: %s", code, out.String())
	}
}

// skillTestWithin runs skill test and fails the test, rather than hanging
// it, when the command does not end within 10 s.
func skillTestWithin(t *testing.T, args ...string) (int, string) {
	t.Helper()
	type result struct {
		code int
		out  string
	}
	ch := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := runSkillCommand(append([]string{"test"}, args...), strings.NewReader(""), &out, &errb)
		ch <- result{code, out.String() + errb.String()}
	}()
	select {
	case r := <-ch:
		return r.code, r.out
	case <-time.After(10 * time.Second):
		t.Fatalf("skill test %q: still running after 10 s", args)
	}
	return 0, ""
}

// TestSkillTestRefusesAFixtureThatIsNotARegularFile: a FIFO among the
// fixtures fails the package at once instead of blocking the command.
func TestSkillTestRefusesAFixtureThatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: fifo\n---\nManual.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "X.yaml"), []byte("skill: fifo\nrun: {type: cli-tool, command: \"true\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "fixtures"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fixtures", "hang.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := skillTestWithin(t, dir, "--workspace", dir)
	if want := "fail fifo: fixture fixtures/hang.yaml: must be a regular file inside the package: is not a regular file: it is a named pipe (FIFO)\n"; code != 1 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, output %q, want %q", code, out, want)
	}
}

// TestSkillTestComparesNumbersExactly: an expected number matches only the
// same decimal value, beyond float64's 2^53.
func TestSkillTestComparesNumbersExactly(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: big\n---\nManual.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "X.yaml"), []byte(`skill: big
harness:
  cases:
    - name: off-by-one
      expect: {status: sealed, output: {exact: {n: 9007199254740992}}}
    - name: same
      expect: {status: sealed, output: {subset: {n: 9007199254740993}}}
run:
  type: cli-tool
  command: sh
  args: ["-c", "printf '{\"n\":9007199254740993}'"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := skillTestWithin(t, dir, "--workspace", dir)
	if want := "fail big/off-by-one: output.n: want 9007199254740992, got 9007199254740993\npass big/same\n"; code != 1 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, output %q, want %q", code, out, want)
	}
}

// TestSkillTestNumbersCompareAsDecimals: spellings of one decimal value are
// equal, and nothing is rounded on the way.
func TestSkillTestNumbersCompareAsDecimals(t *testing.T) {
	for _, tc := range []struct {
		a, b  string
		equal bool
	}{
		{"1", "1.0", true},
		{"100", "1e2", true},
		{"100", "1E+2", true},
		{"0.001", "1e-3", true},
		{"-0", "0", true},
		{"0.0e5", "0", true},
		{"-12.50", "-1.25e1", true},
		{"9007199254740992", "9007199254740993", false},
		{"0.1", "0.10000000000000001", false},
		{"1e999999999999999999999", "1e999999999999999999998", false},
		{"1e999999999999999999999", "10e999999999999999999998", true},
		{"-1", "1", false},
	} {
		d := jsonDiff("n", json.Number(tc.a), json.Number(tc.b), false)
		if (d == "") != tc.equal {
			t.Errorf("%s vs %s: diff %q, want equal %v", tc.a, tc.b, d, tc.equal)
		}
	}
}
