package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libos/libos/kernel"
)

// The CLI a hint names is one the shell can start again: the binary as it
// was started, or, after `go run` (a binary in go's temporary go-build
// folder) or from a test binary, ./libos built first.
func TestCLICommand(t *testing.T) {
	for _, c := range []struct {
		arg0, cli string
		build     bool
	}{
		{"libos", "libos", false},
		{"./libos", "./libos", false},
		{"/usr/local/bin/libos", "/usr/local/bin/libos", false},
		{"/home/a b/libos", "'/home/a b/libos'", false},
		{"/tmp/go-build2481/b001/exe/libos", "./libos", true},
		{"/tmp/go-build77/b001/libos.test", "./libos", true},
		{"/usr/bin/other", "./libos", true},
	} {
		if cli, build := cliCommand(c.arg0); cli != c.cli || build != c.build {
			t.Errorf("cliCommand(%q) = %q, %v; want %q, %v", c.arg0, cli, build, c.cli, c.build)
		}
	}
	var b bytes.Buffer
	demoHint(&b, "./.libos", 4, "/tmp/go-build1/b001/exe/libos")
	if s := b.String(); !strings.Contains(s, "go build -o libos ./cmd/libos") || !strings.Contains(s, "./libos inspect 4 --dir ./.libos") ||
		!strings.Contains(s, "./libos serve --dir ./.libos") {
		t.Errorf("the hint after go run:\n%s", s)
	}
}

// writeScript writes a replay script for one test.
func writeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A run that ends because nothing else can move says, for each process the
// Host must move, what it waits on and the commands that move it; following
// the hint to the letter finishes the run.
func TestIdleRunSaysWhatWaits(t *testing.T) {
	t.Parallel()
	t.Run("a Human message", func(t *testing.T) {
		t.Parallel()
		script := writeScript(t, `processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: receive_process_messages, arguments: {sender: "human:tester"}}]
      - tool_calls: [{name: process_exit, arguments: {payload: {got: "${last.messages.0.body}"}}}]
`)
		dir := t.TempDir()
		_, stderr, code := runBin(t, "run", "base:v0", "--goal", "g", "--script", script, "--dir", dir)
		want := "libos: nothing else can move: pid 1 waits on a Human message from tester: libos send 1 TEXT --from tester --dir " + dir + ", then libos resume --dir " + dir
		if code != exitWaiting || !strings.Contains(stderr, want) {
			t.Fatalf("exit %d; stderr lacks %q:\n%s", code, want, stderr)
		}
		if _, stderr, code := runBin(t, "send", "1", "hi", "--from", "tester", "--dir", dir); code != 0 {
			t.Fatalf("send: %d %s", code, stderr)
		}
		if out, stderr, code := runBin(t, "resume", "--dir", dir); code != 0 || !strings.Contains(out, `"got":"hi"`) {
			t.Fatalf("resume: %d %s %s", code, out, stderr)
		}
	})
	t.Run("a provider that needs the Host", func(t *testing.T) {
		t.Parallel()
		script := writeScript(t, `processes:
  - image: base:v0
    turns:
      - fault: {status: 401, attempts: 1}
        tool_calls: [{name: process_exit, arguments: {message: done}}]
`)
		dir := t.TempDir()
		_, stderr, code := runBin(t, "run", "base:v0", "--goal", "g", "--script", script, "--dir", dir)
		want := "libos: nothing else can move: pid 1 waits on its provider (provider unavailable: authentication failed"
		if code != exitWaiting || !strings.Contains(stderr, want) || !strings.Contains(stderr, "libos resume --dir "+dir+" asks again") {
			t.Fatalf("exit %d; stderr lacks %q:\n%s", code, want, stderr)
		}
	})
	t.Run("a paused process", func(t *testing.T) {
		t.Parallel()
		script, err := filepath.Abs("../../testdata/replay/clock.yaml")
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		spawn := spawnRoot("base:v0", "read the clock", rootGrants(nil, nil))
		var stdout, stderr bytes.Buffer
		code := runSession(context.Background(), dir, &stdout, &stderr, func(rt *kernel.Runtime) (int64, error) {
			pid, err := spawn(rt)
			if err == nil {
				_, err = rt.Signal(pid, kernel.SignalPause)
			}
			return pid, err
		}, &runSettings{Provider: "replay", Script: script})
		want := "libos: nothing else can move: pid 1 is paused: libos continue 1 --dir " + dir + ", then libos resume --dir " + dir
		if code != exitWaiting || !strings.Contains(stderr.String(), want) {
			t.Fatalf("exit %d; stderr lacks %q:\n%s", code, want, stderr.String())
		}
	})
}

// A refused grant flag names the flag, the value and the rule once: not the
// flag package's "invalid value ... for flag -grant", nor the CLI's own
// grant id, which the user never typed.
func TestGrantFlagErrorsSayItOnce(t *testing.T) {
	for _, c := range []struct{ flag, spec, want string }{
		{"--grant", "process:spawn=fly", `libos run: --grant "process:spawn=fly": invalid right "fly": want one of read, write, materialize, execute, admin`},
		{"--grant", "nope=read", `libos run: --grant "nope=read": invalid resource "nope": must start with a scheme`},
		{"--grant", "object:x", `libos run: --grant "object:x": want RESOURCE=RIGHTS[@USES][~DURATION]`},
		{"--deny", "clock:now=read~1m", `libos run: --deny "clock:now=read~1m": ~DURATION: a deny grant does not expire`},
		{"--ask", "clock:now=read@1", `libos run: --ask "clock:now=read@1": @USES: only allow grants can be one-shot`},
	} {
		var stdout, stderr bytes.Buffer
		code := runCommand([]string{"base:v0", "--goal", "g", "--script", "x.yaml", c.flag, c.spec, "--dir", t.TempDir()}, &stdout, &stderr)
		s := stderr.String()
		if code != exitUsage || !strings.HasPrefix(s, c.want) || strings.Count(s, c.spec) != 1 || strings.Contains(s, "cli-") || strings.Contains(s, "invalid value") {
			t.Errorf("%s %s: exit %d, stderr %q; want it to start with %q and say the value once", c.flag, c.spec, code, s, c.want)
		}
	}
}

