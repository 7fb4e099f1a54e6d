package clock

import (
	"testing"
	"time"
)

func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestFakeManual(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start, false)
	ch := f.At(start.Add(10 * time.Second))
	if fired(ch) {
		t.Fatal("timer fired before its instant")
	}
	f.Advance(9 * time.Second)
	if fired(ch) {
		t.Fatal("timer fired early")
	}
	f.Advance(time.Second)
	if !fired(ch) {
		t.Fatal("timer did not fire at its instant")
	}
	if got := f.Now(); !got.Equal(start.Add(10 * time.Second)) {
		t.Fatalf("now = %v", got)
	}
	if !fired(f.At(start)) {
		t.Fatal("a timer in the past fires at once")
	}
	f.AdvanceTo(start)
	if !f.Now().Equal(start.Add(10 * time.Second)) {
		t.Fatal("the fake clock went backwards")
	}
}

func TestFakeAutoAdvance(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start, true)
	later := f.At(start.Add(time.Minute))
	if fired(later) {
		t.Fatal("At alone must not move the clock")
	}
	f.SkipTo(start.Add(time.Minute))
	if !fired(later) || !f.Now().Equal(start.Add(time.Minute)) {
		t.Fatal("auto-advance must jump to the timer's instant")
	}
	if len(f.Pending()) != 0 {
		t.Fatal("no timer may stay pending")
	}
}

func TestManualIgnoresSkip(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start, false)
	f.SkipTo(start.Add(time.Hour))
	if !f.Now().Equal(start) {
		t.Fatal("a manual fake clock must not skip")
	}
}

func TestRealAt(t *testing.T) {
	ch := Real{}.At(time.Now().Add(-time.Second))
	if !fired(ch) {
		t.Fatal("a past instant fires at once")
	}
}
