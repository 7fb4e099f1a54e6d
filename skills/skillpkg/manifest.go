package skillpkg

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// RunnerFile is libos's name for a package's runner manifest.
const RunnerFile = "skill.yaml"

// XManifestFile is runx's name for a package's runner manifest. A package
// holds at most one of XManifestFile and RunnerFile.
const XManifestFile = "X.yaml"

// DefaultRunnerName names the single runner of a run: block.
const DefaultRunnerName = "default"

// ToolManifestFile is the file name of a bundled tool manifest, found at
// tools/<namespace>/<tool>/manifest.json.
const ToolManifestFile = "manifest.json"

var packageRunnerTypes = []RunnerType{TypeJavaScript, TypeCLITool, TypeAgentTask}

// manifestFields are the top-level keys of a runner manifest: runx's set
// (skill, version, runx, policy, emits, catalog, credentials,
// input_definitions, runners, harness) plus libos's run: shorthand.
var manifestFields = []string{"skill", "version", "runx", "policy", "emits", "catalog", "credentials", "input_definitions", "runners", "harness", "run"}

// nullableManifestFields are the top-level fields runx reads with its
// optional_* readers (runner.rs, validate_runner_manifest), which take an
// explicit null as absent.
var nullableManifestFields = []string{"skill", "version", "runx", "catalog", "input_definitions", "harness"}

// Manifest is an admitted runner manifest (X.yaml or skill.yaml).
type Manifest struct {
	// File is the manifest's file name (XManifestFile or RunnerFile).
	File string
	// Skill and Version are runx's optional skill identity fields.
	Skill   string
	Version string
	// Catalog is the catalog: block as compact JSON, nil when absent.
	Catalog json.RawMessage
	// Metadata holds the other top-level blocks libos carries without
	// interpreting them (runx, policy, emits, credentials), as compact JSON.
	Metadata map[string]json.RawMessage
	// InputDefinitions are the shared input declarations runners refer to
	// with {definition: NAME}.
	InputDefinitions []InputDecl
	// Harness holds the package's test cases; nil when absent.
	Harness *Harness
	// Runners are in document order.
	Runners []*Runner
	// skillLine is the line of skill:, for Load's check that it matches
	// the SKILL.md name.
	skillLine int
}

// ParseRunnerManifest parses a skill.yaml and returns its runners (see
// ParseManifest).
func ParseRunnerManifest(data []byte) ([]*Runner, error) {
	m, err := ParseManifest(RunnerFile, data)
	if err != nil {
		return nil, err
	}
	return m.Runners, nil
}

