// Package skillpkg admits skill packages: a folder with a SKILL.md (YAML front
// matter and a Markdown manual), an optional skill.yaml of runners, and
// bundled tools under tools/<namespace>/<tool>/manifest.json (and deeper:
// tools/<namespace>/<tool>/<sub>/manifest.json is the tool <namespace>.<tool>.<sub>).
//
// Admission is strict and happens before anything runs: an unknown field, a
// value of the wrong type, a module or bundled-tool path that escapes the
// package (lexically or through a symlink), or a tool whose dotted name does
// not match its path is refused with an *AdmissionError naming the file, the
// field and the rule. A cli-tool cwd may point outside the package; it is
// recorded, not confined. The package also resolves runner inputs against
// their declarations (ResolveInputs).
package skillpkg

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Package is an admitted skill package. It is immutable after Load and may be
// shared between goroutines.
type Package struct {
	// Dir is the absolute package folder with symlinks resolved.
	Dir   string
	Skill Skill
	// Manual is the Markdown after the front matter of SKILL.md.
	Manual string
	// Manifest is the runner manifest (X.yaml or skill.yaml); nil when the
	// package has neither.
	Manifest *Manifest
	// Runners are the manifest's runners in document order; empty when the
	// package has no manifest.
	Runners []*Runner
	// Tools are the bundled tools sorted by name.
	Tools []*Tool
}

// Runner returns the runner called name, or the default runner when name is
// empty. The error matches ErrNoSuchRunner.
func (p *Package) Runner(name string) (*Runner, error) {
	if len(p.Runners) == 0 {
		return nil, fmt.Errorf("%w: package %q has no %s or %s", ErrNoSuchRunner, p.Skill.Name, XManifestFile, RunnerFile)
	}
	names := make([]string, 0, len(p.Runners))
	for _, r := range p.Runners {
		if (name == "" && r.Default) || (name != "" && r.Name == name) {
			return r, nil
		}
		names = append(names, r.Name)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: package %q marks no runner default: true; name one (runners: %s)", ErrNoSuchRunner, p.Skill.Name, strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("%w: package %q has no runner %q (runners: %s)", ErrNoSuchRunner, p.Skill.Name, name, strings.Join(names, ", "))
}

// Tool returns the bundled tool with the dotted name, if any.
func (p *Package) Tool(name string) (*Tool, bool) {
	for _, t := range p.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return nil, false
}

// Load admits the package in dir. Every refusal matches ErrAdmission (and
// module path refusals also ErrModuleRefused); other errors are I/O failures.
func Load(dir string) (*Package, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolving skill package folder %q: %w", dir, err)
	}
	root, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &AdmissionError{File: ".", Rule: fmt.Sprintf("package folder %s does not exist", abs)}
		}
		return nil, fmt.Errorf("resolving skill package folder %q: %w", dir, err)
	}
	if info, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("reading skill package folder %q: %w", root, err)
	} else if !info.IsDir() {
		return nil, &AdmissionError{File: ".", Rule: fmt.Sprintf("%s must be a folder", abs)}
	}
	pkg := &Package{Dir: root}

	data, err := readContained(root, SkillFile, true)
	if err != nil {
		return nil, err
	}
	if pkg.Skill, pkg.Manual, err = ParseSkillMarkdown(data); err != nil {
		return nil, err
	}

	xdata, err := readContained(root, XManifestFile, false)
	if err != nil {
		return nil, err
	}
	ydata, err := readContained(root, RunnerFile, false)
	if err != nil {
		return nil, err
	}
	file := XManifestFile
	switch {
	case xdata != nil && ydata != nil:
		// Silently preferring one would run what the author did not edit.
		return nil, &AdmissionError{File: ".", Rule: fmt.Sprintf("holds both %s (runx's manifest) and %s (libos's name for it); keep exactly one", XManifestFile, RunnerFile)}
	case ydata != nil:
		xdata, file = ydata, RunnerFile
	}
	if xdata != nil {
		if pkg.Manifest, err = ParseManifest(file, xdata); err != nil {
			return nil, err
		}
		// runx requires the manifest's skill, when given, to be the
		// SKILL.md name: otherwise the runners would be published and
		// found under a name the manual does not carry.
		if m := pkg.Manifest; m.Skill != "" && m.Skill != pkg.Skill.Name {
			return nil, &AdmissionError{File: file, Line: m.skillLine, Field: "skill", Rule: fmt.Sprintf("manifest skill %q does not match SKILL.md name %q", m.Skill, pkg.Skill.Name)}
		}
		pkg.Runners = pkg.Manifest.Runners
		for _, r := range pkg.Runners {
			if err := checkModule(root, r); err != nil {
				return nil, err
			}
		}
	}

	if pkg.Tools, err = loadTools(root); err != nil {
		return nil, err
	}
	return pkg, nil
}

