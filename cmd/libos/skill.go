package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/libos/libos/skills/runner"
	"github.com/libos/libos/skills/runner/clitool"
	"github.com/libos/libos/skills/skillpkg"
)

// skillRunSupervision is how "libos skill run" supervises a cli-tool: the
// command runs one call and exits, so the CLI process itself is the tool's
// subreaper instead of starting itself a second time as its supervisor. The
// package's tests switch it back (skill_test.go): there the command runs
// inside a long-lived test binary whose parallel tests have children of
// their own.
var skillRunSupervision = clitool.InProcess

// maxInputsBytes bounds what --inputs reads; the runners' own limits are far
// lower for javascript, and a cli-tool input object this large belongs in a
// file the tool reads itself.
const maxInputsBytes = 64 << 20

const skillUsage = `usage:
  libos skill run <dir> [--runner NAME] [--inputs FILE|-] [--workspace DIR]
  libos skill check <dir>
  libos skill test <dir> [--runner NAME] [--workspace DIR] [--json]

run prints one libos.skill_run.v1 envelope and exits 0 when it is sealed,
1 when it is a failure (a refused package or --inputs included). --inputs
reads exactly one UTF-8 JSON object from FILE, a regular file inside the
workspace (a relative FILE is resolved against it), or from stdin with -.
check admits the package and prints what it found, exiting 0 when admitted
and 1 when refused.
test runs the harness cases of the package (harness.cases and runx's
fixtures/*.yaml), or of every package below dir, printing one line per case
(pass, fail with the first difference, skipped with the reason) or, with
--json, one libos.skill_test.v1 report; it exits 0 only when no case failed.
Exit status 2 means the command line itself was wrong.
`

// runSkillCommand implements "libos skill"; args are the arguments after
// "skill". It returns the process exit status.
func runSkillCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, skillUsage)
		return 2
	}
	switch args[0] {
	case "run":
		return runSkillRun(args[1:], stdin, stdout, stderr)
	case "check":
		return runSkillCheck(args[1:], stdout, stderr)
	case "test":
		return runSkillTest(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, skillUsage)
		return 0
	}
	fmt.Fprintf(stderr, "libos skill: unknown subcommand %q\n%s", args[0], skillUsage)
	return 2
}

func newSkillFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("libos skill "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, skillUsage) }
	return fs
}

// skillDirArg parses the flags and returns the single package folder.
func skillDirArg(fs *flag.FlagSet, args []string, stderr io.Writer) (string, bool) {
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return "", false // the flag package has printed the error and usage
	}
	if len(positional) != 1 {
		fmt.Fprintf(stderr, "%s: want exactly one package folder, got %d arguments\n%s", fs.Name(), len(positional), skillUsage)
		return "", false
	}
	return positional[0], true
}

func runSkillRun(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newSkillFlagSet("run", stderr)
	runnerName := fs.String("runner", "", "runner `NAME` (default: the package's default runner)")
	inputsArg := fs.String("inputs", "", "one JSON object of inputs read from `FILE` inside the workspace, or - for stdin")
	workspace := fs.String("workspace", "", "workspace `DIR` (RUNX_CWD); default RUNX_CWD, INIT_CWD, then the current directory")
	dir, ok := skillDirArg(fs, args, stderr)
	if !ok {
		return 2
	}

	pkg, err := runner.Admit(dir)
	if err != nil {
		return printEnvelope(stdout, stderr, runner.Refused(err))
	}
	inputs, err := readInputs(*inputsArg, *workspace, stdin)
	if err != nil {
		return printEnvelope(stdout, stderr, runner.Envelope{
			Schema: runner.Schema, Status: runner.StatusFailure,
			Error: &runner.Error{Code: runner.CodeInvalidRequest, Message: err.Error()},
		})
	}
	// An interrupt ends the run through its context, so a cli-tool's process
	// group is terminated rather than orphaned.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := runner.Run(ctx, pkg, *runnerName, inputs, runner.RunOptions{Workspace: *workspace, CLIToolSupervision: skillRunSupervision})
	return printEnvelope(stdout, stderr, env)
}

