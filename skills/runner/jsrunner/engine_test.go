package jsrunner

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Each call's engine is prepared before the call arrives; what a module
// does to the built-ins the worker itself relies on (Object.freeze for the
// context, Promise.prototype.then for the job bound) or to any prototype
// must not reach the engine prepared for the next call.
func TestPreparedEngineIsUntouchedByThePreviousCall(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1})
	dir := runxPackage(t, `
export default ({ tamper }) => {
  const seen = {
    frozen: Object.isFrozen(Object.freeze({})),
    thenPatched: Promise.prototype.then.name === "patched",
    arrayPatched: typeof [].patched,
    globalPatched: typeof globalThis.patched,
    sticky: typeof globalThis.sticky,
    extensible: Object.isExtensible(Object.prototype),
  };
  if (tamper) {
    Object.freeze = (o) => o;
    Promise.prototype.then = function patched() {};
    Array.prototype.patched = () => 1;
    globalThis.patched = 1;
    Object.defineProperty(globalThis, "sticky", { value: 1, configurable: false });
    Object.preventExtensions(Object.prototype);
  }
  return seen;
};`, nil)
	spec := Spec{Dir: dir, Module: "main.mjs"}
	clean := `{"frozen":true,"thenPatched":false,"arrayPatched":"undefined","globalPatched":"undefined","sticky":"undefined","extensible":true}`
	wantOutput(t, run(t, p, spec, `{"tamper":true}`), clean)
	for i := 0; i < 3; i++ {
		wantOutput(t, run(t, p, spec, `{"tamper":false}`), clean)
	}
	// The context is still frozen by the real Object.freeze.
	ctx := runxPackage(t, `export default (inputs, context) => ({ frozen: Object.isFrozen(context) && Object.isFrozen(context.environment) });`, nil)
	wantOutput(t, run(t, p, Spec{Dir: ctx, Module: "main.mjs"}, `{}`), `{"frozen":true}`)
}

// Module scope is evaluated afresh for every call, and exports are live
// bindings read after evaluation, whatever their kind.
func TestModuleScopeAndExportKinds(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1})
	dir := runxPackage(t, `
import { count, bump } from "./lib/counter.mjs";
export * from "./lib/counter.mjs";
let calls = 0;
export let late = "before";
late = "after";
export class Box {}
const topThis = this;
const meta = import.meta;
function scope() { calls++; bump(); return { calls, count, late, box: typeof Box, topThis: typeof topThis, meta: typeof meta }; }
export { scope, scope as "odd name", scope as default };
`, map[string]string{"lib/counter.mjs": `export let count = 0; export function bump() { count++; } export const constant = "c";`})
	for _, export := range []string{"scope", "odd name", "default", ""} {
		wantOutput(t, run(t, p, Spec{Dir: dir, Module: "main.mjs", Export: export}, `{}`),
			`{"calls":1,"count":1,"late":"after","box":"function","topThis":"undefined","meta":"object"}`)
	}
	wantFailure(t, run(t, p, Spec{Dir: dir, Module: "main.mjs", Export: "constant"}, `{}`), CodeModuleRejected, "not a function")
	wantFailure(t, run(t, p, Spec{Dir: dir, Module: "main.mjs", Export: "missing"}, `{}`), CodeModuleRejected, "no export")
}

// An export name the script wrapper does not recognise (an escape in a
// string name) falls back to the IIFE bundle and still works; a module
// without exports reports the missing export; top-level await is refused.
func TestBundleFormats(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1})
	dir := runxPackage(t, `function f() { return { ok: "escaped" }; } export { f as "quote\"d" };`, nil)
	b, f := bundleFromDir(dir, "main.mjs")
	if f != nil {
		t.Fatal(f)
	}
	if !strings.Contains(string(b.code), "__toCommonJS") {
		t.Fatalf("an escaped export name did not fall back to the IIFE bundle:\n%s", b.code)
	}
	wantOutput(t, run(t, p, Spec{Dir: dir, Module: "main.mjs", Export: `quote"d`}, `{}`), `{"ok":"escaped"}`)

	plain := runxPackage(t, `export default () => ({ ok: true });`, nil)
	if b, f = bundleFromDir(plain, "main.mjs"); f != nil || strings.Contains(string(b.code), "__toCommonJS") {
		t.Fatalf("a plain module was not bundled as a script: %v\n%s", f, b.code)
	}

	none := runxPackage(t, `globalThis.x = 1;`, nil)
	wantFailure(t, run(t, p, Spec{Dir: none, Module: "main.mjs"}, `{}`), CodeModuleRejected, "no export")

	tla := runxPackage(t, `const v = await Promise.resolve(1); export default () => ({ v });`, nil)
	wantFailure(t, run(t, p, Spec{Dir: tla, Module: "main.mjs"}, `{}`), CodeModuleRejected, "await")

	// Error positions still name the author's file and line in a multi-file graph.
	pos := runxPackage(t, "import { boom } from \"./lib/boom.mjs\";\nexport default () => boom();\n",
		map[string]string{"lib/boom.mjs": "export function boom() {\n  throw new Error(\"bang\");\n}\n"})
	wantFailure(t, run(t, p, Spec{Dir: pos, Module: "main.mjs"}, `{}`), CodeExecutionFailed, "bang", filepath.ToSlash("lib/boom.mjs:2:"))
}

