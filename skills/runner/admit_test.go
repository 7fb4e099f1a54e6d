package runner

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libos/libos/skills/runner/jsrunner"
	"github.com/libos/libos/skills/skillpkg"
)

// jsFixtures is the folder of the javascript fixtures.
const jsFixtures = "../../testdata/skills/js"

// copyTree copies the folder src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// escapingPackages returns the fixture packages whose module graph leaves
// the package, with the import each error must name. The symlink case is a
// temporary copy in which lib/linked.mjs links to a file outside it.
func escapingPackages(t *testing.T) map[string]string {
	t.Helper()
	outside, err := filepath.Abs(filepath.Join(jsFixtures, "outside.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(t.TempDir(), "escape-symlink")
	copyTree(t, filepath.Join(jsFixtures, "escape-symlink"), linked)
	if err := os.Symlink(outside, filepath.Join(linked, "lib", "linked.mjs")); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		filepath.Join(jsFixtures, "escape-parent"):   `"../../outside.mjs"`,
		filepath.Join(jsFixtures, "escape-absolute"): `"/etc/libos-outside.mjs"`,
		linked: `"./lib/linked.mjs"`,
	}
}

func TestAdmitRefusesModuleGraphsThatLeaveThePackage(t *testing.T) {
	pool := sharedPool(t)
	for dir, spec := range escapingPackages(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			// The package itself is well-formed: only its module graph leaves it.
			pkg, err := skillpkg.Load(dir)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			_, err = Admit(dir)
			var graph *ModuleGraphError
			if !errors.As(err, &graph) || !errors.Is(err, skillpkg.ErrAdmission) || !errors.Is(err, skillpkg.ErrModuleRefused) {
				t.Fatalf("Admit error = %v, want a *ModuleGraphError", err)
			}
			if graph.Runner != skillpkg.DefaultRunnerName || graph.Module != "main.mjs" || !strings.Contains(err.Error(), spec) {
				t.Fatalf("Admit error = %v, want runner default, module main.mjs and the import %s", err, spec)
			}
			refused := Refused(err)
			if refused.Error.Code != CodeModuleRejected || !strings.Contains(refused.Error.Message, spec) || !strings.Contains(refused.Error.Message, "refused") {
				t.Fatalf("refusal = %+v", refused.Error)
			}
			// A run of the same runner fails with exactly the same error.
			ran := Run(context.Background(), pkg, "", nil, RunOptions{Workspace: t.TempDir(), LookupEnv: hostLookup(nil), JavaScript: pool})
			if ran.Error == nil || *ran.Error != *refused.Error {
				t.Fatalf("run error = %+v, admission error = %+v", ran.Error, refused.Error)
			}
		})
	}
}

func TestAdmitChecksBundledToolsAndAdmitsCleanGraphs(t *testing.T) {
	pkg := writePackage(t, map[string]string{
		"SKILL.md":                      "---\nname: tools\n---\n",
		"skill.yaml":                    "run: {type: javascript, module: main.mjs}\n",
		"main.mjs":                      "import { x } from \"./lib/x.mjs\";\nexport default () => ({ x });\n",
		"lib/x.mjs":                     "export const x = 1;\n",
		"tools/ns/t/manifest.json":      `{"name": "ns.t", "runner": {"type": "javascript", "module": "index.mjs"}}`,
		"tools/ns/t/index.mjs":          "import { y } from \"./y.mjs\";\nexport default () => ({ y });\n",
		"tools/ns/t/y.mjs":              "export const y = 2;\n",
		"tools/ns/bad/manifest.json":    `{"name": "ns.bad", "runner": {"type": "javascript", "module": "index.mjs"}}`,
		"tools/ns/bad/index.mjs":        "import { z } from \"../../../../z.mjs\";\nexport default () => ({ z });\n",
		"tools/ns/ok-cli/manifest.json": `{"name": "ns.ok-cli", "runner": {"type": "cli-tool", "command": "cat"}}`,
	})
	_, err := Admit(pkg.Dir)
	var graph *ModuleGraphError
	if !errors.As(err, &graph) || graph.Runner != "ns.bad" || graph.Module != "tools/ns/bad/index.mjs" || !strings.Contains(err.Error(), `"../../../../z.mjs"`) {
		t.Fatalf("Admit error = %v", err)
	}
	var failure *jsrunner.Failure
	if !errors.As(err, &failure) || failure.Code != jsrunner.CodeModuleRejected {
		t.Fatalf("the error does not unwrap to the runner's failure: %v", err)
	}

	if err := os.RemoveAll(filepath.Join(pkg.Dir, "tools", "ns", "bad")); err != nil {
		t.Fatal(err)
	}
	admitted, err := Admit(pkg.Dir)
	if err != nil || len(admitted.Tools) != 2 {
		t.Fatalf("Admit of a clean package = %v, %v", admitted, err)
	}
}