// readInputs reads --inputs: nothing (the empty object), a file, or stdin,
// and checks that it is one complete UTF-8 JSON object (checkInputsDocument).
// A file is runx's "contained" input document: its path is resolved
// against the workspace (explicit, else RUNX_CWD, INIT_CWD or the current
// directory, as the run resolves it) and opened through an os.Root, so
// neither ".." nor a symbolic link leads out of it.
func readInputs(arg, workspace string, stdin io.Reader) (json.RawMessage, error) {
	if arg == "" {
		return nil, nil
	}
	var r io.Reader = stdin
	name := "- (stdin)"
	if arg != "-" {
		f, err := openInputsFile(arg, workspace)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r, name = f, arg
	}
	data, err := io.ReadAll(io.LimitReader(r, maxInputsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--inputs %s: reading: %w", name, err)
	}
	if len(data) > maxInputsBytes {
		return nil, fmt.Errorf("--inputs %s: must be at most %d bytes (64 MiB)", name, maxInputsBytes)
	}
	if err := checkInputsDocument(data); err != nil {
		return nil, fmt.Errorf("--inputs %s: %w", name, err)
	}
	return data, nil
}

// openInputsFile opens the --inputs file inside the workspace: a regular
// file only, opened without blocking so that a FIFO is refused, not waited
// on.
func openInputsFile(arg, workspace string) (*os.File, error) {
	ws, err := runner.ResolveWorkspace(workspace, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("--inputs %s: the file is read from the workspace: %w", arg, err)
	}
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("--inputs %s: must name a regular file inside the workspace %s: %s", arg, ws, fmt.Sprintf(format, args...))
	}
	rel := arg
	if filepath.IsAbs(arg) {
		if rel = relativeToWorkspace(arg, ws); rel == "" {
			return nil, refuse("the path is outside it")
		}
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		return nil, fmt.Errorf("--inputs %s: opening the workspace %s: %w", arg, ws, err)
	}
	defer root.Close()
	f, err := skillpkg.OpenRegular(root.OpenFile, rel)
	if err != nil {
		// os.Root says "path escapes from parent" for a ".." or a symbolic
		// link that leaves the workspace.
		return nil, refuse("%v", err)
	}
	return f, nil
}

// relativeToWorkspace returns the absolute path p relative to the workspace
// ws (or to ws with its symbolic links resolved), or "" when p is not
// below it.
func relativeToWorkspace(p, ws string) string {
	bases := []string{ws}
	if real, err := filepath.EvalSymlinks(ws); err == nil && real != ws {
		bases = append(bases, real)
	}
	for _, base := range bases {
		if rel, err := filepath.Rel(base, p); err == nil && filepath.IsLocal(rel) {
			return rel
		}
	}
	return ""
}

