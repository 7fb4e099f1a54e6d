package jsrunner

import (
	"bufio"
	"container/list"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/dop251/goja"
	"github.com/dop251/goja/parser"

	"github.com/libos/libos/skills/runner/clitool"
)

// workerGuardArg is passed to workers so that an executable that forgot to
// call MaybeRunWorker does nothing harmful: a Go test binary runs no tests,
// and a CLI rejects the unknown flag.
const workerGuardArg = "-test.run=^$"

// workerArg follows workerGuardArg as a worker's only other argument: that
// exact argument vector is what turns a process into a javascript worker.
// It is not an environment variable because a worker's OS environment is
// empty (the contract's "The worker OS environment remains empty").
const workerArg = "libos-jsrunner-worker"

// workerArgs are a worker's arguments after the program name.
var workerArgs = []string{workerGuardArg, workerArg}

// startedAsWorker reports whether args, a program's whole argument vector,
// are a worker's.
func startedAsWorker(args []string) bool {
	return len(args) == 1+len(workerArgs) && slices.Equal(args[1:], workerArgs)
}

// bundleGlobal is the global variable the bundle assigns its exports to.
const bundleGlobal = "__libos_module_exports"

// workerBundleCache bounds how many compiled bundles a worker keeps.
const workerBundleCache = 64

// MaybeRunWorker turns the current process into a skill helper when it was
// started as one and never returns in that case: a javascript worker
// (started with workerArgs) or a cli-tool supervisor (clitool.SupervisorEnv set, see
// clitool.MaybeRunSupervisor). Otherwise it returns immediately, and cli-tool
// calls made by this program run under supervisors. Call it first in main
// (and in TestMain of any test binary that starts a Pool or runs cli-tools)
// before anything else touches stdin or stdout.
func MaybeRunWorker() {
	// Both helpers are this program re-executed, so one hook serves both.
	clitool.MaybeRunSupervisor()
	if !startedAsWorker(os.Args) {
		return
	}
	oneMallocArena()
	// Blocking reads wake straight from the kernel when a request arrives.
	_ = syscall.SetNonblock(0, false)
	os.Exit(runWorker(os.NewFile(0, "stdin"), os.Stdout))
}

// limitInterrupt is the value a watchdog interrupts the engine with.
type limitInterrupt struct {
	limit string
}

func (l *limitInterrupt) Error() string { return l.limit }

type workerState struct {
	cfg      configMsg
	programs map[string]*list.Element
	lru      *list.List // of *compiledBundle, most recent first
	// ready is the engine for the next call, prepared for plan after the
	// previous answer was sent, so that its cost falls between calls.
	ready *engine
	plan  aheadPlan
	// last and streak are the bundle of the last call and how many calls
	// in a row ran it: a bundle is evaluated ahead from its second call in
	// a row, so calls that alternate between bundles are not slowed by
	// engines prepared for the wrong one.
	last   *compiledBundle
	streak int
	// aheadLimit is the longest an evaluation may take for the next to be
	// made ahead: aheadTime, but for tests that must not depend on the load.
	aheadLimit time.Duration
	// guard watches every call's limits, and evaluations ahead, with one
	// timer.
	guard *watchdog
	// enc encodes every call's result, so its buffers are reused.
	enc *jsonEncoder
}

func newWorkerState(cfg configMsg) *workerState {
	return &workerState{cfg: cfg, programs: make(map[string]*list.Element), lru: list.New(), guard: newWatchdog(cfg.HeapLimit),
		aheadLimit: aheadTime}
}

type compiledBundle struct {
	hash string
	prg  *goja.Program
	err  *Failure // a bundle the engine cannot compile is remembered as refused
	// aheadOK says the bundle's last evaluation succeeded within
	// aheadTime, so the next engine may evaluate it ahead of its call.
	// Only the worker's main goroutine reads and writes it.
	aheadOK bool
}

// yieldEvery bounds how long the worker's one goroutine goes without passing
// through the Go scheduler; nothing else makes it, as it blocks only in
// system calls. The runtime takes a goroutine not rescheduled for 10 ms for
// a runaway one: it interrupts it with a signal, or takes its P while it
// waits for a request, and the read that returns then wakes the runtime's
// monitor, which goes back to polling every 20 µs. Under back-to-back calls
// that is thousands of extra thread wake-ups a second on the CPUs the calls
// share.
const yieldEvery = 5 * time.Millisecond

