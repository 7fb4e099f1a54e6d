package jsrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

func TestExports(t *testing.T) {
	p := sharedPool(t)
	basic := fixture(t, "basic")
	cases := []struct {
		name   string
		spec   Spec
		inputs string
		want   string
	}{
		{"sync default", Spec{Dir: basic, Module: "sync.mjs"}, `{"values":[1,2,3]}`, `{"total":6,"kind":"sync"}`},
		{"async default", Spec{Dir: basic, Module: "async.mjs"}, `{"values":[4,5]}`, `{"total":9,"kind":"async"}`},
		{"named export with relative imports", Spec{Dir: basic, Module: "named.mjs", Export: "add"}, `{"a":2,"b":3}`, `{"sum":5,"label":"[2+3]"}`},
		{"named export reading an imported JSON file", Spec{Dir: basic, Module: "named.mjs", Export: "lookup"}, `{"key":"beta"}`, `{"value":2}`},
		{"default selected by omission", Spec{Dir: basic, Module: "named.mjs"}, `{}`, `{"which":"default"}`},
		{"default selected by name", Spec{Dir: basic, Module: "named.mjs", Export: "default"}, `{}`, `{"which":"default"}`},
		{"nested relative re-export", Spec{Dir: fixture(t, "imports"), Module: "nested.mjs"}, `{}`, `{"ok":"ok"}`},
		{"module path with a leading ./", Spec{Dir: basic, Module: "./sync.mjs"}, `{"values":[7]}`, `{"total":7,"kind":"sync"}`},
		{"absent inputs are an empty object", Spec{Dir: basic, Module: "sync.mjs"}, ``, `{"total":0,"kind":"sync"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantOutput(t, run(t, p, tc.spec, tc.inputs), tc.want)
		})
	}
}

func TestRefusedImports(t *testing.T) {
	p := sharedPool(t)
	dir := fixture(t, "imports")
	cases := []struct {
		module string
		parts  []string
	}{
		{"bare.mjs", []string{`"lodash"`, "bare specifier"}},
		{"node_builtin.mjs", []string{`"node:fs"`, "built-in"}},
		{"url.mjs", []string{"https://example.com/x.mjs", "URL"}},
		{"absolute.mjs", []string{"/etc/x.mjs", "absolute"}},
		{"escape.mjs", []string{"../outside.mjs", "escapes the package"}},
		{"dynamic.mjs", []string{"dynamic import", "./ok.mjs"}},
		{"dynamic_computed.mjs", []string{"import", "not a string literal"}},
		{"require.mjs", []string{"require", "./ok.mjs"}},
		{"missing.mjs", []string{"lib/nope.mjs", "does not exist"}},
	}
	for _, tc := range cases {
		t.Run(tc.module, func(t *testing.T) {
			r := run(t, p, Spec{Dir: dir, Module: tc.module}, `{"name":"./ok.mjs"}`)
			wantFailure(t, r, CodeModuleRejected, tc.parts...)
			// Admission's check refuses the graph with the very same failure.
			if f := CheckModule(dir, tc.module); f == nil || *f != *r.Err {
				t.Fatalf("CheckModule = %v, the run failed with %v", f, r.Err)
			}
		})
	}
	// The allowed import still works from the same package.
	wantOutput(t, run(t, p, Spec{Dir: dir, Module: "uses_ok.mjs"}, `{}`), `{"ok":"ok"}`)
	if f := CheckModule(dir, "uses_ok.mjs"); f != nil {
		t.Fatalf("CheckModule(uses_ok.mjs) = %v", f)
	}
	if f := CheckModule(dir, "../outside.mjs"); f == nil || f.Code != CodeInvalidRequest {
		t.Fatalf("CheckModule of an entry outside the package = %v", f)
	}
}

// TestSymlinkEscapes checks that a symbolic link cannot smuggle a file from
// outside the package into the graph, as an import or as the entry module.
func TestSymlinkEscapes(t *testing.T) {
	p := sharedPool(t)
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	pkg := filepath.Join(base, "pkg")
	for _, d := range []string{outside, pkg} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(outside, "secret.mjs"), `export const secret = "leaked";`)
	writeFile(t, filepath.Join(outside, "entry.mjs"), `export default () => ({ leaked: true });`)
	writeFile(t, filepath.Join(pkg, "main.mjs"), `import { secret } from "./linked.mjs"; export default () => ({ secret });`)
	if err := os.Symlink(filepath.Join(outside, "secret.mjs"), filepath.Join(pkg, "linked.mjs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "entry.mjs"), filepath.Join(pkg, "entry.mjs")); err != nil {
		t.Fatal(err)
	}
	wantFailure(t, run(t, p, Spec{Dir: pkg, Module: "main.mjs"}, `{}`), CodeModuleRejected, "./linked.mjs")
	wantFailure(t, run(t, p, Spec{Dir: pkg, Module: "entry.mjs"}, `{}`), CodeModuleRejected, "entry.mjs")

	// A link that stays inside the package is an ordinary file.
	writeFile(t, filepath.Join(pkg, "real.mjs"), `export const secret = "inside";`)
	if err := os.Remove(filepath.Join(pkg, "linked.mjs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real.mjs", filepath.Join(pkg, "linked.mjs")); err != nil {
		t.Fatal(err)
	}
	wantOutput(t, run(t, p, Spec{Dir: pkg, Module: "main.mjs"}, `{}`), `{"secret":"inside"}`)
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestInvalidRequests(t *testing.T) {
	p := sharedPool(t)
	basic := fixture(t, "basic")
	ok := Spec{Dir: basic, Module: "sync.mjs"}
	with := func(f func(*Spec)) Spec { s := ok; f(&s); return s }
	big := `{"pad":"` + strings.Repeat("x", MaxInputBytes) + `"}`
	cases := []struct {
		name   string
		spec   Spec
		inputs string
		parts  []string
	}{
		{"missing dir", with(func(s *Spec) { s.Dir = "" }), `{}`, []string{"spec.Dir"}},
		{"missing module", with(func(s *Spec) { s.Module = "" }), `{}`, []string{"spec.Module", "required"}},
		{"module escaping", with(func(s *Spec) { s.Module = "../outside.mjs" }), `{}`, []string{"spec.Module", "escapes"}},
		{"absolute module", with(func(s *Spec) { s.Module = "/tmp/x.mjs" }), `{}`, []string{"spec.Module", "relative"}},
		{"module extension", with(func(s *Spec) { s.Module = "lib/table.json" }), `{}`, []string{"spec.Module", ".mjs or .js"}},
		{"backslash module", with(func(s *Spec) { s.Module = `lib\math.mjs` }), `{}`, []string{"spec.Module", "forward slashes"}},
		{"timeout too short", with(func(s *Spec) { s.Timeout = 500 * time.Millisecond }), `{}`, []string{"spec.Timeout", "1s..30s"}},
		{"timeout too long", with(func(s *Spec) { s.Timeout = 31 * time.Second }), `{}`, []string{"spec.Timeout", "1s..30s"}},
		{"empty environment name", with(func(s *Spec) { s.Environment = map[string]string{"": "x"} }), `{}`, []string{"spec.Environment"}},
		{"provider key in the environment", with(func(s *Spec) { s.Environment = map[string]string{"OPENAI_API_KEY": "sk-host"} }), `{}`, []string{"spec.Environment", "OPENAI_API_KEY", "credential"}},
		{"credential-like environment name", with(func(s *Spec) { s.Environment = map[string]string{"REGION": "eu", "deploy_token": "t"} }), `{}`, []string{"spec.Environment", "deploy_token", "*_TOKEN"}},
		{"inputs not an object", ok, `[1,2]`, []string{"inputs", "JSON object"}},
		{"inputs not JSON", ok, `{"a":`, []string{"inputs", "not valid JSON"}},
		{"inputs not UTF-8", ok, "{\"a\":\"\xff\"}", []string{"inputs", "UTF-8"}},
		{"inputs too large", ok, big, []string{"inputs", "4 MiB"}},
		{"unknown framing", with(func(s *Spec) { s.Pages = &PagesSpec{PathFrom: "f", MediaType: "application/json", Framing: "ndjson"} }), `{}`, []string{"pages.framing", "json_array"}},
		{"page bytes too large", with(func(s *Spec) {
			s.Pages = &PagesSpec{PathFrom: "f", MediaType: "application/json", Framing: "json_array", PageBytes: MaxPageBytes + 1}
		}), `{}`, []string{"pages.page_bytes"}},
		{"missing path_from", with(func(s *Spec) { s.Pages = &PagesSpec{MediaType: "application/json", Framing: "json_array"} }), `{}`, []string{"pages.path_from"}},
		{"bad media type", with(func(s *Spec) { s.Pages = &PagesSpec{PathFrom: "f", MediaType: "not a type", Framing: "json_array"} }), `{}`, []string{"pages.media_type"}},
		{"package folder missing", with(func(s *Spec) { s.Dir = filepath.Join(basic, "nope") }), `{}`, []string{"spec.Dir"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantFailure(t, run(t, p, tc.spec, tc.inputs), CodeInvalidRequest, tc.parts...)
		})
	}
}

func TestModuleRejected(t *testing.T) {
	p := sharedPool(t)
	basic := fixture(t, "basic")
	cases := []struct {
		name  string
		spec  Spec
		parts []string
	}{
		{"syntax error", Spec{Dir: basic, Module: "syntax_error.mjs"}, []string{"syntax_error.mjs:2", "Expected"}},
		{"missing module file", Spec{Dir: basic, Module: "nope.mjs"}, []string{"nope.mjs", "does not exist"}},
		{"missing named export", Spec{Dir: basic, Module: "named.mjs", Export: "subtract"}, []string{`no export "subtract"`}},
		{"missing default export", Spec{Dir: basic, Module: "outputs.mjs"}, []string{`no export "default"`}},
		// Inherited from Object.prototype, not exported.
		{"inherited toString", Spec{Dir: basic, Module: "named.mjs", Export: "toString"}, []string{`no export "toString"`}},
		{"inherited constructor", Spec{Dir: basic, Module: "named.mjs", Export: "constructor"}, []string{`no export "constructor"`}},
		{"inherited __proto__", Spec{Dir: basic, Module: "named.mjs", Export: "__proto__"}, []string{`no export "__proto__"`}},
		{"export is not a function", Spec{Dir: basic, Module: "named.mjs", Export: "notAFunction"}, []string{`"notAFunction" is not a function`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantFailure(t, run(t, p, tc.spec, `{}`), CodeModuleRejected, tc.parts...)
		})
	}
}

func TestExecutionFailed(t *testing.T) {
	p := sharedPool(t)
	basic := fixture(t, "basic")
	cases := []struct {
		name  string
		spec  Spec
		parts []string
	}{
		{"export throws", Spec{Dir: basic, Module: "throws.mjs"}, []string{"TypeError", "boom from the module"}},
		{"module evaluation throws", Spec{Dir: basic, Module: "evaluation_error.mjs"}, []string{"evaluation", "evaluation boom"}},
		{"promise rejected", Spec{Dir: basic, Module: "async.mjs", Export: "rejects"}, []string{"rejected", "async boom"}},
		{"promise never settles", Spec{Dir: basic, Module: "async.mjs", Export: "pending"}, []string{"did not settle"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantFailure(t, run(t, p, tc.spec, `{}`), CodeExecutionFailed, tc.parts...)
		})
	}
}

func TestOutputs(t *testing.T) {
	p := sharedPool(t)
	basic := fixture(t, "basic")
	rejected := []struct {
		export string
		parts  []string
	}{
		{"returnsUndefined", []string{"result:", "undefined"}},
		{"nestedUndefined", []string{"result.a.b", "undefined"}},
		{"bigint", []string{"result.n", "BigInt"}},
		{"func", []string{"result.f", "function"}},
		{"symbol", []string{"result.s", "symbol"}},
		{"cycle", []string{"result.list[0]", "cycle"}},
		{"nan", []string{"result.x", "NaN"}},
		{"map", []string{"type Map"}},
		{"hole", []string{"result[1]", "hole"}},
		{"holeArrayPrototype", []string{"result[1]", "hole"}},
		{"holeObjectPrototype", []string{"result[1]", "hole"}},
		{"holeProxyPrototype", []string{"result[1]", "hole"}},
		{"tooLarge", []string{"larger than the limit"}},
		{"deep", []string{"deeper than 1000 levels"}},
	}
	for _, tc := range rejected {
		t.Run(tc.export, func(t *testing.T) {
			wantFailure(t, run(t, p, Spec{Dir: basic, Module: "outputs.mjs", Export: tc.export}, `{}`), CodeOutputRejected, tc.parts...)
		})
	}
	t.Run("Object.keys replaced by one that lies", func(t *testing.T) {
		wantFailure(t, run(t, p, Spec{Dir: basic, Module: "outputs.mjs", Export: "lyingObjectKeys"}, `{}`), CodeExecutionFailed, "Object.keys did not return the object's keys")
	})
	t.Run("getter throws while encoding", func(t *testing.T) {
		wantFailure(t, run(t, p, Spec{Dir: basic, Module: "outputs.mjs", Export: "getterThrows"}, `{}`), CodeExecutionFailed, "getter boom")
	})
	t.Run("JSON-compatible values are encoded like JSON.stringify", func(t *testing.T) {
		r := run(t, p, Spec{Dir: basic, Module: "outputs.mjs", Export: "fine"}, `{}`)
		if r.Err != nil {
			t.Fatalf("run failed: %+v", r.Err)
		}
		want := `{"s":"quote\" back\\ nl\n tab\t \u0001 é 😀","n":[0,0,1.5,1e+21,9007199254740992,-7,0.30000000000000004],"t":true,"f":false,"z":null,"nested":{"arr":[[]],"obj":{},"bare":{}}}`
		if string(r.Output) != want {
			t.Fatalf("output\n got %s\nwant %s", r.Output, want)
		}
	})
	t.Run("keys with unpaired surrogates keep them", func(t *testing.T) {
		r := run(t, p, Spec{Dir: basic, Module: "outputs.mjs", Export: "loneSurrogateKeys"}, `{}`)
		if r.Err != nil {
			t.Fatalf("run failed: %+v", r.Err)
		}
		if want := "{\"\\ud800\":1,\"\ufffd\":2,\"nested\":{\"x\\udc00\":[3]}}"; string(r.Output) != want {
			t.Fatalf("output = %s, want %s", r.Output, want)
		}
	})
	t.Run("unpaired surrogates are escaped", func(t *testing.T) {
		r := run(t, p, Spec{Dir: basic, Module: "outputs.mjs", Export: "loneSurrogate"}, `{}`)
		if r.Err != nil {
			t.Fatalf("run failed: %+v", r.Err)
		}
		if want := `{"s":"a\ud800b"}`; string(r.Output) != want {
			t.Fatalf("output = %s, want %s", r.Output, want)
		}
	})
}

func TestContextIsFrozenAndHostIsAbsent(t *testing.T) {
	p := sharedPool(t)
	t.Setenv("LIBOS_HOST_ONLY_SECRET", "must-not-leak")
	r := run(t, p, Spec{
		Dir:         fixture(t, "basic"),
		Module:      "context.mjs",
		Environment: map[string]string{"REGION": "eu-west", "TRACE_LABEL": "t-1"},
	}, `{"x":1}`)
	wantOutput(t, r, `{
		"argumentCount": 2,
		"contextFrozen": true,
		"environmentFrozen": true,
		"contextKeys": ["environment"],
		"environment": {"REGION": "eu-west", "TRACE_LABEL": "t-1"},
		"inputs": {"x": 1},
		"environmentWrite": "TypeError",
		"contextWrite": "TypeError",
		"hostGlobals": {
			"process": "undefined", "require": "undefined", "module": "undefined", "exports": "undefined",
			"fetch": "undefined", "XMLHttpRequest": "undefined", "WebSocket": "undefined",
			"setTimeout": "undefined", "setInterval": "undefined", "setImmediate": "undefined",
			"clearTimeout": "undefined", "queueMicrotask": "undefined", "Deno": "undefined", "Bun": "undefined",
			"console": "undefined", "__filename": "undefined", "__dirname": "undefined"
		}
	}`)
	// Without declared names the environment is empty, never the host's.
	r = run(t, p, Spec{Dir: fixture(t, "basic"), Module: "context.mjs"}, `{}`)
	if r.Err != nil || !strings.Contains(string(r.Output), `"environment":{}`) {
		t.Fatalf("undeclared environment: %+v %s", r.Err, r.Output)
	}
}

func TestRuntimeCodeCannotReadSourceMapsFromTheHost(t *testing.T) {
	p := sharedPool(t)
	fifo := filepath.Join(t.TempDir(), "map.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(map[string]string{"path": fifo})
	r := run(t, p, Spec{Dir: fixture(t, "basic"), Module: "sourcemap_probe.mjs", Timeout: 5 * time.Second}, string(in))
	wantOutput(t, r, `{"a":42,"b":7}`)
}

func TestErrorPositionsNameTheAuthorsFile(t *testing.T) {
	p := sharedPool(t)
	r := run(t, p, Spec{Dir: fixture(t, "basic"), Module: "throws.mjs"}, `{}`)
	wantFailure(t, r, CodeExecutionFailed, "(throws.mjs:2:")
	if strings.Contains(r.Err.Message, bundleNamespace) {
		t.Fatalf("message leaks the bundler namespace: %s", r.Err.Message)
	}
}

func TestEachCallGetsAFreshEngine(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1})
	for i := 0; i < 3; i++ {
		wantOutput(t, run(t, p, Spec{Dir: fixture(t, "basic"), Module: "context.mjs", Export: "leaky"}, `{}`), `{"before":0}`)
	}
}

func TestDeterminism(t *testing.T) {
	p := sharedPool(t)
	want := `{"now":0,"iso":"1970-01-01T00:00:00.000Z","hours":0,"offset":0,
		"random":"TypeError: Math.random is unavailable: modules must be deterministic"}`
	for i := 0; i < 2; i++ {
		wantOutput(t, run(t, p, Spec{Dir: fixture(t, "basic"), Module: "determinism.mjs"}, `{}`), want)
	}
	if FixedClock.UnixMilli() != 0 {
		t.Fatalf("FixedClock = %s", FixedClock)
	}
}

// TestHostileModules runs each hostile module on a one-worker pool and
// checks that it ends with resource_limit naming the limit and that the
// next call on the same pool works.
func TestHostileModules(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1})
	hostile := fixture(t, "hostile")
	healthy := Spec{Dir: fixture(t, "basic"), Module: "sync.mjs"}
	cases := []struct {
		module  string
		timeout time.Duration
		parts   []string
	}{
		{"loop.mjs", time.Second, []string{"wall time limit of 1s"}},
		{"recursion.mjs", 10 * time.Second, []string{"call stack depth"}},
		{"alloc.mjs", 30 * time.Second, []string{"memory limit"}},
		{"huge_alloc.mjs", 30 * time.Second, []string{"memory limit"}},
		{"backtrack.mjs", time.Second, []string{"wall time limit of 1s", "killed"}},
	}
	for _, tc := range cases {
		t.Run(tc.module, func(t *testing.T) {
			start := time.Now()
			r := run(t, p, Spec{Dir: hostile, Module: tc.module, Timeout: tc.timeout}, `{}`)
			wantFailure(t, r, CodeResourceLimit, tc.parts...)
			t.Logf("%s: %s after %s", tc.module, r.Err.Message, time.Since(start).Round(time.Millisecond))
			if limit := tc.timeout + killGrace + 5*time.Second; time.Since(start) > limit {
				t.Fatalf("took %s, more than %s", time.Since(start), limit)
			}
			wantOutput(t, run(t, p, healthy, `{"values":[1,1]}`), `{"total":2,"kind":"sync"}`)
		})
	}
}

// The worker watches every call with one timer that each call re-arms and
// none stops: the wall and heap limits still end a call that follows other
// calls on the same worker, whether the timer was still pending from the
// call before (back to back) or had already fired with no call to watch
// (after a pause), and the worker itself interrupts the call (no kill).
func TestLimitsHoldOnLaterCallsOfAWorker(t *testing.T) {
	// A race-instrumented worker maps shadow memory for every heap arena, so
	// the default address-space headroom could end the allocation first;
	// this test is about the watchdog, so it gives the worker room (and a
	// small heap, which the allocation reaches quickly).
	p := newPool(t, PoolOptions{Workers: 1, MemoryLimit: 32 << 20, AddressSpace: 2 << 30})
	hostile := fixture(t, "hostile")
	healthy := Spec{Dir: fixture(t, "basic"), Module: "sync.mjs"}
	loop := Spec{Dir: hostile, Module: "loop.mjs", Timeout: time.Second}
	alloc := Spec{Dir: hostile, Module: "alloc.mjs", Timeout: 30 * time.Second}
	for _, pause := range []time.Duration{0, 20 * time.Millisecond} {
		for _, limit := range []struct {
			spec Spec
			part string
		}{{loop, "wall time limit of 1s"}, {alloc, "heap reached"}} {
			for i := 0; i < 3; i++ {
				wantOutput(t, run(t, p, healthy, `{"values":[1,2]}`), `{"total":3,"kind":"sync"}`)
			}
			time.Sleep(pause)
			r := run(t, p, limit.spec, `{}`)
			wantFailure(t, r, CodeResourceLimit, limit.part)
			if strings.Contains(r.Err.Message, "killed") {
				t.Fatalf("after %s: the worker was killed instead of interrupting the call: %s", pause, r.Err.Message)
			}
		}
	}
}

// TestAHeapEndsWithItsCall: what a call leaves alive in its engine does not
// count against the next calls of its worker, which each keep as much again
// under the same heap limit.
func TestAHeapEndsWithItsCall(t *testing.T) {
	// Room for the race detector's shadow memory, as above.
	p := newPool(t, PoolOptions{Workers: 1, MemoryLimit: 32 << 20, AddressSpace: 2 << 30})
	keep := Spec{Dir: fixture(t, "hostile"), Module: "keep.mjs", Timeout: 30 * time.Second}
	for range 3 {
		wantOutput(t, run(t, p, keep, `{}`), `{"kept":16777216}`)
	}
	// A call whose result throws while it is encoded lets its heap go too.
	throws := keep
	throws.Export = "keepAndThrow"
	wantFailure(t, run(t, p, throws, `{}`), CodeExecutionFailed, "boom while encoding")
	for range 2 {
		wantOutput(t, run(t, p, keep, `{}`), `{"kept":16777216}`)
	}
}

// TestWorkerCrashIsInternalFailure kills a worker from outside while it
// runs a call: the call reports internal_failure and the pool recovers.
func TestWorkerCrashIsInternalFailure(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1})
	// Kill the worker from outside once the call has been sent to it.
	p.callSent = func(pid int) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Errorf("kill worker %d: %v", pid, err)
		}
	}
	r := run(t, p, Spec{Dir: fixture(t, "hostile"), Module: "loop.mjs", Timeout: 20 * time.Second}, `{}`)
	p.callSent = nil
	wantFailure(t, r, CodeInternalFailure, "worker exited")
	wantOutput(t, run(t, p, Spec{Dir: fixture(t, "basic"), Module: "sync.mjs"}, `{"values":[2]}`), `{"total":2,"kind":"sync"}`)
}

func TestCallerContext(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1})
	loop := Spec{Dir: fixture(t, "hostile"), Module: "loop.mjs", Timeout: 20 * time.Second}

	// Cancelled while the worker runs the call.
	ctx, cancel := context.WithCancel(context.Background())
	p.callSent = func(int) { cancel() }
	r := p.Run(ctx, loop, nil, "")
	p.callSent = nil
	wantFailure(t, r, CodeExecutionFailed, "cancelled")

	// Cancelled before a worker was free.
	r = p.Run(ctx, loop, nil, "")
	wantFailure(t, r, CodeExecutionFailed, "cancelled", "waiting for a worker")

	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	r = p.Run(ctx, loop, nil, "")
	wantFailure(t, r, CodeResourceLimit, "deadline")

	wantOutput(t, run(t, p, Spec{Dir: fixture(t, "basic"), Module: "sync.mjs"}, `{"values":[3]}`), `{"total":3,"kind":"sync"}`)
}

func TestConcurrentRuns(t *testing.T) {
	p := sharedPool(t)
	basic := fixture(t, "basic")
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				r := p.Run(context.Background(), Spec{Dir: basic, Module: "named.mjs", Export: "add"},
					[]byte(fmt.Sprintf(`{"a":%d,"b":%d}`, g, i)), "")
				want := fmt.Sprintf(`{"sum":%d,"label":"[%d+%d]"}`, g+i, g, i)
				if r.Err != nil || string(r.Output) != want {
					errs <- fmt.Errorf("goroutine %d call %d: %+v %s, want %s", g, i, r.Err, r.Output, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestBundleCache(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1})
	pkg := t.TempDir()
	writeFile(t, filepath.Join(pkg, "main.mjs"), `import { v } from "./lib/v.mjs"; export default () => ({ v });`)
	writeFile(t, filepath.Join(pkg, "lib", "v.mjs"), `export const v = 1;`)
	spec := Spec{Dir: pkg, Module: "main.mjs"}

	wantOutput(t, run(t, p, spec, `{}`), `{"v":1}`)
	b1, warm, f := p.bundles.get(pkg, "main.mjs")
	if f != nil || !warm {
		t.Fatalf("second lookup: warm=%v failure=%v, want a warm hit", warm, f)
	}
	// Changing an imported file (same size, so only content can tell) rebuilds.
	writeFile(t, filepath.Join(pkg, "lib", "v.mjs"), `export const v = 2;`)
	wantOutput(t, run(t, p, spec, `{}`), `{"v":2}`)
	b2, warm, _ := p.bundles.get(pkg, "main.mjs")
	if !warm || b2.hash == b1.hash {
		t.Fatalf("after the change: warm=%v, hash changed=%v", warm, b2.hash != b1.hash)
	}
	// An identical graph elsewhere has the same content hash.
	other := t.TempDir()
	writeFile(t, filepath.Join(other, "main.mjs"), `import { v } from "./lib/v.mjs"; export default () => ({ v });`)
	writeFile(t, filepath.Join(other, "lib", "v.mjs"), `export const v = 2;`)
	b3, warm, _ := p.bundles.get(other, "main.mjs")
	if warm || b3.hash != b2.hash {
		t.Fatalf("identical graph: warm=%v, same hash=%v", warm, b3.hash == b2.hash)
	}
	// A graph that becomes invalid is refused, not served from the cache.
	writeFile(t, filepath.Join(pkg, "lib", "v.mjs"), `import "lodash"; export const v = 3;`)
	wantFailure(t, run(t, p, spec, `{}`), CodeModuleRejected, "lodash")
}

func TestPoolLifecycle(t *testing.T) {
	p, err := NewPool(PoolOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantOutput(t, run(t, p, Spec{Dir: fixture(t, "pure"), Module: "sum.mjs", Export: "add"}, `{"a":1,"b":2}`), `{"sum":3}`)
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("second Close = %v, want ErrPoolClosed", err)
	}
	wantFailure(t, run(t, p, Spec{Dir: fixture(t, "pure"), Module: "sum.mjs", Export: "add"}, `{}`), CodeInternalFailure, "closed")
}

func TestNewPoolRejectsANonWorkerExecutable(t *testing.T) {
	for _, exe := range []string{"/bin/true", filepath.Join(t.TempDir(), "missing")} {
		_, err := NewPool(PoolOptions{Workers: 1, Executable: exe, StartTimeout: 5 * time.Second})
		if !errors.Is(err, ErrWorkerStart) {
			t.Fatalf("NewPool(%s) = %v, want ErrWorkerStart", exe, err)
		}
	}
	for _, opts := range []PoolOptions{{Workers: -1}, {MemoryLimit: -1}, {MaxCallDepth: -1}, {StartTimeout: -1}} {
		if _, err := NewPool(opts); err == nil {
			t.Fatalf("NewPool(%+v) accepted a negative option", opts)
		}
	}
}

// TestWorkerStartFailureQuotesItsStderr starts a program that is not a
// worker: the error names what it wrote to stderr before it exited.
func TestWorkerStartFailureQuotesItsStderr(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("no sh: %v", err)
	}
	p, err := NewPool(PoolOptions{Workers: 1, Executable: sh, StartTimeout: 10 * time.Second})
	if err == nil {
		p.Close()
		t.Fatal("a pool of sh started")
	}
	if !errors.Is(err, ErrWorkerStart) {
		t.Fatalf("err = %v, want ErrWorkerStart", err)
	}
	_, said, ok := strings.Cut(err.Error(), "worker stderr: ")
	if !ok || !strings.Contains(said, "option") {
		t.Fatalf("err = %v, want the complaint of sh about its option quoted", err)
	}
}

// TestWorkerArgumentsAlone: only the exact argument vector a pool gives its
// workers makes a worker, wherever the same words appear otherwise.
func TestWorkerArgumentsAlone(t *testing.T) {
	for _, args := range [][]string{
		{"libos"},
		{"libos", workerGuardArg},
		{"libos", workerArg},
		{"libos", workerArg, workerGuardArg},
		{"libos", workerGuardArg, workerArg, "run"},
		{"libos", "run", workerGuardArg, workerArg},
	} {
		if startedAsWorker(args) {
			t.Errorf("%q starts a worker", args)
		}
	}
	if !startedAsWorker(append([]string{"libos"}, workerArgs...)) {
		t.Errorf("a pool's worker arguments %q do not start a worker", workerArgs)
	}
}
