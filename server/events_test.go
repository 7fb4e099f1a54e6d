package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/kernel"
)

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	id   string
	data string
}

// seq is the seq of the event's id.
func (ev sseEvent) seq() uint64 {
	s, _, _ := strings.Cut(ev.id, ".")
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// eventIDs are the SSE ids of log entries read in order from a seq's first:
// SEQ for the first entry of a seq, SEQ.N for the N-th after it.
func eventIDs(entries []kernel.LogEntry) []string {
	ids := make([]string, len(entries))
	sub := 0
	for i, l := range entries {
		if i > 0 && entries[i-1].Seq == l.Seq {
			sub++
		} else {
			sub = 0
		}
		ids[i] = strconv.FormatUint(l.Seq, 10)
		if sub > 0 {
			ids[i] += "." + strconv.Itoa(sub)
		}
	}
	return ids
}

// stream opens GET /events with the query and headers and returns its
// events on a channel until the test ends.
func (f *fixture) stream(query string, header ...string) <-chan sseEvent {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", f.ts.URL+APIPrefix+"/events"+query, nil)
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := f.ts.Client().Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		f.t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan sseEvent, 1024)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			case line == "" && ev.data != "":
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
				ev = sseEvent{}
			}
		}
	}()
	return out
}

// next takes the stream's next event, failing after a generous bound.
func next(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the event stream ended")
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatal("no event within 20 s")
	}
	return sseEvent{}
}

// The stream carries the log as logs --json prints it, in order, resumable
// with since and Last-Event-ID, filtered by pid.
func TestEventStreamIsTheLog(t *testing.T) {
	f := newFixture(t, approvalScript)
	f.must(http.StatusCreated, "POST", "/processes", askSpawn, nil)
	f.run()
	page, err := f.rt.EventLog(kernel.EventQuery{})
	if err != nil || len(page.Entries) < 5 {
		t.Fatalf("log %v %v", page, err)
	}
	ch := f.stream("")
	ids := eventIDs(page.Entries)
	for i, want := range page.Entries {
		ev := next(t, ch)
		b, _ := json.Marshal(want)
		if ev.data != string(b) || ev.id != ids[i] {
			t.Fatalf("event %d: id %s data %s, want id %s data %s", i, ev.id, ev.data, ids[i], b)
		}
		validate(t, "#/components/schemas/LogEntry", []byte(ev.data), "event")
	}
	// Live: the approval and what follows arrive as they commit.
	list, _ := f.rt.Approvals()
	f.must(http.StatusOK, "POST", "/approvals/1/"+list[0].CallID, map[string]any{"decision": "approve"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.srv.RunScheduler(ctx) }()
	var sawExit bool
	for !sawExit {
		var l kernel.LogEntry
		json.Unmarshal([]byte(next(t, ch).data), &l)
		sawExit = l.Type == kernel.LogState && l.PID == 1 && l.To == "exited"
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	mid := page.Entries[len(page.Entries)/2].Seq
	for _, ch := range []<-chan sseEvent{f.stream("?since=" + strconv.FormatUint(mid, 10)), f.stream("?since=0", "Last-Event-ID", strconv.FormatUint(mid, 10))} {
		if ev := next(t, ch); ev.seq() <= mid {
			t.Fatalf("resumed after %d at %s", mid, ev.id)
		}
	}
	ch2 := f.stream("?pid=2")
	for i := 0; i < 3; i++ {
		var l kernel.LogEntry
		json.Unmarshal([]byte(next(t, ch2).data), &l)
		if l.PID != 2 {
			t.Fatalf("pid filter let through %+v", l)
		}
	}
}

// A stream further behind than the shared window reads the log itself and
// still sees every entry once, in order.
func TestEventStreamBehindTheWindow(t *testing.T) {
	f := newFixture(t, clockScript)
	for i := 0; i < 3; i++ {
		f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "read the clock"}, nil)
	}
	f.run()
	// Open one stream so the shared reader starts at the log's end.
	f.stream("?since=" + strconv.FormatUint(f.rt.Store().LastEventSeq(), 10))
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "read the clock"}, nil)
	f.run()
	var want []kernel.LogEntry
	for after := uint64(0); ; {
		page, err := f.rt.EventLog(kernel.EventQuery{After: after})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, page.Entries...)
		after = page.LastSeq
		if !page.More {
			break
		}
	}
	ch := f.stream("")
	ids := eventIDs(want)
	for i, w := range want {
		ev := next(t, ch)
		b, _ := json.Marshal(w)
		if ev.id != ids[i] || ev.data != string(b) {
			t.Fatalf("entry %d: %s %s, want %s %s", i, ev.id, ev.data, ids[i], b)
		}
	}
}

