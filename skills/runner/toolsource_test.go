package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
		}, `runner.command: bundled tool ns.t: "../../../../run.sh" resolves outside the package`},
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
			"tools/ns/t/run.cjs":       "const fs = require('fs');\nconst h = typeof require === 'function' && loader.require(dyn);\nconst u = require('./util');\n",
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
			"const require = createRequire(import.meta.url);\nconst { format } = require('./fmt.js');\n" +
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
		"function require(id) {} class L { static require(id) { return id; } import(x) {} }\n" +
		"const r = [...require(n)], q = `${require(n)}${x}`, o = require?.('./opt.cjs');\n" +
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
		if imp.computed {
			s += fmt.Sprintf("(computed, line %d)", imp.line)
		}
		specs = append(specs, s)
	}
	want := []string{"import ./a.mjs", "import ./ns.mjs", "import ./all.mjs", "import ./sub.mjs", "require ./in-template.cjs", "import ./lazy.mjs",
		"import (computed, line 9)", "require (computed, line 11)", "require (computed, line 11)", "require ./opt.cjs", `require .\/esc.cjs (escaped)`}
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

// import() and require called with anything but one plain string load a
// file admission cannot know, so a bundled tool's source may not hold one,
// as runx refuses it; the refusal names the source file, its line, the
// tool's manifest and the rule. What is no such call stays admitted.
func TestAdmitRefusesComputedToolImports(t *testing.T) {
	const skill = "---\nname: tools\n---\n"
	const rule = " of bundled tool ns.t (tools/ns/t/manifest.json) is not called with one plain string literal"
	refusals := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"require of an environment variable, as in runx's test", map[string]string{
			"tools/ns/t/run.mjs": "import './h.cjs';\n",
			"tools/ns/t/h.cjs":   "const fs = require('node:fs');\nconst helper = require(process.env.HELPER);\n",
		}, "tools/ns/t/h.cjs:2: require" + rule},
		{"require of a template literal", map[string]string{
			"tools/ns/t/run.mjs": "import { createRequire } from 'node:module';\nconst require = createRequire(import.meta.url);\nconst m = require(`./${process.argv[2]}.cjs`);\n",
		}, "tools/ns/t/run.mjs:3: require" + rule},
		{"require of a concatenation", map[string]string{
			"tools/ns/t/run.mjs": "import './h.cjs';\n",
			"tools/ns/t/h.cjs":   "\n\nmodule.exports = require('./lib-' + suffix);\n",
		}, "tools/ns/t/h.cjs:3: require" + rule},
		{"require with a second argument", map[string]string{
			"tools/ns/t/run.mjs": "import './h.cjs';\n",
			"tools/ns/t/h.cjs":   "require('./a.cjs', 1);\n",
			"tools/ns/t/a.cjs":   "\n",
		}, "tools/ns/t/h.cjs:1: require" + rule},
		{"optional call of require", map[string]string{
			"tools/ns/t/run.mjs": "import './h.cjs';\n",
			"tools/ns/t/h.cjs":   "const m = require?.(name);\n",
		}, "tools/ns/t/h.cjs:1: require" + rule},
		{"require spread", map[string]string{
			"tools/ns/t/run.mjs": "import './h.cjs';\n",
			"tools/ns/t/h.cjs":   "const all = [...require(list)];\n",
		}, "tools/ns/t/h.cjs:1: require" + rule},
		{"require as a base class", map[string]string{
			"tools/ns/t/run.mjs": "import './h.cjs';\n",
			"tools/ns/t/h.cjs":   "class A extends require(base) {}\n",
		}, "tools/ns/t/h.cjs:1: require" + rule},
		{"require in a template substitution", map[string]string{
			"tools/ns/t/run.mjs": "import './h.cjs';\n",
			"tools/ns/t/h.cjs":   "const s = `${require(name)}${other}`;\n",
		}, "tools/ns/t/h.cjs:1: require" + rule},
		{"dynamic import of a variable", map[string]string{
			"tools/ns/t/run.mjs": "const name = process.argv[2];\nconst m = await import(name);\n",
		}, "tools/ns/t/run.mjs:2: dynamic import()" + rule},
		{"dynamic import of a template literal, deeper in the closure", map[string]string{
			"tools/ns/t/run.mjs": "import '../../../lib/plugins.mjs';\n",
			"lib/plugins.mjs":    "for (const p of ['a']) {\n  await import(`./plugins/${p}.mjs`);\n}\n",
		}, "lib/plugins.mjs:2: dynamic import()" + rule},
		{"dynamic import of a concatenation", map[string]string{
			"tools/ns/t/run.mjs": "export const load = (x) => import('./' + x + '.mjs');\n",
		}, "tools/ns/t/run.mjs:1: dynamic import()" + rule},
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

	// None of these calls import() or require with a computed argument:
	// other identifiers, members, declarations, method definitions,
	// comments, strings and regular expressions. Literal ones are bound.
	run := "import { createRequire } from 'node:module';\n" +
		"const require = createRequire(import.meta.url);\n" +
		"const required = (x) => x, requires = required(process.argv[2]);\n" +
		"const loader = { require(id) { return id; }, import: 1 };\n" +
		"loader.require(requires); loader?.require(requires);\n" +
		"class L extends Object { static require(id) { return id; } async import(x) { return x; } *require2() {} }\n" +
		"function req(id) { return id; } function* gen() {}\n" +
		"// require(process.env.X) and import(x) in a comment\n" +
		"/* require(name) */ const s = 'require(name) import(name)', re = /require\\(name\\)/;\n" +
		"const t = `require(${'x'}) import(x)`;\n" +
		"if (typeof require === 'function') require.resolve('./lib.cjs');\n" +
		"const lib = require('./lib.cjs'), opt = require?.('./opt.cjs');\n" +
		"const lazy = await import('./lazy.mjs');\n" +
		"console.log(JSON.stringify({ ok: lib.ok && opt.ok && lazy.ok && new L() instanceof L }));\n"
	dir := writeTree(t, map[string]string{
		"SKILL.md":                 skill,
		"tools/ns/t/manifest.json": nodeTool(`["./run.mjs"]`),
		"tools/ns/t/run.mjs":       run,
		"tools/ns/t/lib.cjs":       "function require(id) { return id; }\nmodule.exports = { ok: true };\n",
		"tools/ns/t/opt.cjs":       "exports.ok = true;\n",
		"tools/ns/t/lazy.mjs":      "export const ok = true;\n",
	})
	if _, err := Admit(dir); err != nil {
		t.Fatalf("Admit of a tool with no computed import() or require: %v", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the admitted source is not run")
	}
	// The admitted source is JavaScript Node runs as the scan read it.
	out, err := exec.Command("node", filepath.Join(dir, "tools/ns/t/run.mjs")).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != `{"ok":true}` {
		t.Fatalf("node run.mjs: %v\n%s", err, out)
	}
}