// A manifest.json deeper than tools/<namespace>/<tool>/ is a bundled tool
// too, as runx reads it: its name is the dotted path of the folders below
// tools/, and it is admitted (closure included) like any other, never
// silently skipped.
func TestAdmitReadsDeeperToolManifests(t *testing.T) {
	const skill = "---\nname: tools\n---\n"
	refusals := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"deeper tool with a missing entrypoint", map[string]string{
			"tools/ns/t/manifest.json":     nodeTool(`["./run.mjs"]`),
			"tools/ns/t/run.mjs":           "console.log('{}');\n",
			"tools/ns/t/sub/manifest.json": `{"schema": "runx.tool.manifest.v1", "name": "ns.t.sub", "source": {"type": "cli-tool", "command": "node", "args": ["./run.mjs"]}}`,
		}, `tools/ns/t/sub/manifest.json: source.args[0]: bundled tool ns.t.sub: ./run.mjs names tools/ns/t/sub/run.mjs, which does not exist in the package`},
		{"deeper tool named for a shallower path", map[string]string{
			"tools/ns/t/manifest.json":     nodeTool(`["./run.mjs"]`),
			"tools/ns/t/run.mjs":           "console.log('{}');\n",
			"tools/ns/t/sub/manifest.json": `{"name": "ns.sub", "runner": {"type": "cli-tool", "command": "cat"}}`,
		}, `tools/ns/t/sub/manifest.json:1: name: must be "ns.t.sub" to match the path tools/ns/t/sub, got "ns.sub"`},
		{"deeper tool folder not named as a tool segment", map[string]string{
			"tools/ns/t/manifest.json":     nodeTool(`["./run.mjs"]`),
			"tools/ns/t/run.mjs":           "console.log('{}');\n",
			"tools/ns/t/a.b/manifest.json": `{"name": "ns.t.a.b", "runner": {"type": "cli-tool", "command": "cat"}}`,
		}, `tools/ns/t/a.b: a tool folder must be named with 1 to 64 letters, digits, '_' or '-'`},
		{"tools folder nested in a tool, which runx reads as another root", map[string]string{
			"tools/ns/t/manifest.json":           `{"name": "ns.t", "runner": {"type": "cli-tool", "command": "cat"}}`,
			"tools/ns/t/tools/a/b/manifest.json": `{"name": "a.b", "runner": {"type": "cli-tool", "command": "cat"}}`,
		}, `tools/ns/t/tools/a/b/manifest.json: is below tools/ns/t/tools, a tools folder inside tools/, which runx reads as another root of tools`},
		{"namespace named tools", map[string]string{
			"tools/tools/x/manifest.json": `{"name": "tools.x", "runner": {"type": "cli-tool", "command": "cat"}}`,
		}, `tools/tools/x/manifest.json: is below tools/tools, a tools folder inside tools/`},
		{"folder with no tool at or below it", map[string]string{
			"tools/ns/t/lib/x.mjs": "export const x = 1;\n",
		}, `tools/ns/t/manifest.json: is required and does not exist`},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			tc.files["SKILL.md"] = skill
			_, err := Admit(writeTree(t, tc.files))
			if !errors.Is(err, skillpkg.ErrAdmission) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Admit error = %v\nwant %q", err, tc.want)
			}
		})
	}

	// A folder that holds tools only deeper down needs no manifest of its
	// own; folders without a manifest (fixtures, sources) are no tools, and
	// a nested package (its own SKILL.md) answers for its own tools.
	dir := writeTree(t, map[string]string{
		"tools/ns/t/vendored/SKILL.md":                "---\nname: vendored\n---\n",
		"tools/ns/t/vendored/tools/v/w/manifest.json": `{"name": "v.w", "runner": {"type": "cli-tool", "command": "cat"}}`,
		"SKILL.md":                          skill,
		"tools/ns/t/manifest.json":          `{"name": "ns.t", "runner": {"type": "cli-tool", "command": "cat"}}`,
		"tools/ns/t/fixtures/case.yaml":     "inputs: {}\n",
		"tools/ns/t/sub/manifest.json":      `{"name": "ns.t.sub", "runner": {"type": "cli-tool", "command": "./run.sh", "input_mode": "stdin"}}`,
		"tools/ns/t/sub/run.sh":             "#!/bin/sh\ncat\n",
		"tools/ns/group/deep/manifest.json": `{"schema": "runx.tool.manifest.v1", "name": "ns.group.deep", "source": {"type": "cli-tool", "command": "cat"}}`,
	})
	pkg, err := Admit(dir)
	if err != nil {
		t.Fatalf("Admit of nested tools: %v", err)
	}
	var names []string
	for _, tool := range pkg.Tools {
		names = append(names, tool.Name)
	}
	if strings.Join(names, " ") != "ns.group.deep ns.t ns.t.sub" {
		t.Fatalf("tools %q", names)
	}
	sub, _ := pkg.Tool("ns.t.sub")
	if sub.Namespace != "ns" || sub.Tool != "t.sub" || sub.Dir != "tools/ns/t/sub" || sub.Runner.Base != "tools/ns/t/sub" {
		t.Fatalf("ns.t.sub = %+v, runner base %s", sub, sub.Runner.Base)
	}
	env := RunRunner(context.Background(), pkg, sub.Runner, json.RawMessage(`{"a": 1}`), RunOptions{Workspace: t.TempDir(), LookupEnv: hostLookup(nil)})
	if env.Status != StatusSealed || string(env.Output) != `{"a":1}` {
		t.Fatalf("ns.t.sub: %+v %s", env.Error, env.Output)
	}
}
