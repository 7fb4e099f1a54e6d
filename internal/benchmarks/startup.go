package benchmarks

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ModulePath is libos's module path; the startup scenario builds its
// programs from that module's source tree.
const ModulePath = "github.com/libos/libos"

// helloSource is the baseline: a Go hello-world that, given arguments,
// echoes them instead, so the same binary is also the echo tool.
const helloSource = `package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Println(strings.Join(os.Args[1:], " "))
		return
	}
	fmt.Println("hello, world")
}
`

// StartupOptions configures Startup.
type StartupOptions struct {
	// Libos is the libos binary to measure; empty builds one from ModuleDir.
	Libos string
	// ModuleDir is the root of libos's source tree (FindModuleDir).
	ModuleDir string
	// Runs is how many times each program runs; the figures are medians.
	Runs int
}

// FindModuleDir returns the root of libos's source tree containing the
// working directory, asking the go tool.
func FindModuleDir() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", ModulePath).Output()
	if err != nil {
		return "", fmt.Errorf("the startup scenario needs the go tool and libos's source tree (run it from there): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Startup measures, in one run and interleaved so that load affects each
// alike, the start-up of a Go hello-world, of programs that only link
// libos's third-party dependencies (all of them, and jsonschema alone), of
// `libos --version`, and a direct exec of an echo tool against `libos skill
// run` of a cli-tool package running it. It reports median milliseconds and
// the ratios to the baselines. The programs are built into dir.
func Startup(dir string, opts StartupOptions) (Result, error) {
	if opts.Runs < 1 {
		opts.Runs = 1
	}
	start := time.Now()
	hello := filepath.Join(dir, "hello")
	if err := buildHello(dir, hello); err != nil {
		return Result{}, err
	}
	build := func(out, pkg string) error {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = opts.ModuleDir
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
		}
		return nil
	}
	deps, jsonschema := filepath.Join(dir, "floor-deps"), filepath.Join(dir, "floor-jsonschema")
	if err := build(deps, ModulePath+"/internal/benchmarks/startupfloor/deps"); err != nil {
		return Result{}, err
	}
	if err := build(jsonschema, ModulePath+"/internal/benchmarks/startupfloor/jsonschema"); err != nil {
		return Result{}, err
	}
	libos := opts.Libos
	if libos == "" {
		libos = filepath.Join(dir, "libos")
		if err := build(libos, ModulePath+"/cmd/libos"); err != nil {
			return Result{}, err
		}
	}
	skill, err := writeEchoSkill(dir, hello)
	if err != nil {
		return Result{}, err
	}

	runs := []struct {
		name string
		argv []string
		want string // what stdout must contain
	}{
		{"hello", []string{hello}, "hello, world"},
		{"floor_jsonschema", []string{jsonschema}, "jsonschema"},
		{"floor_deps", []string{deps}, "deps"},
		{"version", []string{libos, "--version"}, "libos "},
		{"echo", []string{hello, "echo-tool"}, "echo-tool"},
		{"skill_run", []string{libos, "skill", "run", skill}, `"status":"sealed"`},
	}
	times := make([][]time.Duration, len(runs))
	// One warm-up round loads each binary into the page cache.
	for i := -1; i < opts.Runs; i++ {
		for j, r := range runs {
			d, err := timeRun(r.argv, r.want)
			if err != nil {
				return Result{}, fmt.Errorf("%s: %w", r.name, err)
			}
			if i >= 0 {
				times[j] = append(times[j], d)
			}
		}
	}
	m := map[string]float64{}
	ms := make([]float64, len(runs))
	for j, r := range runs {
		ms[j] = float64(median(times[j])) / float64(time.Millisecond)
		m[r.name+"_ms"] = ms[j]
	}
	m["version/hello"] = ms[3] / ms[0]
	m["floor_deps/hello"] = ms[2] / ms[0]
	m["floor_jsonschema/hello"] = ms[1] / ms[0]
	m["version/floor_deps"] = ms[3] / ms[2]
	m["skill_run/echo"] = ms[5] / ms[4]
	// skill run starts libos once (it supervises its cli-tool itself) and
	// the tool once: the dependency floor of that.
	m["skill_run_floor_ms"] = ms[2] + ms[4]
	m["skill_run/skill_run_floor"] = ms[5] / m["skill_run_floor_ms"]
	of := fmt.Sprintf("median of %d", opts.Runs)
	return Result{Name: "startup", Elapsed: time.Since(start), Metrics: m, Rows: []Row{
		row("version-ms", "`libos --version` start-up, "+of, ms[3], "ms", "Go hello-world (ms)", ms[0],
			"≤ 3×", func(_, r float64) bool { return r <= 3 }),
		row("skill-run-ms", "`libos skill run` of an echo cli-tool, "+of, ms[5], "ms", "direct exec of the echo (ms)", ms[4],
			"≤ 4×", func(_, r float64) bool { return r <= 4 }),
	}}, nil
}

func buildHello(dir, out string) error {
	src := filepath.Join(dir, "hello-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module hello\n\ngo 1.21\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(helloSource), 0o644); err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = src
	// The hello-world has no dependencies; keep it out of any workspace.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build hello-world: %v\n%s", err, b)
	}
	return nil
}

// writeEchoSkill writes a skill package whose default runner is the
// cli-tool echo (the hello binary with an argument).
func writeEchoSkill(dir, echo string) (string, error) {
	pkg := filepath.Join(dir, "echo-skill")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		return "", err
	}
	md := "---\nname: echo\ndescription: Prints its argument.\n---\n# echo\n\nRuns the benchmark's echo tool.\n"
	manifest := fmt.Sprintf("runners:\n  echo:\n    default: true\n    type: cli-tool\n    command: %q\n    args: [echo-tool]\n", echo)
	if err := os.WriteFile(filepath.Join(pkg, "SKILL.md"), []byte(md), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(pkg, "skill.yaml"), []byte(manifest), 0o644); err != nil {
		return "", err
	}
	return pkg, nil
}

// timeRun runs argv to its end and returns the wall time from start to
// exit; it fails unless the program exits 0 and prints want.
func timeRun(argv []string, want string) (time.Duration, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, stderr.Bytes())
	}
	if !strings.Contains(stdout.String(), want) {
		return 0, errors.New("unexpected output: " + stdout.String())
	}
	return d, nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