// aheadTime is the longest a bundle's evaluation may have taken for the
// worker to evaluate it ahead of the next call: a module that is slow to
// evaluate would delay a call of another bundle arriving meanwhile.
const aheadTime = time.Millisecond

// aheadPlan is what the engine for the next call is prepared for: the
// bundle to evaluate in it (nil for none), under the call-depth and wall
// limits of the call that planned it, and the environment of its context.
type aheadPlan struct {
	bundle  *compiledBundle
	depth   int
	timeout time.Duration
	env     map[string]string
}

func runWorker(in io.Reader, out io.Writer) int {
	// Local-time Date methods read UTC, whatever the machine's zone.
	time.Local = time.UTC
	r := bufio.NewReaderSize(in, 64<<10)
	var cfg configMsg
	if _, err := readFrame(r, &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "jsrunner worker: read config: %v\n", err)
		return 2
	}
	ready := readyMsg{Op: "ready", PID: os.Getpid()}
	if err := applyWorkerLimits(cfg); err != nil {
		ready = readyMsg{Op: "error", Message: err.Error(), PID: os.Getpid()}
	}
	w := newWorkerState(cfg)
	if cfg.HeapLimit > 0 {
		// Calls allocate a little and drop it all, so collect rarely (fewer
		// collections in the latency tail: a collection's mark worker takes
		// a whole CPU for milliseconds) until the heap nears the limit,
		// where the memory limit makes the collector work hard before the
		// watchdog has to step in. 800 lets about 32 MiB of garbage gather
		// (twice 400's), which halves the collections of warm calls and cut
		// their p99 by about a quarter; the memory limit, not this
		// percentage, bounds the heap a call can reach.
		debug.SetGCPercent(800)
		debug.SetMemoryLimit(cfg.HeapLimit)
	}
	if cfg.MaxGoStack > 0 {
		debug.SetMaxStack(int(cfg.MaxGoStack))
	}
	frame, err := appendFrame(nil, ready)
	if err == nil {
		_, err = out.Write(frame)
	}
	if err != nil || ready.Op != "ready" {
		return 2
	}
	var (
		outBuf, inBuf []byte
		req           runMsg // each request is decoded over the previous one
		yielded       = time.Now()
	)
	for {
		body, next, err := readFrameInto(r, &req, inBuf)
		inBuf = next
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0 // the host closed the pipe: a normal shutdown
			}
			fmt.Fprintf(os.Stderr, "jsrunner worker: read request: %v\n", err)
			return 2
		}
		res, payload := w.handle(&req, body)
		outBuf, err = appendFrame(outBuf[:0], &res, payload...)
		if err != nil {
			outBuf, _ = appendFrame(outBuf[:0], &resultMsg{Status: statusFailed, Code: CodeInternalFailure, Message: err.Error()})
		}
		if _, err := out.Write(outBuf); err != nil {
			return 0
		}
		w.ready = w.prepare()
		if now := time.Now(); now.Sub(yielded) >= yieldEvery {
			yielded = now
			runtime.Gosched()
		}
		// Buffers a large call grew are dropped rather than kept.
		if cap(outBuf) > 1<<20 {
			outBuf = nil
		}
		if cap(inBuf) > 1<<20 {
			inBuf = nil
		}
		if w.enc != nil && cap(w.enc.buf) > 1<<20 {
			w.enc = nil
		}
	}
}

func (w *workerState) handle(req *runMsg, body []byte) (resultMsg, [][]byte) {
	if req.Op != "run" || req.CodeLen < 0 || req.CodeLen > len(body) {
		return resultMsg{Status: statusProtocolFail, Message: "malformed run request"}, nil
	}
	code, inputs := body[:req.CodeLen], body[req.CodeLen:]
	cb := w.program(req, code)
	if cb == nil {
		return resultMsg{Status: statusNeedBundle}, nil
	}
	if cb.err != nil {
		return resultMsg{Status: statusFailed, Code: cb.err.Code, Message: cb.err.Message}, nil
	}
	res, payload := w.call(req, cb, inputs)
	if res.Code == CodeResourceLimit && strings.HasPrefix(res.Message, "memory") {
		// Give the pages back before the next call.
		debug.FreeOSMemory()
	}
	return res, payload
}

