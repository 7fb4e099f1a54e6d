package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

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
