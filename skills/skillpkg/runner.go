package skillpkg

import (
	"encoding/json"
	"fmt"
	"math"
	"mime"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// RunnerType selects how a runner executes.
type RunnerType string

// The runner types libos runs.
const (
	TypeJavaScript RunnerType = "javascript"
	TypeCLITool    RunnerType = "cli-tool"
	TypeAgentTask  RunnerType = "agent-task"
)

// UnsupportedRunnerTypes are runx's runner types that libos admits (so a
// runx package loads unchanged) but does not run: a call to such a runner
// fails with invalid_request naming the type.
var UnsupportedRunnerTypes = []RunnerType{"graph", "mcp", "a2a", "agent", "agent-step", "external-adapter", "thread-outbox-provider"}

// Supported reports whether libos runs runners of type t.
func (t RunnerType) Supported() bool {
	return t == TypeJavaScript || t == TypeCLITool || t == TypeAgentTask
}

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
	// MaxTimeout is the longest wall a runner is held to. runx bounds no
	// timeout but javascript's, so a longer declaration is admitted and cut
	// to this one: a century, which no run reaches, and far enough from the
	// largest time.Duration that adding it to a time or a second to it
	// cannot overflow.
	MaxTimeout = 100 * 365 * 24 * time.Hour
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
	Export string
	// ModuleAt and ExportAt locate the module and export fields as written
	// (ExportAt.Line is 0 when no export is declared), so that a check of
	// the module made after parsing names them.
	ModuleAt    Location
	ExportAt    Location
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
	// Agent and Task are runx's agent-task fields: the agent role and the
	// task, whose "### `task`" section of the manual the child is given.
	Agent string
	Task  string
	// Inputs is nil when the runner declares none, in which case any JSON
	// object is accepted as its inputs.
	Inputs []InputDecl
	// OutputDecls are the declared outputs with their schemas, in document
	// order; Outputs maps the same names to their types.
	OutputDecls []OutputDecl
	// Retry is the declared retry policy; nil means one attempt.
	Retry *Retry
	// Mutating is runx's mutating flag (mutating:, risk.mutating or
	// runx.mutating); nil when undeclared.
	Mutating *bool
	// IdempotencyKey is runx's idempotency key (idempotency: KEY or
	// {key: KEY}); "" when undeclared.
	IdempotencyKey string
	// Credential names a runx credential requirement; libos delivers no
	// credentials, so such a runner is refused when run.
	Credential string
	// Metadata holds the runner fields libos carries without interpreting
	// them (artifacts, examples, risk, execution, runx, and for a type libos
	// does not run, everything but type, default, inputs and scopes), as
	// compact JSON by field name.
	Metadata map[string]json.RawMessage
}

// OutputDecl declares one named output of a runner.
type OutputDecl struct {
	Name        string
	Type        ValueType
	Description string
	// Schema is nil when the output declares none.
	Schema *Schema
}

// Retry is runx's retry policy: at most MaxAttempts runs, BackoffMS apart.
type Retry struct {
	MaxAttempts int
	BackoffMS   int64
}

// Attempts returns how many runs a failure may take and, when the policy is
// cut to one, why: runx never retries a mutating runner unless it declares
// an idempotency key.
func (r *Runner) Attempts() (int, string) {
	if r.Retry == nil || r.Retry.MaxAttempts <= 1 {
		return 1, ""
	}
	if r.Mutating != nil && *r.Mutating && r.IdempotencyKey == "" {
		return 1, fmt.Sprintf("retry of %d attempts denied: the runner is mutating and declares no idempotency key", r.Retry.MaxAttempts)
	}
	return r.Retry.MaxAttempts, ""
}

// Compiled on first use: compiling at package init taxes every libos start.
var (
	runnerNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })
	envNamePattern    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
	// runx's rules for source.export (an ASCII JavaScript identifier) and
	// for the input names pages.path_from and path_scope_from give.
	exportPattern    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`) })
	pageInputPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_-]+$`) })
)

// nullableRunnerFields are the runner fields runx reads with its optional_*
// readers, which take an explicit null as absent (json_fields.rs). The
// others (type, module, command, environment, pages, inputs, examples,
// agent, task, act, ...) are required when present, and null is refused.
var nullableRunnerFields = []string{"default", "timeout_seconds", "scopes", "outputs", "retry", "idempotency",
	"mutating", "risk", "artifacts", "execution", "runx", "policy", "runtime", "auth", "context", "context_skills",
	"credential", "export", "cwd", "args", "input_mode", "inputMode", "allowed_tools"}

