package skillpkg

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// RunnerType selects how a runner executes.
type RunnerType string

// The runner types a package may declare.
const (
	TypeJavaScript RunnerType = "javascript"
	TypeCLITool    RunnerType = "cli-tool"
	TypeAgentTask  RunnerType = "agent-task"
)

// InputMode selects what a cli-tool process receives on stdin.
type InputMode string

// The input modes of a cli-tool runner. Only InputModeStdin writes anything
// to stdin; InputModeNone additionally forbids {{input}} placeholders in args.
const (
	InputModeArgs  InputMode = "args"
	InputModeStdin InputMode = "stdin"
	InputModeNone  InputMode = "none"
)

// Timeout rules, in seconds.
const (
	DefaultJavaScriptTimeout = 2 * time.Second
	MinJavaScriptTimeout     = 1 * time.Second
	MaxJavaScriptTimeout     = 30 * time.Second
	DefaultCLIToolTimeout    = 60 * time.Second
	// MaxTimeout bounds every other declared timeout; it keeps the duration
	// arithmetic far from overflow.
	MaxTimeout = 24 * time.Hour
)

// Page size rules of a paged javascript runner.
const (
	DefaultPageBytes = 1 << 20
	MaxPageBytes     = 4 << 20
)

// WorkspaceToken is the only placeholder a cli-tool cwd may hold, and only as
// its entire value: it stands for the caller's workspace (RUNX_CWD).
const WorkspaceToken = "{{env.RUNX_CWD}}"

// Environment lists the host variable names a runner admits.
type Environment struct {
	Required []string
	Optional []string
}

// Names returns the required then the optional names.
func (e Environment) Names() []string {
	return append(append([]string(nil), e.Required...), e.Optional...)
}

// Declares reports whether name is a required or optional variable.
func (e Environment) Declares(name string) bool {
	for _, n := range e.Names() {
		if n == name {
			return true
		}
	}
	return false
}

// Pages declares a paged artifact source for a javascript runner.
type Pages struct {
	PathFrom      string
	PathScopeFrom string
	MediaType     string
	Framing       string
	// PageBytes is resolved: DefaultPageBytes when not declared.
	PageBytes int
}

// Runner is one admitted runner. Values are immutable after admission and
// may be shared between goroutines.
type Runner struct {
	// Name is the key under runners:, or DefaultRunnerName for a run: block,
	// or the dotted tool name for a bundled tool.
	Name string
	// Default is true for the runner a caller gets without naming one.
	Default bool
	Type    RunnerType
	// Base is the package-relative, slash-separated folder that the runner's
	// module and relative command paths resolve from: "" for skill.yaml,
	// "tools/<namespace>/<tool>" for a bundled tool. A cli-tool cwd always
	// resolves from the package folder, as the runtime contract says.
	Base string
	// Module is the package-relative, slash-separated module path (javascript).
	Module string
	// Export is the export to call; "" selects the default export.
	Export      string
	Outputs     map[string]ValueType
	Environment Environment
	// Timeout is resolved: the type's default when not declared, 0 for an
	// agent-task that declares none.
	Timeout time.Duration
	Pages   *Pages
	// Command, Args, Cwd and InputMode describe a cli-tool. Args and Cwd are
	// templates as written; InputMode is resolved to InputModeArgs when absent.
	Command      string
	Args         []string
	Cwd          string
	InputMode    InputMode
	Scopes       []string
	AllowedTools []string
	// Inputs is nil when the runner declares none, in which case any JSON
	// object is accepted as its inputs.
	Inputs []InputDecl
}

