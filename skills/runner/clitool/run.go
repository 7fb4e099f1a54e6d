// Package clitool runs cli-tool skill runners: a declared command started
// without a shell, in its own process group, with an environment rebuilt from
// a documented baseline plus declared names, inputs delivered through files
// and variables, stdout and stderr drained concurrently into bounded, hashed
// captures, and a timeout that terminates the whole group.
//
// On Linux, in a program that calls MaybeRunSupervisor (or jsrunner's
// MaybeRunWorker) first, each call runs under its own supervisor: the program
// re-executed as a child subreaper that starts the tool, so that every
// descendant, also one that left the process group or the session, stays in
// its tree. When the tool ends or is terminated the supervisor kills and
// reaps every descendant left, and only then is the result sealed. A program
// that runs one call and exits may be that subreaper itself instead
// (Call.Supervision, InProcess), with the same supervision code.
//
// The rules that need no I/O (environment construction, input name
// normalization and collision detection, argument templating, cwd
// resolution) are separate functions; Run is the I/O around them.
package clitool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/libos/libos/skills/skillpkg"
)

// DefaultTimeout applies when a call declares none.
const DefaultTimeout = skillpkg.DefaultCLIToolTimeout

// TerminateGrace is how long a timed-out or aborted process group has between
// SIGTERM and SIGKILL. It is the whole tree's, not only the tool's: the kill
// comes when it ends or once the group and every descendant tracked with it
// have exited. A normal exit gets no grace: what is left is killed at once.
const TerminateGrace = 500 * time.Millisecond

// drainGrace bounds how long the output pipes may stay open after the process
// group is gone; only a descendant that left the group can hold them longer.
const drainGrace = time.Second

// Call describes one invocation. The zero values of optional fields select
// the documented defaults.
type Call struct {
	// Command is the declared command. A name without '/' is looked up in the
	// child's PATH (absolute entries only); a relative path resolves from
	// CommandDir.
	Command string
	// Args are argument templates (see RenderArgs).
	Args []string
	// Cwd is the declared cwd (see ResolveCwd).
	Cwd string
	// InputMode selects stdin delivery; "" means args.
	InputMode skillpkg.InputMode
	// Timeout bounds the call; <= 0 means DefaultTimeout.
	Timeout time.Duration
	// PackageDir is the absolute package folder.
	PackageDir string
	// CommandDir is the absolute folder relative command paths resolve from,
	// and the working directory when Cwd is empty: a bundled tool's own
	// folder; "" means PackageDir.
	CommandDir string
	// Workspace is the absolute workspace root, delivered as RUNX_CWD.
	Workspace string
	// Inputs are the resolved inputs (see skillpkg.ResolveInputs).
	Inputs map[string]json.RawMessage
	// Declared lists the runner's declared variable names; Environment holds
	// the values of those present (absent optional names are omitted).
	Declared    []string
	Environment map[string]string
	// LookupEnv reads the host environment for the baseline; nil means
	// os.LookupEnv.
	LookupEnv LookupFunc
	// TempDir is where the private input folder is created; "" means
	// /dev/shm when usable, otherwise os.TempDir().
	TempDir string
	// Supervision selects the process that supervises the call; the zero
	// value is SupervisorProcess.
	Supervision Supervision
}

// CallFor fills the static part of a Call from an admitted cli-tool runner.
func CallFor(pkg *skillpkg.Package, r *skillpkg.Runner) Call {
	return Call{
		Command:    r.Command,
		Args:       r.Args,
		Cwd:        r.Cwd,
		InputMode:  r.InputMode,
		Timeout:    r.Timeout,
		PackageDir: pkg.Dir,
		CommandDir: filepath.Join(pkg.Dir, filepath.FromSlash(r.Base)),
		Declared:   r.Environment.Names(),
	}
}

// Result is what a call did. Err is nil exactly when the call succeeded (exit
// code 0, no timeout or abort, and a complete UTF-8 stdout).
type Result struct {
	// Argv is the argument vector as spawned (argv[0] is Command as
	// declared); nil when the call failed before that was decided.
	Argv []string
	// Cwd is the resolved working directory.
	Cwd string
	// Started is true when a process was spawned.
	Started bool
	// Exited is true when the process exited by itself; ExitCode is then its
	// code. Signal names the signal that ended it otherwise.
	Exited   bool
	ExitCode int
	Signal   string
	Stdout   Stream
	Stderr   Stream
	// Output is the result value: stdout parsed as JSON when it is entirely
	// JSON, otherwise stdout as a JSON string. It is set whenever stdout is
	// complete UTF-8, also on failure, so raw output stays visible.
	Output   json.RawMessage
	Duration time.Duration
	// Err wraps one of the package's sentinel errors.
	Err error
}

// Run performs one call. It never panics on bad input and always returns
// after the process group it started is gone and the private input folder
// is removed; under a supervisor (see MaybeRunSupervisor and Supervision)
// also after every other descendant of the tool is gone. Run is safe for
// concurrent use.
func Run(ctx context.Context, call Call) Result {
	return run(ctx, call, placeFor(call.Supervision))
}

