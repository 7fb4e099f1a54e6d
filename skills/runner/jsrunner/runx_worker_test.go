package jsrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// These tests mirror runx's own javascript worker tests
// (crates/runx-runtime/tests/javascript_worker.rs and
// javascript_worker_hostile.rs in the runx sample) with runx's expected
// results, field by field.

// runxPackage writes a package folder with main.mjs and extra modules.
func runxPackage(t *testing.T, source string, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "main.mjs"), source)
	for rel, body := range extra {
		writeFile(t, filepath.Join(dir, filepath.FromSlash(rel)), body)
	}
	return dir
}

func runxRun(t *testing.T, p *Pool, source, inputs string) Result {
	t.Helper()
	return run(t, p, Spec{Dir: runxPackage(t, source, nil), Module: "main.mjs"}, inputs)
}

func TestRunxWorkerGlobals(t *testing.T) {
	p := sharedPool(t)
	wantOutput(t, runxRun(t, p, "export default () => ({ now: Date.now(), process: typeof process, fetch: typeof fetch, require: typeof require });", `{}`),
		`{"now":0,"process":"undefined","fetch":"undefined","require":"undefined"}`)
	wantOutput(t, runxRun(t, p, "export default () => ({ process: typeof process, require: typeof require, fetch: typeof fetch, websocket: typeof WebSocket, timer: typeof setTimeout, crypto: typeof crypto, performance: typeof performance, deno: typeof Deno, bun: typeof Bun });", `{}`),
		`{"process":"undefined","require":"undefined","fetch":"undefined","websocket":"undefined","timer":"undefined","crypto":"undefined","performance":"undefined","deno":"undefined","bun":"undefined"}`)
}

func TestRunxWorkerStateDoesNotLeak(t *testing.T) {
	p := sharedPool(t)
	dir := runxPackage(t, "export default ({ value }) => { const prior = globalThis.runxLeak; globalThis.runxLeak = value; return { prior: prior ?? null, value }; };", nil)
	wantOutput(t, run(t, p, Spec{Dir: dir, Module: "main.mjs"}, `{"value":"first"}`), `{"prior":null,"value":"first"}`)
	wantOutput(t, run(t, p, Spec{Dir: dir, Module: "main.mjs"}, `{"value":"second"}`), `{"prior":null,"value":"second"}`)
	proto := runxPackage(t, "export default ({ pollute }) => { if (pollute) { Object.prototype.runxPolluted = 'blocked'; return { polluted: true }; } return { inherited: Object.prototype.runxPolluted ?? null }; };", nil)
	wantOutput(t, run(t, p, Spec{Dir: proto, Module: "main.mjs"}, `{"pollute":true}`), `{"polluted":true}`)
	wantOutput(t, run(t, p, Spec{Dir: proto, Module: "main.mjs"}, `{"pollute":false}`), `{"inherited":null}`)
}

func TestRunxWorkerEnvironment(t *testing.T) {
	p := sharedPool(t)
	dir := runxPackage(t, "export default (_inputs, context) => ({ environment: context.environment, frozen: Object.isFrozen(context.environment) });", nil)
	r := p.Run(context.Background(), Spec{Dir: dir, Module: "main.mjs", Environment: map[string]string{"REGION": " ap-southeast-2 ", "TRACE_LABEL": "München,prod"}}, json.RawMessage(`{}`), "")
	wantOutput(t, r, `{"environment":{"REGION":" ap-southeast-2 ","TRACE_LABEL":"München,prod"},"frozen":true}`)
}

func TestRunxWorkerImports(t *testing.T) {
	p := sharedPool(t)
	dir := runxPackage(t, "import { answer } from './lib/answer.mjs'; export default () => ({ answer });", map[string]string{"lib/answer.mjs": "export const answer = 42;"})
	wantOutput(t, run(t, p, Spec{Dir: dir, Module: "main.mjs"}, `{}`), `{"answer":42}`)
	for _, src := range []string{
		"import fs from 'node:fs'; export default () => fs;",
		"import value from 'bare-package'; export default () => value;",
		"import value from 'https://example.com/value.mjs'; export default () => value;",
		"import value from '/etc/passwd'; export default () => value;",
		"import value from '../escape.mjs'; export default () => value;",
		"export default () => import('./other.mjs');",
	} {
		if r := runxRun(t, p, src, `{}`); r.Err == nil {
			t.Errorf("hostile import executed: %s", src)
		}
	}
}

