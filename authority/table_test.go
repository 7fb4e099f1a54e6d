package authority

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// TestEveryOpHasOneEntry parses this package's source: every declared Op
// has exactly one entry in the table, and every entry states its needs
// for any Params without a malformed template.
func TestEveryOpHasOneEntry(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "authority.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []Op
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, ok := spec.Type.(*ast.Ident); !ok || id.Name != "Op" {
			return true
		}
		for _, v := range spec.Values {
			s, err := strconv.Unquote(v.(*ast.BasicLit).Value)
			if err != nil {
				t.Fatal(err)
			}
			declared = append(declared, Op(s))
		}
		return true
	})
	if len(declared) != len(table) {
		t.Errorf("%d operations declared, %d entries in the table", len(declared), len(table))
	}
	seen := map[Op]bool{}
	for _, e := range table {
		if seen[e.Op] {
			t.Errorf("%s has two entries", e.Op)
		}
		seen[e.Op] = true
		all := Params{OID: "o", Namespace: "n", Image: "i:v0", OwnImage: "j:v0", PID: 1, Scope: "s"}
		reqs, err := Requirements(e.Op, all)
		if err != nil || len(reqs) != len(e.Needs) {
			t.Errorf("%s with every parameter: %v %v", e.Op, reqs, err)
		}
		for _, n := range e.Needs {
			if !n.Right.Valid() || len(n.Names) == 0 {
				t.Errorf("%s: a need of %q on %v", e.Op, n.Right, n.Names)
			}
		}
		if len(e.Needs) == 0 && e.Rule == "" {
			t.Errorf("%s needs no right and states no rule: say what decides it", e.Op)
		}
	}
	for _, op := range declared {
		if !seen[op] {
			t.Errorf("operation %s has no entry in the table", op)
		}
	}
	for name, ops := range toolOps {
		for _, op := range ops {
			if !seen[op] {
				t.Errorf("tool %s names %s, which has no entry", name, op)
			}
		}
	}
	for _, op := range append(append([]Op(nil), RunnerOps...), AgentTaskOps...) {
		if !seen[op] {
			t.Errorf("skill runner tools name %s, which has no entry", op)
		}
	}
}

// The table is pure: it imports capabilities and the standard library only.
func TestPure(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "authority.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"errors": true, "fmt": true, "strconv": true, "strings": true, "github.com/libos/libos/capabilities": true}
	for _, im := range f.Imports {
		if p, _ := strconv.Unquote(im.Path.Value); !allowed[p] {
			t.Errorf("authority imports %s", p)
		}
	}
}
