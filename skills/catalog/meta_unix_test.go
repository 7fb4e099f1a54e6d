//go:build unix

package catalog_test

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/libos/libos/skills/catalog"
	"github.com/libos/libos/tools"
)

// A FIFO in a package is refused without being opened: opening it for
// reading would block until a writer came.
func TestReadSkillResourceRefusesFIFO(t *testing.T) {
	dir, _ := resourcePackage(t)
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := catalog.LoadCatalog([]string{dir}, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = call(t, metaTool(t, "read_skill_resource"), &fakeSys{skills: c.Skills()}, `{"name": "echo", "path": "pipe"}`)
	wantToolError(t, err, tools.CodeInvalidArguments, "path:", "not a regular file")
}