var (
	runnerNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	envNamePattern    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// runnerFields lists the known runner fields and the runner types that
// accept each; nil means every type.
var runnerFields = map[string][]RunnerType{
	"type":            nil,
	"environment":     nil,
	"timeout_seconds": nil,
	"scopes":          nil,
	"inputs":          nil,
	"outputs":         nil,
	"module":          {TypeJavaScript},
	"export":          {TypeJavaScript},
	"pages":           {TypeJavaScript},
	"command":         {TypeCLITool},
	"args":            {TypeCLITool},
	"cwd":             {TypeCLITool},
	"input_mode":      {TypeCLITool},
	"inputMode":       {TypeCLITool},
	"allowed_tools":   {TypeAgentTask},
}

const knownRunnerFields = "type, module, export, outputs, environment, timeout_seconds, pages, command, args, cwd, input_mode, scopes, allowed_tools, inputs"

// parseRunner reads one runner mapping. base is the package-relative folder
// its relative paths resolve from; allowDefault permits the default: key;
// types lists the runner types accepted here.
func (r nodeReader) parseRunner(n *yaml.Node, field, name, base string, allowDefault bool, types []RunnerType) (*Runner, error) {
	entries, err := r.mapping(n, field)
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]keyValue, len(entries))
	run := &Runner{Name: name, Base: base}
	for _, e := range entries {
		if e.key == "default" {
			if !allowDefault {
				return nil, r.fail(e.keyAt, join(field, e.key), "applies only to a runner under runners:")
			}
			if run.Default, err = r.boolean(e.value, join(field, e.key)); err != nil {
				return nil, err
			}
			continue
		}
		if _, ok := runnerFields[e.key]; !ok {
			return nil, r.fail(e.keyAt, join(field, e.key), "is not a known runner field (allowed: %s)", knownRunnerFields)
		}
		byKey[e.key] = e
	}
	typeEntry, ok := byKey["type"]
	if !ok {
		return nil, r.fail(n, join(field, "type"), "is required (one of %s)", typeList(types))
	}
	t, err := r.str(typeEntry.value, join(field, "type"))
	if err != nil {
		return nil, err
	}
	run.Type = RunnerType(t)
	if !containsType(types, run.Type) {
		return nil, r.fail(typeEntry.value, join(field, "type"), "must be one of %s, got %q", typeList(types), t)
	}
	for _, e := range entries {
		applies, known := runnerFields[e.key]
		if known && applies != nil && !containsType(applies, run.Type) {
			return nil, r.fail(e.keyAt, join(field, e.key), "applies only to %s runners, not %s", typeList(applies), run.Type)
		}
	}
	if _, a := byKey["input_mode"]; a {
		if _, b := byKey["inputMode"]; b {
			return nil, r.fail(byKey["inputMode"].keyAt, join(field, "inputMode"), "is the same field as input_mode; give only one")
		}
	}

	if e, ok := byKey["environment"]; ok {
		if run.Environment, err = r.parseEnvironment(e.value, join(field, "environment"), name); err != nil {
			return nil, err
		}
	}
	if e, ok := byKey["inputs"]; ok {
		if run.Inputs, err = r.parseInputs(e.value, join(field, "inputs")); err != nil {
			return nil, err
		}
	}
	if e, ok := byKey["outputs"]; ok {
		if run.Outputs, err = r.parseOutputs(e.value, join(field, "outputs")); err != nil {
			return nil, err
		}
	}
	if e, ok := byKey["scopes"]; ok {
		if run.Scopes, err = r.uniqueWords(e.value, join(field, "scopes")); err != nil {
			return nil, err
		}
	}
	if e, ok := byKey["allowed_tools"]; ok {
		if run.AllowedTools, err = r.words(e.value, join(field, "allowed_tools")); err != nil {
			return nil, err
		}
	}
	if err := r.parseTimeout(run, byKey, field); err != nil {
		return nil, err
	}

	switch run.Type {
	case TypeJavaScript:
		err = r.parseJavaScript(run, n, byKey, field)
	case TypeCLITool:
		err = r.parseCLITool(run, n, byKey, field)
	}
	if err != nil {
		return nil, err
	}
	return run, nil
}

func (r nodeReader) parseTimeout(run *Runner, byKey map[string]keyValue, field string) error {
	e, ok := byKey["timeout_seconds"]
	f := join(field, "timeout_seconds")
	if !ok {
		switch run.Type {
		case TypeJavaScript:
			run.Timeout = DefaultJavaScriptTimeout
		case TypeCLITool:
			run.Timeout = DefaultCLIToolTimeout
		}
		return nil
	}
	secs, err := r.number(e.value, f)
	if err != nil {
		return err
	}
	if run.Type == TypeJavaScript {
		if secs < MinJavaScriptTimeout.Seconds() || secs > MaxJavaScriptTimeout.Seconds() {
			return r.fail(e.value, f, "must be from %g through %g seconds for a javascript runner, got %g",
				MinJavaScriptTimeout.Seconds(), MaxJavaScriptTimeout.Seconds(), secs)
		}
	} else if secs <= 0 || secs > MaxTimeout.Seconds() {
		return r.fail(e.value, f, "must be greater than 0 and at most %g seconds, got %g", MaxTimeout.Seconds(), secs)
	}
	run.Timeout = time.Duration(secs * float64(time.Second))
	if run.Timeout <= 0 {
		return r.fail(e.value, f, "must be at least one nanosecond, got %g", secs)
	}
	return nil
}