// program returns the compiled bundle, compiling code when given, or nil
// when the worker does not hold the bundle and no code came with the request.
func (w *workerState) program(req *runMsg, code []byte) *compiledBundle {
	if el, ok := w.programs[req.Bundle]; ok {
		w.lru.MoveToFront(el)
		return el.Value.(*compiledBundle)
	}
	if len(code) == 0 {
		return nil
	}
	cb := &compiledBundle{hash: req.Bundle}
	prg, err := compileBundle(req.ModuleName, code)
	if err != nil {
		cb.err = failf(CodeModuleRejected, "the engine cannot compile the module: %s", truncateMessage(err.Error()))
	} else {
		cb.prg = prg
	}
	w.programs[req.Bundle] = w.lru.PushFront(cb)
	for w.lru.Len() > workerBundleCache {
		last := w.lru.Back()
		w.lru.Remove(last)
		delete(w.programs, last.Value.(*compiledBundle).hash)
	}
	return cb
}

// compileBundle compiles a bundle as strict code (ES modules are strict).
// Only the inline source map the bundler appends is honoured: the parser
// would otherwise read a sourceMappingURL target from the filesystem.
func compileBundle(name string, code []byte) (*goja.Program, error) {
	ast, err := parser.ParseFile(nil, name, string(code), 0, parser.WithSourceMapLoader(refuseSourceMap))
	if err != nil {
		return nil, err
	}
	return goja.CompileAST(ast, true)
}

func refuseSourceMap(string) ([]byte, error) {
	return nil, errors.New("source maps are only read inline")
}

// engine is a fresh runtime prepared for exactly one call. Preparing it
// (creating the runtime, installing the deterministic clock, the refusing
// Math.random and the promise-job bound) happens while the worker waits for
// its next request, so a call pays only for running the module. When the
// calls before ran one bundle that evaluates quickly, the engine also
// evaluates that bundle's top-level code and builds their context ahead
// (prepare): a module is deterministic and sees neither inputs nor
// environment while it evaluates, so evaluating it ahead gives the call
// what evaluating it on arrival would. No other module code runs in an
// engine before the call it serves, and an engine serves one call.
type engine struct {
	vm *goja.Runtime
	// Object.freeze and Object.hasOwn, which the worker calls on every
	// call, captured before module code can replace them.
	freeze, hasOwn goja.Callable
	// inside calls run as one engine call (see workerState.call); it is
	// built with the engine so that a call does not pay for it.
	inside goja.Callable
	run    func()
	bound  *promiseBound

	// evaluated is the bundle whose top-level code ran in this engine,
	// under call-depth limit depth, leaving exports; nil when none did.
	evaluated *compiledBundle
	depth     int
	exports   goja.Value
	// ctx is the frozen {environment} context built for env ahead of the
	// call; the call uses it when its environment is the same.
	env map[string]string
	ctx *goja.Object
}

// newEngine builds the next call's runtime.
func newEngine() *engine {
	vm := goja.New()
	// eval and Function parse code too; they must not open files for source maps.
	vm.SetParserOptions(parser.WithDisableSourceMaps)
	vm.SetTimeSource(func() time.Time { return FixedClock })
	vm.SetRandSource(func() float64 { panic(vm.NewTypeError("Math.random is unavailable: modules must be deterministic")) })
	e := &engine{vm: vm}
	// Captured before module code can replace them.
	object := vm.Get("Object").ToObject(vm)
	e.freeze, _ = goja.AssertFunction(object.Get("freeze"))
	e.hasOwn, _ = goja.AssertFunction(object.Get("hasOwn"))
	// Never reachable from module code: only the worker holds it.
	e.inside, _ = goja.AssertFunction(vm.ToValue(func(goja.FunctionCall) goja.Value {
		e.run()
		return goja.Undefined()
	}))
	e.bound = &promiseBound{vm: vm}
	vm.SetAsyncContextTracker(e.bound)
	return e
}

