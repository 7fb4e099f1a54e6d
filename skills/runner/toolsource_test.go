package runner

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libos/libos/skills/skillpkg"
)

// writeTree writes files (mode 0755 for .sh, 0644 otherwise) under a new
// folder and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(rel, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// nodeTool is a runx-form manifest of tools/ns/t run by node with args.
func nodeTool(args string) string {
	return `{"schema": "runx.tool.manifest.v1", "name": "ns.t", "source": {"type": "cli-tool", "command": "node", "args": ` + args + `, "input_mode": "stdin"}}`
}

// Admission binds a bundled cli-tool's static local source closure: the
// command path, the entrypoint and what it imports must be package files,
// and node may not be handed TypeScript.
func TestAdmitBindsBundledToolSources(t *testing.T) {
	const skill = "---\nname: tools\n---\n"
	refusals := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"missing command script", map[string]string{
			"tools/ns/t/manifest.json": `{"name": "ns.t", "runner": {"type": "cli-tool", "command": "./run.sh"}}`,
		}, `tools/ns/t/manifest.json: runner.command: bundled tool ns.t: ./run.sh names tools/ns/t/run.sh, which does not exist in the package`},
		{"command escaping the package", map[string]string{
			"tools/ns/t/manifest.json": `{"name": "ns.t", "runner": {"type": "cli-tool", "command": "../../../../run.sh"}}`,
		}, `runner.command: bundled tool ns.t: ../../../../run.sh resolves outside the package`},
		{"missing node entrypoint", map[string]string{
			"tools/ns/t/manifest.json": nodeTool(`["--no-warnings", "./run.mjs", "{{text}}"]`),
		}, `tools/ns/t/manifest.json: source.args[1]: bundled tool ns.t: ./run.mjs names tools/ns/t/run.mjs, which does not exist in the package`},
		{"bare node entrypoint", map[string]string{
			"tools/ns/t/manifest.json": nodeTool(`["main.js"]`),
		}, `source.args[0]: bundled tool ns.t: main.js names tools/ns/t/main.js, which does not exist`},
		{"typescript node entrypoint", map[string]string{
			"tools/ns/t/manifest.json": nodeTool(`["./run.ts"]`),
			"tools/ns/t/run.ts":        "console.log('{}');\n",
		}, `source.args[0]: bundled tool ns.t: tools/ns/t/run.ts is uncompiled TypeScript, which node does not run`},
		{"missing static import", map[string]string{
			"tools/ns/t/manifest.json": nodeTool(`["./run.mjs"]`),
			"tools/ns/t/run.mjs":       "#!/usr/bin/env node\n// import './commented.mjs';\nconst s = \"import './quoted.mjs'\";\nimport { x } from './lib.mjs';\nimport './missing.mjs';\n",
			"tools/ns/t/lib.mjs":       "export const x = 1;\n",
		}, `tools/ns/t/run.mjs:5: import "./missing.mjs" of bundled tool ns.t (tools/ns/t/manifest.json) resolves to tools/ns/t/missing.mjs, which does not exist in the package`},
		{"missing re-export deeper in the closure", map[string]string{
			"tools/ns/t/manifest.json": nodeTool(`["./run.mjs"]`),
			"tools/ns/t/run.mjs":       "import { y } from '../../../lib/y.mjs';\nconsole.log(y);\n",
			"lib/y.mjs":                "const re = /['\"]/g;\nexport { y } from\n  './z.mjs';\n",
		}, `lib/y.mjs:3: import "./z.mjs" of bundled tool ns.t (tools/ns/t/manifest.json) resolves to lib/z.mjs, which does not exist in the package`},
		{"missing require", map[string]string{
			"tools/ns/t/manifest.json": nodeTool(`["./run.cjs"]`),
			"tools/ns/t/run.cjs":       "const fs = require('fs');\nconst h = require(`${'./dyn'}`);\nconst u = require('./util');\n",
		}, `tools/ns/t/run.cjs:3: require "./util" of bundled tool ns.t (tools/ns/t/manifest.json) resolves to tools/ns/t/util, which does not exist in the package`},
		{"import leaving the package", map[string]string{
			"tools/ns/t/manifest.json": nodeTool(`["./run.mjs"]`),
			"tools/ns/t/run.mjs":       "import '../../../../x.mjs';\n",
		}, `tools/ns/t/run.mjs:1: import "../../../../x.mjs" of bundled tool ns.t (tools/ns/t/manifest.json) resolves outside the package`},
		{"typescript import under node", map[string]string{
			"tools/ns/t/manifest.json": nodeTool(`["./run.mjs"]`),
			"tools/ns/t/run.mjs":       "import { f } from './f.ts';\n",
			"tools/ns/t/f.ts":          "export const f = 1;\n",
		}, `tools/ns/t/run.mjs:1: import "./f.ts" of bundled tool ns.t (tools/ns/t/manifest.json) resolves to uncompiled TypeScript (tools/ns/t/f.ts), which node does not run`},
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

	// A complete closure is admitted, its files count as reached (lib/ is
	// outside tools/), and the tool runs as admitted.
	dir := writeTree(t, map[string]string{
		"SKILL.md":                 skill,
		"tools/ns/t/manifest.json": nodeTool(`["./run.mjs"]`),
		"tools/ns/t/run.mjs": "import { readFileSync } from 'node:fs';\nimport { createRequire } from 'node:module';\nimport { shout } from '../../../lib/shout.mjs';\n" +
			"const require = createRequire(import.meta.url);\nconst { format } = require('./fmt');\n" +
			"console.log(JSON.stringify({ text: format(shout(JSON.parse(readFileSync(0, 'utf8')).text)) }));\n",
		"tools/ns/t/fmt.js":          "module.exports = { format: (s) => `<${s}>` };\n",
		"lib/shout.mjs":              "export { shout } from './impl/shout.mjs';\n",
		"lib/impl/shout.mjs":         "export const shout = (s) => s.toUpperCase() + `${'!'}`;\n",
		"tools/ns/sh/manifest.json":  `{"name": "ns.sh", "runner": {"type": "cli-tool", "command": "./run.sh", "input_mode": "stdin"}}`,
		"tools/ns/sh/run.sh":         "#!/bin/sh\ncat\n",
		"tools/ns/cat/manifest.json": `{"name": "ns.cat", "runner": {"type": "cli-tool", "command": "cat", "args": ["-", "{{path}}.js"]}}`,
	})
	pkg, err := Admit(dir)
	if err != nil {
		t.Fatalf("Admit of a complete closure: %v", err)
	}
	sh, _ := pkg.Tool("ns.sh")
	env := RunRunner(context.Background(), pkg, sh.Runner, json.RawMessage(`{"a": 1}`), RunOptions{Workspace: t.TempDir(), LookupEnv: hostLookup(nil)})
	if env.Status != StatusSealed || string(env.Output) != `{"a":1}` {
		t.Fatalf("./run.sh: %+v %s", env.Error, env.Output)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the node tool was admitted but is not run")
	}
	node, _ := pkg.Tool("ns.t")
	env = RunRunner(context.Background(), pkg, node.Runner, json.RawMessage(`{"text": "hi"}`), RunOptions{Workspace: t.TempDir(), LookupEnv: hostLookup(nil)})
	if env.Status != StatusSealed || string(env.Output) != `{"text":"<HI!>"}` {
		t.Fatalf("node tool: %+v %s %v", env.Error, env.Output, env.Stderr)
	}
}

