package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/libos/libos/skills/runner/jsrunner"
	"github.com/libos/libos/skills/skillpkg"
)

// ModuleGraphError refuses a package whose javascript runner has a module
// graph the runner would refuse (an import that leaves the package, a
// forbidden import kind, a syntax error). It matches skillpkg.ErrAdmission and
// skillpkg.ErrModuleRefused, and unwraps to the runner's *jsrunner.Failure.
type ModuleGraphError struct {
	// Runner names the runner: its name in skill.yaml, or the dotted name of
	// a bundled tool.
	Runner string
	// Module is the runner's package-relative entry module.
	Module string
	// Failure is exactly what running the module would have reported.
	Failure *jsrunner.Failure
}

func (e *ModuleGraphError) Error() string {
	return fmt.Sprintf("runner %s: module %s: %s", e.Runner, e.Module, e.Failure.Message)
}

// Is reports whether target is skillpkg.ErrAdmission or
// skillpkg.ErrModuleRefused.
func (e *ModuleGraphError) Is(target error) bool {
	return target == skillpkg.ErrAdmission || target == skillpkg.ErrModuleRefused
}

// Unwrap returns the runner's failure.
func (e *ModuleGraphError) Unwrap() error { return e.Failure }

// Admit admits the skill package in dir: skillpkg.Load, then the module graph
// of every javascript runner (the package's and its bundled tools') built by
// jsrunner.CheckModule, the resolver and bundler that run the module. So a
// package that check admits never fails a run with module_rejected for its
// imports, and one it refuses is refused with the error a run would give.
// The export each javascript runner calls must be one its module exports
// (checkExport), so that no call fails with "the module has no export".
// The source closure of every bundled cli-tool is bound too (toolSources):
// a missing command or entrypoint file, an import that does not resolve, or
// uncompiled TypeScript run by node is refused before anything runs.
// Refusals match skillpkg.ErrAdmission; a refused graph is a
// *ModuleGraphError.
func Admit(dir string) (*skillpkg.Package, error) {
	pkg, err := skillpkg.Load(dir)
	if err != nil {
		return nil, err
	}
	runners := append([]*skillpkg.Runner(nil), pkg.Runners...)
	for _, t := range pkg.Tools {
		runners = append(runners, t.Runner)
	}
	reached := map[string]bool{}
	if err := bindToolSources(pkg, reached); err != nil {
		return nil, err
	}
	for _, r := range runners {
		entries := graphStepModules(r)
		if r.Type == skillpkg.TypeJavaScript {
			entries = append(entries, r.Module)
		}
		for _, m := range entries {
			files, f := jsrunner.ModuleGraph(pkg.Dir, m)
			if f != nil {
				return nil, &ModuleGraphError{Runner: r.Name, Module: m, Failure: f}
			}
			for _, file := range files {
				reached[file] = true
			}
		}
		if r.Type == skillpkg.TypeJavaScript {
			if err := checkExport(pkg.Dir, r); err != nil {
				return nil, err
			}
		}
		if r.Type == skillpkg.TypeCLITool {
			for _, a := range append([]string{r.Command}, r.Args...) {
				reached[path.Clean(path.Join(r.Base, a))] = true
			}
		}
	}
	if err := refuseUnreachedModules(pkg.Dir, reached); err != nil {
		return nil, err
	}
	return pkg, nil
}

// bindToolSources checks the source closure of each bundled cli-tool and
// marks its files reached.
func bindToolSources(pkg *skillpkg.Package, reached map[string]bool) error {
	var root *os.Root
	defer func() {
		if root != nil {
			root.Close()
		}
	}()
	for _, t := range pkg.Tools {
		if t.Runner.Type != skillpkg.TypeCLITool {
			continue
		}
		if root == nil {
			var err error
			if root, err = os.OpenRoot(pkg.Dir); err != nil {
				return fmt.Errorf("opening skill package folder %s: %w", pkg.Dir, err)
			}
		}
		files, err := toolSources(root, t)
		if err != nil {
			return err
		}
		for _, f := range files {
			reached[f] = true
		}
	}
	return nil
}

// ErrUnreachedModule is matched (with skillpkg.ErrAdmission and
// skillpkg.ErrModuleRefused) by the refusal of a package module that no
// declared source reaches.
var ErrUnreachedModule = errors.New("executable JavaScript module is not reachable from a declared package source")

type unreachedError struct{ rel string }

func (e *unreachedError) Error() string { return e.rel + ": " + ErrUnreachedModule.Error() }

func (e *unreachedError) Is(target error) bool {
	return target == ErrUnreachedModule || target == skillpkg.ErrAdmission || target == skillpkg.ErrModuleRefused
}

// refuseUnreachedModules refuses, as runx does, a .js or .mjs file of the
// package that no javascript runner's module graph (graph steps included)
// imports and no cli-tool runner names: code that is shipped but never
// reviewed as part of a source. Test files (*.test.js), the folders
// fixtures, harness, tests and tools, and nested packages are exempt.
func refuseUnreachedModules(dir string, reached map[string]bool) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			switch d.Name() {
			case "fixtures", "harness", "tests", "tools", "node_modules":
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if _, err := os.Lstat(filepath.Join(p, skillpkg.SkillFile)); err == nil {
				return filepath.SkipDir // a nested package answers for itself
			}
			return nil
		}
		name := d.Name()
		if !(strings.HasSuffix(name, ".js") || strings.HasSuffix(name, ".mjs")) ||
			strings.HasSuffix(name, ".test.js") || strings.HasSuffix(name, ".test.mjs") {
			return nil
		}
		if !reached[rel] {
			return &unreachedError{rel: rel}
		}
		return nil
	})
}