// ownProperty reports whether key is an own property of o, through the
// Object.hasOwn captured before module code could replace it.
func (e *engine) ownProperty(o *goja.Object, key goja.Value) (bool, error) {
	v, err := e.hasOwn(goja.Undefined(), o, key)
	if err != nil {
		return false, err
	}
	return v.ToBoolean(), nil
}

// builtin returns the function global.name, read now. It serves only keys
// Go text cannot hold, which are rare: capturing it with the engine would
// cost every call (Reflect alone is most of an engine). Module code may
// have replaced it by then, which changes how its own values cross the
// boundary, and nothing it can reach.
func (e *engine) builtin(global, name string) (goja.Callable, error) {
	obj := e.vm.Get(global)
	if obj == nil {
		return nil, fmt.Errorf("%s is not defined", global)
	}
	fn, ok := goja.AssertFunction(obj.ToObject(e.vm).Get(name))
	if !ok {
		return nil, fmt.Errorf("%s.%s is not a function", global, name)
	}
	return fn, nil
}

// propertyKey is an own enumerable string key of an object: its Go text,
// and, when Go text cannot hold it (an unpaired surrogate reads as U+FFFD),
// the engine's string, through which the property is read and the key
// written.
type propertyKey struct {
	name  string
	exact goja.Value
}

// ownKeys returns o's own enumerable string keys in the engine's order.
func (e *engine) ownKeys(o *goja.Object) ([]propertyKey, error) {
	names := o.Keys()
	keys := make([]propertyKey, len(names))
	lossy := false
	for i, name := range names {
		keys[i].name = name
		lossy = lossy || strings.ContainsRune(name, utf8.RuneError)
	}
	if !lossy {
		return keys, nil
	}
	objectKeys, err := e.builtin("Object", "keys")
	if err != nil {
		return nil, err
	}
	v, err := objectKeys(goja.Undefined(), o)
	if err != nil {
		return nil, err
	}
	// Module code may have replaced Object.keys: what it returned must be
	// the keys Go text found, as strings.
	list, ok := v.(*goja.Object)
	if !ok || list.Get("length") == nil || list.Get("length").ToInteger() != int64(len(names)) {
		return nil, errors.New("Object.keys did not return the object's keys")
	}
	for i := range keys {
		k := list.Get(strconv.Itoa(i))
		if k == nil || !goja.IsString(k) || k.String() != names[i] {
			return nil, errors.New("Object.keys did not return the object's keys")
		}
		keys[i].exact = k
	}
	return keys, nil
}

// get reads o's property k.
func (e *engine) get(o *goja.Object, k propertyKey) (goja.Value, error) {
	if k.exact == nil {
		return o.Get(k.name), nil
	}
	reflectGet, err := e.builtin("Reflect", "get")
	if err != nil {
		return nil, err
	}
	return reflectGet(goja.Undefined(), o, k.exact)
}

// nextEngine returns the engine prepared for this call, or a new one.
func (w *workerState) nextEngine() *engine {
	e := w.ready
	w.ready = nil
	if e == nil {
		e = newEngine()
	}
	return e
}

// planNext says what the engine of the call after req's is prepared for.
func (w *workerState) planNext(req *runMsg, bundle *compiledBundle) {
	if bundle == w.last {
		w.streak++
	} else {
		w.last, w.streak = bundle, 1
	}
	w.plan = aheadPlan{depth: req.MaxDepth, timeout: time.Duration(req.TimeoutNS)}
	if w.streak >= 2 && bundle.aheadOK {
		// A copy: the next request is decoded over req.
		w.plan.bundle, w.plan.env = bundle, maps.Clone(req.Env)
	}
}

// prepare builds the next call's engine and, when the plan names a bundle,
// evaluates it in the engine under the plan's limits and builds the plan's
// context. An evaluation ahead that fails is dropped with its engine; the
// call then evaluates the bundle itself and reports what happens.
func (w *workerState) prepare() *engine {
	plan := w.plan
	w.plan = aheadPlan{}
	e := newEngine()
	// The call the plan was made in may have found the bundle slow or
	// failing since: its evaluation updated aheadOK.
	if plan.bundle == nil || !plan.bundle.aheadOK {
		return e
	}
	e.vm.SetMaxCallStackSize(plan.depth)
	w.guard.arm(e.vm, plan.timeout)
	start := time.Now()
	err := e.evaluate(plan.bundle, plan.depth)
	w.guard.disarm()
	plan.bundle.aheadOK = err == nil && time.Since(start) < w.aheadLimit
	if err != nil {
		return newEngine()
	}
	if ctx, err := e.context(plan.env); err == nil {
		e.env, e.ctx = plan.env, ctx
	}
	return e
}

