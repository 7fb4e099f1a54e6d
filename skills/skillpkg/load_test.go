package skillpkg

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTree creates files (path -> content) below dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const skillMD = "---\nname: sample\ndescription: A sample.\n---\n# Sample\n"

func TestLoadFullPackage(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"SKILL.md": skillMD,
		"skill.yaml": `runners:
  score:
    default: true
    type: javascript
    module: lib/score.mjs
  shell:
    type: cli-tool
    command: ./bin/run.sh
    cwd: /somewhere/outside
`,
		"lib/score.mjs":                  "export default () => 1;\n",
		"tools/git/log/manifest.json":    `{"name": "git.log", "runner": {"type": "javascript", "module": "index.mjs"}}`,
		"tools/git/log/index.mjs":        "export default () => 2;\n",
		"tools/git/status/manifest.json": `{"name": "git.status", "runner": {"type": "cli-tool", "command": "git", "args": ["status"]}}`,
		"tools/README.md":                "ignored\n",
		"tools/git/NOTES":                "ignored\n",
	})
	pkg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(dir)
	if pkg.Dir != real || pkg.Skill.Name != "sample" || pkg.Manual != "# Sample\n" {
		t.Fatalf("package = %+v", pkg)
	}
	def, err := pkg.Runner("")
	if err != nil || def.Name != "score" {
		t.Fatalf("default runner = %+v, %v", def, err)
	}
	sh, err := pkg.Runner("shell")
	if err != nil || sh.Cwd != "/somewhere/outside" {
		t.Fatalf("shell runner = %+v, %v", sh, err)
	}
	if _, err := pkg.Runner("nope"); !errors.Is(err, ErrNoSuchRunner) || !strings.Contains(err.Error(), "runners: score, shell") {
		t.Fatalf("Runner(nope) error = %v", err)
	}
	if len(pkg.Tools) != 2 || pkg.Tools[0].Name != "git.log" || pkg.Tools[1].Name != "git.status" {
		t.Fatalf("tools = %+v", pkg.Tools)
	}
	if tool, ok := pkg.Tool("git.log"); !ok || tool.Runner.Module != "tools/git/log/index.mjs" {
		t.Fatalf("Tool(git.log) = %+v, %v", tool, ok)
	}
}

func TestLoadWithoutRunnerManifest(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"SKILL.md": skillMD})
	pkg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.Runners) != 0 || len(pkg.Tools) != 0 {
		t.Fatalf("package = %+v", pkg)
	}
	if _, err := pkg.Runner(""); !errors.Is(err, ErrNoSuchRunner) {
		t.Fatalf("Runner on a package without skill.yaml: %v", err)
	}
}

