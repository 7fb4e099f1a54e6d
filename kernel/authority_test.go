package kernel

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/tools"
)

// Every built-in tool has an entry in the authority table: a tool the table
// does not know could check, or skip, whatever it liked.
func TestEveryBuiltinToolHasAnAuthorityEntry(t *testing.T) {
	for _, tl := range BuiltinTools(tools.Config{}) {
		ops, ok := authority.ToolOps(tl.Name)
		if !ok {
			t.Errorf("tool %s has no entry in the authority table (authority/authority.go, toolOps)", tl.Name)
			continue
		}
		for _, op := range ops {
			if _, ok := authority.Lookup(op); !ok {
				t.Errorf("tool %s names %s, which the table lacks", tl.Name, op)
			}
		}
	}
}

// authorityDeciders are the only functions that decide a grant: the
// kernel's one check (decide, and apply and permits around it), the report
// of which grant decides an operation of the table (Holding), the one-shot
// bookkeeping of handing uses down to a child, and the tool fake's own
// Require and Holding. Everything else goes through the table.
var authorityDeciders = map[string][]string{
	"kernel/syscalls.go":       {"check", "decideEach", "decide", "decideOn", "handScopeUsesDown"},
	"kernel/tree.go":           {"transferOneShots"},
	"tools/toolstest/roles.go": {"Require", "Holding"},
}

// TestAuthorityOnlyThroughTheTable reads the kernel's, the tools' and the
// skill catalog's source: no function outside authorityDeciders decides a
// grant (capabilities.Check or Approved, the kernel's decide or apply), so
// no tool or kernel stage checks a right the table does not state.
func TestAuthorityOnlyThroughTheTable(t *testing.T) {
	var files []string
	for _, dir := range []string{".", "../tools", "../skills/catalog"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			files = append(files, path)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		rel := filepath.ToSlash(path)
		if strings.HasPrefix(rel, "../") {
			rel = strings.TrimPrefix(rel, "../")
		} else {
			rel = "kernel/" + rel
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || slices.Contains(authorityDeciders[rel], fn.Name.Name) {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				x, _ := sel.X.(*ast.Ident)
				pkgCall := x != nil && x.Name == "capabilities" && (sel.Sel.Name == "Check" || sel.Sel.Name == "Approved")
				kernelCall := strings.HasPrefix(rel, "kernel/") && (sel.Sel.Name == "decide" || sel.Sel.Name == "apply")
				if pkgCall || kernelCall {
					t.Errorf("%s: %s decides authority itself (%s); name an operation of the authority table and check it with Require, require or permits",
						fset.Position(call.Pos()), fn.Name.Name, sel.Sel.Name)
				}
				return true
			})
		}
	}
}
