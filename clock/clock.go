// Package clock is the time source of a runtime. The kernel reads time and
// waits for timers only through a Clock, so kernel logic runs on a fake clock
// in tests and never sleeps for real.
package clock

import (
	"sort"
	"sync"
	"time"
)

// Clock is a source of wall-clock time and timer wake-ups. Implementations
// must be safe for concurrent use.
type Clock interface {
	// Now returns the current wall-clock time.
	Now() time.Time
	// At returns a channel that is closed once Now() >= t.
	At(t time.Time) <-chan struct{}
}

// Real is the operating system's clock.
type Real struct{}

// Now implements Clock.
func (Real) Now() time.Time { return time.Now() }

// At implements Clock.
func (Real) At(t time.Time) <-chan struct{} {
	ch := make(chan struct{})
	d := time.Until(t)
	if d <= 0 {
		close(ch)
		return ch
	}
	time.AfterFunc(d, func() { close(ch) })
	return ch
}

// Skipper is implemented by clocks that may jump ahead. A scheduler calls
// SkipTo(t) when nothing can run before t; a real clock ignores it.
type Skipper interface {
	SkipTo(t time.Time)
}

// Fake is a manually driven clock. With autoAdvance set, SkipTo jumps the
// clock to the requested instant: the scheduler skips only when nothing else
// can run, so jumping is indistinguishable from waiting and keeps end-to-end
// tests deterministic and instant.
type Fake struct {
	mu          sync.Mutex
	now         time.Time
	waiters     []fakeWaiter
	autoAdvance bool
}

type fakeWaiter struct {
	at time.Time
	ch chan struct{}
}

// NewFake returns a fake clock reading start.
func NewFake(start time.Time, autoAdvance bool) *Fake {
	return &Fake{now: start, autoAdvance: autoAdvance}
}

// Now implements Clock.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// At implements Clock.
func (f *Fake) At(t time.Time) <-chan struct{} {
	f.mu.Lock()
	ch := make(chan struct{})
	f.waiters = append(f.waiters, fakeWaiter{at: t, ch: ch})
	f.mu.Unlock()
	f.fire()
	return ch
}

// SkipTo implements Skipper: with auto-advance on, it moves the clock to t.
func (f *Fake) SkipTo(t time.Time) {
	if f.autoAdvance {
		f.AdvanceTo(t)
	}
}

// Advance moves the clock forward by d and fires due timers.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	t := f.now.Add(d)
	f.mu.Unlock()
	f.AdvanceTo(t)
}

// AdvanceTo moves the clock to t (never backwards) and fires due timers.
func (f *Fake) AdvanceTo(t time.Time) {
	f.mu.Lock()
	if t.After(f.now) {
		f.now = t
	}
	f.mu.Unlock()
	f.fire()
}

// Pending reports the instants of timers that have not fired yet, earliest first.
func (f *Fake) Pending() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]time.Time, 0, len(f.waiters))
	for _, w := range f.waiters {
		out = append(out, w.at)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

func (f *Fake) fire() {
	f.mu.Lock()
	kept := f.waiters[:0]
	var due []chan struct{}
	for _, w := range f.waiters {
		if !w.at.After(f.now) {
			due = append(due, w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
	f.mu.Unlock()
	for _, ch := range due {
		close(ch)
	}
}
