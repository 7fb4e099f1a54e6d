// Package builtin holds the skill packages built into the libos binary. Each
// top-level folder is one package (a SKILL.md and, optionally, a skill.yaml);
// they are read from the embedded file system, never from disk, so a
// built-in skill is the same in every runtime.
package builtin

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
)

//go:embed runtime-session
var builtin embed.FS

// FS returns the embedded packages; each top-level folder is one package.
func FS() fs.FS { return builtin }

// Folders lists the top-level package folders, sorted.
func Folders() []string {
	entries, err := fs.ReadDir(builtin, ".")
	if err != nil {
		// The embedded tree is fixed at build time; failing to list it is a
		// build defect, not a runtime condition.
		panic(fmt.Sprintf("built-in skills: %v", err))
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}