// evaluate runs bundle's top-level code in e as an engine call of its own,
// so the promise jobs it queues run before any export is called, as an ES
// module's evaluation settles before its importer goes on.
func (e *engine) evaluate(bundle *compiledBundle, depth int) error {
	var (
		exports goja.Value
		err     error
	)
	e.run = func() {
		if _, err = e.vm.RunProgram(bundle.prg); err == nil {
			exports = e.vm.Get(bundleGlobal)
		}
	}
	if _, ierr := e.inside(goja.Undefined()); ierr != nil {
		return ierr
	}
	if err != nil {
		return err
	}
	if l := e.bound.exceeded(); l != nil {
		return l
	}
	e.evaluated, e.depth, e.exports = bundle, depth, exports
	return nil
}

// call runs one export invocation in a fresh engine instance, so nothing a
// module leaves behind is visible to the next call.
func (w *workerState) call(req *runMsg, bundle *compiledBundle, inputs []byte) (resultMsg, [][]byte) {
	e := w.nextEngine()
	ahead := e.evaluated == bundle && e.depth == req.MaxDepth
	if e.evaluated != nil && !ahead {
		// Prepared for another bundle, whose code ran in it.
		e = newEngine()
	}
	w.planNext(req, bundle)
	if !maps.Equal(e.env, req.Env) {
		e.ctx = nil
	}
	vm := e.vm
	if !ahead {
		vm.SetMaxCallStackSize(req.MaxDepth)
	}
	w.guard.arm(vm, time.Duration(req.TimeoutNS))
	defer w.guard.disarm()

	in, err := decodeJSON(e, inputs)
	if err != nil {
		return resultMsg{Status: statusFailed, Code: CodeInvalidRequest, Message: "inputs: " + err.Error()}, nil
	}
	if !ahead {
		start := time.Now()
		err := e.evaluate(bundle, req.MaxDepth)
		bundle.aheadOK = err == nil && time.Since(start) < w.aheadLimit
		if err != nil {
			return classifyEngineError(err, CodeExecutionFailed, "module evaluation failed"), nil
		}
	}
	var (
		res     resultMsg
		payload [][]byte
	)
	// Everything that may run module code happens inside one engine call so
	// that exceptions, interrupts and stack overflows all come back as its error.
	e.run = func() { res, payload = w.invoke(e, req, in) }
	if _, err := e.inside(goja.Undefined()); err != nil {
		return classifyEngineError(err, CodeExecutionFailed, "execution failed"), nil
	}
	if l := e.bound.exceeded(); l != nil {
		return classifyEngineError(l, CodeExecutionFailed, "execution failed"), nil
	}
	return res, payload
}

// context builds the frozen {environment} argument of a call.
func (e *engine) context(env map[string]string) (*goja.Object, error) {
	vm := e.vm
	envObj := vm.NewObject()
	for k, v := range env {
		// Defined, not assigned, so no name can reach an inherited setter.
		if err := envObj.DefineDataProperty(k, vm.ToValue(v), goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_TRUE); err != nil {
			return nil, fmt.Errorf("build environment: %w", err)
		}
	}
	if _, err := e.freeze(goja.Undefined(), envObj); err != nil {
		return nil, fmt.Errorf("freeze environment: %w", err)
	}
	ctx := vm.NewObject()
	if err := ctx.DefineDataProperty("environment", envObj, goja.FLAG_FALSE, goja.FLAG_FALSE, goja.FLAG_TRUE); err != nil {
		return nil, fmt.Errorf("build context: %w", err)
	}
	if _, err := e.freeze(goja.Undefined(), ctx); err != nil {
		return nil, fmt.Errorf("freeze context: %w", err)
	}
	return ctx, nil
}

