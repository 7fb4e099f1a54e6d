package quantum

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoIO keeps the core pure: it imports nothing that reaches a disk, a
// network, a database or the clock (time is an input).
func TestNoIO(t *testing.T) {
	allowed := map[string]bool{"encoding/json": true, "fmt": true, "slices": true, "time": true}
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(src), "time.Now(") || strings.Contains(string(src), "time.Since(") {
			t.Errorf("%s reads the clock: time is an input of the core", f)
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowed[path] {
				t.Errorf("%s imports %s: the quantum core does no I/O", f, path)
			}
		}
	}
}
