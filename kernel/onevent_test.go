package kernel

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

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