// The scheduler loop runs what the API starts, whenever it starts it.
func TestRunSchedulerServesNewWork(t *testing.T) {
	f := newFixture(t, messageScript)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.srv.RunScheduler(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "wait for ana"}, nil)
	waitStatus(t, f, 1, "waiting")
	f.must(http.StatusCreated, "POST", "/processes/1/messages", map[string]any{"body": "go", "from": "ana"}, nil)
	waitStatus(t, f, 1, "exited")
	// A message posted around the API (the control socket's path) is seen too.
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "wait for ana"}, nil)
	waitStatus(t, f, 2, "waiting")
	if _, err := f.rt.PostHumanMessage(kernel.HumanMessage{To: 2, From: "ana", Body: "go"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, f, 2, "exited")
}

// waitStatus polls a process until it has status, within a generous bound.
func waitStatus(t *testing.T, f *fixture, pid int64, status string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := f.rt.Process(pid)
		if err == nil && string(info.Status) == status {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: %+v %v, want %s", pid, info, err, status)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Every event id is unique, and a client that reconnects with the id of a
// provider call's entry gets the model's output that shares its seq, from
// the shared window and from the log alike.
func TestEventStreamResumesInsideASeq(t *testing.T) {
	f := newFixture(t, clockScript)
	live := f.stream("?since=0") // the shared window holds what follows
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "read the clock"}, nil)
	f.run()
	page, err := f.rt.EventLog(kernel.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	ids := eventIDs(page.Entries)
	seen := map[string]bool{}
	split := -1
	for i, id := range ids {
		ev := next(t, live)
		if ev.id != id || seen[id] {
			t.Fatalf("event %d: id %s (seen before: %v), want %s", i, ev.id, seen[id], id)
		}
		seen[id] = true
		if strings.HasSuffix(id, ".1") {
			split = i
		}
	}
	if split < 1 || page.Entries[split].Type != kernel.LogModelOutput {
		t.Fatalf("no model output shares a seq with its provider call: %v", ids)
	}
	want, _ := json.Marshal(page.Entries[split])
	resume := func(how string) {
		t.Helper()
		ev := next(t, f.stream("", "Last-Event-ID", ids[split-1]))
		if ev.id != ids[split] || ev.data != string(want) {
			t.Fatalf("%s: resumed after %s at %s %s, want %s %s", how, ids[split-1], ev.id, ev.data, ids[split], want)
		}
		ev = next(t, f.stream("", "Last-Event-ID", ids[split]))
		if ev.id != ids[split+1] {
			t.Fatalf("%s: resumed after %s at %s, want %s", how, ids[split], ev.id, ids[split+1])
		}
	}
	resume("from the window")

	g := newFixture(t, clockScript) // no stream open: resumes read the log
	g.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "read the clock"}, nil)
	g.run()
	// The reader moves to the log's end with no stream open: its window is
	// empty, and a resume reads the log.
	g.must(http.StatusOK, "GET", "/processes", nil, nil)
	f = g
	resume("from the log")
}

// The shared window holds at most hubWindowBytes of entries however large
// they are, and a stream takes it a bounded batch at a time, still seeing
// every entry once, in order.
func TestEventWindowIsBoundedInBytes(t *testing.T) {
	f := newFixture(t, messageScript)
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "wait for ana"}, nil)
	f.run()
	start := f.rt.Store().LastEventSeq()
	live := f.stream("?since=" + strconv.FormatUint(start, 10))
	body := strings.Repeat("€", 32000) // 96,000 bytes
	const n = 120
	for i := 0; i < n; i++ {
		if _, err := f.rt.PostHumanMessage(kernel.HumanMessage{To: 1, From: "bob", Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if ev := next(t, live); !strings.Contains(ev.data, `"action":"posted"`) {
			t.Fatalf("event %d: %.200s", i, ev.data)
		}
	}
	h := f.srv.hub
	h.mu.Lock()
	held, sum, base := h.bytes, 0, h.base
	for _, e := range h.entries {
		sum += len(e.data)
	}
	h.mu.Unlock()
	if held != sum || held > hubWindowBytes || held < hubWindowBytes/2 {
		t.Fatalf("the window holds %d bytes (counted %d), bound %d", sum, held, hubWindowBytes)
	}
	batch, _, more, _, ok := h.since(cursor{seq: base, sub: wholeSeq}, 0, streamBatchBytes)
	size := 0
	for _, e := range batch {
		size += len(e.data)
	}
	if !ok || !more || len(batch) == 0 || (len(batch) > 1 && size > streamBatchBytes) {
		t.Fatalf("a batch from the window's start: %d entries, %d bytes, more %v, ok %v", len(batch), size, more, ok)
	}
	// A stream from before the window reads the log, then the window.
	resumed := f.stream("?since=" + strconv.FormatUint(start, 10))
	for i := 0; i < n; i++ {
		ev := next(t, resumed)
		if ev.seq() != start+uint64(i)+1 {
			t.Fatalf("event %d: id %s, want seq %d", i, ev.id, start+uint64(i)+1)
		}
	}
}