func (r nodeReader) parseJavaScript(run *Runner, n *yaml.Node, byKey map[string]keyValue, field string) error {
	e, ok := byKey["module"]
	if !ok {
		return r.fail(n, join(field, "module"), "is required for a javascript runner")
	}
	mod, err := r.nonEmptyStr(e.value, join(field, "module"))
	if err != nil {
		err.(*AdmissionError).module = true
		return err
	}
	if !strings.HasSuffix(mod, ".mjs") && !strings.HasSuffix(mod, ".js") {
		return r.moduleFail(e.value, join(field, "module"), "must name a .mjs or .js file, got %q", mod)
	}
	if run.Module, err = r.containedPath(e.value, join(field, "module"), run.Base, mod); err != nil {
		err.(*AdmissionError).module = true
		return err
	}
	if e, ok := byKey["export"]; ok {
		if run.Export, err = r.nonEmptyStr(e.value, join(field, "export")); err != nil {
			return err
		}
	}
	if e, ok := byKey["pages"]; ok {
		if run.Pages, err = r.parsePages(e.value, join(field, "pages"), run.Inputs); err != nil {
			return err
		}
	}
	return nil
}

func (r nodeReader) moduleFail(n *yaml.Node, field, format string, args ...any) error {
	err := r.fail(n, field, format, args...)
	err.module = true
	return err
}