// ParseManifest parses a runner manifest named file (X.yaml or skill.yaml)
// with runx's schema: skill, version, catalog, harness, input_definitions,
// runners (exactly one marked default: true when there are several) and the
// metadata blocks runx, policy, emits and credentials; or libos's run: (one
// runner, named DefaultRunnerName). Unknown keys are refused with the file,
// line and key. It does no I/O: module paths are checked to stay inside the
// package lexically here and on disk by Load.
func ParseManifest(file string, data []byte) (*Manifest, error) {
	r := nodeReader{file: file}
	if len(data) > MaxManifestBytes {
		return nil, r.fail(nil, "", "must be at most %d bytes", MaxManifestBytes)
	}
	if !utf8.Valid(data) {
		return nil, r.fail(nil, "", "must be UTF-8 text")
	}
	root, err := r.parseDocument(data)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return nil, r.fail(nil, "", "must hold run: or runners:")
	}
	entries, err := r.mapping(root, "")
	if err != nil {
		return nil, err
	}
	m := &Manifest{File: file}
	byKey := map[string]keyValue{}
	for _, e := range entries {
		if !slices.Contains(manifestFields, e.key) {
			return nil, r.fail(e.keyAt, join("", e.key), "is not a known field (allowed: %s)", strings.Join(manifestFields, ", "))
		}
		if isNull(e.value) && slices.Contains(nullableManifestFields, e.key) {
			continue
		}
		byKey[e.key] = e
	}
	if e, ok := byKey["skill"]; ok {
		if m.Skill, err = r.nonEmptyStr(e.value, "skill"); err != nil {
			return nil, err
		}
		m.skillLine = e.value.Line
	}
	if e, ok := byKey["version"]; ok {
		if m.Version, err = r.nonEmptyStr(e.value, "version"); err != nil {
			return nil, err
		}
	}
	if e, ok := byKey["catalog"]; ok {
		if _, err := r.mapping(e.value, "catalog"); err != nil {
			return nil, err
		}
		if m.Catalog, err = r.jsonValue(e.value, "catalog"); err != nil {
			return nil, err
		}
	}
	for _, key := range []string{"runx", "policy", "emits", "credentials"} {
		e, ok := byKey[key]
		if !ok {
			continue
		}
		if key == "runx" || key == "credentials" {
			if _, err := r.mapping(e.value, key); err != nil {
				return nil, err
			}
		}
		raw, err := r.jsonValue(e.value, key)
		if err != nil {
			return nil, err
		}
		if m.Metadata == nil {
			m.Metadata = map[string]json.RawMessage{}
		}
		m.Metadata[key] = raw
	}
	defs := map[string]InputDecl{}
	if e, ok := byKey["input_definitions"]; ok {
		if m.InputDefinitions, err = r.parseInputs(e.value, "input_definitions", nil); err != nil {
			return nil, err
		}
		for _, d := range m.InputDefinitions {
			defs[d.Name] = d
		}
	}
	run, haveRun := byKey["run"]
	runners, haveRunners := byKey["runners"]
	switch {
	case haveRun && haveRunners:
		return nil, r.fail(runners.keyAt, "runners", "must not be given together with run")
	case haveRun:
		one, err := r.parseRunner(run.value, "run", DefaultRunnerName, "", false, packageRunnerTypes, defs)
		if err != nil {
			return nil, err
		}
		one.Default = true
		m.Runners = []*Runner{one}
	case haveRunners:
		if m.Runners, err = r.parseNamedRunners(&runners, defs); err != nil {
			return nil, err
		}
	default:
		return nil, r.fail(root, "", "must hold run: or runners:")
	}
	if e, ok := byKey["harness"]; ok {
		if m.Harness, err = r.parseHarness(e.value, m.Runners); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (r nodeReader) parseNamedRunners(block *keyValue, defs map[string]InputDecl) ([]*Runner, error) {
	entries, err := r.mapping(block.value, "runners")
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, r.fail(block.value, "runners", "must declare at least one runner")
	}
	out := make([]*Runner, 0, len(entries))
	var defaults []string
	for _, e := range entries {
		f := join("runners", e.key)
		if !runnerNamePattern().MatchString(e.key) {
			return nil, r.fail(e.keyAt, f, "runner names must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit")
		}
		one, err := r.parseRunner(e.value, f, e.key, "", true, packageRunnerTypes, defs)
		if err != nil {
			return nil, err
		}
		if one.Default {
			defaults = append(defaults, one.Name)
		}
		out = append(out, one)
	}
	switch {
	case len(defaults) > 1:
		return nil, r.fail(block.value, "runners", "at most one runner may be marked default: true, found %d (%s)", len(defaults), strings.Join(defaults, ", "))
	case len(defaults) == 0 && len(out) == 1:
		// runx runs a lone runner without default: true as the default.
		out[0].Default = true
	}
	// Several runners and none marked default is admitted, as runx admits
	// it: every call must then name its runner.
	return out, nil
}

// Tool is a bundled local tool.
type Tool struct {
	// Name is the dotted name "<namespace>.<tool>".
	Name      string
	Namespace string
	// Tool is the tool's folder name, or for a tool nested deeper in its
	// namespace (tools/ns/t/sub) the dotted path of its folders ("t.sub").
	Tool        string
	Description string
	// Version is runx's optional tool version; "" in libos's form.
	Version string
	// RunnerField is the manifest field that declares the runner: "runner"
	// in libos's form, "source" in runx's (whose scopes and inputs sit
	// beside it at the top level).
	RunnerField string
	// Dir is the package-relative folder "tools/<namespace>/<tool>", or a
	// folder below it for a nested tool.
	Dir string
	// Runner runs the tool; its Name is the tool's dotted name and its
	// relative paths resolve from Dir.
	Runner *Runner
}

// ToolManifestSchema marks runx's form of a bundled tool manifest.
const ToolManifestSchema = "runx.tool.manifest.v1"