// runnerFields lists the runner fields (runx's set, plus libos's inputMode
// spelling) and the runner types that accept each; nil means every type.
// Fields libos does not interpret are carried as metadata.
var runnerFields = map[string][]RunnerType{
	"type":            nil,
	"default":         nil,
	"environment":     nil,
	"timeout_seconds": nil,
	"scopes":          nil,
	"inputs":          nil,
	"outputs":         nil,
	"retry":           nil,
	"risk":            nil,
	"mutating":        nil,
	"idempotency":     nil,
	"artifacts":       nil,
	"examples":        nil,
	"execution":       nil,
	"runx":            nil,
	"policy":          nil,
	"runtime":         nil,
	"auth":            nil,
	"credential":      nil,
	"context":         nil,
	"context_skills":  nil,
	"act":             nil,
	"source":          nil,
	"module":          {TypeJavaScript},
	"export":          {TypeJavaScript},
	"pages":           {TypeJavaScript},
	"command":         {TypeCLITool},
	"args":            {TypeCLITool},
	"cwd":             {TypeCLITool},
	"input_mode":      {TypeCLITool},
	"inputMode":       {TypeCLITool},
	"allowed_tools":   {TypeAgentTask},
	"agent":           {TypeAgentTask},
	"task":            {TypeAgentTask},
	// The fields of runner types libos does not run.
	"graph":                  {},
	"server":                 {},
	"tool":                   {},
	"arguments":              {},
	"agent_card_url":         {},
	"agent_identity":         {},
	"external_adapter":       {},
	"thread_outbox_provider": {},
	"headers":                {},
	"hook":                   {},
	"http":                   {},
	"method":                 {},
	"url":                    {},
	"allow_private_network":  {},
}

// metadataRunnerFields are carried into Runner.Metadata for every type.
var metadataRunnerFields = []string{"artifacts", "examples", "risk", "execution", "runx", "policy", "runtime", "auth", "context", "context_skills", "act", "idempotency", "retry"}

