package skillpkg

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// RunnerFile is the name of a package's runner manifest.
const RunnerFile = "skill.yaml"

// DefaultRunnerName names the single runner of a run: block.
const DefaultRunnerName = "default"

// ToolManifestFile is the file name of a bundled tool manifest, found at
// tools/<namespace>/<tool>/manifest.json.
const ToolManifestFile = "manifest.json"

var packageRunnerTypes = []RunnerType{TypeJavaScript, TypeCLITool, TypeAgentTask}

// ParseRunnerManifest parses a skill.yaml holding either run: (one runner,
// named DefaultRunnerName) or runners: (named runners, exactly one marked
// default: true). Runners are returned in document order. It does no I/O:
// module paths are checked to stay inside the package lexically here and on
// disk by Load.
func ParseRunnerManifest(data []byte) ([]*Runner, error) {
	r := nodeReader{file: RunnerFile}
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
	var run, runners *keyValue
	for i, e := range entries {
		switch e.key {
		case "run":
			run = &entries[i]
		case "runners":
			runners = &entries[i]
		default:
			return nil, r.fail(e.keyAt, join("", e.key), "is not a known field (allowed: run, runners)")
		}
	}
	switch {
	case run != nil && runners != nil:
		return nil, r.fail(runners.keyAt, "runners", "must not be given together with run")
	case run != nil:
		one, err := r.parseRunner(run.value, "run", DefaultRunnerName, "", false, packageRunnerTypes)
		if err != nil {
			return nil, err
		}
		one.Default = true
		return []*Runner{one}, nil
	case runners != nil:
		return r.parseNamedRunners(runners)
	}
	return nil, r.fail(root, "", "must hold run: or runners:")
}

func (r nodeReader) parseNamedRunners(block *keyValue) ([]*Runner, error) {
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
		if !runnerNamePattern.MatchString(e.key) {
			return nil, r.fail(e.keyAt, f, "runner names must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit")
		}
		one, err := r.parseRunner(e.value, f, e.key, "", true, packageRunnerTypes)
		if err != nil {
			return nil, err
		}
		if one.Default {
			defaults = append(defaults, one.Name)
		}
		out = append(out, one)
	}
	if len(defaults) != 1 {
		return nil, r.fail(block.value, "runners", "exactly one runner must be marked default: true, found %d (%s)", len(defaults), strings.Join(defaults, ", "))
	}
	return out, nil
}

// Tool is a bundled local tool.
type Tool struct {
	// Name is the dotted name "<namespace>.<tool>".
	Name        string
	Namespace   string
	Tool        string
	Description string
	// Dir is the package-relative folder "tools/<namespace>/<tool>".
	Dir string
	// Runner runs the tool; its Name is the tool's dotted name and its
	// relative paths resolve from Dir.
	Runner *Runner
}

var toolSegmentPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

var toolRunnerTypes = []RunnerType{TypeJavaScript, TypeCLITool}

// ParseToolManifest parses the manifest.json of the bundled tool in the
// folder tools/<namespace>/<tool>: a JSON object with name (which must be
// "<namespace>.<tool>"), description, and runner (a javascript or cli-tool
// runner whose relative paths resolve from the tool's folder). It does no I/O.
func ParseToolManifest(namespace, tool string, data []byte) (*Tool, error) {
	dir := "tools/" + namespace + "/" + tool
	r := nodeReader{file: dir + "/" + ToolManifestFile}
	if !toolSegmentPattern.MatchString(namespace) {
		return nil, &AdmissionError{File: "tools/" + namespace, Rule: "a tool namespace folder must be named with 1 to 64 letters, digits, '_' or '-'"}
	}
	if !toolSegmentPattern.MatchString(tool) {
		return nil, &AdmissionError{File: dir, Rule: "a tool folder must be named with 1 to 64 letters, digits, '_' or '-'"}
	}
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
	haveName := false
	for _, e := range entries {
		switch e.key {
		case "name":
			if t.Name, err = r.nonEmptyStr(e.value, "name"); err == nil && t.Name != want {
				err = r.fail(e.value, "name", "must be %q to match the path %s, got %q", want, dir, t.Name)
			}
			haveName = true
		case "description":
			t.Description, err = r.str(e.value, "description")
		case "runner":
			t.Runner, err = r.parseRunner(e.value, "runner", want, dir, false, toolRunnerTypes)
		default:
			err = r.fail(e.keyAt, join("", e.key), "is not a known field (allowed: name, description, runner)")
		}
		if err != nil {
			return nil, err
		}
	}
	if !haveName {
		return nil, r.fail(root, "name", "is required and must be %q", want)
	}
	if t.Runner == nil {
		return nil, r.fail(root, "runner", "is required")
	}
	t.Runner.Default = false
	return t, nil
}

// fieldError builds an AdmissionError for checks made outside a node walk.
func fieldError(file, field, format string, args ...any) *AdmissionError {
	return &AdmissionError{File: file, Field: field, Rule: fmt.Sprintf(format, args...)}
}