// Compiled on first use: compiling at package init taxes every libos start.
var toolSegmentPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`) })

var toolRunnerTypes = []RunnerType{TypeJavaScript, TypeCLITool}

// The top-level fields of each form of a tool manifest. runx's runner fields
// (runxToolRunnerFields) are runner fields libos already reads, so they are
// handed to the runner parser together with source.
var (
	libosToolFields      = []string{"name", "description", "runner"}
	runxToolFields       = []string{"schema", "name", "version", "description", "source", "inputs", "scopes", "risk", "retry", "idempotency", "mutating", "artifacts"}
	runxToolRunnerFields = []string{"source", "inputs", "scopes", "risk", "retry", "idempotency", "mutating", "artifacts"}
)

// ParseToolManifest parses the manifest.json of the bundled tool in the
// folder tools/<namespace>/<tool>. It reads two forms of a JSON object:
//
//   - libos's: name (which must be "<namespace>.<tool>"), description, and
//     runner (a javascript or cli-tool runner);
//   - runx's: schema (ToolManifestSchema), name, version, description,
//     source (the runner: its type, command, args, module, ...), inputs,
//     scopes, risk, retry, idempotency, mutating and artifacts, each with
//     the shape it has on a runner.
//
// A manifest holding runner is libos's form, any other runx's. Relative
// paths resolve from the tool's folder. It does no I/O.
func ParseToolManifest(namespace, tool string, data []byte) (*Tool, error) {
	return parseToolManifest(namespace, []string{tool}, data)
}

// parseToolManifest parses the manifest of the tool in the folder
// tools/<namespace>/<folders...>, whose name is their dotted path (runx
// reads a manifest nested deeper in a tool's folder as a tool of its own).
func parseToolManifest(namespace string, folders []string, data []byte) (*Tool, error) {
	dir := "tools/" + namespace + "/" + strings.Join(folders, "/")
	r := nodeReader{file: dir + "/" + ToolManifestFile}
	if !toolSegmentPattern().MatchString(namespace) {
		return nil, &AdmissionError{File: "tools/" + namespace, Rule: "a tool namespace folder must be named with 1 to 64 letters, digits, '_' or '-'"}
	}
	// Each folder is a segment of the dotted name, so none may hold a dot.
	for i, f := range folders {
		if !toolSegmentPattern().MatchString(f) {
			return nil, &AdmissionError{File: "tools/" + namespace + "/" + strings.Join(folders[:i+1], "/"), Rule: "a tool folder must be named with 1 to 64 letters, digits, '_' or '-'"}
		}
	}
	// runx names a tool from the last tools/ folder of its path, libos from
	// the package's own: refuse the paths on which they would differ.
	below := append([]string{namespace}, folders...)
	if i := slices.Index(below, "tools"); i >= 0 {
		return nil, &AdmissionError{File: r.file, Rule: fmt.Sprintf("is below %s, a tools folder inside tools/, which runx reads as another root of tools; rename that folder", "tools/"+strings.Join(below[:i+1], "/"))}
	}
	tool := strings.Join(folders, ".")
	if len(data) > MaxManifestBytes {
		return nil, r.fail(nil, "", "must be at most %d bytes", MaxManifestBytes)
	}
	if !utf8.Valid(data) {
		return nil, r.fail(nil, "", "must be UTF-8 text")
	}
	// The manifest must be JSON; it is then read with the YAML reader (JSON is
	// YAML) so that errors carry field paths and lines like skill.yaml's.
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		return nil, r.fail(nil, "", "must be well-formed JSON: %v", err)
	}
	root, err := r.parseDocument(data)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return nil, r.fail(nil, "", "must be a JSON object")
	}
	entries, err := r.mapping(root, "")
	if err != nil {
		return nil, err
	}
	t := &Tool{Namespace: namespace, Tool: tool, Dir: dir}
	want := namespace + "." + tool
	byKey := make(map[string]keyValue, len(entries))
	for _, e := range entries {
		byKey[e.key] = e
	}
	_, libosForm := byKey["runner"]
	if !libosForm {
		// runx reads every field of its form but schema, name and source
		// with an optional_* reader (tool.rs, validate_tool_manifest),
		// which takes an explicit null as absent.
		for _, e := range entries {
			if isNull(e.value) && e.key != "schema" && e.key != "name" && e.key != "source" {
				delete(byKey, e.key)
			}
		}
	}
	fields := runxToolFields
	if libosForm {
		fields = libosToolFields
	}
	for _, e := range entries {
		if slices.Contains(fields, e.key) {
			continue
		}
		if libosForm && slices.Contains(runxToolFields, e.key) {
			return nil, r.fail(e.keyAt, join("", e.key), "is not a known field of libos's form, which holds runner (allowed: %s); runx's form holds schema %q and source instead of runner", strings.Join(libosToolFields, ", "), ToolManifestSchema)
		}
		return nil, r.fail(e.keyAt, join("", e.key), "is not a known field (allowed: %s)", strings.Join(fields, ", "))
	}
	e, ok := byKey["name"]
	if !ok {
		return nil, r.fail(root, "name", "is required and must be %q", want)
	}
	if t.Name, err = r.nonEmptyStr(e.value, "name"); err != nil {
		return nil, err
	}
	if t.Name != want {
		return nil, r.fail(e.value, "name", "must be %q to match the path %s, got %q", want, dir, t.Name)
	}
	if e, ok := byKey["description"]; ok {
		if t.Description, err = r.str(e.value, "description"); err != nil {
			return nil, err
		}
	}
	if libosForm {
		t.RunnerField = "runner"
		if t.Runner, err = r.parseRunner(byKey["runner"].value, "runner", want, dir, false, toolRunnerTypes, nil); err != nil {
			return nil, err
		}
	} else {
		t.RunnerField = "source"
		if t.Runner, t.Version, err = r.parseRunxTool(root, byKey, want, dir); err != nil {
			return nil, err
		}
	}
	t.Runner.Default = false
	return t, nil
}

// parseRunxTool reads the rest of runx's form: the schema marker, version,
// and the runner made of source and the runner fields beside it.
func (r nodeReader) parseRunxTool(root *yaml.Node, byKey map[string]keyValue, name, dir string) (*Runner, string, error) {
	e, ok := byKey["schema"]
	if !ok {
		_, hasSource := byKey["source"]
		if !hasSource {
			return nil, "", r.fail(root, "runner", "is required (libos's form), or give schema %q and source (runx's form)", ToolManifestSchema)
		}
		return nil, "", r.fail(root, "schema", "is required in runx's form and must be %q", ToolManifestSchema)
	}
	marker, err := r.str(e.value, "schema")
	if err != nil {
		return nil, "", err
	}
	if marker != ToolManifestSchema {
		return nil, "", r.fail(e.value, "schema", "must be %q, got %q", ToolManifestSchema, marker)
	}
	var version string
	if e, ok := byKey["version"]; ok {
		if version, err = r.nonEmptyStr(e.value, "version"); err != nil {
			return nil, "", err
		}
	}
	src, ok := byKey["source"]
	if !ok {
		return nil, "", r.fail(root, "source", "is required: it declares the runner (type, command, args, module, ...)")
	}
	srcEntries, err := r.mapping(src.value, "source")
	if err != nil {
		return nil, "", err
	}
	if !slices.ContainsFunc(srcEntries, func(e keyValue) bool { return e.key == "type" }) {
		return nil, "", r.fail(src.value, "source.type", "is required (one of %s)", typeList(toolRunnerTypes))
	}
	// The runner parser reads source and the fields beside it as one runner;
	// a field it misses belongs in source, so that is the line it names.
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: src.value.Line, Column: src.value.Column}
	for _, key := range runxToolRunnerFields {
		if e, ok := byKey[key]; ok {
			n.Content = append(n.Content, e.keyAt, e.value)
		}
	}
	run, err := r.parseRunner(n, "", name, dir, false, toolRunnerTypes, nil)
	if err != nil {
		// A field read out of source is named where the author wrote it.
		var ae *AdmissionError
		if errors.As(err, &ae) && slices.Contains(sourceFields, firstSegment(ae.Field)) {
			ae.Field = "source." + ae.Field
		}
		return nil, "", err
	}
	return run, version, nil
}

// firstSegment is the first key of a dotted field path ("args" of
// "args[1]", "environment" of "environment.required").
func firstSegment(field string) string {
	if i := strings.IndexAny(field, ".["); i >= 0 {
		return field[:i]
	}
	return field
}