// Each command's help states the defaults it has: resume's are the run's.
func TestHelpStatesDefaults(t *testing.T) {
	for _, c := range []struct {
		cmd        string
		want, lack []string
	}{
		{"run", []string{"RESOURCE=RIGHTS[@USES][~DURATION]", "default: $OPENAI_BASE_URL, else https://api.openai.com/v1", "the image's max_output_tokens"}, nil},
		{"resume", []string{"default: the one the run recorded", "-skills DIR", "-retain-io", "not given: as the run recorded"}, []string{"replay when --script is given"}},
	} {
		var stdout bytes.Buffer
		if code := run([]string{c.cmd, "--help"}, strings.NewReader(""), &stdout, &bytes.Buffer{}); code != exitOK {
			t.Fatalf("%s --help: exit %d", c.cmd, code)
		}
		for _, w := range c.want {
			if !strings.Contains(stdout.String(), w) {
				t.Errorf("%s --help lacks %q:\n%s", c.cmd, w, stdout.String())
			}
		}
		for _, w := range c.lack {
			if strings.Contains(stdout.String(), w) {
				t.Errorf("%s --help says %q:\n%s", c.cmd, w, stdout.String())
			}
		}
	}
}

// A goal that cannot be read fails goal get: stdout keeps what is known of
// the goal, stderr says why.
func TestGoalGetOfAnUnavailableGoalFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Without retained I/O nothing can recover the goal after the run.
	if _, stderr, code := runBin(t, "run", "base:v0", "--goal", "read the clock", "--script", "../../testdata/replay/clock.yaml", "--retain-io=false", "--dir", dir); code != 0 {
		t.Fatalf("run: %s", stderr)
	}
	out, stderr, code := runBin(t, "goal", "get", "1", "--dir", dir)
	if code != exitFailed || !strings.HasPrefix(out, "goal of pid 1: ") || !strings.Contains(stderr, "libos goal get: goal of pid 1 unavailable: ") {
		t.Fatalf("goal get: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	out, _, code = runBin(t, "goal", "get", "1", "--json", "--dir", dir)
	if code != exitFailed || !strings.Contains(out, `"error":"`) {
		t.Fatalf("goal get --json: exit %d, stdout %q", code, out)
	}
}

// send says a missing pid as every command does, and refuses an empty body.
func TestSendErrors(t *testing.T) {
	t.Parallel()
	dir := clockRun(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "99", "hi"}, "libos send: to: no such process: pid 99\n"},
		{[]string{"send", "1", ""}, "libos send: body: must not be empty or only white space\n"},
	} {
		if _, stderr, code := runBin(t, append(c.args, "--dir", dir)...); code != exitFailed || stderr != c.want {
			t.Errorf("%q: exit %d, stderr %q; want %q", c.args, code, stderr, c.want)
		}
	}
}

// resume takes --skills and --retain-io to correct what the run recorded: a
// skill folder that moved would otherwise stop every resume, naming a flag
// resume refused.
func TestResumeCorrectsSkillsAndRetention(t *testing.T) {
	t.Parallel()
	skills := filepath.Join(t.TempDir(), "skills")
	if err := os.CopyFS(skills, os.DirFS("../../testdata/skills/agent")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, stderr, code := runBin(t, "run", "skilled:v0", "--goal", "count words", "--script", "../../testdata/replay/skills.yaml", "--skills", skills, "--dir", dir); code != 0 {
		t.Fatalf("run: %s", stderr)
	}
	moved := skills + "-moved"
	if err := os.Rename(skills, moved); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runBin(t, "resume", "--dir", dir); code == 0 || !strings.Contains(stderr, "--skills") {
		t.Fatalf("resume with the recorded folder gone: exit %d %s", code, stderr)
	}
	if _, stderr, code := runBin(t, "resume", "--skills", moved, "--retain-io=false", "--dir", dir); code != 0 {
		t.Fatalf("resume --skills: exit %d %s", code, stderr)
	}
	s, err := recordedSettings(dir)
	if err != nil || len(s.SkillDirs) != 1 || s.SkillDirs[0] != moved || !s.NoFullIO || s.Provider != "replay" {
		t.Fatalf("recorded after the correction: %+v %v", s, err)
	}
	// What is not given stays as recorded.
	if _, stderr, code := runBin(t, "resume", "--dir", dir); code != 0 {
		t.Fatalf("resume after the correction: exit %d %s", code, stderr)
	}
}

// skill check warns of a YAML file at the package's root that is not read
// as its runner manifest; the report and the exit status stay admission's.
func TestSkillCheckWarnsOfStrayManifests(t *testing.T) {
	dir := skillPackage(t, cliManifest)
	code, _, stderr := runSkill(t, "", "check", dir)
	if code != 0 || stderr != "" {
		t.Fatalf("a package without strays: exit %d, stderr %q", code, stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "runner.yaml"), []byte(cliManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runSkill(t, "", "check", dir)
	want := "libos skill check: warning: runner.yaml is not read: a runner manifest is a file named exactly X.yaml or skill.yaml\n"
	if code != 0 || stderr != want || !strings.Contains(stdout, `"status": "admitted"`) {
		t.Fatalf("exit %d, stderr %q, stdout %s", code, stderr, stdout)
	}
}