func TestRunxWorkerTypedFailures(t *testing.T) {
	p := sharedPool(t)
	dir := runxPackage(t, "export default ({ fail }) => { if (fail) return Math.random(); return { state: 'clean' }; };", nil)
	wantFailure(t, run(t, p, Spec{Dir: dir, Module: "main.mjs"}, `{"fail":true}`), CodeExecutionFailed, "Math.random")
	wantOutput(t, run(t, p, Spec{Dir: dir, Module: "main.mjs"}, `{"fail":false}`), `{"state":"clean"}`)
	wantFailure(t, runxRun(t, p, "export default () => undefined;", `{}`), CodeOutputRejected, "not JSON-compatible")
	for _, src := range []string{
		"export default () => 1n;",
		"export default () => Symbol('not-json');",
		"export default () => function notJson() {};",
		"export default () => { const value = {}; value.self = value; return value; };",
		"export default () => console.log('protocol pollution');",
	} {
		if r := runxRun(t, p, src, `{}`); r.Err == nil {
			t.Errorf("%s: succeeded with %s", src, r.Output)
		}
	}
}

func TestRunxWorkerPromises(t *testing.T) {
	p := sharedPool(t)
	wantOutput(t, runxRun(t, p, "export default async function execute({ value }) { return { value: await Promise.resolve(value) }; }", `{"value":"settled"}`), `{"value":"settled"}`)
	wantFailure(t, runxRun(t, p, "export default () => new Promise(() => {});", `{}`), CodeExecutionFailed, "did not settle")
	storm := "export default () => { let value = Promise.resolve(0); for (let index = 0; index < 5000; index += 1) value = value.then(number => number + 1); return value; };"
	wantFailure(t, runxRun(t, p, storm, `{}`), CodeResourceLimit, "promise job limit of 1000")
	// Each await schedules a reaction too, and the module's evaluation
	// counts towards its call.
	awaits := "export default async ({ n }) => { let sum = 0; for (let i = 0; i < n; i++) sum += await i; return { sum }; };"
	wantOutput(t, runxRun(t, p, awaits, `{"n":900}`), `{"sum":404550}`)
	wantFailure(t, runxRun(t, p, awaits, `{"n":1001}`), CodeResourceLimit, "promise job limit of 1000")
	evaluation := "for (let i = 0; i < 600; i++) Promise.resolve(i).then(() => i); export default async ({ n }) => { for (let i = 0; i < n; i++) await i; return { n }; };"
	wantOutput(t, runxRun(t, p, evaluation, `{"n":300}`), `{"n":300}`)
	wantFailure(t, runxRun(t, p, evaluation, `{"n":500}`), CodeResourceLimit, "promise job limit of 1000")
	// A chain of built-ins alone runs no instruction an interrupt could stop.
	builtins := "const obj = {}; const q = Promise.resolve(obj); obj.then = q.then.bind(q); export default () => { new Promise((resolve) => resolve(obj)); return { returned: true }; };"
	wantFailure(t, runxRun(t, p, builtins, `{}`), CodeResourceLimit, "promise job limit of 1000")
	wantFailure(t, runxRun(t, p, "const obj = {}; const q = Promise.resolve(obj); obj.then = q.then.bind(q); new Promise((resolve) => resolve(obj)); export default () => ({ returned: true });", `{}`),
		CodeResourceLimit, "promise job limit of 1000")
	// Reactions past the bound fail the call even when no instruction runs
	// after them: here a job calls Promise.all, a built-in, after the export returned.
	late := "export default () => { Promise.resolve(new Array(1001).fill(0)).then(Promise.all.bind(Promise)); return { returned: true }; };"
	wantFailure(t, runxRun(t, p, late, `{}`), CodeResourceLimit, "promise job limit of 1000")
}

