package clitool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/libos/libos/skills/skillpkg"
)

// BaselineEnvNames are the host variables a cli-tool process inherits when
// they are set: process launch and user paths, certificates, and locale and
// terminal behaviour. Proxy variables are deliberately absent because their
// URLs may carry credentials; a runner that needs one declares it.
var BaselineEnvNames = []string{
	"PATH", "HOME", "TMPDIR", "TMP", "TEMP", "SystemRoot", "WINDIR", "COMSPEC", "PATHEXT", "USER", "LOGNAME",
	"CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "SSL_CERT_DIR", "SSL_CERT_FILE",
	"LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "COLORTERM", "TZ",
}

// Transport variable names and size limits of the subprocess ABI.
const (
	EnvCwd        = "RUNX_CWD"
	EnvInputsPath = "RUNX_INPUTS_PATH"
	EnvInputsJSON = "RUNX_INPUTS_JSON"
	// EnvInputPrefix starts RUNX_INPUT_<NAME> and RUNX_INPUT_<NAME>_PATH.
	EnvInputPrefix = "RUNX_INPUT_"
	// MaxInlineInputsJSON is the largest complete input object mirrored in
	// RUNX_INPUTS_JSON.
	MaxInlineInputsJSON = 48 << 10
	// MaxInlineInput is the largest single input value mirrored in
	// RUNX_INPUT_<NAME>.
	MaxInlineInput = 8 << 10
	// MaxStartBytes bounds what a tool starts with: its arguments and its
	// whole environment, each string counted as the kernel counts it
	// (argSpaceOverhead). Linux refuses to start a process past a limit of
	// its own (2 MiB with the default 8 MiB stack); this leaves it room.
	// The RUNX_* variables take what the arguments and the other variables
	// leave: the path variables first, and a call whose paths do not fit is
	// refused; then the mirrors, conveniences the contract lets go: the
	// complete object, then each input in name order until one would not
	// fit.
	MaxStartBytes = 1536 << 10
)

// argSpaceOverhead is what the kernel counts for each argument or
// environment string of a starting process beyond its bytes: the NUL that
// ends it and the pointer to it.
const argSpaceOverhead = 1 + 8

// envEntrySize is what the environment variable name=value takes.
func envEntrySize(name string, value []byte) int {
	return len(name) + 1 + len(value) + argSpaceOverhead
}

// startSize is what argv and env take.
func startSize(argv, env []string) int {
	n := 0
	for _, list := range [][]string{argv, env} {
		for _, s := range list {
			n += len(s) + argSpaceOverhead
		}
	}
	return n
}

// LookupFunc reads a host environment variable, like os.LookupEnv.
type LookupFunc func(name string) (string, bool)

// NormalizeInputName is the <NAME> of RUNX_INPUT_<NAME> for an input name;
// the rule is admission's (skillpkg.NormalizeInputName), which refuses the
// names it maps to nothing or onto another's.
func NormalizeInputName(name string) string { return skillpkg.NormalizeInputName(name) }

// inputFilePrefix starts the name of each input's file, followed by the
// normalized name; maxFileName is the longest file name Linux and the BSDs
// allow.
const (
	inputFilePrefix = "input_"
	maxFileName     = 255
)

// inputFile is one input's delivery: its normalized name and the bytes
// written to its file (and mirrored inline when small enough).
type inputFile struct {
	input string
	norm  string
	data  []byte
}

// inputPlan is the pure part of input delivery: what goes into which file and
// which variable, decided before anything is written or spawned.
type inputPlan struct {
	all   []byte
	files []inputFile
}

// planInputs normalizes every input name and refuses names that normalize to
// nothing or to the same variables as another input. Variable sets are
// compared in full (RUNX_INPUT_<N> and RUNX_INPUT_<N>_PATH), so "s" and
// "s.path" collide as well, whatever the payload sizes.
func planInputs(inputs map[string]json.RawMessage) (inputPlan, error) {
	names := make([]string, 0, len(inputs))
	for name := range inputs {
		names = append(names, name)
	}
	sort.Strings(names)
	owner := make(map[string]string, 2*len(names))
	plan := inputPlan{files: make([]inputFile, 0, len(names))}
	for _, name := range names {
		norm := NormalizeInputName(name)
		if norm == "" {
			return inputPlan{}, fmt.Errorf("%w: input name %q has no letter or digit to form RUNX_INPUT_<NAME>", ErrInvalidRequest, name)
		}
		if len(inputFilePrefix)+len(norm) > maxFileName {
			return inputPlan{}, fmt.Errorf("%w: input name %q is too long: its file %s<NAME> would have %d bytes, more than the %d a file name may have", ErrInvalidRequest, name, inputFilePrefix, len(inputFilePrefix)+len(norm), maxFileName)
		}
		for _, v := range []string{EnvInputPrefix + norm, EnvInputPrefix + norm + "_PATH"} {
			if other, taken := owner[v]; taken {
				return inputPlan{}, fmt.Errorf("%w: inputs %q and %q both map to the variable %s", ErrInvalidRequest, other, name, v)
			}
			owner[v] = name
		}
		plan.files = append(plan.files, inputFile{input: name, norm: norm, data: serializeValue(inputs[name])})
	}
	all, err := skillpkg.EncodeInputs(inputs)
	if err != nil {
		return inputPlan{}, fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	plan.all = all
	return plan, nil
}

// serializeValue renders one input value for its file, its inline variable
// and argument placeholders: a JSON string as its text, anything else as
// compact JSON.
func serializeValue(v json.RawMessage) []byte {
	v = bytes.TrimSpace(v)
	if string(v) == "null" {
		return nil // runx renders a null input as an empty string
	}
	if len(v) > 0 && v[0] == '"' {
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			return []byte(s)
		}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, v); err != nil {
		return append([]byte(nil), v...)
	}
	return compact.Bytes()
}