// containedPath checks that rel, a relative slash path resolved from the
// package-relative folder base, stays inside the package, and returns the
// cleaned package-relative path.
func (r nodeReader) containedPath(n *yaml.Node, field, base, rel string) (string, error) {
	switch {
	case strings.ContainsRune(rel, 0):
		return "", r.fail(n, field, "must not contain a NUL byte")
	case strings.Contains(rel, `\`):
		return "", r.fail(n, field, "must use forward slashes, got %q", rel)
	case path.IsAbs(rel) || (len(rel) >= 2 && rel[1] == ':'):
		return "", r.fail(n, field, "must be a relative path inside the package, got %q", rel)
	}
	p := path.Clean(path.Join(base, rel))
	if p == ".." || strings.HasPrefix(p, "../") || p == "." {
		return "", r.fail(n, field, "must stay inside the package, got %q", rel)
	}
	return p, nil
}

func (r nodeReader) parseCLITool(run *Runner, n *yaml.Node, byKey map[string]keyValue, field string) error {
	e, ok := byKey["command"]
	if !ok {
		return r.fail(n, join(field, "command"), "is required for a cli-tool runner")
	}
	var err error
	if run.Command, err = r.nonEmptyStr(e.value, join(field, "command")); err != nil {
		return err
	}
	if strings.ContainsRune(run.Command, 0) {
		return r.fail(e.value, join(field, "command"), "must not contain a NUL byte")
	}
	run.InputMode = InputModeArgs
	modeKey := "input_mode"
	if _, ok := byKey["inputMode"]; ok {
		modeKey = "inputMode"
	}
	if e, ok := byKey[modeKey]; ok {
		mode, err := r.str(e.value, join(field, modeKey))
		if err != nil {
			return err
		}
		switch InputMode(mode) {
		case InputModeArgs, InputModeStdin, InputModeNone:
			run.InputMode = InputMode(mode)
		default:
			return r.fail(e.value, join(field, modeKey), "must be one of args, stdin, none, got %q", mode)
		}
	}
	if e, ok := byKey["args"]; ok {
		f := join(field, "args")
		if err := r.plain(e.value, f); err != nil {
			return err
		}
		if e.value.Kind != yaml.SequenceNode {
			return r.fail(e.value, f, "must be a list of strings, got %s", kindName(e.value))
		}
		run.Args = make([]string, 0, len(e.value.Content))
		for i, item := range e.value.Content {
			itemField := fmt.Sprintf("%s[%d]", f, i)
			arg, err := r.str(item, itemField)
			if err != nil {
				return err
			}
			if err := checkArgTemplate(arg, run); err != nil {
				return r.fail(item, itemField, "%v", err)
			}
			run.Args = append(run.Args, arg)
		}
	}
	if e, ok := byKey["cwd"]; ok {
		f := join(field, "cwd")
		if run.Cwd, err = r.nonEmptyStr(e.value, f); err != nil {
			return err
		}
		if strings.ContainsRune(run.Cwd, 0) {
			return r.fail(e.value, f, "must not contain a NUL byte")
		}
		if strings.Contains(run.Cwd, "{{") && run.Cwd != WorkspaceToken {
			return r.fail(e.value, f, "may hold a placeholder only as the exact value %s", WorkspaceToken)
		}
	}
	return nil
}

// checkArgTemplate refuses placeholders that could not be filled: an env
// reference to an undeclared variable, an input the runner does not declare,
// or any input reference when the input mode is none.
func checkArgTemplate(arg string, run *Runner) error {
	parts, err := ParseTemplate(arg)
	if err != nil {
		return err
	}
	for _, p := range parts {
		switch {
		case p.Env != "":
			if !run.Environment.Declares(p.Env) {
				return fmt.Errorf("placeholder {{env.%s}} names a variable the runner does not declare in environment", p.Env)
			}
		case p.Input != "":
			if run.InputMode == InputModeNone {
				return fmt.Errorf("placeholder {{%s}} names an input, but input_mode is none", p.Input)
			}
			if run.Inputs != nil && !declaresInput(run.Inputs, p.Input) {
				return fmt.Errorf("placeholder {{%s}} names an input the runner does not declare", p.Input)
			}
		}
	}
	return nil
}

func declaresInput(decls []InputDecl, name string) bool {
	for _, d := range decls {
		if d.Name == name {
			return true
		}
	}
	return false
}

// parseEnvironment reads environment.required and environment.optional of the
// runner called runner.
func (r nodeReader) parseEnvironment(n *yaml.Node, field, runner string) (Environment, error) {
	entries, err := r.mapping(n, field)
	if err != nil {
		return Environment{}, err
	}
	var env Environment
	seen := map[string]bool{}
	for _, e := range entries {
		f := join(field, e.key)
		var list []string
		switch e.key {
		case "required", "optional":
			if list, err = r.strList(e.value, f); err != nil {
				return Environment{}, err
			}
		default:
			return Environment{}, r.fail(e.keyAt, f, "is not a known field (allowed: required, optional)")
		}
		for i, name := range list {
			itemField := fmt.Sprintf("%s[%d]", f, i)
			switch {
			case !envNamePattern.MatchString(name):
				return Environment{}, r.fail(e.value.Content[i], itemField, "must be a variable name of letters, digits and '_' not starting with a digit, got %q", name)
			case strings.HasPrefix(name, "RUNX_"):
				return Environment{}, r.fail(e.value.Content[i], itemField, "must not use the RUNX_ prefix, which the runtime reserves, got %q", name)
			case seen[name]:
				return Environment{}, r.fail(e.value.Content[i], itemField, "declares %q more than once", name)
			}
			// The Host's own keys live in its environment; a declared name
			// would copy one into the process and into retained I/O.
			if pattern, ok := MatchCredentialName(name); ok {
				refusal := r.fail(e.value.Content[i], itemField, "runner %s must not declare %s: it matches %s; %s", runner, name, pattern, CredentialRule)
				refusal.credential = true
				return Environment{}, refusal
			}
			seen[name] = true
		}
		if e.key == "required" {
			env.Required = list
		} else {
			env.Optional = list
		}
	}
	return env, nil
}

func (r nodeReader) uniqueWords(n *yaml.Node, field string) ([]string, error) {
	list, err := r.words(n, field)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, s := range list {
		if seen[s] {
			return nil, r.fail(n, field, "lists %q more than once", s)
		}
		seen[s] = true
	}
	return list, nil
}

func (r nodeReader) valueType(n *yaml.Node, field string) (ValueType, error) {
	s, err := r.str(n, field)
	if err != nil {
		return "", err
	}
	if !validValueType(ValueType(s)) {
		return "", r.fail(n, field, "must be one of %s, got %q", valueTypeList(), s)
	}
	return ValueType(s), nil
}

func valueTypeList() string {
	names := make([]string, len(valueTypes))
	for i, t := range valueTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

func (r nodeReader) parseOutputs(n *yaml.Node, field string) (map[string]ValueType, error) {
	entries, err := r.mapping(n, field)
	if err != nil {
		return nil, err
	}
	out := make(map[string]ValueType, len(entries))
	for _, e := range entries {
		if strings.TrimSpace(e.key) == "" {
			return nil, r.fail(e.keyAt, field, "output names must not be empty")
		}
		if out[e.key], err = r.valueType(e.value, join(field, e.key)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseInputs reads name -> type (shorthand) or name -> {type, required,
// default, description}. An empty mapping declares no inputs (nil), so the
// runner accepts any JSON object.
func (r nodeReader) parseInputs(n *yaml.Node, field string) ([]InputDecl, error) {
	entries, err := r.mapping(n, field)
	if err != nil {
		return nil, err
	}
	decls := make([]InputDecl, 0, len(entries))
	for _, e := range entries {
		f := join(field, e.key)
		if strings.TrimSpace(e.key) == "" {
			return nil, r.fail(e.keyAt, field, "input names must not be empty")
		}
		d := InputDecl{Name: e.key}
		if e.value.Kind == yaml.ScalarNode && e.value.Anchor == "" {
			if d.Type, err = r.valueType(e.value, f); err != nil {
				return nil, err
			}
			decls = append(decls, d)
			continue
		}
		props, err := r.mapping(e.value, f)
		if err != nil {
			return nil, r.fail(e.value, f, "must be a type name or a mapping of type, required, default, description")
		}
		haveType := false
		var defaultNode *yaml.Node
		for _, p := range props {
			pf := join(f, p.key)
			switch p.key {
			case "type":
				d.Type, err = r.valueType(p.value, pf)
				haveType = true
			case "required":
				d.Required, err = r.boolean(p.value, pf)
			case "description":
				d.Description, err = r.str(p.value, pf)
			case "default":
				defaultNode = p.value
				d.Default, err = r.jsonValue(p.value, pf)
			default:
				err = r.fail(p.keyAt, pf, "is not a known field (allowed: type, required, default, description)")
			}
			if err != nil {
				return nil, err
			}
		}
		if !haveType {
			return nil, r.fail(e.value, join(f, "type"), "is required (one of %s)", valueTypeList())
		}
		if defaultNode != nil {
			if d.Required {
				return nil, r.fail(defaultNode, join(f, "default"), "must not be given for a required input")
			}
			if err := CheckType(d.Type, d.Default); err != nil {
				return nil, r.fail(defaultNode, join(f, "default"), "%v", err)
			}
		}
		decls = append(decls, d)
	}
	if len(decls) == 0 {
		return nil, nil
	}
	return decls, nil
}

func (r nodeReader) parsePages(n *yaml.Node, field string, inputs []InputDecl) (*Pages, error) {
	entries, err := r.mapping(n, field)
	if err != nil {
		return nil, err
	}
	p := &Pages{PageBytes: DefaultPageBytes}
	nodes := map[string]*yaml.Node{}
	for _, e := range entries {
		f := join(field, e.key)
		switch e.key {
		case "path_from":
			p.PathFrom, err = r.nonEmptyStr(e.value, f)
		case "path_scope_from":
			p.PathScopeFrom, err = r.nonEmptyStr(e.value, f)
		case "media_type":
			p.MediaType, err = r.nonEmptyStr(e.value, f)
			if err == nil && p.MediaType != "application/json" {
				err = r.fail(e.value, f, "must be application/json for json_array framing, got %q", p.MediaType)
			}
		case "framing":
			p.Framing, err = r.nonEmptyStr(e.value, f)
			if err == nil && p.Framing != "json_array" {
				err = r.fail(e.value, f, "must be json_array, got %q", p.Framing)
			}
		case "page_bytes":
			var size int64
			size, err = r.integer(e.value, f)
			if err == nil && (size < 1 || size > MaxPageBytes) {
				err = r.fail(e.value, f, "must be from 1 through %d, got %d", MaxPageBytes, size)
			}
			p.PageBytes = int(size)
		default:
			err = r.fail(e.keyAt, f, "is not a known field (allowed: path_from, path_scope_from, media_type, framing, page_bytes)")
		}
		if err != nil {
			return nil, err
		}
		nodes[e.key] = e.value
	}
	for _, required := range []string{"path_from", "media_type", "framing"} {
		if nodes[required] == nil {
			return nil, r.fail(n, join(field, required), "is required")
		}
	}
	if p.PathScopeFrom == p.PathFrom {
		return nil, r.fail(nodes["path_scope_from"], join(field, "path_scope_from"), "must name a different input than path_from")
	}
	if inputs != nil {
		for _, key := range []string{"path_from", "path_scope_from"} {
			name := p.PathFrom
			if key == "path_scope_from" {
				name = p.PathScopeFrom
			}
			if name == "" {
				continue
			}
			d, ok := findInput(inputs, name)
			if !ok {
				return nil, r.fail(nodes[key], join(field, key), "names input %q, which the runner does not declare", name)
			}
			if d.Type != TypeString && d.Type != TypeAny {
				return nil, r.fail(nodes[key], join(field, key), "names input %q of type %s; a path input must be a string", name, d.Type)
			}
		}
	}
	return p, nil
}

func findInput(decls []InputDecl, name string) (InputDecl, bool) {
	for _, d := range decls {
		if d.Name == name {
			return d, true
		}
	}
	return InputDecl{}, false
}

func containsType(types []RunnerType, t RunnerType) bool {
	for _, x := range types {
		if x == t {
			return true
		}
	}
	return false
}

func typeList(types []RunnerType) string {
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}