func knownRunnerFields() string {
	names := make([]string, 0, len(runnerFields))
	for k := range runnerFields {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// sourceFields may appear inside runx's nested source: block instead of on
// the runner itself.
var sourceFields = []string{"act", "agent", "agent_card_url", "agent_identity", "args", "arguments", "command", "cwd", "environment", "external_adapter", "export", "graph", "input_mode", "module", "outputs", "pages", "server", "task", "thread_outbox_provider", "timeout_seconds", "tool", "type"}

// parseRunner reads one runner mapping. base is the package-relative folder
// its relative paths resolve from; allowDefault permits the default: key;
// types lists the runner types accepted here.
func (r nodeReader) parseRunner(n *yaml.Node, field, name, base string, allowDefault bool, types []RunnerType, defs map[string]InputDecl) (*Runner, error) {
	entries, err := r.mapping(n, field)
	if err != nil {
		return nil, err
	}
	entries, fromSource, err := r.flattenSource(entries, field)
	if err != nil {
		return nil, err
	}
	// keyField names a field where the author wrote it: in runx's nested
	// source: block, or on the runner.
	keyField := func(key string) string {
		if fromSource[key] {
			return join(join(field, "source"), key)
		}
		return join(field, key)
	}
	byKey := make(map[string]keyValue, len(entries))
	run := &Runner{Name: name, Base: base}
	for _, e := range entries {
		if isNull(e.value) && slices.Contains(nullableRunnerFields, e.key) {
			// Absent for its value; still present (in entries) for the rule
			// of which runner types may declare it, as runx checks the key.
			continue
		}
		switch e.key {
		case "instructions":
			return nil, r.fail(e.keyAt, join(field, e.key), "is not supported; put agent operating instructions in the owning SKILL.md")
		case "default":
			if !allowDefault {
				return nil, r.fail(e.keyAt, join(field, e.key), "applies only to a runner under runners:")
			}
			if run.Default, err = r.boolean(e.value, join(field, e.key)); err != nil {
				return nil, err
			}
		}
		if _, ok := runnerFields[e.key]; !ok {
			return nil, r.fail(e.keyAt, join(field, e.key), "is not a known runner field (allowed: %s)", knownRunnerFields())
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
	switch {
	case t == "http":
		return nil, r.fail(typeEntry.value, join(field, "type"), "http was removed; compose http.read, http.query, or http.execute in a graph")
	case t == "catalog":
		return nil, r.fail(typeEntry.value, join(field, "type"), "catalog was removed; invoke catalog tools from a graph tool step")
	case slices.Contains(types, run.Type):
	case allowDefault || name == DefaultRunnerName && base == "":
		// A package runner may be of a type libos admits but does not run.
		if !slices.Contains(UnsupportedRunnerTypes, run.Type) {
			return nil, r.fail(typeEntry.value, join(field, "type"), "must be one of %s (or a runx type libos admits but does not run: %s), got %q", typeList(types), typeList(UnsupportedRunnerTypes), t)
		}
	default:
		return nil, r.fail(typeEntry.value, join(field, "type"), "must be one of %s, got %q", typeList(types), t)
	}
	if !run.Type.Supported() {
		return r.parseUnsupportedRunner(run, entries, byKey, field, defs)
	}
	for _, e := range entries {
		applies := runnerFields[e.key]
		if applies != nil && !containsType(applies, run.Type) {
			if len(applies) == 0 {
				return nil, r.fail(e.keyAt, join(field, e.key), "applies only to runner types libos does not run (%s), not %s", typeList(UnsupportedRunnerTypes), run.Type)
			}
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
		if run.Inputs, err = r.parseInputs(e.value, join(field, "inputs"), defs); err != nil {
			return nil, err
		}
	}
	if e, ok := byKey["outputs"]; ok {
		if run.OutputDecls, err = r.parseOutputs(e.value, join(field, "outputs")); err != nil {
			return nil, err
		}
		run.Outputs = make(map[string]ValueType, len(run.OutputDecls))
		for _, o := range run.OutputDecls {
			run.Outputs[o.Name] = o.Type
		}
	}
	if e, ok := byKey["scopes"]; ok {
		if run.Scopes, err = r.scopes(e.value, join(field, "scopes")); err != nil {
			return nil, err
		}
	}
	if e, ok := byKey["allowed_tools"]; ok {
		if run.AllowedTools, err = r.words(e.value, join(field, "allowed_tools")); err != nil {
			return nil, err
		}
	}
	if err := r.parseGovernance(run, byKey, field); err != nil {
		return nil, err
	}
	if err := r.parseTimeout(run, byKey, field); err != nil {
		return nil, err
	}

	switch run.Type {
	case TypeJavaScript:
		err = r.parseJavaScript(run, n, byKey, field, keyField)
	case TypeCLITool:
		err = r.parseCLITool(run, n, byKey, field)
	case TypeAgentTask:
		err = r.parseAgentTask(run, byKey, field)
	}
	if err != nil {
		return nil, err
	}
	if e, ok := byKey["examples"]; ok {
		if err := r.checkExamples(run, e.value, join(field, "examples")); err != nil {
			return nil, err
		}
	}
	return run, nil
}

// flattenSource merges runx's nested source: block into the runner's own
// fields, refusing a field given in both places and a key that is not a
// source field. fromSource marks the keys read from the block. A null
// source: is absent, as runx reads it.
func (r nodeReader) flattenSource(entries []keyValue, field string) (out []keyValue, fromSource map[string]bool, err error) {
	var src *keyValue
	for i := range entries {
		if entries[i].key == "source" {
			src = &entries[i]
		}
	}
	if src == nil {
		return entries, nil, nil
	}
	out = make([]keyValue, 0, len(entries))
	for _, e := range entries {
		if e.key != "source" {
			out = append(out, e)
		}
	}
	if isNull(src.value) {
		return out, nil, nil
	}
	f := join(field, "source")
	inner, err := r.mapping(src.value, f)
	if err != nil {
		return nil, nil, err
	}
	fromSource = make(map[string]bool, len(inner))
	for _, e := range inner {
		if !slices.Contains(sourceFields, e.key) {
			return nil, nil, r.fail(e.keyAt, join(f, e.key), "is not a known source field (allowed: %s)", strings.Join(sourceFields, ", "))
		}
		for _, o := range out {
			if o.key == e.key {
				return nil, nil, r.fail(e.keyAt, join(f, e.key), "is also given on the runner at line %d; give it once", o.keyAt.Line)
			}
		}
		out = append(out, e)
		fromSource[e.key] = true
	}
	return out, fromSource, nil
}

// parseUnsupportedRunner admits a runner of a type libos does not run: its
// inputs, scopes and governance are checked as for any runner, the rest is
// kept as metadata so that skill check can show it.
func (r nodeReader) parseUnsupportedRunner(run *Runner, entries []keyValue, byKey map[string]keyValue, field string, defs map[string]InputDecl) (*Runner, error) {
	var err error
	if e, ok := byKey["inputs"]; ok {
		if run.Inputs, err = r.parseInputs(e.value, join(field, "inputs"), defs); err != nil {
			return nil, err
		}
	}
	if e, ok := byKey["scopes"]; ok {
		if run.Scopes, err = r.scopes(e.value, join(field, "scopes")); err != nil {
			return nil, err
		}
	}
	if err := r.parseGovernance(run, byKey, field); err != nil {
		return nil, err
	}
	for _, e := range entries {
		switch e.key {
		case "type", "default", "inputs", "scopes":
			continue
		}
		if _, done := run.Metadata[e.key]; done {
			continue
		}
		raw, err := r.jsonValue(e.value, join(field, e.key))
		if err != nil {
			return nil, err
		}
		if run.Metadata == nil {
			run.Metadata = map[string]json.RawMessage{}
		}
		run.Metadata[e.key] = raw
	}
	return run, nil
}

// parseGovernance reads runx's retry, mutating/risk, idempotency, credential
// and artifacts rules, and keeps the metadata fields as JSON.
func (r nodeReader) parseGovernance(run *Runner, byKey map[string]keyValue, field string) error {
	var err error
	for _, key := range metadataRunnerFields {
		e, ok := byKey[key]
		if !ok {
			continue
		}
		raw, err := r.jsonValue(e.value, join(field, key))
		if err != nil {
			return err
		}
		if run.Metadata == nil {
			run.Metadata = map[string]json.RawMessage{}
		}
		run.Metadata[key] = raw
	}
	if e, ok := byKey["retry"]; ok {
		rt, err := r.parseRetry(e.value, join(field, "retry"))
		if err != nil {
			return err
		}
		run.Retry = rt
	}
	if e, ok := byKey["risk"]; ok {
		entries, err := r.mapping(e.value, join(field, "risk"))
		if err != nil {
			return err
		}
		for _, re := range entries {
			// runx reads risk.mutating null as absent (first_value).
			if re.key == "mutating" && !isNull(re.value) {
				b, err := r.boolean(re.value, join(join(field, "risk"), "mutating"))
				if err != nil {
					return err
				}
				run.Mutating = &b
			}
		}
	}
	if e, ok := byKey["mutating"]; ok {
		// runx reads mutating: before risk.mutating.
		b, err := r.boolean(e.value, join(field, "mutating"))
		if err != nil {
			return err
		}
		run.Mutating = &b
	}
	if e, ok := byKey["idempotency"]; ok {
		f := join(field, "idempotency")
		switch {
		case e.value.Kind == yaml.ScalarNode && e.value.ShortTag() == "!!null":
		case e.value.Kind == yaml.ScalarNode:
			if run.IdempotencyKey, err = r.nonEmptyStr(e.value, f); err != nil {
				return err
			}
		default:
			entries, err := r.mapping(e.value, f)
			if err != nil {
				return err
			}
			for _, ie := range entries {
				if ie.key != "key" {
					return r.fail(ie.keyAt, join(f, ie.key), "is not a known field (allowed: key)")
				}
				if run.IdempotencyKey, err = r.nonEmptyStr(ie.value, join(f, "key")); err != nil {
					return err
				}
			}
		}
	}
	if e, ok := byKey["credential"]; ok {
		if run.Credential, err = r.nonEmptyStr(e.value, join(field, "credential")); err != nil {
			return err
		}
		if run.Type == TypeJavaScript {
			return r.fail(e.keyAt, join(field, "credential"), "is not valid for a pure javascript source; route credentials through a native provider tool")
		}
	}
	if e, ok := byKey["artifacts"]; ok {
		if err := r.checkArtifacts(e.value, join(field, "artifacts"), run.Type); err != nil {
			return err
		}
	}
	return nil
}

func (r nodeReader) parseRetry(n *yaml.Node, field string) (*Retry, error) {
	entries, err := r.mapping(n, field)
	if err != nil {
		return nil, err
	}
	rt := &Retry{MaxAttempts: 1}
	for _, e := range withoutNulls(entries, "max_attempts", "backoff_ms") {
		f := join(field, e.key)
		switch e.key {
		case "max_attempts":
			v, err := r.wholeNumber(e.value, f)
			if err != nil {
				return nil, err
			}
			if v < 1 || v > 100 {
				return nil, r.fail(e.value, f, "must be a positive integer of at most 100, got %g", v)
			}
			rt.MaxAttempts = int(v)
		case "backoff_ms":
			v, err := r.wholeNumber(e.value, f)
			if err != nil {
				return nil, err
			}
			if v > 3_600_000 {
				return nil, r.fail(e.value, f, "must be a non-negative integer of at most 3600000, got %g", v)
			}
			rt.BackoffMS = int64(v)
		default:
			return nil, r.fail(e.keyAt, f, "is not a known field (allowed: max_attempts, backoff_ms)")
		}
	}
	return rt, nil
}

// checkArtifacts applies runx's artifact contract rules: emits (a string or
// a list), named_emits and packets (name -> non-empty string, packets only
// for named outputs), wrap_as, and packet (only with wrap_as). A graph
// runner declares none.
func (r nodeReader) checkArtifacts(n *yaml.Node, field string, t RunnerType) error {
	if t == "graph" {
		return r.fail(n, field, "is ambiguous for a graph source; declare the packet on the graph's terminal output-producing step")
	}
	entries, err := r.mapping(n, field)
	if err != nil {
		return err
	}
	named := map[string]bool{}
	var packets *keyValue
	var packet *keyValue
	haveWrap := false
	// Every field of the contract is optional to runx, so null is absent.
	entries = withoutNulls(entries, "emits", "named_emits", "namedEmits", "packets", "wrap_as", "wrapAs", "packet")
	for i, e := range entries {
		f := join(field, e.key)
		switch e.key {
		case "emits":
			if e.value.Kind == yaml.ScalarNode {
				_, err = r.nonEmptyStr(e.value, f)
			} else {
				_, err = r.strList(e.value, f)
			}
		case "named_emits", "namedEmits", "packets":
			var m []keyValue
			if m, err = r.mapping(e.value, f); err == nil {
				for _, x := range m {
					if _, err = r.nonEmptyStr(x.value, join(f, x.key)); err != nil {
						break
					}
					if e.key != "packets" {
						named[x.key] = true
					}
				}
			}
			if e.key == "packets" {
				packets = &entries[i]
			}
		case "wrap_as", "wrapAs":
			_, err = r.nonEmptyStr(e.value, f)
			haveWrap = true
		case "packet":
			_, err = r.nonEmptyStr(e.value, f)
			packet = &entries[i]
		default:
			err = r.fail(e.keyAt, f, "is not a known field (allowed: emits, named_emits, packets, wrap_as, packet)")
		}
		if err != nil {
			return err
		}
	}
	if packets != nil {
		if len(named) == 0 {
			return r.fail(packets.keyAt, join(field, "packets"), "requires %s", join(field, "named_emits"))
		}
		m, _ := r.mapping(packets.value, "")
		for _, x := range m {
			if !named[x.key] {
				return r.fail(x.keyAt, join(join(field, "packets"), x.key), "must name an output declared by %s", join(field, "named_emits"))
			}
		}
	}
	if packet != nil && !haveWrap {
		return r.fail(packet.keyAt, join(field, "packet"), "requires %s; use named_emits for named packet outputs", join(field, "wrap_as"))
	}
	return nil
}

// checkExamples checks runx's examples: a list of complete calls, each of
// which must satisfy the runner's input contract.
func (r nodeReader) checkExamples(run *Runner, n *yaml.Node, field string) error {
	if err := r.plain(n, field); err != nil {
		return err
	}
	if n.Kind != yaml.SequenceNode {
		return r.fail(n, field, "must be a list of input objects, got %s", kindName(n))
	}
	for i, item := range n.Content {
		f := fmt.Sprintf("%s[%d]", field, i)
		if _, err := r.mapping(item, f); err != nil {
			return err
		}
		raw, err := r.jsonValue(item, f)
		if err != nil {
			return err
		}
		if _, err := ResolveInputs(run.Inputs, raw); err != nil {
			return r.fail(item, f, "does not match the runner's input contract: %v", err)
		}
	}
	return nil
}

func (r nodeReader) parseAgentTask(run *Runner, byKey map[string]keyValue, field string) error {
	var err error
	if e, ok := byKey["agent"]; ok {
		if run.Agent, err = r.nonEmptyStr(e.value, join(field, "agent")); err != nil {
			return err
		}
	}
	if e, ok := byKey["task"]; ok {
		if run.Task, err = r.nonEmptyStr(e.value, join(field, "task")); err != nil {
			return err
		}
	}
	return nil
}

// scopes reads runx's opaque scope strings: a list whose items are kept
// exactly as written (spaces, punctuation and repeats included), each of
// them not blank. As in runx, a single string is refused rather than split:
// splitting would change a scope that holds a space; null declares none.
func (r nodeReader) scopes(n *yaml.Node, field string) ([]string, error) {
	if err := r.plain(n, field); err != nil {
		return nil, err
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil, nil
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
		return nil, r.fail(n, field, "must be a list of strings, got a string: scopes are opaque exact strings, so one string is not split into several; write [%q] for one scope", n.Value)
	}
	return r.strList(n, field)
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
		// runx reads timeout_seconds as an unsigned integer and holds a
		// javascript wall to 1..30 (source.rs, validate_source_timeout).
		if secs != math.Trunc(secs) || secs < MinJavaScriptTimeout.Seconds() || secs > MaxJavaScriptTimeout.Seconds() {
			return r.fail(e.value, f, "must be a whole number of seconds from %g through %g for a javascript runner, got %g",
				MinJavaScriptTimeout.Seconds(), MaxJavaScriptTimeout.Seconds(), secs)
		}
		run.Timeout = time.Duration(secs) * time.Second
		return nil
	}
	switch {
	case secs < 0:
		return r.fail(e.value, f, "must be 0 or more seconds, got %g", secs)
	case secs == 0:
		// runx admits 0 (its parser reads an unsigned integer and checks
		// only javascript's range) and runs the call with the default wall.
		if run.Type == TypeCLITool {
			run.Timeout = DefaultCLIToolTimeout
		}
		return nil
	case secs >= MaxTimeout.Seconds():
		// runx bounds no other wall; converting a larger one would overflow.
		run.Timeout = MaxTimeout
		return nil
	}
	// A fraction of a second is libos's: its tests stop runs sooner.
	run.Timeout = time.Duration(secs * float64(time.Second))
	if run.Timeout <= 0 {
		return r.fail(e.value, f, "must be at least one nanosecond, got %g", secs)
	}
	return nil
}

func (r nodeReader) parseJavaScript(run *Runner, n *yaml.Node, byKey map[string]keyValue, field string, keyField func(string) string) error {
	e, ok := byKey["module"]
	if !ok {
		return r.fail(n, join(field, "module"), "is required for a javascript runner")
	}
	mf := keyField("module")
	mod, err := r.nonEmptyStr(e.value, mf)
	if err != nil {
		err.(*AdmissionError).module = true
		return err
	}
	if why := unportableModulePath(mod); why != "" {
		// runx's rule (source.rs, validate_javascript_module).
		return r.moduleFail(e.value, mf, "must be a portable relative .mjs or .js path without '.', '..', empty or backslash segments; %q %s", mod, why)
	}
	if run.Module, err = r.containedPath(e.value, mf, run.Base, mod); err != nil {
		err.(*AdmissionError).module = true
		return err
	}
	run.ModuleAt = Location{File: r.file, Line: e.value.Line, Field: mf}
	run.ExportAt = Location{File: r.file, Field: keyField("export")}
	if _, declared := byKey["export"]; !declared && strings.HasSuffix(mf, "source.module") {
		// Not written anywhere yet: name it where the module is, in source.
		run.ExportAt.Field = strings.TrimSuffix(mf, "module") + "export"
	}
	if e, ok := byKey["export"]; ok {
		if run.Export, err = r.nonEmptyStr(e.value, run.ExportAt.Field); err != nil {
			return err
		}
		if !exportPattern().MatchString(run.Export) {
			// runx's rule (source.rs, validate_javascript_export); the
			// worker looks the name up among the module's exports.
			return r.fail(e.value, run.ExportAt.Field, "must be a JavaScript identifier (ASCII letters, digits, '_' and '$', not starting with a digit), got %q", run.Export)
		}
		run.ExportAt.Line = e.value.Line
	}
	if e, ok := byKey["pages"]; ok {
		if run.Pages, err = r.parsePages(e.value, keyField("pages"), run.Inputs); err != nil {
			return err
		}
	}
	return nil
}

// unportableModulePath applies runx's rule for a javascript module path:
// slash-separated segments, none of them empty, "." or "..", no backslash,
// not absolute, naming a .mjs or .js file. It says what breaks the rule, or
// returns "". A path that reaches its file only once cleaned is refused,
// not cleaned, as runx refuses it.
func unportableModulePath(mod string) string {
	switch {
	case strings.HasPrefix(mod, "/"):
		return "is absolute"
	case strings.Contains(mod, `\`):
		return "holds a backslash"
	}
	for _, seg := range strings.Split(mod, "/") {
		switch seg {
		case "":
			return "has an empty segment"
		case ".", "..":
			return fmt.Sprintf("has a %q segment", seg)
		}
	}
	if !strings.HasSuffix(mod, ".mjs") && !strings.HasSuffix(mod, ".js") {
		return "does not name a .mjs or .js file"
	}
	return ""
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
	return r.checkInputVariables(run.Inputs, join(field, "inputs"))
}

// checkInputVariables applies the runtime contract's rule for a cli-tool's
// inputs at admission: each input travels as RUNX_INPUT_<NAME> and
// RUNX_INPUT_<NAME>_PATH (NormalizeInputName) in a file input_<NAME>, so a
// name that normalises to nothing, to a file name too long, or to a variable
// of another input ("a.b" and "a_b"; "s" and "s.path") would fail every
// call before it starts.
func (r nodeReader) checkInputVariables(decls []InputDecl, field string) error {
	const rule = "a cli-tool gets each input as RUNX_INPUT_<NAME> and RUNX_INPUT_<NAME>_PATH, <NAME> being the name with each run of characters other than ASCII letters and digits made one '_', trimmed and uppercased"
	owner := make(map[string]InputDecl, 2*len(decls))
	for _, d := range decls {
		fail := func(format string, args ...any) error {
			return &AdmissionError{File: r.file, Line: d.line, Field: join(field, d.Name), Rule: fmt.Sprintf(format, args...) + "; " + rule}
		}
		norm := NormalizeInputName(d.Name)
		if norm == "" {
			return fail("has no ASCII letter or digit, so it names no variable")
		}
		if len(norm) > MaxInputVariableName {
			return fail("normalises to a <NAME> of %d bytes, more than the %d that its file input_<NAME> may take", len(norm), MaxInputVariableName)
		}
		for _, v := range []string{InputVariablePrefix + norm, InputVariablePrefix + norm + "_PATH"} {
			if other, taken := owner[v]; taken {
				return fail("maps to %s, as input %q (line %d) does; rename one of them", v, other.Name, other.line)
			}
			owner[v] = d
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
			// A placeholder naming no declared input is admitted: runx
			// renders an unmatched placeholder as its literal text.
		}
	}
	return nil
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
	// required: null and optional: null are absent, as in runx.
	for _, e := range withoutNulls(entries, "required", "optional") {
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
			case !envNamePattern().MatchString(name):
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

// parseOutputs reads name -> type (shorthand) or name -> {type, schema,
// description, packet}, in document order.
func (r nodeReader) parseOutputs(n *yaml.Node, field string) ([]OutputDecl, error) {
	entries, err := r.mapping(n, field)
	if err != nil {
		return nil, err
	}
	out := make([]OutputDecl, 0, len(entries))
	for _, e := range entries {
		f := join(field, e.key)
		if strings.TrimSpace(e.key) == "" {
			return nil, r.fail(e.keyAt, field, "output names must not be empty")
		}
		d := OutputDecl{Name: e.key}
		if e.value.Kind == yaml.ScalarNode && e.value.Anchor == "" {
			if d.Type, err = r.valueType(e.value, f); err != nil {
				return nil, err
			}
			out = append(out, d)
			continue
		}
		props, err := r.mapping(e.value, f)
		if err != nil {
			return nil, r.fail(e.value, f, "must be a type name or a mapping of type, schema, description, packet")
		}
		d.Type = TypeJSON
		var schemaNode *yaml.Node
		for _, p := range props {
			pf := join(f, p.key)
			switch p.key {
			case "type":
				d.Type, err = r.valueType(p.value, pf)
			case "description":
				d.Description, err = r.str(p.value, pf)
			case "packet":
				_, err = r.nonEmptyStr(p.value, pf)
			case "schema":
				schemaNode = p.value
				_, err = r.mapping(p.value, pf)
			default:
				err = r.fail(p.keyAt, pf, "is not a known field (allowed: type, schema, description, packet)")
			}
			if err != nil {
				return nil, err
			}
		}
		if schemaNode != nil {
			if d.Schema, err = r.compileDeclSchema(schemaNode, join(f, "schema"), d.Type, "", nil, false); err != nil {
				return nil, err
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// parseInputs reads runx's input declarations: name -> {type, required,
// default, description, schema, packet, artifact} (type defaults to string,
// as in runx), name -> {definition: NAME} for a shared declaration of
// input_definitions, or libos's shorthand name -> type. An empty mapping
// declares no inputs (nil), so the runner accepts any JSON object.
func (r nodeReader) parseInputs(n *yaml.Node, field string, defs map[string]InputDecl) ([]InputDecl, error) {
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
		d := InputDecl{Name: e.key, Type: TypeString, line: e.keyAt.Line}
		if e.value.Kind == yaml.ScalarNode && e.value.Anchor == "" {
			if d.Type, err = r.inputType(e.value, f); err != nil {
				return nil, err
			}
			decls = append(decls, d)
			continue
		}
		props, err := r.mapping(e.value, f)
		if err != nil {
			return nil, r.fail(e.value, f, "must be a type name or a mapping of type, required, default, description, schema")
		}
		if len(props) == 1 && props[0].key == "definition" && defs != nil {
			ref, err := r.nonEmptyStr(props[0].value, join(f, "definition"))
			if err != nil {
				return nil, err
			}
			def, ok := defs[ref]
			if !ok {
				return nil, r.fail(props[0].value, join(f, "definition"), "references unknown input_definitions.%s", ref)
			}
			def.Name, def.line = e.key, e.keyAt.Line
			decls = append(decls, def)
			continue
		}
		var defaultNode, schemaNode, packetNode *yaml.Node
		for _, p := range props {
			pf := join(f, p.key)
			if p.key != "default" && isNull(p.value) {
				// runx reads every other field with an optional_* reader,
				// which takes null as absent; a null default is a default
				// of null.
				if p.key == "definition" {
					return nil, r.fail(p.keyAt, pf, "is not supported together with other fields; a {definition: NAME} reference takes the shared declaration exactly")
				}
				if !slices.Contains(inputDeclFields, p.key) {
					return nil, r.fail(p.keyAt, pf, "is not a known field (allowed: %s)", strings.Join(inputDeclFields, ", "))
				}
				continue
			}
			switch p.key {
			case "type":
				d.Type, err = r.inputType(p.value, pf)
			case "required":
				d.Required, err = r.boolean(p.value, pf)
			case "description":
				d.Description, err = r.str(p.value, pf)
			case "default":
				defaultNode = p.value
				d.Default, err = r.jsonValue(p.value, pf)
			case "artifact":
				d.Artifact, err = r.boolean(p.value, pf)
			case "packet":
				packetNode = p.value
				d.Packet, err = r.nonEmptyStr(p.value, pf)
			case "schema":
				schemaNode = p.value
				_, err = r.mapping(p.value, pf)
			case "definition":
				err = r.fail(p.keyAt, pf, "is not supported together with other fields; a {definition: NAME} reference takes the shared declaration exactly")
			default:
				err = r.fail(p.keyAt, pf, "is not a known field (allowed: %s)", strings.Join(inputDeclFields, ", "))
			}
			if err != nil {
				return nil, err
			}
		}
		switch {
		case packetNode != nil && d.Type != TypeJSON:
			return nil, r.fail(packetNode, join(f, "packet"), "requires %s to be json", join(f, "type"))
		case packetNode != nil && schemaNode != nil:
			return nil, r.fail(schemaNode, join(f, "schema"), "and %s are mutually exclusive; the packet catalog owns the schema", join(f, "packet"))
		case packetNode != nil && defaultNode != nil:
			return nil, r.fail(defaultNode, join(f, "default"), "cannot be given for a packet input")
		}
		if schemaNode != nil {
			if d.Schema, err = r.compileDeclSchema(schemaNode, join(f, "schema"), d.Type, d.Description, d.Default, true); err != nil {
				return nil, err
			}
			if defaultNode != nil {
				if err := d.Schema.Validate(d.Default); err != nil {
					return nil, r.fail(defaultNode, join(f, "default"), "must match the declared input schema: %v", err)
				}
			}
		} else if defaultNode != nil {
			if err := CheckType(d.Type, d.Default); err != nil {
				return nil, r.fail(defaultNode, join(f, "default"), "must match declared type %s: %v", d.Type, err)
			}
		}
		decls = append(decls, d)
	}
	if len(decls) == 0 {
		return nil, nil
	}
	return decls, nil
}

// inputDeclFields are the fields of an input declaration.
var inputDeclFields = []string{"type", "required", "default", "description", "schema", "packet", "artifact"}

// inputTypes are runx's input types (governance.rs, validate_inputs); json
// takes any JSON value. libos's "any" remains an output type only.
var inputTypes = []ValueType{TypeArray, TypeBoolean, TypeInteger, TypeJSON, TypeNumber, TypeObject, TypeString}

func (r nodeReader) inputType(n *yaml.Node, field string) (ValueType, error) {
	s, err := r.str(n, field)
	if err != nil {
		return "", err
	}
	if !slices.Contains(inputTypes, ValueType(s)) {
		names := make([]string, len(inputTypes))
		for i, t := range inputTypes {
			names[i] = string(t)
		}
		hint := ""
		if ValueType(s) == TypeAny {
			hint = " (json takes any JSON value)"
		}
		return "", r.fail(n, field, "must be one of %s%s, got %q", strings.Join(names, ", "), hint, s)
	}
	return ValueType(s), nil
}

// compileDeclSchema builds a declaration's effective JSON Schema (the
// author's schema plus the declared type, description and default, which
// the schema must not repeat) and compiles it once. For inputs it also
// applies runx's rule that an object schema states its shape, and checks
// schema.examples.
func (r nodeReader) compileDeclSchema(n *yaml.Node, field string, t ValueType, description string, def json.RawMessage, input bool) (*Schema, error) {
	entries, err := r.mapping(n, field)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		switch e.key {
		case "type", "description", "default":
			// runx refuses an input schema that restates its declaration.
			if input {
				parent := strings.TrimSuffix(field, ".schema")
				return nil, r.fail(e.keyAt, join(field, e.key), "duplicates %s", join(parent, e.key))
			}
		case "examples":
			if e.value.Kind != yaml.SequenceNode {
				return nil, r.fail(e.value, join(field, e.key), "must be an array")
			}
		}
	}
	raw, err := r.jsonValue(n, field)
	if err != nil {
		return nil, err
	}
	doc, err := decodeNumbers(raw)
	if err != nil {
		return nil, r.fail(n, field, "is not JSON: %v", err)
	}
	obj := doc.(map[string]any)
	if _, has := obj["type"]; !has {
		if jt := jsonSchemaType(t); jt != "" {
			obj["type"] = jt
		}
	}
	if description != "" {
		obj["description"] = description
	}
	if def != nil {
		dv, err := decodeNumbers(def)
		if err != nil {
			return nil, r.fail(n, field, "default is not JSON: %v", err)
		}
		obj["default"] = dv
	}
	if input {
		if at, ok := implicitObject(obj, field); !ok {
			return nil, r.fail(n, at, "declares an object without a shape; define its properties or set additionalProperties explicitly for an intentional open object")
		}
	}
	sch, err := CompileSchema(obj)
	if err != nil {
		return nil, r.fail(n, field, "is invalid JSON Schema: %v", err)
	}
	if ex, ok := obj["examples"].([]any); ok {
		for i, v := range ex {
			if err := sch.ValidateDecoded(v); err != nil {
				return nil, r.fail(n, fmt.Sprintf("%s.examples[%d]", field, i), "must match the declared schema: %v", err)
			}
		}
	}
	return sch, nil
}

// jsonSchemaType maps a declared type onto JSON Schema's type keyword; json
// and any constrain nothing.
func jsonSchemaType(t ValueType) string {
	switch t {
	case TypeJSON, TypeAny, "":
		return ""
	}
	return string(t)
}

// implicitObject walks a schema as runx does and reports the first
// subschema that declares type object without stating any shape keyword.
func implicitObject(s any, field string) (string, bool) {
	obj, ok := s.(map[string]any)
	if !ok {
		return "", true
	}
	declares := false
	switch t := obj["type"].(type) {
	case string:
		declares = t == "object"
	case []any:
		declares = slices.Contains(t, any("object"))
	}
	if declares {
		explicit := false
		for _, k := range []string{"$ref", "additionalProperties", "allOf", "anyOf", "const", "enum", "if", "maxProperties", "minProperties", "not", "oneOf", "patternProperties", "properties", "propertyNames", "unevaluatedProperties"} {
			if _, ok := obj[k]; ok {
				explicit = true
				break
			}
		}
		if !explicit {
			return field, false
		}
	}
	for _, k := range []string{"additionalProperties", "contains", "else", "if", "items", "not", "propertyNames", "then", "unevaluatedProperties"} {
		if at, ok := implicitObject(obj[k], field+"."+k); !ok {
			return at, false
		}
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf", "prefixItems"} {
		if list, ok := obj[k].([]any); ok {
			for i, c := range list {
				if at, ok := implicitObject(c, fmt.Sprintf("%s.%s[%d]", field, k, i)); !ok {
					return at, false
				}
			}
		}
	}
	for _, k := range []string{"$defs", "definitions", "dependentSchemas", "patternProperties", "properties"} {
		if m, ok := obj[k].(map[string]any); ok {
			names := make([]string, 0, len(m))
			for name := range m {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				if at, ok := implicitObject(m[name], join(field+"."+k, name)); !ok {
					return at, false
				}
			}
		}
	}
	return "", true
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
		if isNull(e.value) && (e.key == "path_scope_from" || e.key == "page_bytes") {
			continue // optional to runx, so null is absent
		}
		switch e.key {
		case "path_from":
			p.PathFrom, err = r.pageInput(e.value, f)
		case "path_scope_from":
			p.PathScopeFrom, err = r.pageInput(e.value, f)
		case "media_type":
			p.MediaType, err = r.nonEmptyStr(e.value, f)
			if err == nil {
				// runx keeps the media type as declared (an archive's .js
				// file is framed like a .json one); it must be well-formed.
				if _, _, perr := mime.ParseMediaType(p.MediaType); perr != nil {
					err = r.fail(e.value, f, "must be a media type such as application/json, got %q: %v", p.MediaType, perr)
				}
			}
		case "framing":
			p.Framing, err = r.nonEmptyStr(e.value, f)
			if err == nil && p.Framing != "json_array" {
				err = r.fail(e.value, f, "must be json_array, got %q", p.Framing)
			}
		case "page_bytes":
			var size float64
			size, err = r.wholeNumber(e.value, f)
			if err == nil && (size < 1 || size > MaxPageBytes) {
				err = r.fail(e.value, f, "must be from 1 through %d, got %g", MaxPageBytes, size)
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
			if d.Type != TypeString && d.Type != TypeAny && d.Type != TypeJSON {
				return nil, r.fail(nodes[key], join(field, key), "names input %q of type %s; a path input must be a string", name, d.Type)
			}
		}
	}
	return p, nil
}

// pageInput reads pages.path_from or path_scope_from by runx's rule
// (source.rs, validate_page_input_name and validate_artifact_pages): the
// name of an input in letters, digits, '_' and '-', and not runx_page,
// the field the runtime adds to every paged call.
func (r nodeReader) pageInput(n *yaml.Node, field string) (string, error) {
	name, err := r.nonEmptyStr(n, field)
	if err != nil {
		return "", err
	}
	switch {
	case !pageInputPattern().MatchString(name):
		return "", r.fail(n, field, "must name one declared input using letters, digits, '_' or '-', got %q", name)
	case name == "runx_page":
		return "", r.fail(n, field, "must not name runx_page, the field the runtime reserves for the page it passes to each call")
	}
	return name, nil
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
