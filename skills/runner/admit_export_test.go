package runner

import (
	"errors"
	"testing"

	"github.com/libos/libos/skills/skillpkg"
)

// TestAdmitChecksTheExportExists refuses a javascript runner whose module
// lacks the export it calls, naming the manifest, the line, the field and
// the module: the package used to be admitted and every call then failed
// with "the module has no export", naming none of them.
func TestAdmitChecksTheExportExists(t *testing.T) {
	const skill = "---\nname: x\n---\nx"
	refusals := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"named export missing", map[string]string{
			"X.yaml": "runners:\n  a:\n    type: javascript\n    module: m.mjs\n    export: missingexport\n",
			"m.mjs":  "export function present() { return {}; }\n",
		}, `X.yaml:5: runners.a.export: names export "missingexport", which module m.mjs does not have (the module exports present)`},
		{"default export missing", map[string]string{
			"X.yaml":    "run:\n  type: javascript\n  module: lib/m.mjs\n",
			"lib/m.mjs": "export const a = () => 1;\nexport function b() {}\n",
		}, `X.yaml:3: run.module: module lib/m.mjs has no default export, which the runner calls when it names no export (the module exports a, b); export a default function, or name one in run.export`},
		{"module that exports nothing", map[string]string{
			"X.yaml": "runners:\n  a: {type: javascript, module: m.mjs, default: true}\n",
			"m.mjs":  "globalThis.x = 1;\n",
		}, `X.yaml:2: runners.a.module: module m.mjs has no default export, which the runner calls when it names no export (the module exports nothing); export a default function, or name one in runners.a.export`},
		{"bundled tool in runx's form", map[string]string{
			"tools/ns/t/manifest.json": `{"schema": "runx.tool.manifest.v1", "name": "ns.t",
  "source": {"type": "javascript", "module": "t.mjs", "export": "run"}}`,
			"tools/ns/t/t.mjs": "export default () => 1;\n",
		}, `tools/ns/t/manifest.json:2: source.export: names export "run", which module tools/ns/t/t.mjs does not have (the module exports default)`},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			tc.files["SKILL.md"] = skill
			_, err := Admit(writeTree(t, tc.files))
			if !errors.Is(err, skillpkg.ErrAdmission) || !errors.Is(err, skillpkg.ErrModuleRefused) || err == nil || err.Error() != tc.want {
				t.Fatalf("Admit error = %v\nwant %s", err, tc.want)
			}
		})
	}

	// Exports reached through re-exports, renames and JSON count.
	if _, err := Admit(writeTree(t, map[string]string{
		"SKILL.md": skill,
		"X.yaml":   "runners:\n  a: {type: javascript, module: m.mjs, export: fromLib}\n  b: {type: javascript, module: d.mjs}\n  c: {type: javascript, module: s.mjs, export: $star}\n",
		"m.mjs":    "export { helper as fromLib } from './lib.mjs';\n",
		"d.mjs":    "import data from './d.json';\nconst f = () => data;\nexport { f as default };\n",
		"d.json":   `{"k": 1}`,
		"s.mjs":    "export * from './lib.mjs';\n",
		"lib.mjs":  "export const helper = () => 1;\nexport function $star() {}\n",
	})); err != nil {
		t.Fatalf("Admit: %v", err)
	}
}