// graphStepModules lists the javascript modules a runner of a type libos
// does not run names in its graph steps (run: {type: javascript, module}),
// so that they count as reached.
func graphStepModules(r *skillpkg.Runner) []string {
	raw, ok := r.Metadata["graph"]
	if !ok {
		return nil
	}
	var g struct {
		Steps []struct {
			Run *struct {
				Type   string `json:"type"`
				Module string `json:"module"`
			} `json:"run"`
		} `json:"steps"`
	}
	if json.Unmarshal(raw, &g) != nil {
		return nil
	}
	var out []string
	for _, st := range g.Steps {
		if st.Run != nil && st.Run.Type == string(skillpkg.TypeJavaScript) && st.Run.Module != "" {
			out = append(out, path.Clean(st.Run.Module))
		}
	}
	return out
}

// exportsNamespace is the esbuild namespace of the package files
// moduleExports reads.
const exportsNamespace = "libos-exports"

// checkExport refuses a javascript runner whose module does not export the
// name the runner calls (Runner.Export, or default), naming the manifest,
// line and field that declare it: otherwise the package is admitted and
// every call fails with module_rejected "the module has no export", which
// names neither. A module whose exports cannot be listed before it runs (a
// CommonJS file in its graph) is left to the run.
func checkExport(dir string, r *skillpkg.Runner) error {
	exports, known := moduleExports(dir, r.Module)
	if !known {
		return nil
	}
	want := r.Export
	if want == "" {
		want = "default"
	}
	if slices.Contains(exports, want) {
		return nil
	}
	has := "exports nothing"
	if len(exports) > 0 {
		names := slices.Sorted(slices.Values(exports))
		if len(names) > 20 {
			names = append(names[:20], fmt.Sprintf("and %d more", len(names)-20))
		}
		has = "exports " + strings.Join(names, ", ")
	}
	if r.Export == "" {
		return r.ModuleAt.ModuleError("module %s has no default export, which the runner calls when it names no export (the module %s); export a default function, or name one in %s", r.Module, has, r.ExportAt.Field)
	}
	return r.ExportAt.ModuleError("names export %q, which module %s does not have (the module %s)", r.Export, r.Module, has)
}

// moduleExports lists the names module exports, as the bundler that runs it
// reads them: esbuild's metafile lists the entry's exports, those re-exported
// from other package files included. known is false when the list is not
// the one a call sees: a CommonJS file in the graph, whose exports are
// assigned as it runs, or a graph that does not build (jsrunner.ModuleGraph,
// which Admit ran first, is what reports that). Files are read through an
// os.Root of the package, as regular files only.
func moduleExports(dir, module string) (exports []string, known bool) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, false
	}
	defer root.Close()
	resolve := func(a api.OnResolveArgs) (api.OnResolveResult, error) {
		switch {
		case a.Kind == api.ResolveEntryPoint:
			return api.OnResolveResult{Path: a.Path, Namespace: exportsNamespace}, nil
		case a.Kind == api.ResolveJSImportStatement && a.Namespace == exportsNamespace &&
			(strings.HasPrefix(a.Path, "./") || strings.HasPrefix(a.Path, "../")):
			return api.OnResolveResult{Path: path.Join(path.Dir(a.Importer), a.Path), Namespace: exportsNamespace}, nil
		}
		// ModuleGraph refused every other import already; this one changed
		// since, and the run will report it.
		return api.OnResolveResult{Errors: []api.Message{{Text: "unexpected import " + a.Path}}}, nil
	}
	load := func(a api.OnLoadArgs) (api.OnLoadResult, error) {
		f, err := skillpkg.OpenRegular(root.OpenFile, a.Path)
		if err != nil {
			return api.OnLoadResult{Errors: []api.Message{{Text: err.Error()}}}, nil
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, jsrunner.MaxSourceBytes+1))
		if err != nil || len(data) > jsrunner.MaxSourceBytes {
			return api.OnLoadResult{Errors: []api.Message{{Text: "unreadable " + a.Path}}}, nil
		}
		contents := string(data)
		loader := api.LoaderJS
		if path.Ext(a.Path) == ".json" {
			loader = api.LoaderJSON
		}
		return api.OnLoadResult{Contents: &contents, Loader: loader}, nil
	}
	result := api.Build(api.BuildOptions{
		EntryPoints: []string{module},
		Bundle:      true,
		Write:       false,
		Format:      api.FormatESModule,
		Platform:    api.PlatformNeutral,
		Target:      api.ESNext,
		Metafile:    true,
		LogLevel:    api.LogLevelSilent,
		Plugins: []api.Plugin{{Name: exportsNamespace, Setup: func(b api.PluginBuild) {
			b.OnResolve(api.OnResolveOptions{Filter: ".*"}, resolve)
			b.OnLoad(api.OnLoadOptions{Filter: ".*", Namespace: exportsNamespace}, load)
		}}},
	})
	if len(result.Errors) > 0 {
		return nil, false
	}
	var meta struct {
		Inputs map[string]struct {
			Format string `json:"format"`
		} `json:"inputs"`
		Outputs map[string]struct {
			Exports []string `json:"exports"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(result.Metafile), &meta); err != nil || len(meta.Outputs) != 1 {
		return nil, false
	}
	for _, in := range meta.Inputs {
		if in.Format == "cjs" {
			return nil, false
		}
	}
	for _, out := range meta.Outputs {
		exports = out.Exports
	}
	return exports, true
}
