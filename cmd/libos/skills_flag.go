package main

import (
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"slices"
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
	fs.Var(f, "skills", "load skill packages from `DIR` (repeatable): DIR itself when it holds a SKILL.md, else each folder directly inside it that does")
	return f
}

// runFlags are a run's settings beyond its provider: the skill folders and
// full-I/O retention. resume and serve take them too, to correct what a run
// recorded: a recorded folder that moved would otherwise stop every resume.
type runFlags struct {
	skills   *skillDirsFlag
	retainIO *bool
}

// registerRunFlags adds --skills and --retain-io to fs; recorded says they
// correct a recorded run's settings (resume, serve), for the help.
func registerRunFlags(fs *flag.FlagSet, recorded bool) runFlags {
	skills := registerSkillsFlag(fs)
	retain := "retain full provider I/O and tool results as durable evidence (context and goal recovery after a reopen need it)"
	if recorded {
		f := fs.Lookup("skills")
		f.Usage += "; given, they replace the folders the run recorded"
		retain += "; not given: as the run recorded"
	}
	return runFlags{skills: skills, retainIO: fs.Bool("retain-io", true, retain)}
}

// given reports whether fs was given one of the flags by name.
func given(fs *flag.FlagSet, names ...string) bool {
	found := false
	fs.Visit(func(fl *flag.Flag) { found = found || slices.Contains(names, fl.Name) })
	return found
}

// givenAny reports whether fs was given --skills or --retain-io.
func (f runFlags) givenAny(fs *flag.FlagSet) bool { return given(fs, "skills", "retain-io") }

// apply writes into s the flags fs was given, or all of them for a new run,
// whose defaults are settings too.
func (f runFlags) apply(fs *flag.FlagSet, s *runSettings, all bool) {
	if all || given(fs, "skills") {
		s.SkillDirs = f.skills.dirs
	}
	if all || given(fs, "retain-io") {
		s.NoFullIO = !*f.retainIO
	}
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