func TestRunxWorkerLimits(t *testing.T) {
	// The default pool options: runx's 64 MiB heap.
	p, err := NewPool(PoolOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if p.opts.MemoryLimit != 64<<20 {
		t.Fatalf("default memory limit %d", p.opts.MemoryLimit)
	}
	if r := runxRun(t, p, "export default () => { const bytes = new ArrayBuffer(70 * 1024 * 1024); return { bytes: bytes.byteLength }; };", `{}`); r.Err == nil {
		t.Fatalf("a 70 MiB allocation succeeded under the 64 MiB heap limit: %s", r.Output)
	}
	wantOutput(t, runxRun(t, p, "export default () => ({ recovered: true });", `{}`), `{"recovered":true}`)
	if r := runxRun(t, p, "export default () => { while (true) {} };", `{}`); r.Err == nil {
		t.Fatal("an infinite loop completed")
	}
	if r := runxRun(t, p, "function recurse() { return recurse(); } export default () => recurse();", `{}`); r.Err == nil {
		t.Fatal("unbounded recursion completed")
	}
	big := fmt.Sprintf(`{"value":%q}`, strings.Repeat("x", 4<<20+1))
	if r := runxRun(t, p, "export default ({ value }) => ({ value });", big); r.Err == nil {
		t.Fatal("an input over 4 MiB was accepted")
	}
	wantOutput(t, runxRun(t, p, "export default () => ({ accepted: true }); /*"+strings.Repeat("x", 1<<20+1)+"*/", `{}`), `{"accepted":true}`)
	wantFailure(t, runxRun(t, p, "export default () => ({ ok: true }); /*"+strings.Repeat("x", 4<<20)+"*/", `{}`), CodeModuleRejected, "4 MiB")
	if r := runxRun(t, p, "export default () => ({ value: 'x'.repeat((4 * 1024 * 1024) + 1) });", `{}`); r.Err == nil {
		t.Fatal("an output over 4 MiB crossed the protocol")
	}
	wantOutput(t, runxRun(t, p, "export default () => ({ recovered: 'bounds' });", `{}`), `{"recovered":"bounds"}`)
}

// TestRunxWorkerPagedArchive is runx's
// volume_independent_artifacts_drive_one_worker_across_bounded_pages: a
// JSON array after a JavaScript assignment prefix, records delivered as
// encoded JSON strings.
func TestRunxWorkerPagedArchive(t *testing.T) {
	p := sharedPool(t)
	dir := runxPackage(t, "export default (inputs) => {\n  const page = inputs.runx_page;\n  const state = page.state ?? { count: 0, sum: 0 };\n  for (const raw of page.records) { const value = JSON.parse(raw); state.count += 1; state.sum += value.value; }\n  const runx_page = { state };\n  return page.eof ? { runx_page, result: state } : { runx_page };\n};", nil)
	var recs []string
	for i := 0; i < 20000; i++ {
		recs = append(recs, fmt.Sprintf(`{"value":%d,"padding":"%s"}`, i, strings.Repeat("x", 32)))
	}
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "archive.data"), "window.YTD.items.part0 = ["+strings.Join(recs, ",")+"]")
	spec := Spec{Dir: dir, Module: "main.mjs", Pages: &PagesSpec{PathFrom: "archive_file", MediaType: "application/javascript", Framing: "json_array", PageBytes: 64 << 10}}
	r := p.Run(context.Background(), spec, json.RawMessage(`{"archive_file":"archive.data"}`), ws)
	if r.Pages <= 1 {
		t.Fatalf("%d pages, want several", r.Pages)
	}
	// runx's final result carries the domain output; runx_page stays a
	// control member of the last call.
	var out struct {
		Result struct{ Count, Sum int64 } `json:"result"`
	}
	if r.Err != nil || json.Unmarshal(r.Output, &out) != nil || out.Result.Count != 20000 || out.Result.Sum != 199990000 {
		t.Fatalf("output %s, %+v", r.Output, r.Err)
	}
	if strings.Contains(string(r.Output), "archive.data") {
		t.Fatal("the artifact path reached the output")
	}
	// Scope skill resolves the path inside the package folder.
	writeFile(t, filepath.Join(dir, "fixtures", "archive.data"), "window.YTD.items.part0 = ["+strings.Join(recs[:3], ",")+"];\n")
	spec.Pages.PathScopeFrom = "archive_scope"
	r = p.Run(context.Background(), spec, json.RawMessage(`{"archive_file":"fixtures/archive.data","archive_scope":"skill"}`), ws)
	if r.Err != nil || !strings.Contains(string(r.Output), `"count":3`) {
		t.Fatalf("skill scope: %s %+v", r.Output, r.Err)
	}
	if _, err := os.Stat(filepath.Join(dir, "fixtures")); err != nil {
		t.Fatal(err)
	}
}
