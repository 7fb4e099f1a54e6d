package jsrunner

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestMain(m *testing.M) {
	MaybeRunWorker()
	code := m.Run()
	if shared.pool != nil {
		shared.pool.Close()
	}
	os.Exit(code)
}

// testMemoryLimit keeps allocation-bomb tests quick.
const testMemoryLimit = 128 << 20

var shared struct {
	once sync.Once
	pool *Pool
	err  error
}

// sharedPool is the pool for tests that do not depend on pool identity or
// worker recovery.
func sharedPool(t testing.TB) *Pool {
	t.Helper()
	shared.once.Do(func() {
		shared.pool, shared.err = NewPool(PoolOptions{Workers: 2, MemoryLimit: testMemoryLimit})
	})
	if shared.err != nil {
		t.Fatalf("NewPool: %v", shared.err)
	}
	return shared.pool
}

// newPool starts a private pool closed at the end of the test.
func newPool(t testing.TB, opts PoolOptions) *Pool {
	t.Helper()
	if opts.MemoryLimit == 0 {
		opts.MemoryLimit = testMemoryLimit
	}
	p, err := NewPool(opts)
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func fixture(t testing.TB, name string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "testdata", "skills", "js", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("fixture %s: %v", name, err)
	}
	return dir
}

func run(t testing.TB, p *Pool, spec Spec, inputs string) Result {
	t.Helper()
	return p.Run(context.Background(), spec, json.RawMessage(inputs), "")
}

// wantOutput fails unless r succeeded with output equal (as JSON) to want.
func wantOutput(t testing.TB, r Result, want string) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("run failed: %s: %s", r.Err.Code, r.Err.Message)
	}
	var got, exp any
	if err := json.Unmarshal(r.Output, &got); err != nil {
		t.Fatalf("output %q is not JSON: %v", r.Output, err)
	}
	if err := json.Unmarshal([]byte(want), &exp); err != nil {
		t.Fatalf("bad expectation %q: %v", want, err)
	}
	g, _ := json.Marshal(got)
	e, _ := json.Marshal(exp)
	if string(g) != string(e) {
		t.Fatalf("output = %s, want %s", r.Output, want)
	}
}

// wantFailure fails unless r failed with code and a message containing each of parts.
func wantFailure(t testing.TB, r Result, code string, parts ...string) {
	t.Helper()
	if r.Err == nil {
		t.Fatalf("run succeeded with %s, want failure %s", r.Output, code)
	}
	if r.Err.Code != code {
		t.Fatalf("failure code = %s (%s), want %s", r.Err.Code, r.Err.Message, code)
	}
	for _, p := range parts {
		if !containsFold(r.Err.Message, p) {
			t.Fatalf("failure message %q does not mention %q", r.Err.Message, p)
		}
	}
	if r.Output != nil {
		t.Fatalf("failed run has output %s", r.Output)
	}
}