// checkInputsDocument enforces runx's rule for an --inputs document: it
// must decode to exactly one JSON object, in UTF-8 with no byte order mark
// and nothing but white space after the object. An empty document is
// refused rather than read as {}: a truncated or missing file must not run
// the skill with defaults. Offsets count bytes from 0.
func checkInputsDocument(data []byte) error {
	if len(bytes.Trim(data, " \t\r\n")) == 0 {
		return errors.New("holds no JSON object (the document is empty or white space); it must decode to exactly one JSON object")
	}
	if bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		return errors.New("byte offset 0: a UTF-8 byte order mark; the document must be exactly one JSON object, without one")
	}
	if !utf8.Valid(data) {
		off := 0
		for off < len(data) {
			r, n := utf8.DecodeRune(data[off:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			off += n
		}
		return fmt.Errorf("byte offset %d: not UTF-8; the document must be UTF-8 JSON", off)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		var syntax *json.SyntaxError
		switch {
		case errors.As(err, &syntax):
			// Offset counts the bytes read, the offending one included.
			return fmt.Errorf("byte offset %d: not JSON: %v; the document must be exactly one JSON object", syntax.Offset-1, err)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return fmt.Errorf("byte offset %d: the document ends inside its JSON value; it must be exactly one complete JSON object", len(data))
		}
		return fmt.Errorf("not JSON: %v; the document must be exactly one JSON object", err)
	}
	if v[0] != '{' {
		return fmt.Errorf("holds %s, not a JSON object; the document must be exactly one JSON object", jsonKindOf(v[0]))
	}
	end := dec.InputOffset()
	if rest := bytes.TrimLeft(data[end:], " \t\r\n"); len(rest) > 0 {
		return fmt.Errorf("byte offset %d: data after the JSON object; the document must be exactly one JSON object", len(data)-len(rest))
	}
	return nil
}

// jsonKindOf names the kind of JSON value that starts with c.
func jsonKindOf(c byte) string {
	switch c {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func printEnvelope(stdout, stderr io.Writer, env runner.Envelope) int {
	raw, err := json.Marshal(env)
	if err != nil {
		fmt.Fprintf(stderr, "libos skill run: encoding the envelope: %v\n", err)
		return 1
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", termJSON(raw)); err != nil {
		fmt.Fprintf(stderr, "libos skill run: writing the envelope: %v\n", err)
		return 1
	}
	if env.Status == runner.StatusSealed {
		return 0
	}
	return 1
}

// checkReport is what "libos skill check" prints.
type checkReport struct {
	Schema       string   `json:"schema"`
	Status       string   `json:"status"`
	Dir          string   `json:"dir,omitempty"`
	Name         string   `json:"name,omitempty"`
	Description  string   `json:"description,omitempty"`
	AllowedTools []string `json:"allowed_tools,omitempty"`
	// Metadata is the SKILL.md front matter beyond name, description and
	// allowed-tools.
	Metadata     map[string]json.RawMessage `json:"metadata,omitempty"`
	ManualBytes  int                        `json:"manual_bytes,omitempty"`
	Manifest     *manifestReport            `json:"manifest,omitempty"`
	HarnessCases int                        `json:"harness_cases,omitempty"`
	Runners      []runnerReport             `json:"runners,omitempty"`
	Tools        []toolReport               `json:"tools,omitempty"`
	Error        *runner.Error              `json:"error,omitempty"`
}

type manifestReport struct {
	File     string                     `json:"file"`
	Skill    string                     `json:"skill,omitempty"`
	Version  string                     `json:"version,omitempty"`
	Catalog  json.RawMessage            `json:"catalog,omitempty"`
	Metadata map[string]json.RawMessage `json:"metadata,omitempty"`
}

type runnerReport struct {
	Name string              `json:"name"`
	Type skillpkg.RunnerType `json:"type"`
	// Unsupported is set for a runner type libos admits but does not run.
	Unsupported    bool                          `json:"unsupported,omitempty"`
	Default        bool                          `json:"default,omitempty"`
	Agent          string                        `json:"agent,omitempty"`
	Task           string                        `json:"task,omitempty"`
	Module         string                        `json:"module,omitempty"`
	Export         string                        `json:"export,omitempty"`
	Command        string                        `json:"command,omitempty"`
	Args           []string                      `json:"args,omitempty"`
	Cwd            string                        `json:"cwd,omitempty"`
	InputMode      skillpkg.InputMode            `json:"input_mode,omitempty"`
	TimeoutSeconds float64                       `json:"timeout_seconds,omitempty"`
	Environment    *environmentReport            `json:"environment,omitempty"`
	Inputs         []inputReport                 `json:"inputs,omitempty"`
	Outputs        map[string]skillpkg.ValueType `json:"outputs,omitempty"`
	Pages          *pagesReport                  `json:"pages,omitempty"`
	Scopes         []string                      `json:"scopes,omitempty"`
	AllowedTools   []string                      `json:"allowed_tools,omitempty"`
	OutputSchemas  map[string]json.RawMessage    `json:"output_schemas,omitempty"`
	Retry          *skillpkg.Retry               `json:"retry,omitempty"`
	Mutating       *bool                         `json:"mutating,omitempty"`
	Metadata       map[string]json.RawMessage    `json:"metadata,omitempty"`
}

type environmentReport struct {
	Required []string `json:"required,omitempty"`
	Optional []string `json:"optional,omitempty"`
}

type pagesReport struct {
	PathFrom      string `json:"path_from"`
	PathScopeFrom string `json:"path_scope_from,omitempty"`
	MediaType     string `json:"media_type"`
	Framing       string `json:"framing"`
	PageBytes     int    `json:"page_bytes"`
}

type inputReport struct {
	Name        string             `json:"name"`
	Type        skillpkg.ValueType `json:"type"`
	Required    bool               `json:"required,omitempty"`
	Default     json.RawMessage    `json:"default,omitempty"`
	Description string             `json:"description,omitempty"`
	Schema      json.RawMessage    `json:"schema,omitempty"`
	Packet      string             `json:"packet,omitempty"`
}

type toolReport struct {
	Name        string       `json:"name"`
	Description string       `json:"description,omitempty"`
	Runner      runnerReport `json:"runner"`
}

func reportRunner(r *skillpkg.Runner) runnerReport {
	rep := runnerReport{
		Name: r.Name, Type: r.Type, Default: r.Default, Module: r.Module, Export: r.Export,
		Command: r.Command, Args: r.Args, Cwd: r.Cwd, InputMode: r.InputMode,
		TimeoutSeconds: r.Timeout.Seconds(), Outputs: r.Outputs,
		Scopes: r.Scopes, AllowedTools: r.AllowedTools,
		Unsupported: !r.Type.Supported(), Agent: r.Agent, Task: r.Task,
		Retry: r.Retry, Mutating: r.Mutating, Metadata: r.Metadata,
	}
	for _, o := range r.OutputDecls {
		if o.Schema != nil {
			if rep.OutputSchemas == nil {
				rep.OutputSchemas = map[string]json.RawMessage{}
			}
			rep.OutputSchemas[o.Name] = o.Schema.Raw
		}
	}
	if p := r.Pages; p != nil {
		rep.Pages = &pagesReport{PathFrom: p.PathFrom, PathScopeFrom: p.PathScopeFrom, MediaType: p.MediaType, Framing: p.Framing, PageBytes: p.PageBytes}
	}
	if len(r.Environment.Required)+len(r.Environment.Optional) > 0 {
		rep.Environment = &environmentReport{Required: r.Environment.Required, Optional: r.Environment.Optional}
	}
	for _, d := range r.Inputs {
		in := inputReport{Name: d.Name, Type: d.Type, Required: d.Required, Default: d.Default, Description: d.Description, Packet: d.Packet}
		if d.Schema != nil {
			in.Schema = d.Schema.Raw
		}
		rep.Inputs = append(rep.Inputs, in)
	}
	return rep
}

func runSkillCheck(args []string, stdout, stderr io.Writer) int {
	fs := newSkillFlagSet("check", stderr)
	dir, ok := skillDirArg(fs, args, stderr)
	if !ok {
		return 2
	}
	rep := checkReport{Schema: "libos.skill_check.v1"}
	pkg, err := runner.Admit(dir)
	if err != nil {
		rep.Status = "refused"
		rep.Error = runner.Refused(err).Error
	} else {
		rep.Status = "admitted"
		rep.Dir, rep.Name, rep.Description = pkg.Dir, pkg.Skill.Name, pkg.Skill.Description
		rep.AllowedTools, rep.ManualBytes = pkg.Skill.AllowedTools, len(pkg.Manual)
		rep.Metadata = pkg.Skill.Metadata
		if m := pkg.Manifest; m != nil {
			rep.Manifest = &manifestReport{File: m.File, Skill: m.Skill, Version: m.Version, Catalog: m.Catalog, Metadata: m.Metadata}
			if m.Harness != nil {
				rep.HarnessCases = len(m.Harness.Cases)
			}
		}
		for _, r := range pkg.Runners {
			rep.Runners = append(rep.Runners, reportRunner(r))
		}
		for _, t := range pkg.Tools {
			rep.Tools = append(rep.Tools, toolReport{Name: t.Name, Description: t.Description, Runner: reportRunner(t.Runner)})
		}
		strayManifests(pkg.Dir, stderr)
	}
	raw, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		fmt.Fprintf(stderr, "libos skill check: encoding the report: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", termJSON(raw))
	if rep.Status != "admitted" {
		return 1
	}
	return 0
}

// strayManifests warns on stderr of YAML files at a package's root that are
// not its runner manifest: only a file named exactly X.yaml or skill.yaml is
// read, so a runner written in runner.yaml or x.yaml is silently absent.
// The report and the exit status stay admission's.
func strayManifests(dir string, stderr io.Writer) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		if !e.Type().IsRegular() || (ext != ".yaml" && ext != ".yml") || name == skillpkg.XManifestFile || name == skillpkg.RunnerFile {
			continue
		}
		fmt.Fprintf(stderr, "libos skill check: warning: %s is not read: a runner manifest is a file named exactly %s or %s\n",
			termText(name), skillpkg.XManifestFile, skillpkg.RunnerFile)
	}
}
