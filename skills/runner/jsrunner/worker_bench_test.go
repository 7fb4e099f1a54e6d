package jsrunner

import (
	"testing"
)

// The worker's side of a warm call cannot be profiled through the pool
// (-cpuprofile sees only the host), so these run it in-process.

// BenchmarkWorkerCall is one warm call's work in the worker, from the
// decoded request to the encoded result, with the engine already prepared
// (and the bundle evaluated in it ahead, as after a call of the same bundle).
func BenchmarkWorkerCall(b *testing.B) {
	bd, _, f := newBundleCache().get(fixture(b, "pure"), "sum.mjs")
	if f != nil {
		b.Fatal(f)
	}
	w := newWorkerState(configMsg{HeapLimit: 64 << 20})
	req := &runMsg{Op: "run", Bundle: bd.hash, CodeLen: len(bd.code), Export: "add", Env: map[string]string{},
		TimeoutNS: 2e9, MaxDepth: defaultMaxCallDepth, OutputMax: MaxOutputBytes, ModuleName: "sum.mjs"}
	inputs := []byte(`{"a":20,"b":22}`)
	if res, _ := w.handle(req, append(append([]byte{}, bd.code...), inputs...)); res.Status != statusOK {
		b.Fatalf("compile call: %+v", res)
	}
	req.CodeLen = 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w.ready = w.prepare()
		b.StartTimer()
		if res, payload := w.handle(req, inputs); res.Status != statusOK || string(payload[0]) != `{"sum":42}` {
			b.Fatalf("%+v %s", res, payload)
		}
	}
}

// BenchmarkWorkerEngine is the engine a worker prepares between calls.
func BenchmarkWorkerEngine(b *testing.B) {
	for i := 0; i < b.N; i++ {
		newEngine()
	}
}
