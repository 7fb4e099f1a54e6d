package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/skills/catalog"
	"github.com/libos/libos/tools"
)

// skillDirsFlag collects repeated --skills DIR flags. Folders are made
// absolute when parsed, so what a run loaded can be named again later
// whatever the working directory then is.
type skillDirsFlag struct {
	dirs []string
}

func (f *skillDirsFlag) String() string { return strings.Join(f.dirs, string(filepath.ListSeparator)) }

// Set adds one folder.
func (f *skillDirsFlag) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("--skills: the folder must not be empty")
	}
	abs, err := filepath.Abs(v)
	if err != nil {
		return fmt.Errorf("--skills %q: %w", v, err)
	}
	f.dirs = append(f.dirs, abs)
	return nil
}

// registerSkillsFlag adds the repeatable --skills flag to fs.
func registerSkillsFlag(fs *flag.FlagSet) *skillDirsFlag {
	f := &skillDirsFlag{}
	fs.Var(f, "skills", "load skill packages from DIR (repeatable): DIR itself when it holds a SKILL.md, else each folder directly inside it that does")
	return f
}

// loadSkillCatalog admits the built-in skills and the packages of dirs for a
// runtime's kernel.Options.Skills. Skill tools may not take a built-in
// tool's name; runners see the workspace RUNX_CWD, else INIT_CWD, else the
// current directory; javascript runners run in workers that are this binary
// re-executed (main calls jsrunner.MaybeRunWorker first). The caller closes
// the catalog after the runtime.
func loadSkillCatalog(dirs []string) (*catalog.Catalog, error) {
	builtins := kernel.BuiltinTools(tools.Config{})
	reserved := make([]string, len(builtins))
	for i, t := range builtins {
		reserved[i] = t.Name
	}
	c, err := catalog.LoadCatalog(dirs, catalog.CatalogOptions{ReservedToolNames: reserved})
	if err != nil {
		return nil, fmt.Errorf("--skills: %w", err)
	}
	return c, nil
}
