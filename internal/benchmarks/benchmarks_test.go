package benchmarks

import "testing"

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