func TestScanImports(t *testing.T) {
	src := "import a, { b as c } from \"./a.mjs\";\n" +
		"import * as ns from './ns.mjs'\n" +
		"export * from './all.mjs';\n" +
		"export * as sub from './sub.mjs';\n" +
		"export { d };\n" +
		"export default function from(x) { return x / 2 / 3; }\n" +
		"const t = `${`nested ${require('./in-template.cjs')}`} import './no.mjs'`;\n" +
		"const m = import.meta.url, o = { import: 1, require: 2 };\n" +
		"x.require('./member.cjs'); import('./lazy.mjs'); import(name);\n" +
		"if (a) { } /re'/.test(s); const e = require('.\\/esc.cjs');\n" +
		"const half = i++ / 2 + j-- / 2; // it's\n"
	got, err := scanImports([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var specs []string
	for _, imp := range got {
		s := imp.kind + " " + imp.spec
		if imp.escaped {
			s += " (escaped)"
		}
		specs = append(specs, s)
	}
	want := []string{"import ./a.mjs", "import ./ns.mjs", "import ./all.mjs", "import ./sub.mjs", "require ./in-template.cjs", "import ./lazy.mjs", `require .\/esc.cjs (escaped)`}
	if strings.Join(specs, "|") != strings.Join(want, "|") {
		t.Fatalf("specifiers\n %q\nwant\n %q", specs, want)
	}
	for _, bad := range []string{"const s = 'open;\n", "/* never closed", "const t = `open", "const r = /open\n"} {
		if _, err := scanImports([]byte(bad)); err == nil {
			t.Errorf("%q: scanned without error", bad)
		}
	}
}

// A bundled tool's source closure reaches only package files and Node
// built-ins, as runx's admission binds it: a bare specifier (resolved from
// installed packages) or an absolute path or URL is refused rather than
// left unfollowed, naming the source file, the specifier and the manifest.
func TestAdmitRefusesToolImportsOutsideTheClosure(t *testing.T) {
	const skill = "---\nname: tools\n---\n"
	const manifest = "(tools/ns/t/manifest.json)"
	bare := manifest + ` is a bare specifier, which Node resolves from installed packages`
	absolute := manifest + ` is an absolute path or URL`
	refusals := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"bare import, even with the package installed", map[string]string{
			"tools/ns/t/run.mjs":                          "import fs from 'node:fs';\nimport _ from 'lodash';\n",
			"tools/ns/t/node_modules/lodash/index.js":     "module.exports = {};\n",
			"tools/ns/t/node_modules/lodash/package.json": `{"name": "lodash", "main": "index.js"}`,
		}, `tools/ns/t/run.mjs:2: import "lodash" of bundled tool ns.t ` + bare},
		{"bare require", map[string]string{
			"tools/ns/t/run.mjs": "import { createRequire } from 'node:module';\nconst require = createRequire(import.meta.url);\nconst pad = require('left-pad');\n",
		}, `tools/ns/t/run.mjs:3: require "left-pad" of bundled tool ns.t ` + bare},
		{"scoped re-export deeper in the closure", map[string]string{
			"tools/ns/t/run.mjs": "import { y } from '../../../lib/y.mjs';\n",
			"lib/y.mjs":          "export { y } from '@scope/pkg/sub';\n",
		}, `lib/y.mjs:1: import "@scope/pkg/sub" of bundled tool ns.t ` + bare},
		{"literal dynamic import", map[string]string{
			"tools/ns/t/run.mjs": "const chalk = await import('chalk');\n",
		}, `tools/ns/t/run.mjs:1: import "chalk" of bundled tool ns.t ` + bare},
		{"built-in Node loads only with node:", map[string]string{
			"tools/ns/t/run.mjs": "import test from 'test';\n",
		}, `tools/ns/t/run.mjs:1: import "test" of bundled tool ns.t ` + bare},
		{"a folder by ..", map[string]string{
			"tools/ns/t/run.mjs": "import './h.cjs';\n",
			"tools/ns/t/h.cjs":   "const up = require('..');\n",
		}, `tools/ns/t/h.cjs:1: require ".." of bundled tool ns.t ` + manifest + ` names a folder`},
		{"absolute path", map[string]string{
			"tools/ns/t/run.mjs": "import x from '/etc/x.js';\n",
		}, `tools/ns/t/run.mjs:1: import "/etc/x.js" of bundled tool ns.t ` + absolute},
		{"file URL", map[string]string{
			"tools/ns/t/run.mjs": "import x from 'file:///etc/x.js';\n",
		}, `tools/ns/t/run.mjs:1: import "file:///etc/x.js" of bundled tool ns.t ` + absolute},
		{"remote URL", map[string]string{
			"tools/ns/t/run.mjs": "import x from 'https://example.com/x.mjs';\n",
		}, `tools/ns/t/run.mjs:1: import "https://example.com/x.mjs" of bundled tool ns.t ` + absolute},
		{"relative with a query, even if a file has that name", map[string]string{
			"tools/ns/t/run.mjs":     "import { x } from './lib.mjs?v=1';\n",
			"tools/ns/t/lib.mjs?v=1": "export const x = 1;\n",
			"tools/ns/t/lib.mjs":     "export const x = 2;\n",
		}, `tools/ns/t/run.mjs:1: import "./lib.mjs?v=1" of bundled tool ns.t ` + manifest + ` holds ? or #`},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			tc.files["SKILL.md"] = skill
			tc.files["tools/ns/t/manifest.json"] = nodeTool(`["./run.mjs"]`)
			_, err := Admit(writeTree(t, tc.files))
			if !errors.Is(err, skillpkg.ErrAdmission) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Admit error = %v\nwant %q", err, tc.want)
			}
		})
	}

	// Node built-ins stay allowed, by node: or by the bare name Node loads
	// ahead of any installed package.
	dir := writeTree(t, map[string]string{
		"SKILL.md":                 skill,
		"tools/ns/t/manifest.json": nodeTool(`["./run.mjs"]`),
		"tools/ns/t/run.mjs": "import fs from 'fs';\nimport { readFile } from 'fs/promises';\nimport path from 'node:path';\nimport test from 'node:test';\n" +
			"export * from 'node:util';\nconst { posix } = await import('path/posix');\n" +
			"import { createRequire } from 'module';\nconst cp = createRequire(import.meta.url)('child_process');\n",
	})
	if _, err := Admit(dir); err != nil {
		t.Fatalf("Admit of a tool importing Node built-ins: %v", err)
	}
}
