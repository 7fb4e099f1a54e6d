package benchmarks

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/libos/libos/skills/runner/jsrunner"
)

// TestMain lets this test binary serve as the javascript worker of the
// js_warm scenario.
func TestMain(m *testing.M) {
	jsrunner.MaybeRunWorker()
	os.Exit(m.Run())
}

// report reports a scenario's metrics and, for each goal row, its value,
// baseline and ratio (key, key-baseline, key-ratio).
func report(b *testing.B, r Result, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
	for name, v := range r.Metrics {
		b.ReportMetric(v, name)
	}
	for _, row := range r.Rows {
		b.ReportMetric(row.Value, row.Key)
		if row.Baseline != "" {
			b.ReportMetric(row.BaselineValue, row.Key+"-baseline")
			b.ReportMetric(row.Ratio, row.Key+"-ratio")
		}
	}
}

// BenchmarkQuanta: 1,000 processes of 10 quanta each against raw Pebble
// synced Sets with 64 writers in the same run (goal: >= 10,000 quanta/s and
// >= 0.35x raw, at most 2 synced commits a quantum), and the store's write
// lock held a quantum (goal: <= 0.05 ms).
func BenchmarkQuanta(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r, err := Quanta(b.TempDir(), 1000, 10)
		report(b, r, err)
	}
}

// BenchmarkLargeContexts: the store's write lock held a quantum with
// contexts growing to 100 KB against contexts under 3 KB (goal: <= 2x).
func BenchmarkLargeContexts(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r, err := LargeContexts(b.TempDir(), 200)
		report(b, r, err)
	}
}

// BenchmarkCASVsRaw: parallel compare-and-swap writes against raw synced
// Sets (goal: >= 0.9x).
func BenchmarkCASVsRaw(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r, err := CASVsRaw(b.TempDir(), 20_000)
		report(b, r, err)
	}
}

// BenchmarkEndedProcessHeap: heap retained per ended process after 5,000
// (-args -full: 50,000) ran and exited (goal: <= 1 KB).
func BenchmarkEndedProcessHeap(b *testing.B) {
	procs := 5000
	if *full {
		procs = 50_000
	}
	for i := 0; i < b.N; i++ {
		r, err := EndedProcessHeap(b.TempDir(), procs, 5000)
		report(b, r, err)
	}
}

// BenchmarkAliveProcessHeap: heap per process at 10 quanta while alive
// (goal: <= 8 KB).
func BenchmarkAliveProcessHeap(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r, err := AliveProcessHeap(b.TempDir(), 500)
		report(b, r, err)
	}
}

// BenchmarkJSWarm: javascript warm calls against a precompiled goja call
// (goal: median <= 50 µs, p99 <= 250 µs).
func BenchmarkJSWarm(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r, err := JSWarm(b.TempDir(), 2000, "")
		report(b, r, err)
	}
}

// BenchmarkReopen: kernel.Open of 100,000 Objects and 10,000 processes
// (-args -full: 100,000 processes) against objects.Open of its store
// (goal: < 1 s).
func BenchmarkReopen(b *testing.B) {
	procs := 10_000
	if *full {
		procs = 100_000
	}
	for i := 0; i < b.N; i++ {
		r, err := Reopen(b.TempDir(), procs, 100_000)
		report(b, r, err)
	}
}

// BenchmarkSpawnRoundTrips: one parent's chain of spawn+run+exit+wake round
// trips (goal: >= 1,000/s).
func BenchmarkSpawnRoundTrips(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r, err := SpawnRoundTrips(b.TempDir(), 200)
		report(b, r, err)
	}
}

// BenchmarkParallelSpawnRoundTrips: 50 parents at once, 20 round trips each
// (goal: >= 1,000/s).
func BenchmarkParallelSpawnRoundTrips(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r, err := ParallelSpawnRoundTrips(b.TempDir(), 50, 20)
		report(b, r, err)
	}
}

func BenchmarkMessageRoundTrips(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r, err := MessageRoundTrips(b.TempDir(), 200)
		report(b, r, err)
	}
}