func (w *workerState) invoke(e *engine, req *runMsg, in goja.Value) (resultMsg, [][]byte) {
	vm := e.vm
	exports, ok := e.exports.(*goja.Object)
	if !ok {
		return resultMsg{Status: statusFailed, Code: CodeModuleRejected, Message: fmt.Sprintf("the module has no export %q", req.Export)}, nil
	}
	// Only the module's own exports: the exports object inherits from
	// Object.prototype, whose toString or constructor is no export.
	if own, err := e.ownProperty(exports, vm.ToValue(req.Export)); err != nil || !own {
		return resultMsg{Status: statusFailed, Code: CodeModuleRejected, Message: fmt.Sprintf("the module has no export %q", req.Export)}, nil
	}
	fnVal := exports.Get(req.Export)
	if fnVal == nil || goja.IsUndefined(fnVal) {
		return resultMsg{Status: statusFailed, Code: CodeModuleRejected, Message: fmt.Sprintf("the module has no export %q", req.Export)}, nil
	}
	fn, ok := goja.AssertFunction(fnVal)
	if !ok {
		return resultMsg{Status: statusFailed, Code: CodeModuleRejected, Message: fmt.Sprintf("export %q is not a function", req.Export)}, nil
	}

	ctx := e.ctx
	if ctx == nil {
		var err error
		if ctx, err = e.context(req.Env); err != nil {
			return classifyEngineError(err, CodeInternalFailure, "build the context"), nil
		}
	}

	ret, err := fn(goja.Undefined(), in, ctx)
	if err != nil {
		return classifyEngineError(err, CodeExecutionFailed, "the export threw"), nil
	}
	if obj, ok := ret.(*goja.Object); ok && obj.ExportType() == typeOfPromise {
		p, _ := obj.Export().(*goja.Promise)
		if p != nil {
			// Promise jobs have already run: the engine drains its job queue
			// when the outermost call returns, and there are no timers or I/O
			// that could settle a promise later.
			switch p.State() {
			case goja.PromiseStateFulfilled:
				ret = p.Result()
			case goja.PromiseStateRejected:
				return resultMsg{Status: statusFailed, Code: CodeExecutionFailed,
					Message: "the export's promise was rejected: " + describeValue(vm, p.Result())}, nil
			default:
				return resultMsg{Status: statusFailed, Code: CodeExecutionFailed,
					Message: "the export's promise did not settle (a module has no timers or I/O that could settle it later)"}, nil
			}
		}
	}
	if req.Paged {
		return encodePaged(ret, req.OutputMax, e)
	}
	// The encoded bytes are copied into the answer before the next call
	// reuses the encoder.
	enc := w.encoder(req.OutputMax, e)
	// The encoder outlives the call; the engine's heap must not, whatever
	// ends the encoding (a getter that throws unwinds past a plain call).
	defer enc.release()
	if err := enc.encode(ret); err != nil {
		return outputFailure(err), nil
	}
	return resultMsg{Status: statusOK}, [][]byte{enc.buf}
}

// encoder returns the worker's result encoder, emptied, with limit.
func (w *workerState) encoder(limit int, e *engine) *jsonEncoder {
	if w.enc == nil {
		w.enc = newJSONEncoder(limit, e)
		return w.enc
	}
	w.enc.release()
	w.enc.buf, w.enc.limit, w.enc.path, w.enc.eng = w.enc.buf[:0], limit, w.enc.path[:0], e
	return w.enc
}

