package kernel

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libos/libos/llm"
)

// OnEvent gets every committed event once, in commit order (Seq ascending
// with no event of the log left out), one call at a time, though many
// workers commit at once; an OnEvent that calls the Runtime does not wait on
// itself, and the events of its own commit follow it.
func TestOnEventDeliversInCommitOrder(t *testing.T) {
	var (
		mu        sync.Mutex
		seqs      []uint64
		inFlight  atomic.Int32
		overlaps  atomic.Int32
		posted    atomic.Bool
		rt        *Runtime
		postError error
	)
	onEvent := func(ev Event) {
		if inFlight.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer inFlight.Add(-1)
		mu.Lock()
		seqs = append(seqs, ev.Seq)
		mu.Unlock()
		// A Host call from the hook commits events of its own.
		if ev.Kind == EventSpawn && ev.PID == 5 && posted.CompareAndSwap(false, true) {
			_, postError = rt.PostHumanMessage(HumanMessage{To: 5, From: "ana", Body: "hello"})
		}
	}
	p := funcProvider(func(req llm.Request) (llm.Response, error) {
		if req.Turn < 3 {
			return llm.Response{ToolCalls: []llm.ToolCall{{ID: fmt.Sprintf("c%d", req.Turn), Name: "get_current_time", Arguments: json.RawMessage(`{}`)}}}, nil
		}
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "x", Name: "process_exit", Arguments: json.RawMessage(`{}`)}}}, nil
	})
	h := newHarness(t, "", func(o *Options) { o.Provider, o.Workers, o.OnEvent = p, 8, onEvent })
	rt = h.rt
	for range 40 {
		h.spawn(clockGrants())
	}
	h.run()
	if postError != nil {
		t.Fatalf("a Host call from OnEvent: %v", postError)
	}
	page, err := h.rt.EventLog(EventQuery{Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if overlaps.Load() != 0 {
		t.Fatalf("OnEvent ran %d times while another call ran", overlaps.Load())
	}
	if len(seqs) != len(page.Entries) {
		t.Fatalf("OnEvent got %d events, the log holds %d", len(seqs), len(page.Entries))
	}
	for i, e := range page.Entries {
		if seqs[i] != e.Seq {
			t.Fatalf("delivery %d was seq %d, the log's %d-th event is seq %d", i, seqs[i], i, e.Seq)
		}
	}
}

// An OnEvent that panics loses its own event only: the Runtime goes on (the
// call whose commit delivered it succeeds), and OnEvent gets every later
// event, those of the same commit included.
func TestOnEventPanicLosesOnlyItsEvent(t *testing.T) {
	var (
		mu       sync.Mutex
		got      []uint64
		panicked atomic.Bool
	)
	onEvent := func(ev Event) {
		if ev.Kind == EventSpawn && panicked.CompareAndSwap(false, true) {
			panic("a Host defect")
		}
		mu.Lock()
		got = append(got, ev.Seq)
		mu.Unlock()
	}
	h := newHarness(t, "", func(o *Options) { o.OnEvent = onEvent })
	if _, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "one"}); err != nil {
		t.Fatal(err)
	}
	pid, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "two"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "ana", Body: "hi"}); err != nil {
		t.Fatal(err)
	}
	h.rt.Close()
	page, err := h.rt.EventLog(EventQuery{Limit: 1000})
	if err == nil {
		t.Fatalf("EventLog after Close: %v", page)
	}
	mu.Lock()
	defer mu.Unlock()
	if !panicked.Load() || len(got) < 3 {
		t.Fatalf("after one panicking call, OnEvent got %d events (%v)", len(got), got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("out of order after the panic: %v", got)
		}
	}
}

// Close returns once every committed event was delivered, even when the
// goroutine delivering them is another's and OnEvent is slow.
func TestCloseWaitsForEveryEvent(t *testing.T) {
	var delivered atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	onEvent := func(ev Event) {
		if ev.Kind == EventMessage {
			once.Do(func() { close(entered) })
			<-release
		}
		delivered.Add(1)
	}
	h := newHarness(t, "", func(o *Options) { o.OnEvent = onEvent })
	pid, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g"})
	if err != nil {
		t.Fatal(err)
	}
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		_, _ = h.rt.PostHumanMessage(HumanMessage{To: pid, From: "ana", Body: "hi"})
	}()
	// The poster's goroutine delivers and waits in OnEvent; a commit
	// meanwhile queues its events behind.
	<-entered
	if _, err := h.rt.Signal(pid, SignalKill); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { h.rt.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while events waited to be delivered")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-closed
	<-posted
	page, err := h.rt.EventLog(EventQuery{})
	_ = page
	if err == nil {
		t.Fatal("the log was readable after Close")
	}
	if n := delivered.Load(); n < 4 {
		t.Fatalf("%d events delivered by the time Close returned", n)
	}
}

// An OnEvent that ends its goroutine (runtime.Goexit, as a t.Fatal called
// where it must not be does), which no recover stops, loses its own event
// only: Close does not wait for good on a delivery no one finishes, and
// the events after it, of the same commit and later ones, reach OnEvent.
func TestOnEventGoexitLosesOnlyItsEvent(t *testing.T) {
	var exited atomic.Bool
	var after atomic.Int32
	h := newHarness(t, "", func(o *Options) {
		o.OnEvent = func(Event) {
			if exited.CompareAndSwap(false, true) {
				runtime.Goexit()
			}
			after.Add(1)
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", Grants: clockGrants()})
	}()
	<-done
	sameCommit := after.Load()
	if _, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g2", Grants: clockGrants()}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { h.rt.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for good on a delivery whose goroutine had ended")
	}
	if sameCommit == 0 || after.Load() <= sameCommit {
		t.Fatalf("after the goroutine ended: %d events of its commit, %d in all; want some of each", sameCommit, after.Load())
	}
}
