package jsrunner

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strconv"
	"testing"
)

// TestWorkerOSEnvironmentIsEmpty reads a running worker's environment from
// /proc: the contract's "The worker OS environment remains empty", so what
// tells the process it is a worker travels in its arguments.
func TestWorkerOSEnvironmentIsEmpty(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1})
	var environ []byte
	var readErr error
	p.callSent = func(pid int) {
		environ, readErr = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	}
	r := p.Run(context.Background(), Spec{Dir: fixture(t, "pure"), Module: "sum.mjs", Export: "add"}, json.RawMessage(`{"a":1,"b":2}`), "")
	p.callSent = nil
	wantOutput(t, r, `{"sum":3}`)
	if readErr != nil {
		t.Fatal(readErr)
	}
	if len(environ) != 0 {
		t.Fatalf("the worker's environment is %q, want it empty", bytes.Split(bytes.TrimSuffix(environ, []byte{0}), []byte{0}))
	}
}
