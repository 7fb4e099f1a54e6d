package benchmarks

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func report(b *testing.B, r Result, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
	for name, v := range r.Metrics {
		b.ReportMetric(v, name)
	}
}

// BenchmarkQuanta: 1,000 processes of 10 quanta each (goal: >= 3,000
// quanta/s on 2 cores, at most 2 synced commits per quantum).
func BenchmarkQuanta(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r, err := Quanta(b.TempDir(), 1000, 10)
		report(b, r, err)
	}
}

func BenchmarkSpawnRoundTrips(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r, err := SpawnRoundTrips(b.TempDir(), 200)
		report(b, r, err)
	}
}

func BenchmarkMessageRoundTrips(b *testing.B) {
	for i := 0; i < b.N; i++ {
		r, err := MessageRoundTrips(b.TempDir(), 200)
		report(b, r, err)
	}
}

// TestScenariosRun keeps the scenarios working at a small size.
func TestScenariosRun(t *testing.T) {
	if r, err := Quanta(t.TempDir(), 5, 3); err != nil || r.Metrics["commits/quantum"] > 2 {
		t.Fatalf("quanta: %+v %v", r, err)
	}
	if _, err := SpawnRoundTrips(t.TempDir(), 3); err != nil {
		t.Fatal(err)
	}
	if _, err := MessageRoundTrips(t.TempDir(), 3); err != nil {
		t.Fatal(err)
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