// A bundle called twice in a row is evaluated ahead of its next call, in
// the engine prepared for that call. Every call still sees its own
// evaluation only, its own environment, inputs decoded as JSON.parse
// would whatever the module did to Object.prototype, and the promise jobs
// of its evaluation settled before the export runs.
func TestEvaluationAheadIsTheCallsOwn(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1})
	dir := runxPackage(t, `
globalThis.evaluations = (globalThis.evaluations ?? 0) + 1;
let settled = false;
Promise.resolve().then(() => { settled = true; });
let calls = 0;
Object.defineProperty(Object.prototype, "a", { set() { throw new Error("a setter ran"); }, configurable: true });
export default (inputs, context) => ({
  evaluations: globalThis.evaluations, calls: ++calls, settled,
  a: Object.getOwnPropertyDescriptor(inputs, "a")?.value ?? null, name: context.environment.NAME ?? null,
});`, nil)
	other := runxPackage(t, `export default () => ({ other: typeof globalThis.evaluations });`, nil)
	spec := Spec{Dir: dir, Module: "main.mjs"}
	want := func(a int, name string) string {
		n := "null"
		if name != "" {
			n = `"` + name + `"`
		}
		return fmt.Sprintf(`{"evaluations":1,"calls":1,"settled":true,"a":%d,"name":%s}`, a, n)
	}
	for i := range 4 {
		wantOutput(t, run(t, p, spec, fmt.Sprintf(`{"a":%d}`, i)), want(i, ""))
	}
	spec.Environment = map[string]string{"NAME": "first"}
	wantOutput(t, run(t, p, spec, `{"a":7}`), want(7, "first"))
	wantOutput(t, run(t, p, spec, `{"a":8}`), want(8, "first"))
	spec.Environment = map[string]string{"NAME": "second"}
	wantOutput(t, run(t, p, spec, `{"a":9}`), want(9, "second"))
	// The engine prepared for the bundle above serves no other bundle.
	wantOutput(t, run(t, p, Spec{Dir: other, Module: "main.mjs"}, `{}`), `{"other":"undefined"}`)
	wantOutput(t, run(t, p, spec, `{"a":10}`), want(10, "second"))
}

