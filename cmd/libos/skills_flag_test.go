package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libos/libos/skills/catalog"
)

func TestSkillsFlagLoadsCatalog(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	skills := registerSkillsFlag(fs)
	if err := fs.Parse([]string{"--skills", "../../testdata/skills/agent/echo", "--skills", "../../testdata/skills/agent/tally"}); err != nil {
		t.Fatal(err)
	}
	for _, d := range skills.dirs {
		if !filepath.IsAbs(d) {
			t.Fatalf("--skills kept a relative folder %q", d)
		}
	}
	if err := fs.Parse([]string{"--skills", ""}); err == nil {
		t.Fatal("an empty --skills folder must be refused")
	}
	cat, err := loadSkillCatalog(skills.dirs)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	var names []string
	for _, s := range cat.Skills() {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "agent-libos-runtime-session,echo,tally" {
		t.Fatalf("skills %v", names)
	}
}

func TestSkillsFlagRefusesBuiltinToolNames(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sleep")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: sleep\n---\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "skill.yaml"), []byte("run:\n  type: cli-tool\n  command: cat\n"), 0o644)
	_, err := loadSkillCatalog([]string{dir})
	if !errors.Is(err, catalog.ErrNameCollision) || !strings.Contains(err.Error(), "--skills") || !strings.Contains(err.Error(), "the built-in tool sleep") {
		t.Fatalf("want a collision with the built-in sleep, got %v", err)
	}
}