func TestLoadRefuses(t *testing.T) {
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{
		"evil.mjs":               "export default () => 0;\n",
		"SKILL.md":               skillMD,
		"ns/tool/manifest.json":  `{"name": "ns.tool", "runner": {"type": "cli-tool", "command": "x"}}`,
		"tool/manifest.json":     `{"name": "ns.tool", "runner": {"type": "cli-tool", "command": "x"}}`,
		"plain-dir/placeholder":  "",
		"lib/deep/placeholder":   "",
		"lib/deep/inner.mjs":     "export default 1;\n",
		"manifest/manifest.json": "{}",
	})
	tests := []struct {
		name    string
		files   map[string]string
		links   map[string]string // link path -> target (absolute, or relative to the link)
		wantErr string
		module  bool
	}{
		{name: "missing SKILL.md", files: map[string]string{"skill.yaml": "run: {type: cli-tool, command: x}\n"}, wantErr: "SKILL.md: is required and does not exist"},
		{name: "SKILL.md is a folder", files: map[string]string{"SKILL.md/x": ""}, wantErr: "SKILL.md: must be a regular file"},
		{name: "SKILL.md symlinked outside", links: map[string]string{"SKILL.md": filepath.Join(outside, "SKILL.md")}, wantErr: "SKILL.md: resolves through a symlink"},
		{name: "bad skill.yaml", files: map[string]string{"SKILL.md": skillMD, "skill.yaml": "run: {type: cli-tool}\n"}, wantErr: "skill.yaml:1: run.command: is required"},
		{name: "module missing", files: map[string]string{"SKILL.md": skillMD, "skill.yaml": "run: {type: javascript, module: m.mjs}\n"}, wantErr: "skill.yaml:1: run.module: names m.mjs, which does not exist", module: true},
		{name: "module is a folder", files: map[string]string{"SKILL.md": skillMD, "skill.yaml": "run: {type: javascript, module: m.mjs}\n", "m.mjs/x": ""}, wantErr: "which is not a regular file", module: true},
		{
			name:    "module symlinked outside",
			files:   map[string]string{"SKILL.md": skillMD, "skill.yaml": "runners:\n  a: {type: javascript, module: m.mjs, default: true}\n"},
			links:   map[string]string{"m.mjs": filepath.Join(outside, "evil.mjs")},
			wantErr: "skill.yaml:2: runners.a.module: names m.mjs, which resolves through a symlink", module: true,
		},
		{
			name:    "module under a folder symlinked outside",
			files:   map[string]string{"SKILL.md": skillMD, "skill.yaml": "run: {type: javascript, module: lib/deep/inner.mjs}\n"},
			links:   map[string]string{"lib": filepath.Join(outside, "lib")},
			wantErr: "resolves through a symlink", module: true,
		},
		{
			name:    "tools folder symlinked outside",
			files:   map[string]string{"SKILL.md": skillMD},
			links:   map[string]string{"tools": outside},
			wantErr: "tools: resolves through a symlink",
		},
		{
			name:    "tool folder symlinked outside",
			files:   map[string]string{"SKILL.md": skillMD, "tools/ns/.keep": ""},
			links:   map[string]string{"tools/ns/tool": filepath.Join(outside, "tool")},
			wantErr: "tools/ns/tool: resolves through a symlink",
		},
		{
			name:    "tool manifest symlinked outside",
			files:   map[string]string{"SKILL.md": skillMD, "tools/ns/tool/.keep": ""},
			links:   map[string]string{"tools/ns/tool/manifest.json": filepath.Join(outside, "ns/tool/manifest.json")},
			wantErr: "tools/ns/tool/manifest.json: resolves through a symlink",
		},
		{
			name:    "dangling symlink among tools",
			files:   map[string]string{"SKILL.md": skillMD, "tools/ns/.keep": ""},
			links:   map[string]string{"tools/ns/gone": filepath.Join(outside, "does-not-exist")},
			wantErr: "tools/ns/gone: is a symlink to nothing",
		},
		{name: "tool manifest in the namespace folder", files: map[string]string{"SKILL.md": skillMD, "tools/ns/manifest.json": "{}"}, wantErr: "tools/ns/manifest.json: bundled tool manifests must be at tools/<namespace>/<tool>/manifest.json"},
		{name: "tool manifest in the tools folder", files: map[string]string{"SKILL.md": skillMD, "tools/manifest.json": "{}"}, wantErr: "tools/manifest.json: bundled tool manifests must be at tools/<namespace>/<tool>/manifest.json"},
		{name: "tool folder without manifest", files: map[string]string{"SKILL.md": skillMD, "tools/ns/tool/index.mjs": ""}, wantErr: "tools/ns/tool/manifest.json: is required and does not exist"},
		{name: "tool name mismatch", files: map[string]string{"SKILL.md": skillMD, "tools/ns/tool/manifest.json": `{"name": "ns.other", "runner": {"type": "cli-tool", "command": "x"}}`}, wantErr: `tools/ns/tool/manifest.json:1: name: must be "ns.tool"`},
		{
			name: "tool module symlinked outside",
			files: map[string]string{"SKILL.md": skillMD,
				"tools/ns/tool/manifest.json": `{"name": "ns.tool", "runner": {"type": "javascript", "module": "m.mjs"}}`},
			links:   map[string]string{"tools/ns/tool/m.mjs": filepath.Join(outside, "evil.mjs")},
			wantErr: "tools/ns/tool/manifest.json:1: runner.module: names tools/ns/tool/m.mjs, which resolves through a symlink", module: true,
		},
		// runx's form declares the module in source: that is the field named.
		{
			name: "runx-form tool module missing",
			files: map[string]string{"SKILL.md": skillMD,
				"tools/ns/tool/manifest.json": `{"schema": "runx.tool.manifest.v1", "name": "ns.tool", "source": {"type": "javascript", "module": "m.mjs"}}`},
			wantErr: "tools/ns/tool/manifest.json:1: source.module: names tools/ns/tool/m.mjs, which does not exist", module: true,
		},
		{
			name: "runx-form nested tool module symlinked outside",
			files: map[string]string{"SKILL.md": skillMD,
				"tools/ns/tool/manifest.json":     `{"name": "ns.tool", "runner": {"type": "cli-tool", "command": "x"}}`,
				"tools/ns/tool/sub/manifest.json": `{"schema": "runx.tool.manifest.v1", "name": "ns.tool.sub", "source": {"type": "javascript", "module": "m.mjs"}}`},
			links:   map[string]string{"tools/ns/tool/sub/m.mjs": filepath.Join(outside, "evil.mjs")},
			wantErr: "tools/ns/tool/sub/manifest.json:1: source.module: names tools/ns/tool/sub/m.mjs, which resolves through a symlink", module: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, tc.files)
			for link, target := range tc.links {
				full := filepath.Join(dir, filepath.FromSlash(link))
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, full); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Load error = %v, want %q", err, tc.wantErr)
			}
			if !errors.Is(err, ErrAdmission) {
				t.Fatalf("error %v does not match ErrAdmission", err)
			}
			if errors.Is(err, ErrModuleRefused) != tc.module {
				t.Fatalf("error %v: ErrModuleRefused match = %v, want %v", err, !tc.module, tc.module)
			}
		})
	}
}

func TestLoadFollowsSymlinksThatStayInside(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"SKILL.md":       skillMD,
		"skill.yaml":     "run: {type: javascript, module: current.mjs}\n",
		"v2/main.mjs":    "export default () => 1;\n",
		"shared/doc.txt": "",
	})
	if err := os.Symlink("v2/main.mjs", filepath.Join(dir, "current.mjs")); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err != nil {
		t.Fatal(err)
	}
}

func TestLoadMissingFolder(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope"))
	if !errors.Is(err, ErrAdmission) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Load of a missing folder: %v", err)
	}
}