// checkModule confirms on disk that a javascript runner's module is a regular
// file that stays inside the package after symlinks are resolved.
// The error names the manifest, line and field recorded when the runner
// was parsed (Runner.ModuleAt).
func checkModule(root string, r *Runner) error {
	if r.Type != TypeJavaScript {
		return nil
	}
	fail := func(format string, args ...any) error {
		return r.ModuleAt.ModuleError(format, args...)
	}
	full := filepath.Join(root, filepath.FromSlash(r.Module))
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fail("names %s, which does not exist", r.Module)
		}
		return fail("names %s, which cannot be resolved: %v", r.Module, err)
	}
	if !inside(root, real) {
		return fail("names %s, which resolves through a symlink to %s outside the package", r.Module, real)
	}
	info, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("reading module %s: %w", r.Module, err)
	}
	if !info.Mode().IsRegular() {
		return fail("names %s, which is not a regular file", r.Module)
	}
	return nil
}

// readContained reads a package-relative file, refusing one that resolves
// outside the package or is not a regular file. A missing optional file
// yields nil data and no error.
func readContained(root, rel string, required bool) ([]byte, error) {
	full := filepath.Join(root, filepath.FromSlash(rel))
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if required {
				return nil, &AdmissionError{File: rel, Rule: "is required and does not exist"}
			}
			return nil, nil
		}
		return nil, fmt.Errorf("resolving %s: %w", rel, err)
	}
	if !inside(root, real) {
		return nil, &AdmissionError{File: rel, Rule: fmt.Sprintf("resolves through a symlink to %s outside the package", real)}
	}
	// Checked before opening: opening a FIFO waits for a writer, so a
	// package holding one would stall admission for ever. OpenRegular checks
	// again on the descriptor, against a swap after this check.
	if info, err := os.Lstat(real); err != nil {
		return nil, fmt.Errorf("reading %s: %w", rel, err)
	} else if !info.Mode().IsRegular() {
		return nil, &AdmissionError{File: rel, Rule: "must be a regular file"}
	}
	f, err := OpenRegular(os.OpenFile, real)
	if errors.Is(err, ErrNotRegular) {
		return nil, &AdmissionError{File: rel, Rule: "must be a regular file"}
	} else if err != nil {
		return nil, fmt.Errorf("opening %s: %w", rel, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", rel, err)
	}
	if len(data) > MaxManifestBytes {
		return nil, &AdmissionError{File: rel, Rule: fmt.Sprintf("must be at most %d bytes", MaxManifestBytes)}
	}
	return data, nil
}