// run performs a call with its tree supervised where place says.
func run(ctx context.Context, call Call, place treePlace) Result {
	start := time.Now()
	res := Result{}
	fail := func(err error) Result {
		res.Err = err
		res.Duration = time.Since(start)
		return res
	}
	if call.InputMode == "" {
		call.InputMode = skillpkg.InputModeArgs
	}
	if call.Timeout <= 0 {
		call.Timeout = DefaultTimeout
	}
	if call.CommandDir == "" {
		call.CommandDir = call.PackageDir
	}
	lookup := call.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}

	if err := checkEnvironmentNames(call); err != nil {
		return fail(err)
	}
	plan, err := planInputs(call.Inputs)
	if err != nil {
		return fail(err)
	}
	args, err := RenderArgs(call.Args, call.Inputs, call.Declared, call.Environment)
	if err != nil {
		return fail(err)
	}
	res.Cwd = ResolveCwd(call.Cwd, call.PackageDir, call.Workspace)
	if call.Cwd == "" {
		// A bundled tool's local paths are its folder's, as admission bound
		// them (runner.Admit): `node ./run.mjs` must find run.mjs beside
		// its manifest. A declared relative cwd stays the package's.
		res.Cwd = call.CommandDir
	}
	pathValue, ok := call.Environment["PATH"]
	if !ok {
		pathValue, _ = lookup("PATH")
	}
	commandPath, err := resolveCommand(call.Command, call.CommandDir, pathValue)
	if err != nil {
		return fail(err)
	}
	res.Argv = append([]string{call.Command}, args...)
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("%w before the process started: %v", ErrAborted, context.Cause(ctx)))
	}

	// The RUNX_* variables take what the arguments and the other variables
	// leave of what a process may start with.
	room := MaxStartBytes - startSize(res.Argv, BuildEnv(lookup, call.Environment, nil))
	inputDir, transport, err := prepareInputs(call.TempDir, plan, call.Workspace, room)
	if err != nil {
		return fail(err)
	}
	defer removeInputs(inputDir, plan)
	env := BuildEnv(lookup, call.Environment, transport)

	p := &process{timeout: call.Timeout}
	if err := p.start(commandPath, res.Argv, env, res.Cwd, place); err != nil {
		return fail(err)
	}
	var stdin []byte
	if call.InputMode == skillpkg.InputModeStdin {
		stdin = plan.all
	}
	cause := p.supervise(ctx, stdin)

	res.Started = p.started
	res.Stdout, res.Stderr = p.stdout.stream(), p.stderr.stream()
	switch {
	case p.spawnFailure != "":
		return fail(fmt.Errorf("%w: %s", ErrSpawn, p.spawnFailure))
	case p.failure != "":
		return fail(fmt.Errorf("%w: %s", ErrInternal, p.failure))
	}
	switch ws := syscall.WaitStatus(p.end.Status); {
	case ws.Exited():
		res.Exited, res.ExitCode = true, ws.ExitStatus()
	case ws.Signaled():
		res.Signal = signalName(ws.Signal())
	}
	output, outputErr := outputValue(res.Stdout, p.stdoutIncomplete)
	res.Output = output
	switch {
	case p.end.Message != "":
		// The result cannot be sealed while part of the tree may still act.
		return fail(fmt.Errorf("%w: %s", ErrInternal, p.end.Message))
	case errors.Is(cause, ErrTimeout):
		return fail(fmt.Errorf("%w after %s; its process group was terminated", ErrTimeout, call.Timeout))
	case errors.Is(cause, ErrAborted):
		return fail(fmt.Errorf("%w: %v; its process group was terminated", ErrAborted, context.Cause(ctx)))
	case cause != nil:
		return fail(cause)
	case res.Signal != "":
		return fail(fmt.Errorf("%w: killed by signal %s", ErrExitStatus, res.Signal))
	case !res.Exited:
		return fail(fmt.Errorf("%w: exit status unavailable", ErrInternal))
	case res.ExitCode != 0:
		return fail(fmt.Errorf("%w: exited with code %d", ErrExitStatus, res.ExitCode))
	case outputErr != nil:
		return fail(outputErr)
	}
	res.Duration = time.Since(start)
	return res
}

// checkEnvironmentNames refuses a call whose declared or resolved variables
// include a credential-like name. Admission already refuses such a runner;
// this holds even for a Call built without admission, so a Host key can
// never reach a tool's environment (and from there retained I/O).
func checkEnvironmentNames(call Call) error {
	for _, name := range call.Declared {
		if err := skillpkg.CheckEnvironmentName(name); err != nil {
			return fmt.Errorf("%w: declared variable: %w", ErrInvalidRequest, err)
		}
	}
	for name := range call.Environment {
		if err := skillpkg.CheckEnvironmentName(name); err != nil {
			return fmt.Errorf("%w: environment value: %w", ErrInvalidRequest, err)
		}
	}
	return nil
}

