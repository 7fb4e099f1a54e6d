package jsrunner

import (
	"encoding/json"
	"fmt"
	"mime"
	"path"
	"strings"
	"time"

	"github.com/libos/libos/skills/skillpkg"
)

// Failure codes reported in Failure.Code. They are the whole vocabulary: a
// caller can switch on them.
const (
	// CodeInvalidRequest: the spec, the inputs or a paged artifact broke a
	// rule; nothing ran.
	CodeInvalidRequest = "invalid_request"
	// CodeModuleRejected: the module graph was refused (a forbidden import,
	// a syntax error, a missing or non-callable export).
	CodeModuleRejected = "module_rejected"
	// CodeExecutionFailed: the module threw, rejected its promise or never
	// settled it.
	CodeExecutionFailed = "execution_failed"
	// CodeResourceLimit: a limit ended the call (wall time, memory, call
	// stack, page count, continuation state); the message names it.
	CodeResourceLimit = "resource_limit"
	// CodeOutputRejected: the result is not JSON-compatible, too large, or
	// breaks the paged-result shape.
	CodeOutputRejected = "output_rejected"
	// CodeInternalFailure: the runner itself failed (a worker could not be
	// started or died for a reason other than a limit, the pool is closed).
	CodeInternalFailure = "internal_failure"
)

// Limits that the contract fixes. They are not configurable per call.
const (
	// DefaultTimeout is the wall limit of one export call when Spec.Timeout is 0.
	DefaultTimeout = 2 * time.Second
	// MinTimeout and MaxTimeout bound a declared wall limit.
	MinTimeout = 1 * time.Second
	MaxTimeout = 30 * time.Second
	// MaxInputBytes bounds the JSON inputs of one export call (page metadata included).
	MaxInputBytes = 4 << 20
	// MaxPromiseJobs bounds the promise reactions (then, catch, finally,
	// await) one call may schedule, its module's evaluation included.
	MaxPromiseJobs = 1000
	// MaxSourceBytes bounds one module file of the graph, as runx does.
	MaxSourceBytes = 4 << 20
	// MaxOutputBytes bounds the JSON result of one export call.
	MaxOutputBytes = 4 << 20
	// MaxArtifactBytes bounds a paged artifact.
	MaxArtifactBytes = 512 << 20
	// DefaultPageBytes and MaxPageBytes bound the source bytes framed into one page.
	DefaultPageBytes = 1 << 20
	MaxPageBytes     = 4 << 20
	// MaxStateBytes bounds the continuation state carried between pages.
	MaxStateBytes = 2 << 20
	// MaxPages bounds the number of export calls of one paged run.
	MaxPages = 4096
)

// FixedClock is the instant every module observes through Date: Date.now()
// returns 0 and new Date() reads 1970-01-01T00:00:00Z, as in runx's worker,
// so a module cannot depend on when it runs.
var FixedClock = time.Unix(0, 0).UTC()

// Spec selects one javascript runner of an admitted package.
type Spec struct {
	// Dir is the package folder; every module of the graph must be inside it.
	Dir string
	// Module is the entry module: a relative, slash-separated .mjs or .js path inside Dir.
	Module string
	// Export names the function to call; "" selects the default export.
	Export string
	// Environment holds the declared names, already resolved; it is the
	// only environment a module sees.
	Environment map[string]string
	// Timeout is the wall limit of each export call: 0 means DefaultTimeout,
	// otherwise it must lie in [MinTimeout, MaxTimeout].
	Timeout time.Duration
	// Pages, when set, makes the run a paged run over a JSON-array artifact.
	Pages *PagesSpec
}

// PagesSpec declares a paged deterministic source.
type PagesSpec struct {
	// PathFrom names the input holding the artifact path.
	PathFrom string
	// PathScopeFrom optionally names the input holding runx's scope of the
	// path: "skill" (the package folder) or "workspace" (the default).
	PathScopeFrom string
	// MediaType is reported to the module in runx_page.media_type.
	MediaType string
	// Framing must be "json_array".
	Framing string
	// PageBytes bounds the source bytes of one page: 0 means DefaultPageBytes, at most MaxPageBytes.
	PageBytes int
}

// Failure says why a run did not produce an output.
type Failure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error makes a Failure usable as an error value.
func (f *Failure) Error() string { return f.Code + ": " + f.Message }

