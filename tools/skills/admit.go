package skills

import (
	"fmt"

	"github.com/libos/libos/images/skillpkg"
	"github.com/libos/libos/tools/skills/jsrunner"
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
	for _, r := range runners {
		if r.Type != skillpkg.TypeJavaScript {
			continue
		}
		if f := jsrunner.CheckModule(pkg.Dir, r.Module); f != nil {
			return nil, &ModuleGraphError{Runner: r.Name, Module: r.Module, Failure: f}
		}
	}
	return pkg, nil
}