func signalName(s syscall.Signal) string {
	name := s.String()
	if strings.HasPrefix(name, "signal ") {
		return name
	}
	return fmt.Sprintf("%s (%d)", name, int(s))
}

// ramTempDir is preferred for input folders on Linux: it is RAM-backed, so
// input files never reach a disk and creating them costs no journal writes,
// which otherwise dominate the runtime's share of a short call.
const ramTempDir = "/dev/shm"

// prepareInputs creates the private input folder and writes the inputs into
// it. With no explicit root it tries ramTempDir first and falls back to
// os.TempDir() when that is missing, not writable or full.
func prepareInputs(root string, plan inputPlan, workspace string, room int) (string, map[string]string, error) {
	roots := []string{root}
	if root == "" {
		roots = []string{ramTempDir, os.TempDir()}
	}
	var lastErr error
	for _, r := range roots {
		dir, err := os.MkdirTemp(r, "libos-skill-")
		if err != nil {
			lastErr = fmt.Errorf("%w: creating the input folder: %v", ErrInternal, err)
			continue
		}
		transport, err := writeInputs(dir, plan, workspace, room)
		if err != nil {
			os.RemoveAll(dir)
			if errors.Is(err, ErrInvalidRequest) {
				// The inputs, not the folder: another root fails alike.
				return "", nil, err
			}
			lastErr = err
			continue
		}
		return dir, transport, nil
	}
	return "", nil, lastErr
}

// removeInputs deletes the input folder. The known files go one by one,
// which is cheaper than a recursive walk; RemoveAll handles anything the
// process added.
func removeInputs(dir string, plan inputPlan) {
	os.Remove(filepath.Join(dir, inputsFile))
	for _, f := range plan.files {
		os.Remove(inputFilePath(dir, f))
	}
	if os.Remove(dir) != nil {
		os.RemoveAll(dir)
	}
}

const inputsFile = "inputs.json"

func inputFilePath(dir string, f inputFile) string { return filepath.Join(dir, inputFilePrefix+f.norm) }

// writeInputs writes the complete input object and one file per input into
// the private folder and returns the transport variables pointing at them.
func writeInputs(dir string, plan inputPlan, workspace string, room int) (map[string]string, error) {
	// MkdirTemp already creates 0700; chmod states the requirement and
	// survives an unusual umask.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: securing the input folder: %v", ErrInternal, err)
	}
	inputsPath := filepath.Join(dir, inputsFile)
	filePath := func(f inputFile) string { return inputFilePath(dir, f) }
	// Decided first: inputs the environment cannot carry write nothing.
	transport, err := plan.transportEnv(workspace, inputsPath, filePath, room)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(inputsPath, plan.all, 0o600); err != nil {
		return nil, fmt.Errorf("%w: writing inputs: %v", ErrInternal, err)
	}
	for _, f := range plan.files {
		if err := os.WriteFile(filePath(f), f.data, 0o600); err != nil {
			return nil, fmt.Errorf("%w: writing input %q: %v", ErrInternal, f.input, err)
		}
	}
	return transport, nil
}

// resolveCommand finds the executable for a declared command.
func resolveCommand(command, dir, pathValue string) (string, error) {
	if strings.Contains(command, "/") {
		p := command
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("%w: command %q: %v", ErrSpawn, command, err)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(pathValue) {
		if d == "" || !filepath.IsAbs(d) {
			continue // relative PATH entries would depend on the cwd
		}
		p := filepath.Join(d, command)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: command %q was not found in PATH", ErrSpawn, command)
}

func checkExecutable(p string) error {
	info, err := os.Stat(p)
	if err != nil {
		return err
	}
	if info.IsDir() {
		return fmt.Errorf("%s is a folder", p)
	}
	if info.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not executable", p)
	}
	return nil
}

// outputValue turns a successful stdout into the result value.
func outputValue(s Stream, incomplete bool) (json.RawMessage, error) {
	switch {
	case incomplete:
		return nil, fmt.Errorf("%w: stdout was held open by a process outside the process group, so its content is incomplete", ErrOutputRejected)
	case s.Truncated:
		return nil, fmt.Errorf("%w: stdout was %d bytes, more than the %d retained; a text or JSON result must be complete", ErrOutputRejected, s.Bytes, MaxRetainedBytes)
	case !utf8.Valid(s.Retained):
		return nil, fmt.Errorf("%w: stdout is not valid UTF-8 text", ErrOutputRejected)
	}
	if trimmed := bytes.TrimSpace(s.Retained); len(trimmed) > 0 && json.Valid(trimmed) {
		var compact bytes.Buffer
		if err := json.Compact(&compact, trimmed); err == nil {
			return compact.Bytes(), nil
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(string(s.Retained)); err != nil {
		return nil, fmt.Errorf("%w: encoding stdout: %v", ErrInternal, err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
