package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/big"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"

	"github.com/libos/libos/skills/runner"
	"github.com/libos/libos/skills/runner/jsrunner"
	"github.com/libos/libos/skills/skillpkg"
)

// skillTestSchema identifies the --json report of "libos skill test".
const skillTestSchema = "libos.skill_test.v1"

// The statuses of one case.
const (
	casePass    = "pass"
	caseFail    = "fail"
	caseSkipped = "skipped"
)

type caseResult struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

type skillTestReport struct {
	Schema  string       `json:"schema"`
	Cases   []caseResult `json:"cases"`
	Passed  int          `json:"passed"`
	Failed  int          `json:"failed"`
	Skipped int          `json:"skipped"`
}

// runSkillTest implements "libos skill test <dir>": the harness cases of the
// package in dir (harness.cases of its manifest, and runx's fixtures/*.yaml
// of kind skill aimed at the package), or of every package below dir. It
// exits 0 only when no case failed.
func runSkillTest(args []string, stdout, stderr io.Writer) int {
	fs := newSkillFlagSet("test", stderr)
	runner := fs.String("runner", "", "run only the cases of runner `NAME`")
	workspace := fs.String("workspace", "", "workspace `DIR` the cases run in (default: the current directory)")
	asJSON := fs.Bool("json", false, "print one libos.skill_test.v1 JSON report instead of one line per case")
	dir, ok := skillDirArg(fs, args, stderr)
	if !ok {
		return 2
	}
	ws := *workspace
	if ws == "" {
		// runx's harness runs cases in its working directory.
		cwd, err := os.Getwd()
		if err != nil {
			fmt.Fprintf(stderr, "libos skill test: %v\n", err)
			return 2
		}
		ws = cwd
	}
	dirs, err := packageDirs(dir)
	if err != nil {
		fmt.Fprintf(stderr, "libos skill test: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var pool *jsrunner.Pool
	defer func() {
		if pool != nil {
			pool.Close()
		}
	}()
	getPool := func() (*jsrunner.Pool, error) {
		if pool == nil {
			p, err := jsrunner.NewPool(jsrunner.PoolOptions{Workers: 1})
			if err != nil {
				return nil, err
			}
			pool = p
		}
		return pool, nil
	}

	rep := skillTestReport{Schema: skillTestSchema, Cases: []caseResult{}}
	emit := func(c caseResult) {
		rep.Cases = append(rep.Cases, c)
		switch c.Status {
		case casePass:
			rep.Passed++
		case caseFail:
			rep.Failed++
		default:
			rep.Skipped++
		}
		if !*asJSON {
			line := c.Status + " " + c.Name
			if c.Reason != "" {
				line += ": " + c.Reason
			}
			fmt.Fprintln(stdout, termText(line))
		}
	}
	matched := false
	for _, d := range dirs {
		matched = testPackage(ctx, d, *runner, ws, getPool, emit) || matched
	}
	if *runner != "" && !matched {
		// A misspelt runner would run nothing and pass.
		emit(caseResult{Name: "--runner " + *runner, Status: caseFail, Reason: "no package tested has a runner of that name"})
	}
	if *asJSON {
		raw, err := json.Marshal(rep)
		if err != nil {
			fmt.Fprintf(stderr, "libos skill test: encoding the report: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s\n", termJSON(raw))
	} else {
		fmt.Fprintf(stdout, "%d passed, %d failed, %d skipped\n", rep.Passed, rep.Failed, rep.Skipped)
	}
	if rep.Failed > 0 {
		return 1
	}
	return 0
}

// packageDirs lists dir itself when it is a package (holds SKILL.md), else
// every package folder below it, in lexical order. A package's own folders
// are not searched for more packages.
func packageDirs(dir string) ([]string, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("%s is not a folder", dir)
	}
	var out []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if _, err := os.Lstat(filepath.Join(p, skillpkg.SkillFile)); err == nil {
			out = append(out, p)
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no skill package (a folder with %s) in %s", skillpkg.SkillFile, dir)
	}
	return out, nil
}

// packageCase is one case with where it came from.
type packageCase struct {
	skillpkg.HarnessCase
	// source names the case's file for messages ("X.yaml" or the fixture).
	source string
	// skip, when set, is why the case is not run.
	skip string
}

func testPackage(ctx context.Context, dir, runnerFilter, workspace string, getPool func() (*jsrunner.Pool, error), emit func(caseResult)) (hasRunner bool) {
	label := filepath.Base(dir)
	pkg, err := runner.Admit(dir)
	if err != nil {
		emit(caseResult{Name: label, Status: caseFail, Reason: "package refused: " + err.Error()})
		return false
	}
	if runnerFilter != "" {
		_, err := pkg.Runner(runnerFilter)
		hasRunner = err == nil
	}
	label = pkg.Skill.Name
	cases, err := packageCases(pkg)
	if err != nil {
		emit(caseResult{Name: label, Status: caseFail, Reason: err.Error()})
		return hasRunner
	}
	for _, c := range cases {
		name := label + "/" + c.Name
		r, err := pkg.Runner(c.Runner)
		if err != nil {
			emit(caseResult{Name: name, Status: caseFail, Reason: err.Error()})
			continue
		}
		if runnerFilter != "" && r.Name != runnerFilter {
			continue
		}
		if c.skip != "" {
			emit(caseResult{Name: name, Status: caseSkipped, Reason: c.skip})
			continue
		}
		if reason := skipReason(pkg, r, c.HarnessCase); reason != "" {
			emit(caseResult{Name: name, Status: caseSkipped, Reason: reason})
			continue
		}
		opts := runner.RunOptions{Workspace: workspace, LookupEnv: caseLookup(c.Env)}
		if r.Type == skillpkg.TypeJavaScript {
			if opts.JavaScript, err = getPool(); err != nil {
				emit(caseResult{Name: name, Status: caseFail, Reason: "starting a javascript worker: " + err.Error()})
				continue
			}
		}
		if r.Type == skillpkg.TypeAgentTask {
			opts.AgentAnswer = func(string, string) (json.RawMessage, bool) {
				v, _, ok := agentAnswer(pkg, r, c.Answers)
				return v, ok
			}
		}
		env := runner.RunRunner(ctx, pkg, r, c.Inputs, opts)
		if diff := compareCase(c.Expect, env); diff != "" {
			emit(caseResult{Name: name, Status: caseFail, Reason: diff})
			continue
		}
		emit(caseResult{Name: name, Status: casePass})
	}
	return hasRunner
}

// packageCases gathers harness.cases and runx's package fixtures
// (fixtures/*.yaml) in that order; fixtures are sorted by file name.
func packageCases(pkg *skillpkg.Package) ([]packageCase, error) {
	var out []packageCase
	if m := pkg.Manifest; m != nil && m.Harness != nil {
		for _, c := range m.Harness.Cases {
			out = append(out, packageCase{HarnessCase: c, source: m.File})
		}
	}
	files, err := filepath.Glob(filepath.Join(pkg.Dir, "fixtures", "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	for _, f := range files {
		rel := "fixtures/" + filepath.Base(f)
		data, err := readFixture(pkg.Dir, rel)
		if err != nil {
			return nil, err
		}
		c, kind, target, err := skillpkg.ParseFixture(rel, data)
		if err != nil {
			return nil, fmt.Errorf("fixture refused: %w", err)
		}
		pc := packageCase{HarnessCase: c, source: rel}
		switch {
		case kind != "skill":
			pc.skip = fmt.Sprintf("fixture kind %q is not run by libos skill test", kind)
		case target != ".." && target != ".":
			pc.skip = fmt.Sprintf("fixture target %q is not this package", target)
		}
		out = append(out, pc)
	}
	return out, nil
}

// readFixture reads the package file rel (fixtures/NAME.yaml). It opens
// the file inside the package without blocking and refuses anything but a
// regular file: a FIFO would otherwise hang the command where no signal is
// looked at, and a symbolic link may not leave the package.
func readFixture(pkgDir, rel string) ([]byte, error) {
	root, err := os.OpenRoot(pkgDir)
	if err != nil {
		return nil, fmt.Errorf("reading fixture %s: %w", rel, err)
	}
	defer root.Close()
	f, err := skillpkg.OpenRegular(root.OpenFile, rel)
	if err != nil {
		return nil, fmt.Errorf("fixture %s: must be a regular file inside the package: %w", rel, err)
	}
	defer f.Close()
	// One byte past the limit is enough for ParseFixture to refuse it.
	data, err := io.ReadAll(io.LimitReader(f, skillpkg.MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading fixture %s: %w", rel, err)
	}
	return data, nil
}

// skipReason says why a case cannot run in libos, or "".
func skipReason(pkg *skillpkg.Package, r *skillpkg.Runner, c skillpkg.HarnessCase) string {
	switch {
	case !r.Type.Supported():
		return fmt.Sprintf("runner %s: runner type %q is not supported", r.Name, r.Type)
	case c.Expect.Status == "needs_agent" || c.Expect.Status == "policy_denied" || c.Expect.Status == "escalated":
		return fmt.Sprintf("expect.status %s is a runx graph state libos does not produce", c.Expect.Status)
	case c.Expect.StepOutputs != nil:
		return "expect.step_outputs compares graph steps, which libos does not run"
	}
	if r.Type == skillpkg.TypeAgentTask {
		if _, key, ok := agentAnswer(pkg, r, c.Answers); !ok {
			return fmt.Sprintf("agent-task runner %s needs caller.answers.%s in place of a model", r.Name, key)
		}
	}
	return ""
}

// agentAnswer finds runx's answer to an agent task: caller.answers
// "agent_task.<task>.output", with the skill's name standing in for an
// undeclared task. It returns the key it looked for.
func agentAnswer(pkg *skillpkg.Package, r *skillpkg.Runner, answers map[string]json.RawMessage) (json.RawMessage, string, bool) {
	task := r.Task
	if task == "" {
		task = pkg.Skill.Name
	}
	key := "agent_task." + task + ".output"
	v, ok := answers[key]
	return v, key, ok
}

// caseLookup overlays a case's env on the host environment.
func caseLookup(env map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		if v, ok := env[name]; ok {
			return v, true
		}
		return os.LookupEnv(name)
	}
}

// compareCase returns the first difference between a case's expectation and
// the envelope, or "". Receipt expectations are runx's receipts, which libos
// does not produce; they are not compared.
func compareCase(x skillpkg.Expectation, env runner.Envelope) string {
	if x.Status != "" && x.Status != string(env.Status) {
		msg := fmt.Sprintf("status: want %s, got %s", x.Status, env.Status)
		if env.Error != nil {
			msg += fmt.Sprintf(" (%s: %s)", env.Error.Code, env.Error.Message)
		}
		return msg
	}
	if x.OutputExact == nil && x.OutputSubset == nil {
		return ""
	}
	got, err := decodeAny(env.Output)
	if err != nil {
		return "output: not JSON: " + err.Error()
	}
	if x.OutputExact != nil {
		want, err := decodeAny(x.OutputExact)
		if err != nil {
			return "expect.output.exact: " + err.Error()
		}
		if d := jsonDiff("output", want, got, false); d != "" {
			return d
		}
	}
	if x.OutputSubset != nil {
		want, err := decodeAny(x.OutputSubset)
		if err != nil {
			return "expect.output.subset: " + err.Error()
		}
		if d := jsonDiff("output", want, got, true); d != "" {
			return d
		}
	}
	return ""
}

func decodeAny(raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// jsonDiff returns the first place where got differs from want, or "". With
// subset, objects in got may hold members want does not name; arrays and
// scalars must match (arrays element by element, each a subset).
func jsonDiff(path string, want, got any, subset bool) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: want an object, got %s", path, shortJSON(got))
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s.%s: missing, want %s", path, k, shortJSON(w[k]))
			}
			if d := jsonDiff(path+"."+k, w[k], gv, subset); d != "" {
				return d
			}
		}
		if !subset {
			extra := make([]string, 0)
			for k := range g {
				if _, ok := w[k]; !ok {
					extra = append(extra, k)
				}
			}
			if len(extra) > 0 {
				sort.Strings(extra)
				return fmt.Sprintf("%s.%s: not expected, got %s", path, extra[0], shortJSON(g[extra[0]]))
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Sprintf("%s: want an array, got %s", path, shortJSON(got))
		}
		if len(g) != len(w) {
			return fmt.Sprintf("%s: want %d elements, got %d", path, len(w), len(g))
		}
		for i := range w {
			if d := jsonDiff(fmt.Sprintf("%s[%d]", path, i), w[i], g[i], subset); d != "" {
				return d
			}
		}
		return ""
	case json.Number:
		// As decimals, not float64: 9007199254740993 is not
		// 9007199254740992, while 1, 1.0 and 1e0 are one number.
		if g, ok := got.(json.Number); ok && decimalKey(w) == decimalKey(g) {
			return ""
		}
	default:
		if reflect.DeepEqual(want, got) {
			return ""
		}
	}
	return fmt.Sprintf("%s: want %s, got %s", path, shortJSON(want), shortJSON(got))
}

// decimalKey returns a canonical text of the JSON number n's exact decimal
// value: "0" for zero, else the sign, the significant digits d and the
// exponent e of 0.d × 10^e. The exponent is a big.Int, so no spelling
// (1e999999999 included) is rounded or costs more than its text.
func decimalKey(n json.Number) string {
	s := string(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, expText, _ := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := intPart + frac
	exp := new(big.Int)
	if expText != "" {
		if _, ok := exp.SetString(strings.TrimPrefix(expText, "+"), 10); !ok {
			return "invalid:" + string(n) // the decoder admits no such number
		}
	}
	trimmed := strings.TrimLeft(digits, "0")
	// 0.digits × 10^len(intPart); each leading zero dropped lowers the
	// exponent by one, trailing zeros change nothing.
	exp.Add(exp, big.NewInt(int64(len(intPart)-(len(digits)-len(trimmed)))))
	trimmed = strings.TrimRight(trimmed, "0")
	if trimmed == "" {
		return "0" // -0 is 0
	}
	sign := ""
	if neg {
		sign = "-"
	}
	return sign + "0." + trimmed + "e" + exp.String()
}

func shortJSON(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	if len(raw) > 120 {
		return string(raw[:117]) + "..."
	}
	return string(raw)
}