// encodePaged splits a paged result into its runx_page control value and
// the rest of the object.
func encodePaged(ret goja.Value, limit int, e *engine) (resultMsg, [][]byte) {
	obj, ok := ret.(*goja.Object)
	if !ok || obj.ExportType() != typeOfObject || obj.ClassName() != "Object" || builtinTag(obj) != "" {
		// Let the ordinary encoder explain a value that is not JSON at all;
		// otherwise the host reports the wrong shape with the page position.
		enc := newJSONEncoder(limit, e)
		if err := enc.encode(ret); err != nil {
			return outputFailure(err), nil
		}
		return resultMsg{Status: statusOK, NotObject: true}, nil
	}
	out := newJSONEncoder(limit, e)
	out.seen[obj] = struct{}{}
	out.buf = append(out.buf, '{')
	var control []byte
	res := resultMsg{Status: statusOK}
	keys, err := e.ownKeys(obj)
	if err != nil {
		return outputFailure(err), nil
	}
	for _, k := range keys {
		v, err := e.get(obj, k)
		if err != nil {
			return outputFailure(err), nil
		}
		if k.exact == nil && k.name == "runx_page" {
			ce := newJSONEncoder(limit, e)
			ce.path = []pathSeg{{key: "runx_page"}}
			ce.seen[obj] = struct{}{}
			if err := ce.encode(v); err != nil {
				return outputFailure(err), nil
			}
			control = ce.buf
			res.HasControl = true
			continue
		}
		if res.OtherKeys > 0 {
			out.buf = append(out.buf, ',')
		}
		res.OtherKeys++
		out.path = append(out.path[:0], pathSeg{key: k.name})
		out.key(k)
		out.buf = append(out.buf, ':')
		if err := out.encode(v); err != nil {
			return outputFailure(err), nil
		}
	}
	out.buf = append(out.buf, '}')
	if err := out.checkSize(); err != nil {
		return outputFailure(err), nil
	}
	res.ControlLen = len(control)
	return res, [][]byte{control, out.buf}
}

func outputFailure(err error) resultMsg {
	var oe *outputError
	if errors.As(err, &oe) || errors.Is(err, errOutputTooLarge) {
		return resultMsg{Status: statusFailed, Code: CodeOutputRejected, Message: err.Error()}
	}
	return classifyEngineError(err, CodeExecutionFailed, "encoding the result failed")
}

// classifyEngineError maps engine errors: limit interrupts and stack
// overflows are resource limits; a JavaScript exception gets code.
func classifyEngineError(err error, code, what string) resultMsg {
	var limit *limitInterrupt
	if errors.As(err, &limit) {
		return resultMsg{Status: statusFailed, Code: CodeResourceLimit, Message: limit.limit}
	}
	var intr *goja.InterruptedError
	if errors.As(err, &intr) {
		if l, ok := intr.Value().(*limitInterrupt); ok {
			return resultMsg{Status: statusFailed, Code: CodeResourceLimit, Message: l.limit}
		}
		return resultMsg{Status: statusFailed, Code: CodeResourceLimit, Message: "interrupted: " + truncateMessage(intr.String())}
	}
	var so *goja.StackOverflowError
	if errors.As(err, &so) {
		return resultMsg{Status: statusFailed, Code: CodeResourceLimit, Message: "call stack depth limit exceeded (runaway recursion)"}
	}
	var oe *outputError
	if errors.As(err, &oe) {
		return resultMsg{Status: statusFailed, Code: CodeOutputRejected, Message: err.Error()}
	}
	var ex *goja.Exception
	if errors.As(err, &ex) {
		return resultMsg{Status: statusFailed, Code: code, Message: what + ": " + truncateMessage(ex.Error())}
	}
	return resultMsg{Status: statusFailed, Code: code, Message: what + ": " + truncateMessage(err.Error())}
}

// describeValue renders a rejection reason without letting its toString
// escape as a panic.
func describeValue(vm *goja.Runtime, v goja.Value) string {
	if v == nil {
		return "undefined"
	}
	var s string
	if ex := vm.Try(func() {
		if o, ok := v.(*goja.Object); ok {
			if st := o.Get("stack"); st != nil && goja.IsString(st) {
				s = st.String()
				return
			}
		}
		s = v.String()
	}); ex != nil {
		return "(a value whose conversion to text threw)"
	}
	return truncateMessage(s)
}

const maxMessageBytes = 2048

// truncateMessage bounds a message and shows package files by their path.
func truncateMessage(s string) string {
	s = strings.ReplaceAll(s, bundleNamespace+":./", "")
	s = strings.ReplaceAll(s, bundleNamespace+":", "")
	if len(s) <= maxMessageBytes {
		return s
	}
	cut := maxMessageBytes
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xc0 != 0x80 }

