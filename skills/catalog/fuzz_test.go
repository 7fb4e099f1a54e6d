package catalog

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadSkillResource feeds read_skill_resource paths to the path rule
// and the package reader: an accepted path is a clean relative path, and
// nothing outside the package is ever returned, whatever links it holds.
func FuzzReadSkillResource(f *testing.F) {
	for _, seed := range []string{"SKILL.md", "docs/a.md", "../secret", "docs/../../secret", "out/secret", "abs", "docs/./a.md", "/etc/passwd", "docs//a.md", `docs\a.md`, "docs/up/secret", "a\x00b", ".", "..", ""} {
		f.Add(seed)
	}
	root := f.TempDir()
	secret := []byte("SECRET-OUTSIDE-THE-PACKAGE")
	if err := os.WriteFile(filepath.Join(root, "secret"), secret, 0o644); err != nil {
		f.Fatal(err)
	}
	pkg := filepath.Join(root, "pkg")
	for rel, body := range map[string]string{"SKILL.md": "---\nname: p\n---\n", "docs/a.md": "inside"} {
		p := filepath.Join(pkg, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	for link, target := range map[string]string{"abs": filepath.Join(root, "secret"), "out": "..", "docs/up": "../.."} {
		if err := os.Symlink(target, filepath.Join(pkg, filepath.FromSlash(link))); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, p string) {
		if resourcePathRule(p) != "" {
			return
		}
		if !fs.ValidPath(p) || p == "." || strings.Contains("/"+p+"/", "/../") {
			t.Fatalf("accepted path %q is not a clean relative path", p)
		}
		data, err := readPackageFile(pkg, p, MaxResourceBytes)
		if err == nil && bytes.Contains(data, secret) {
			t.Fatalf("path %q read a file outside the package", p)
		}
	})
}
