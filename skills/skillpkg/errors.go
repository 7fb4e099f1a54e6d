package skillpkg

import (
	"errors"
	"fmt"
)

// ErrAdmission is matched (errors.Is) by every error that refuses a skill
// package during admission: a malformed SKILL.md, skill.yaml or bundled tool
// manifest, or a path that escapes the package.
var ErrAdmission = errors.New("skill package refused")

// ErrModuleRefused is matched, in addition to ErrAdmission, by admission errors
// about a runner's JavaScript module path (missing, not a .mjs/.js file, or
// escaping the package). Callers report these as module_rejected rather than
// as a manifest error.
var ErrModuleRefused = errors.New("module refused")

// ErrInvalidInputs is matched by every error ResolveInputs returns.
var ErrInvalidInputs = errors.New("invalid inputs")

// ErrNoSuchRunner is returned by Package.Runner for a name the package does not
// declare, or when the package declares no runners at all.
var ErrNoSuchRunner = errors.New("no such runner")

// AdmissionError names the file, the field and the rule a package broke.
type AdmissionError struct {
	// File is the package-relative, slash-separated file the error is in
	// ("SKILL.md", "skill.yaml", "tools/ns/tool/manifest.json"), or "." for
	// the package folder itself.
	File string
	// Line is the 1-based line of the offending node, or 0 when unknown.
	Line int
	// Field is the dotted path of the offending field ("runners.build.args[1]"),
	// or "" when the error concerns the file as a whole.
	Field string
	// Rule states what was required.
	Rule string
	// module marks errors about a module path (see ErrModuleRefused).
	module bool
	// credential marks a credential-like environment name (see
	// ErrCredentialEnvironment).
	credential bool
}

func (e *AdmissionError) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", loc, e.Rule)
	}
	return fmt.Sprintf("%s: %s: %s", loc, e.Field, e.Rule)
}

// Is reports whether target is ErrAdmission, ErrModuleRefused for a module
// path error, or ErrCredentialEnvironment for a credential-like environment
// name.
func (e *AdmissionError) Is(target error) bool {
	return target == ErrAdmission || (e.module && target == ErrModuleRefused) ||
		(e.credential && target == ErrCredentialEnvironment)
}

// Location is where a manifest declares a field, recorded while it is
// parsed so that a check made later (on disk, or on the module graph) names
// what the author wrote rather than a path guessed from the runner.
type Location struct {
	// File is the package-relative manifest ("X.yaml", "skill.yaml",
	// "tools/ns/t/manifest.json").
	File string
	// Line is the 1-based line of the field's value, or 0 when unknown.
	Line int
	// Field is the dotted field path as written ("runners.a.module",
	// "run.export", "source.module").
	Field string
}

// ModuleError refuses the module or export declared at l: the error
// matches ErrAdmission and ErrModuleRefused, as a run of that module would
// fail with module_rejected.
func (l Location) ModuleError(format string, args ...any) *AdmissionError {
	return &AdmissionError{File: l.File, Line: l.Line, Field: l.Field, Rule: fmt.Sprintf(format, args...), module: true}
}