// TestScenariosRun keeps the scenarios working at a small size, each with
// its goal rows complete.
func TestScenariosRun(t *testing.T) {
	runs := []struct {
		rows int
		run  func(dir string) (Result, error)
	}{
		{3, func(dir string) (Result, error) { return Quanta(dir, 5, 3) }},
		{1, func(dir string) (Result, error) { return CASVsRaw(dir, 40) }},
		{1, func(dir string) (Result, error) { return EndedProcessHeap(dir, 6, 4) }},
		{1, func(dir string) (Result, error) { return AliveProcessHeap(dir, 3) }},
		{2, func(dir string) (Result, error) { return JSWarm(dir, 3, "") }},
		{1, func(dir string) (Result, error) { return Reopen(dir, 5, 20) }},
		{1, func(dir string) (Result, error) { return SpawnRoundTrips(dir, 3) }},
		{1, func(dir string) (Result, error) { return ParallelSpawnRoundTrips(dir, 3, 2) }},
		{0, func(dir string) (Result, error) { return MessageRoundTrips(dir, 3) }},
	}
	for _, run := range runs {
		r, err := run.run(t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		if len(r.Rows) != run.rows {
			t.Errorf("%s: %d rows, want %d", r.Name, len(r.Rows), run.rows)
		}
		for _, row := range r.Rows {
			if row.Key == "" || row.Name == "" || row.Unit == "" || row.Goal == "" {
				t.Errorf("%s: incomplete row %+v", r.Name, row)
			}
			// A heap difference over a few processes is noise, and may
			// be negative; every other figure is a positive measurement.
			if row.Unit != "B" && (row.Value <= 0 || (row.Baseline != "" && (row.BaselineValue <= 0 || row.Ratio <= 0))) {
				t.Errorf("%s: row without figures %+v", r.Name, row)
			}
		}
		if r.Name == "quanta" && r.Metrics["commits/quantum"] > 2 {
			t.Errorf("quanta: %v commits a quantum", r.Metrics["commits/quantum"])
		}
		if r.Name == "cas" && (r.Metrics["raw-like/s"] <= 0 || r.Metrics["cas/raw-like"] <= 0) {
			t.Errorf("cas: no raw baseline of the data a write stores: %v", r.Metrics)
		}
		if r.Name == "cas" {
			// CPU time may read 0 over so few writes (tick accounting),
			// never less.
			for _, k := range []string{"cas-cpu-µs/write", "raw-like-cpu-µs/write", "raw-cpu-µs/set"} {
				if v, ok := r.Metrics[k]; !ok || v < 0 {
					t.Errorf("cas: %s = %v, %v", k, v, ok)
				}
			}
		}
		if r.Name == "spawn_wait" && (r.Metrics["commits/roundtrip"] < 2 || r.Metrics["wal-syncs/roundtrip"] <= 0) {
			t.Errorf("spawn_wait: commits and syncs a round trip: %v", r.Metrics)
		}
	}
}

// BenchmarkStartup: `libos --version` start-up against a Go hello-world
// (goal: <= 3x) and `libos skill run` of an echo tool against running it
// directly (goal: <= 4x), with the floor libos's dependencies set.
func BenchmarkStartup(b *testing.B) {
	mod, err := FindModuleDir()
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		r, err := Startup(b.TempDir(), StartupOptions{ModuleDir: mod, Runs: 20})
		report(b, r, err)
	}
}

func TestStartupRuns(t *testing.T) {
	mod, err := FindModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Startup(t.TempDir(), StartupOptions{ModuleDir: mod, Runs: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hello_ms", "version_ms", "echo_ms", "skill_run_ms", "version/hello", "skill_run/echo", "floor_deps/hello"} {
		if r.Metrics[name] <= 0 {
			t.Errorf("%s missing: %v", name, r.Metrics)
		}
	}
	if len(r.Rows) != 2 || r.Rows[0].Ratio <= 0 || r.Rows[1].Ratio <= 0 {
		t.Errorf("startup rows %+v", r.Rows)
	}
}

// TestFloorLinksLibosDependencies keeps the floor program honest: it links
// exactly the third-party packages that libos's own packages import.
func TestFloorLinksLibosDependencies(t *testing.T) {
	mod, err := FindModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	list := func(args ...string) []string {
		cmd := exec.Command("go", append([]string{"list"}, args...)...)
		cmd.Dir = mod
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %v: %v", args, err)
		}
		return strings.Fields(string(out))
	}
	own := list("-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./cmd/libos")
	var libos []string
	for _, p := range own {
		if strings.HasPrefix(p, ModulePath+"/") {
			libos = append(libos, p)
		}
	}
	thirdParty := func(pkgs []string) []string {
		var out []string
		for _, p := range list(append([]string{"-f", "{{join .Imports \"\\n\"}}"}, pkgs...)...) {
			if strings.Contains(strings.SplitN(p, "/", 2)[0], ".") && !strings.HasPrefix(p, ModulePath+"/") && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
		slices.Sort(out)
		return out
	}
	want := thirdParty(libos)
	got := thirdParty([]string{"./internal/benchmarks/startupfloor/deps"})
	if !slices.Equal(got, want) {
		t.Errorf("startupfloor/deps imports %v;\nlibos's packages import %v", got, want)
	}
}