// watchdog enforces the wall and heap limits of the worker's calls with one
// timer that each call re-arms, so a call allocates no timer: it interrupts
// the call's vm once the wall limit passes, and while the call runs it
// samples the heap every heapTick, interrupting the vm when the heap passes
// the configured limit. A reading above the limit is confirmed after a
// collection so that garbage does not count against the module. A call
// shorter than heapTick never wakes the timer. A check that fires as one
// call ends and runs during the next is a valid check of the next call.
//
// The timer is never stopped, only moved later by the next call's arm: a
// stop followed by a re-arm would make the Go runtime wake a thread
// sleeping in its poller for every call. A firing that finds no call
// leaves the timer unarmed until the next call.
type watchdog struct {
	heapLimit int64
	timer     *time.Timer

	mu       sync.Mutex
	vm       *goja.Runtime // the call being watched; nil between calls
	wall     time.Duration
	deadline time.Time
}

func newWatchdog(heapLimit int64) *watchdog {
	d := &watchdog{heapLimit: heapLimit}
	d.timer = time.AfterFunc(time.Hour, d.check)
	d.timer.Stop()
	return d
}

// arm starts watching a call that runs in vm with the wall limit wall.
func (d *watchdog) arm(vm *goja.Runtime, wall time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.vm, d.wall, d.deadline = vm, wall, time.Now().Add(wall)
	first := wall
	if d.heapLimit > 0 {
		first = min(first, heapTick)
	}
	d.timer.Reset(first)
}

// disarm ends the watch of the current call.
func (d *watchdog) disarm() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.vm = nil
}

func (d *watchdog) check() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.vm == nil {
		return
	}
	if !time.Now().Before(d.deadline) {
		d.vm.Interrupt(&limitInterrupt{limit: fmt.Sprintf("wall time limit of %s exceeded", d.wall)})
		return
	}
	if d.heapLimit > 0 {
		if used, over := heapOver(d.heapLimit); over {
			d.vm.Interrupt(&limitInterrupt{limit: fmt.Sprintf("memory limit of %d MiB exceeded (heap reached %d MiB)", d.heapLimit>>20, used>>20)})
			return
		}
	}
	d.timer.Reset(min(heapTick, max(time.Until(d.deadline), 0)))
}

// heapTick is how often a running call's heap is sampled.
const heapTick = 2 * time.Millisecond

func heapOver(limit int64) (int64, bool) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	if int64(sample[0].Value.Uint64()) <= limit {
		return 0, false
	}
	runtime.GC()
	metrics.Read(sample)
	used := int64(sample[0].Value.Uint64())
	return used, used > limit
}

// promiseBound counts the promise reactions a call schedules (each then,
// catch and finally, and each await) and interrupts the call past
// MaxPromiseJobs: goja drains its job queue only when the outermost call
// returns, so an unbounded chain would otherwise run to the wall limit.
// goja reports every reaction it schedules to an engine's async context
// tracker, so the bound costs an engine nothing until a module uses
// promises (wrapping Promise.prototype.then instead would build the whole
// Promise constructor into every engine).
//
// The interrupt is seen at the next instruction the engine runs. A chain
// of built-ins alone (a thenable whose then is a bound Promise method)
// schedules reactions without running one, so a reaction scheduled after
// the interrupt also throws, from the built-in then that schedules it, as
// a TypeError the chain's promise is rejected with; an await cannot be
// that reaction, since the code before it would have stopped at the
// interrupt. A call whose reactions passed the bound fails even when no
// instruction ran after them (exceeded).
type promiseBound struct {
	vm   *goja.Runtime
	jobs int
}

func (b *promiseBound) Grab() any {
	b.jobs++
	switch {
	case b.jobs == MaxPromiseJobs+1:
		b.vm.Interrupt(b.limit())
	case b.jobs > MaxPromiseJobs+1:
		panic(b.vm.NewTypeError(b.limit().Error()))
	}
	return nil
}

func (b *promiseBound) limit() *limitInterrupt {
	return &limitInterrupt{limit: fmt.Sprintf("promise job limit of %d exceeded", MaxPromiseJobs)}
}

// exceeded reports the limit when the bound was passed.
func (b *promiseBound) exceeded() *limitInterrupt {
	if b.jobs > MaxPromiseJobs {
		return b.limit()
	}
	return nil
}

func (*promiseBound) Resumed(any) {}
func (*promiseBound) Exited()     {}
