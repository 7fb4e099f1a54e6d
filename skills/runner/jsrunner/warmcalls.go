package jsrunner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"time"

	"github.com/dop251/goja"
)

// warmModule is the module of MeasureWarmCalls, and warmScript the same
// function as a plain script for the in-process baseline.
const (
	warmModule = "export function add(inputs) {\n  return { sum: inputs.a + inputs.b };\n}\n"
	warmScript = `function add(inputs) { return { sum: inputs.a + inputs.b }; }`
	warmInputs = `{"a":20,"b":22}`
	warmOutput = `{"sum":42}`
)

// WarmCalls are the latencies of warm javascript calls through a pool and,
// measured in the same run, of the same function called in-process on a
// precompiled goja program.
type WarmCalls struct {
	Calls int
	// LimitFailures counts calls a limit ended (resource_limit): they are
	// outcomes of the measured pool, so they are counted, not fatal, and
	// their latencies are left out.
	LimitFailures int
	Median        time.Duration
	P99           time.Duration
	GojaMedian    time.Duration
	GojaP99       time.Duration
}

// MeasureWarmCalls starts a pool of one worker with opts, writes a small
// pure module into dir, and times calls warm calls of it (its bundle cached,
// compiled in the worker; each call crossing the process boundary with the
// pool's isolation and limits). Each call is followed by one call of the
// baseline: the module compiled once with goja.Compile and, per call, a
// fresh goja runtime that runs it, parses the inputs, calls the function and
// stringifies the result, with no process boundary, bundle lookup or
// limits. Interleaving puts the machine's load on both alike. The pool's
// executable must call MaybeRunWorker first.
func MeasureWarmCalls(ctx context.Context, dir string, calls int, opts PoolOptions) (WarmCalls, error) {
	if calls < 1 {
		return WarmCalls{}, fmt.Errorf("jsrunner: warm calls: calls %d must be positive", calls)
	}
	if err := os.WriteFile(filepath.Join(dir, "sum.mjs"), []byte(warmModule), 0o644); err != nil {
		return WarmCalls{}, err
	}
	opts.Workers = 1
	p, err := NewPool(opts)
	if err != nil {
		return WarmCalls{}, err
	}
	defer p.Close()
	spec := Spec{Dir: dir, Module: "sum.mjs", Export: "add"}
	in := json.RawMessage(warmInputs)
	var failures int
	call := func() error {
		r := p.Run(ctx, spec, in, "")
		if r.Err != nil && r.Err.Code == CodeResourceLimit {
			failures++
			return errLimit
		}
		if r.Err != nil {
			return fmt.Errorf("jsrunner: warm call: %s: %s", r.Err.Code, r.Err.Message)
		}
		if string(r.Output) != warmOutput {
			return fmt.Errorf("jsrunner: warm call returned %s", r.Output)
		}
		return nil
	}
	prg, err := goja.Compile("sum.js", warmScript, true)
	if err != nil {
		return WarmCalls{}, err
	}
	// The first call bundles and compiles: it is not warm.
	if err := call(); err != nil {
		if err == errLimit {
			err = fmt.Errorf("jsrunner: warm calls: the first call ended at a limit")
		}
		return WarmCalls{}, err
	}
	if err := gojaCall(prg); err != nil {
		return WarmCalls{}, err
	}
	lat := make([]time.Duration, 0, calls)
	base := make([]time.Duration, 0, calls)
	// The baseline leaves 30 times the garbage of a pool call (a fresh goja
	// runtime against the pool call's few allocations), and left to itself
	// that garbage sets the host's collector off every hundred-odd calls,
	// whose mark worker then takes a core from the pool call being timed.
	// So the collector runs at set points outside both timings instead:
	// neither figure carries the other's garbage.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for i := range calls {
		if i%collectEvery == 0 {
			runtime.GC()
		}
		start := time.Now()
		err := call()
		d := time.Since(start)
		if err != nil && err != errLimit {
			return WarmCalls{}, err
		}
		if err == nil {
			lat = append(lat, d)
		}
		start = time.Now()
		if err := gojaCall(prg); err != nil {
			return WarmCalls{}, err
		}
		base = append(base, time.Since(start))
	}
	if len(lat) == 0 {
		return WarmCalls{}, fmt.Errorf("jsrunner: warm calls: all %d calls ended at a limit", calls)
	}
	slices.Sort(lat)
	slices.Sort(base)
	q := func(s []time.Duration, f float64) time.Duration { return s[int(f*float64(len(s)-1))] }
	return WarmCalls{Calls: calls, LimitFailures: failures, Median: q(lat, 0.5), P99: q(lat, 0.99), GojaMedian: q(base, 0.5), GojaP99: q(base, 0.99)}, nil
}

// collectEvery is how many iterations of MeasureWarmCalls run between two
// collections: their garbage (under a megabyte) stays far below what
// would make the collector necessary sooner.
const collectEvery = 64

// errLimit marks a warm call a limit ended.
var errLimit = errors.New("jsrunner: warm call ended at a limit")

// gojaCall is one call of the in-process baseline.
func gojaCall(prg *goja.Program) error {
	vm := goja.New()
	if _, err := vm.RunProgram(prg); err != nil {
		return err
	}
	add, _ := goja.AssertFunction(vm.Get("add"))
	j := vm.Get("JSON").ToObject(vm)
	parse, _ := goja.AssertFunction(j.Get("parse"))
	stringify, _ := goja.AssertFunction(j.Get("stringify"))
	in, err := parse(goja.Undefined(), vm.ToValue(warmInputs))
	if err != nil {
		return err
	}
	out, err := add(goja.Undefined(), in)
	if err == nil {
		out, err = stringify(goja.Undefined(), out)
	}
	if err != nil {
		return fmt.Errorf("jsrunner: goja baseline: %w", err)
	}
	if out.String() != warmOutput {
		return fmt.Errorf("jsrunner: goja baseline returned %s", out)
	}
	return nil
}
