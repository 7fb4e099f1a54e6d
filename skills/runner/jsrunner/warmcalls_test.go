package jsrunner

import (
	"context"
	"testing"
)

func TestMeasureWarmCallsRuns(t *testing.T) {
	w, err := MeasureWarmCalls(context.Background(), t.TempDir(), 3, PoolOptions{MemoryLimit: testMemoryLimit})
	if err != nil {
		t.Fatal(err)
	}
	if w.Calls != 3 || w.Median <= 0 || w.P99 < w.Median || w.GojaMedian <= 0 || w.GojaP99 < w.GojaMedian {
		t.Fatalf("%+v", w)
	}
}