// Result is the outcome of Pool.Run: Output when Err is nil.
type Result struct {
	// Output is the JSON result of the export (the domain output of the final page for a paged run).
	Output json.RawMessage
	// Err is set when the run failed; Output is then nil.
	Err *Failure
	// DurationMS is the wall time of the whole run, admission included.
	DurationMS int64
	// Pages counts the export calls made by a paged run, the failed one included; 0 otherwise.
	Pages int
}

func failf(code, format string, args ...any) *Failure {
	return &Failure{Code: code, Message: fmt.Sprintf(format, args...)}
}

// validatedSpec is a Spec whose defaults are applied and whose fields obey the rules.
type validatedSpec struct {
	Spec
	module    string // cleaned module path
	export    string // "default" when Spec.Export is ""
	timeout   time.Duration
	pageBytes int
}

func validateSpec(s Spec) (validatedSpec, *Failure) {
	v := validatedSpec{Spec: s}
	if s.Dir == "" {
		return v, failf(CodeInvalidRequest, "spec.Dir: the package folder is required")
	}
	mod, f := validateModulePath(s.Module)
	if f != nil {
		return v, f
	}
	v.module = mod
	v.export = s.Export
	if v.export == "" {
		v.export = "default"
	}
	switch {
	case s.Timeout == 0:
		v.timeout = DefaultTimeout
	case s.Timeout < MinTimeout || s.Timeout > MaxTimeout:
		return v, failf(CodeInvalidRequest, "spec.Timeout: %s is outside the allowed range 1s..30s", s.Timeout)
	default:
		v.timeout = s.Timeout
	}
	for name := range s.Environment {
		if name == "" {
			return v, failf(CodeInvalidRequest, "spec.Environment: a variable name must not be empty")
		}
		// Admission refuses these names; refusing here too keeps a Host
		// credential out of a module even for a Spec built without it.
		if err := skillpkg.CheckEnvironmentName(name); err != nil {
			return v, failf(CodeInvalidRequest, "spec.Environment: %v", err)
		}
	}
	if s.Pages != nil {
		p := s.Pages
		if p.PathFrom == "" {
			return v, failf(CodeInvalidRequest, "pages.path_from: the input naming the artifact path is required")
		}
		if p.PathScopeFrom == p.PathFrom {
			return v, failf(CodeInvalidRequest, "pages.path_scope_from: must name a different input than pages.path_from")
		}
		if p.Framing != "json_array" {
			return v, failf(CodeInvalidRequest, "pages.framing: %q is not supported; the only framing is json_array", p.Framing)
		}
		if p.MediaType == "" {
			return v, failf(CodeInvalidRequest, "pages.media_type: a media type is required")
		}
		if _, _, err := mime.ParseMediaType(p.MediaType); err != nil {
			return v, failf(CodeInvalidRequest, "pages.media_type: %q is not a valid media type: %v", p.MediaType, err)
		}
		switch {
		case p.PageBytes == 0:
			v.pageBytes = DefaultPageBytes
		case p.PageBytes < 0 || p.PageBytes > MaxPageBytes:
			return v, failf(CodeInvalidRequest, "pages.page_bytes: %d is outside the allowed range 1..%d", p.PageBytes, MaxPageBytes)
		default:
			v.pageBytes = p.PageBytes
		}
	}
	return v, nil
}

// validateModulePath applies the portable-path rule to an entry module and
// returns it cleaned.
func validateModulePath(m string) (string, *Failure) {
	switch {
	case m == "":
		return "", failf(CodeInvalidRequest, "spec.Module: the entry module is required")
	case strings.Contains(m, "\\"):
		return "", failf(CodeInvalidRequest, "spec.Module: %q must use forward slashes", m)
	case strings.HasPrefix(m, "/"):
		return "", failf(CodeInvalidRequest, "spec.Module: %q must be relative to the package folder", m)
	case strings.ContainsRune(m, 0):
		return "", failf(CodeInvalidRequest, "spec.Module: the path contains a NUL byte")
	}
	clean := path.Clean(m)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", failf(CodeInvalidRequest, "spec.Module: %q escapes the package folder", m)
	}
	if ext := path.Ext(clean); ext != ".mjs" && ext != ".js" {
		return "", failf(CodeInvalidRequest, "spec.Module: %q must end in .mjs or .js", m)
	}
	return clean, nil
}