// transportEnv returns the RUNX_* variables for a call whose input files live
// in dir, within room bytes (see MaxStartBytes): paths on every call, inline
// mirrors within their size limits and what the paths leave. Values holding
// a NUL byte cannot be environment values and are delivered by path only.
func (p inputPlan) transportEnv(workspace, inputsPath string, filePath func(inputFile) string, room int) (map[string]string, error) {
	env := map[string]string{
		EnvCwd:        workspace,
		EnvInputsPath: inputsPath,
	}
	size := envEntrySize(EnvCwd, []byte(workspace)) + envEntrySize(EnvInputsPath, []byte(inputsPath))
	for _, f := range p.files {
		name, path := EnvInputPrefix+f.norm+"_PATH", filePath(f)
		env[name] = path
		size += envEntrySize(name, []byte(path))
	}
	if size > room {
		return nil, fmt.Errorf("%w: %d inputs: the RUNX_* path variables take %d bytes, and the arguments and the other variables leave %d of the %d a tool may start with", ErrInvalidRequest, len(p.files), size, max(room, 0), MaxStartBytes)
	}
	// The mirrors take what is left, the complete object first; the inputs'
	// stop at the first that does not fit.
	if n := envEntrySize(EnvInputsJSON, p.all); len(p.all) <= MaxInlineInputsJSON && bytes.IndexByte(p.all, 0) < 0 && size+n <= room {
		env[EnvInputsJSON] = string(p.all)
		size += n
	}
	for _, f := range p.files {
		if len(f.data) > MaxInlineInput || bytes.IndexByte(f.data, 0) >= 0 {
			continue
		}
		name := EnvInputPrefix + f.norm
		n := envEntrySize(name, f.data)
		if size+n > room {
			break
		}
		env[name] = string(f.data)
		size += n
	}
	return env, nil
}

// BuildEnv constructs a child environment from nothing: the baseline names
// that lookup finds, then the resolved declared variables, then the runtime
// transport variables. Later groups win on a name clash. The result is sorted
// and never nil (a nil environment would make os/exec inherit the host's).
func BuildEnv(lookup LookupFunc, declared, transport map[string]string) []string {
	merged := make(map[string]string, len(BaselineEnvNames)+len(declared)+len(transport))
	if lookup != nil {
		for _, name := range BaselineEnvNames {
			if v, ok := lookup(name); ok {
				merged[name] = v
			}
		}
	}
	for k, v := range declared {
		merged[k] = v
	}
	for k, v := range transport {
		merged[k] = v
	}
	env := make([]string, 0, len(merged))
	for k, v := range merged {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// RenderArgs fills argument templates: {{name}} with the input's serialized
// value ("" for null) and {{env.NAME}} with a declared variable's value (""
// for an absent optional one). A placeholder naming an input that was not
// supplied stays as written, as in runx. A variable the runner does not
// declare is an error, as is a rendered argument holding a NUL byte.
func RenderArgs(templates []string, inputs map[string]json.RawMessage, declared []string, values map[string]string) ([]string, error) {
	isDeclared := make(map[string]bool, len(declared))
	for _, n := range declared {
		isDeclared[n] = true
	}
	out := make([]string, 0, len(templates))
	for i, tmpl := range templates {
		parts, err := skillpkg.ParseTemplate(tmpl)
		if err != nil {
			return nil, fmt.Errorf("%w: args[%d]: %v", ErrInvalidRequest, i, err)
		}
		var b strings.Builder
		for _, p := range parts {
			switch {
			case p.Env != "":
				if !isDeclared[p.Env] {
					return nil, fmt.Errorf("%w: args[%d]: {{env.%s}} names a variable the runner does not declare", ErrInvalidRequest, i, p.Env)
				}
				b.WriteString(values[p.Env])
			case p.Input != "":
				v, ok := inputs[p.Input]
				if !ok {
					// runx leaves an unmatched placeholder as written.
					b.WriteString(p.Raw)
					continue
				}
				b.Write(serializeValue(v))
			default:
				b.WriteString(p.Literal)
			}
		}
		arg := b.String()
		if strings.IndexByte(arg, 0) >= 0 {
			return nil, fmt.Errorf("%w: args[%d] renders to a value holding a NUL byte", ErrInvalidRequest, i)
		}
		out = append(out, arg)
	}
	return out, nil
}

// ResolveCwd returns the working directory of a call: the package folder when
// cwd is empty, the workspace for the exact token {{env.RUNX_CWD}}, an
// absolute cwd as it is, and a relative one joined to the package folder.
func ResolveCwd(cwd, packageDir, workspace string) string {
	switch {
	case cwd == "":
		return packageDir
	case cwd == skillpkg.WorkspaceToken:
		return workspace
	case filepath.IsAbs(cwd):
		return filepath.Clean(cwd)
	}
	return filepath.Join(packageDir, cwd)
}
