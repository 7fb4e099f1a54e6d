package datadriven

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDataDrivenParser(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "script.txt")
	script := "# head\ncmd a b=c\nin1\nin2\n----\nout1\nout2\n\nother\n----\n----\nx\n\ny\n----\n----\n"
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	chunks := parse(t, path)
	var cases []*Case
	for _, ch := range chunks {
		if ch.c != nil {
			cases = append(cases, ch.c)
		}
	}
	if len(cases) != 2 {
		t.Fatalf("parsed %d cases, want 2", len(cases))
	}
	first := cases[0]
	if first.Cmd != "cmd" || first.Input != "in1\nin2" || first.Expected != "out1\nout2" {
		t.Fatalf("first case parsed as %+v", first)
	}
	if v, ok := first.Arg("b"); !ok || v != "c" {
		t.Fatalf("arg b = %q, %v", v, ok)
	}
	if w := first.Words(); len(w) != 1 || w[0] != "a" {
		t.Fatalf("words = %q", w)
	}
	if cases[1].Expected != "x\n\ny" {
		t.Fatalf("multi-line expectation parsed as %q", cases[1].Expected)
	}
	var out strings.Builder
	for _, ch := range chunks {
		if ch.c == nil {
			out.WriteString(ch.text + "\n")
			continue
		}
		writeCase(&out, ch.c, ch.c.Expected)
	}
	if got := strings.TrimRight(out.String(), "\n") + "\n"; got != script {
		t.Fatalf("rewrite does not round-trip:\n%s", got)
	}
}