// runx reads a bundled tool's command and each of its arguments as a
// relative path from the tool's folder, whether or not it names a package
// file, and refuses one it cannot read so: empty, padded with white space,
// absolute, holding a backslash, ? or #, or leaving the package. A bare
// command (node, python3) and ordinary arguments stay admitted.
func TestAdmitRefusesToolArgsRunxCannotRead(t *testing.T) {
	const skill = "---\nname: tools\n---\n"
	runx := func(command, args string) string {
		return `{"schema": "runx.tool.manifest.v1", "name": "ns.t", "source": {"type": "cli-tool", "command": "` + command + `", "args": ` + args + `}}`
	}
	const rule = "; runx reads each command and argument of a bundled tool as a relative path from the tool's folder"
	refusals := []struct {
		name, manifest, want string
	}{
		{"absolute command", runx("/usr/bin/env", `["node", "./run.mjs"]`),
			`tools/ns/t/manifest.json: source.command: bundled tool ns.t: "/usr/bin/env" is an absolute path; name a package file by its relative path, or a command in PATH by its bare name (node)` + rule},
		{"absolute command in libos's form", `{"name": "ns.t", "runner": {"type": "cli-tool", "command": "/bin/cat"}}`,
			`tools/ns/t/manifest.json: runner.command: bundled tool ns.t: "/bin/cat" is an absolute path`},
		{"command path holding #, though the file exists", runx("./run#1.sh", `[]`),
			`source.command: bundled tool ns.t: "./run#1.sh" holds ? or #` + rule},
		{"entrypoint holding ?, though the file exists", runx("node", `["./run.mjs?v=1"]`),
			`source.args[0]: bundled tool ns.t: "./run.mjs?v=1" holds ? or #` + rule},
		{"argument holding # that names no file", runx("node", `["./run.mjs", "--tag=#1"]`),
			`source.args[1]: bundled tool ns.t: "--tag=#1" holds ? or #`},
		{"absolute argument", runx("node", `["./run.mjs", "/etc/hosts"]`),
			`source.args[1]: bundled tool ns.t: "/etc/hosts" is an absolute path`},
		{"empty argument", runx("node", `["./run.mjs", ""]`),
			`source.args[1]: bundled tool ns.t: "" is empty` + rule},
		{"argument padded with white space", runx("node", `["./run.mjs", "--flag "]`),
			`source.args[1]: bundled tool ns.t: "--flag " begins or ends with white space`},
		{"argument holding a backslash", runx("node", `["./run.mjs", "a\\b"]`),
			`source.args[1]: bundled tool ns.t: "a\\b" holds a backslash`},
		{"argument leaving the package through a folder", runx("node", `["./run.mjs", "x/../../../../../etc"]`),
			`source.args[1]: bundled tool ns.t: "x/../../../../../etc" resolves outside the package` + rule},
		{"argument naming the package folder", runx("node", `["./run.mjs", "../../.."]`),
			`source.args[1]: bundled tool ns.t: "../../.." resolves to the package folder itself`},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Admit(writeTree(t, map[string]string{
				"SKILL.md":                 skill,
				"tools/ns/t/manifest.json": tc.manifest,
				"tools/ns/t/run.mjs":       "console.log('{}');\n",
				"tools/ns/t/run.mjs?v=1":   "console.log('{}');\n",
				"tools/ns/t/run#1.sh":      "#!/bin/sh\necho '{}'\n",
			}))
			if !errors.Is(err, skillpkg.ErrAdmission) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Admit error = %v\nwant %q", err, tc.want)
			}
		})
	}

	dir := writeTree(t, map[string]string{
		"SKILL.md":                   skill,
		"tools/ns/t/manifest.json":   runx("node", `["--no-warnings", "./run.mjs", "{{text}}", "-", "--mode=fast", "a.b", "data/x.txt"]`),
		"tools/ns/t/run.mjs":         "console.log('{}');\n",
		"tools/ns/py/manifest.json":  `{"name": "ns.py", "runner": {"type": "cli-tool", "command": "python3", "args": ["main.py", "-v"]}}`,
		"tools/ns/py/main.py":        "print('{}')\n",
		"tools/ns/sh/manifest.json":  `{"name": "ns.sh", "runner": {"type": "cli-tool", "command": "sh", "args": ["-c", "echo '{}'"]}}`,
		"tools/ns/env/manifest.json": `{"name": "ns.env", "runner": {"type": "cli-tool", "command": "env", "args": ["LANG=C", "cat"]}}`,
	})
	if _, err := Admit(dir); err != nil {
		t.Fatalf("Admit of bare commands and plain arguments: %v", err)
	}
}