// loadTools admits tools/<namespace>/<tool>/manifest.json, and as runx
// does a manifest.json nested deeper in a tool folder, a tool named by the
// dotted path of its folders (tools/ns/t/sub is ns.t.sub). Plain files among
// the namespace and tool folders are ignored, except a manifest.json placed
// there: a tool the author meant to bundle would otherwise silently vanish.
// For the same reason a tool folder with no manifest at or below it is
// refused, as is any of these folders resolving outside the package.
func loadTools(root string) ([]*Tool, error) {
	toolsDir := filepath.Join(root, "tools")
	if _, err := os.Lstat(toolsDir); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err := containedDir(root, "tools"); err != nil {
		return nil, err
	}
	namespaces, err := os.ReadDir(toolsDir)
	if err != nil {
		return nil, fmt.Errorf("listing tools: %w", err)
	}
	var tools []*Tool
	for _, ns := range namespaces {
		nsRel := "tools/" + ns.Name()
		isDir, err := dirEntryIsDir(root, nsRel)
		if err != nil {
			return nil, err
		}
		if !isDir {
			if ns.Name() == ToolManifestFile {
				return nil, misplacedManifest(nsRel)
			}
			continue
		}
		if err := containedDir(root, nsRel); err != nil {
			return nil, err
		}
		entries, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(nsRel)))
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", nsRel, err)
		}
		for _, t := range entries {
			toolRel := nsRel + "/" + t.Name()
			isDir, err := dirEntryIsDir(root, toolRel)
			if err != nil {
				return nil, err
			}
			if !isDir {
				if t.Name() == ToolManifestFile {
					return nil, misplacedManifest(toolRel)
				}
				continue
			}
			if err := containedDir(root, toolRel); err != nil {
				return nil, err
			}
			before := len(tools)
			if tools, err = loadToolFolder(root, ns.Name(), []string{t.Name()}, tools); err != nil {
				return nil, err
			}
			if len(tools) == before {
				return nil, &AdmissionError{File: toolRel + "/" + ToolManifestFile, Rule: "is required and does not exist"}
			}
		}
	}
	sort.Slice(tools, func(i, j int) bool { return tools[i].Name < tools[j].Name })
	return tools, nil
}

// loadToolFolder appends the tool whose manifest is in the folder
// tools/<namespace>/<folders...>, if any, and those nested below it. A
// symlinked subfolder is not followed: the tool and namespace folders are
// the ones confined (containedDir), and what a link inside a tool reaches
// is package source, bound by the tool's closure. A subfolder holding a
// SKILL.md is a nested package, which answers for its own tools.
func loadToolFolder(root, namespace string, folders []string, tools []*Tool) ([]*Tool, error) {
	rel := "tools/" + namespace + "/" + strings.Join(folders, "/")
	entries, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", rel, err)
	}
	for _, e := range entries {
		if e.Name() != ToolManifestFile {
			continue
		}
		manifestRel := rel + "/" + ToolManifestFile
		data, err := readContained(root, manifestRel, true)
		if err != nil {
			return nil, err
		}
		tool, err := parseToolManifest(namespace, folders, data)
		if err != nil {
			return nil, err
		}
		if err := checkModule(root, tool.Runner); err != nil {
			return nil, err
		}
		tools = append(tools, tool)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		sub := rel + "/" + e.Name()
		if _, err := os.Lstat(filepath.Join(root, filepath.FromSlash(sub), SkillFile)); err == nil {
			continue
		}
		if tools, err = loadToolFolder(root, namespace, append(slices.Clip(folders), e.Name()), tools); err != nil {
			return nil, err
		}
	}
	return tools, nil
}

func misplacedManifest(rel string) error {
	return &AdmissionError{File: rel, Rule: "bundled tool manifests must be at tools/<namespace>/<tool>/" + ToolManifestFile + "; move it into its tool's folder"}
}

// dirEntryIsDir reports whether a package-relative path is a folder,
// following symlinks (whose targets containedDir then checks).
func dirEntryIsDir(root, rel string) (bool, error) {
	info, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// A dangling symlink: nothing to admit, but refuse it rather than
			// silently dropping what may be a tool.
			return false, &AdmissionError{File: rel, Rule: "is a symlink to nothing"}
		}
		return false, fmt.Errorf("reading %s: %w", rel, err)
	}
	return info.IsDir(), nil
}

func containedDir(root, rel string) error {
	real, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &AdmissionError{File: rel, Rule: "is a symlink to nothing"}
		}
		return fmt.Errorf("resolving %s: %w", rel, err)
	}
	if !inside(root, real) {
		return &AdmissionError{File: rel, Rule: fmt.Sprintf("resolves through a symlink to %s outside the package", real)}
	}
	info, err := os.Stat(real)
	if err != nil {
		return fmt.Errorf("reading %s: %w", rel, err)
	}
	if !info.IsDir() {
		return &AdmissionError{File: rel, Rule: "must be a folder"}
	}
	return nil
}

// inside reports whether path p (absolute, symlinks resolved) is root or
// below it.
func inside(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}