// The worker evaluates ahead only a bundle called twice in a row whose
// evaluation was quick, and an engine prepared for one bundle is not used
// for another. What counts as quick is set for each bundle, so that the
// machine's load decides nothing.
func TestWorkerEvaluatesAheadOnlyWhatItShould(t *testing.T) {
	w := newWorkerState(configMsg{HeapLimit: 64 << 20})
	w.aheadLimit = time.Minute
	load := func(source string) (*runMsg, []byte) {
		b, _, f := newBundleCache().get(runxPackage(t, source, nil), "main.mjs")
		if f != nil {
			t.Fatal(f)
		}
		return &runMsg{Op: "run", Bundle: b.hash, CodeLen: len(b.code), Export: "default", Env: map[string]string{},
			TimeoutNS: 30e9, MaxDepth: defaultMaxCallDepth, OutputMax: MaxOutputBytes, ModuleName: "main.mjs"}, b.code
	}
	call := func(req *runMsg, code []byte, want string) {
		t.Helper()
		req.CodeLen = len(code)
		res, payload := w.handle(req, append(append([]byte{}, code...), `{}`...))
		if res.Status != statusOK || string(payload[0]) != want {
			t.Fatalf("%+v %s, want %s", res, payload, want)
		}
		w.ready = w.prepare()
	}
	quick, quickCode := load(`export default () => ({ quick: true });`)
	slow, slowCode := load(`let x = 0; for (let i = 0; i < 2e5; i++) x += i; export default () => ({ x });`)
	call(quick, quickCode, `{"quick":true}`)
	if w.ready.evaluated != nil {
		t.Fatal("a bundle's first call had the next engine evaluate it")
	}
	call(quick, nil, `{"quick":true}`)
	if w.ready.evaluated == nil || w.ready.evaluated.hash != quick.Bundle {
		t.Fatal("a bundle called twice in a row was not evaluated ahead of its third call")
	}
	// Called for another bundle, the engine is replaced.
	w.aheadLimit = time.Nanosecond // no evaluation is this quick
	call(slow, slowCode, `{"x":19999900000}`)
	call(slow, nil, `{"x":19999900000}`)
	if w.ready.evaluated != nil {
		t.Fatal("a bundle whose evaluation took more than aheadLimit was evaluated ahead")
	}
	call(quick, nil, `{"quick":true}`)
	if w.ready.evaluated != nil {
		t.Fatal("a bundle called once after another was evaluated ahead")
	}
}

// An engine that evaluated its bundle ahead answers the call as evaluating
// on arrival would: the evaluation's promise reactions count towards the
// call's bound, a setter the module put on Object.prototype sees no input,
// and a call with another environment gets its own context.
func TestAheadEngineAnswersAsArrivalWould(t *testing.T) {
	w := newWorkerState(configMsg{HeapLimit: 64 << 20})
	b, _, f := newBundleCache().get(runxPackage(t, `
for (let i = 0; i < 600; i++) Promise.resolve(i).then(() => i);
Object.defineProperty(Object.prototype, "n", { set() { throw new Error("a setter ran"); }, configurable: true });
export default async ({ n }, { environment }) => { for (let i = 0; i < n; i++) await i; return { n, name: environment.NAME ?? null }; };`, nil), "main.mjs")
	if f != nil {
		t.Fatal(f)
	}
	req := &runMsg{Op: "run", Bundle: b.hash, Export: "default", TimeoutNS: 30e9, MaxDepth: defaultMaxCallDepth,
		OutputMax: MaxOutputBytes, ModuleName: "main.mjs"}
	code := b.code
	call := func(n int, env, aheadEnv map[string]string) (resultMsg, string) {
		t.Helper()
		if aheadEnv != nil {
			cb := w.programs[b.hash].Value.(*compiledBundle)
			cb.aheadOK = true // whatever this machine's speed made of the evaluation
			w.plan = aheadPlan{bundle: cb, depth: req.MaxDepth, timeout: 30 * time.Second, env: aheadEnv}
			w.ready = w.prepare()
			if w.ready.evaluated != cb || w.ready.ctx == nil {
				t.Fatal("the engine did not evaluate the bundle ahead")
			}
		}
		req.Env, req.CodeLen = env, len(code)
		res, payload := w.handle(req, append(append([]byte{}, code...), fmt.Sprintf(`{"n":%d}`, n)...))
		code = nil
		if len(payload) == 0 {
			return res, ""
		}
		return res, string(payload[0])
	}
	check := func(res resultMsg, out, want string) {
		t.Helper()
		if res.Status != statusOK || out != want {
			t.Fatalf("%+v %s, want %s", res, out, want)
		}
	}
	res, out := call(300, map[string]string{}, nil)
	check(res, out, `{"n":300,"name":null}`)
	res, out = call(300, map[string]string{}, map[string]string{})
	check(res, out, `{"n":300,"name":null}`)
	if res, _ = call(500, map[string]string{}, map[string]string{}); res.Code != CodeResourceLimit || !strings.Contains(res.Message, "promise job limit") {
		t.Fatalf("600 reactions of the evaluation ahead and 500 awaits: %+v", res)
	}
	res, out = call(1, map[string]string{"NAME": "b"}, map[string]string{"NAME": "a"})
	check(res, out, `{"n":1,"name":"b"}`)
	res, out = call(1, map[string]string{"NAME": "a"}, map[string]string{"NAME": "a"})
	check(res, out, `{"n":1,"name":"a"}`)
}