// A bundled tool's require is bound to exactly the file it names, as runx
// binds it. Node searches further (./fmt.js for ./fmt; for a folder, its
// package.json main ahead of its index.js; a trailing slash skips the
// files), so a search of admission's own could bind another file than the
// one Node loads: here d/index.js while Node runs d/main.js.
func TestAdmitBindsToolRequiresExactly(t *testing.T) {
	const skill = "---\nname: tools\n---\n"
	const tail = " of bundled tool ns.t (tools/ns/t/manifest.json) resolves to "
	refusals := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"extension left out", map[string]string{
			"tools/ns/t/run.cjs": "const { format } = require('./fmt');\n",
			"tools/ns/t/fmt.js":  "exports.format = (s) => s;\n",
		}, `tools/ns/t/run.cjs:1: require "./fmt"` + tail + `tools/ns/t/fmt, which does not exist in the package; a bundled tool's require is bound to exactly the file it names`},
		{"folder whose package.json main Node loads instead of index.js", map[string]string{
			"tools/ns/t/run.cjs":        "require('./d');\n",
			"tools/ns/t/d/package.json": `{"main": "main.js"}`,
			"tools/ns/t/d/main.js":      "require(process.env.ANYTHING);\n",
			"tools/ns/t/d/index.js":     "\n",
		}, `tools/ns/t/run.cjs:1: require "./d"` + tail + `tools/ns/t/d, which is not a regular file; a bundled tool's require is bound to exactly the file it names`},
		{"trailing slash, which Node reads as a folder", map[string]string{
			"tools/ns/t/run.cjs":      "require('./lib/');\n",
			"tools/ns/t/lib.js":       "\n",
			"tools/ns/t/lib/index.js": "\n",
		}, `tools/ns/t/run.cjs:1: require "./lib/"` + tail + `tools/ns/t/lib, which is not a regular file`},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			tc.files["SKILL.md"] = skill
			tc.files["tools/ns/t/manifest.json"] = nodeTool(`["./run.cjs"]`)
			_, err := Admit(writeTree(t, tc.files))
			if !errors.Is(err, skillpkg.ErrAdmission) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Admit error = %v\nwant %q", err, tc.want)
			}
		})
	}

	dir := writeTree(t, map[string]string{
		"SKILL.md":                 skill,
		"tools/ns/t/manifest.json": nodeTool(`["./run.cjs"]`),
		"tools/ns/t/run.cjs":       "const { format } = require('./fmt.js');\nconst data = require('./data.json');\nrequire('./d/index.js');\n",
		"tools/ns/t/fmt.js":        "exports.format = (s) => s;\n",
		"tools/ns/t/data.json":     "{}\n",
		"tools/ns/t/d/index.js":    "\n",
	})
	if _, err := Admit(dir); err != nil {
		t.Fatalf("Admit of exact requires: %v", err)
	}
}
