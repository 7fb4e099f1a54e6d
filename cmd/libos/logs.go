package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/libos/libos/control"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/objects"
)

// followInterval is how often logs --follow asks a live runtime for new events.
const followInterval = 200 * time.Millisecond

func logsCommand(args []string, stdout, stderr io.Writer) int {
	f := newReadFlags("logs", stderr)
	pid := f.fs.Int64("pid", 0, "only this process's events")
	since := f.fs.Uint64("since", 0, "only events after this seq")
	var follow bool
	f.fs.BoolVar(&follow, "follow", false, "keep printing new events of a live runtime until interrupted")
	f.fs.BoolVar(&follow, "f", false, "short for --follow")
	if !parseNoPositional(f.fs, args, stderr) {
		return exitUsage
	}
	if *pid < 0 {
		return usageError(stderr, f.fs.Name(), "--pid %d: must be a positive integer", *pid)
	}
	if err := requireDir(*f.dir); err != nil {
		fmt.Fprintf(stderr, "libos logs: %v\n", err)
		return exitFailed
	}
	if *pid != 0 {
		if err := requireProcess(*f.dir, *pid); err != nil {
			fmt.Fprintf(stderr, "libos logs: %s\n", termLines(err.Error()))
			return exitFailed
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	print := func(l kernel.LogEntry) {
		if *f.asJSON {
			b, _ := json.Marshal(l)
			fmt.Fprintln(stdout, string(termJSON(b)))
			return
		}
		fmt.Fprintln(stdout, logLine(l))
	}
	src := &logSource{dir: *f.dir, follow: follow}
	after := *since
	for {
		page, err := src.page(ctx, *pid, after)
		if err != nil {
			if ctx.Err() != nil {
				return exitOK
			}
			fmt.Fprintf(stderr, "libos logs: %s\n", termLines(err.Error()))
			return exitFailed
		}
		for _, l := range page.Entries {
			print(l)
		}
		after = page.LastSeq
		if page.More {
			continue
		}
		if !follow {
			return exitOK
		}
		select {
		case <-ctx.Done():
			// Interrupting a follow is how it is meant to end.
			return exitOK
		case <-time.After(followInterval):
		}
	}
}

// logSource reads pages of the event log from dir: from the runtime that
// holds it, or from the directory itself when it is idle. Following an idle
// directory reads it once and then looks for a runtime's socket, reading
// the directory again only when its store changed: a read-only open holds
// the directory, and a run starting at that moment would find it in use.
// A run that started and ended between two looks left its events there.
type logSource struct {
	dir    string
	follow bool
	// idleRead says the idle directory was read to its end since the last
	// live answer, when its store's files were as stamp says.
	idleRead bool
	stamp    string
}

// storeStamp is what a commit changes in the store of dir: the names, sizes
// and modification times of its files.
func storeStamp(dir string) string {
	entries, err := os.ReadDir(kernel.StorePath(dir))
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			fmt.Fprintf(&b, "%s %d %d\n", e.Name(), info.Size(), info.ModTime().UnixNano())
		}
	}
	return b.String()
}

func (s *logSource) page(ctx context.Context, pid int64, after uint64) (kernel.EventPage, error) {
	req := control.Request{Op: "logs", PID: pid, Since: after}
	if !s.follow {
		resp, err := withRuntime(s.dir, req)
		return decodePage(resp, err)
	}
	resp, err := control.Dial(ctx, s.dir, req, 0)
	if err == nil {
		s.idleRead = false
		return decodePage(resp, nil)
	}
	if !errors.Is(err, control.ErrUnreachable) {
		return kernel.EventPage{}, err
	}
	stamp := storeStamp(s.dir)
	if s.idleRead && stamp == s.stamp {
		return kernel.EventPage{LastSeq: after}, nil
	}
	rt, err := kernel.Open(s.dir, kernel.Options{ReadOnly: true})
	if errors.Is(err, objects.ErrInUse) {
		// A runtime is taking the directory; its socket answers soon.
		return kernel.EventPage{LastSeq: after}, nil
	}
	if err != nil {
		return kernel.EventPage{}, err
	}
	defer rt.Close()
	page, err := rt.EventLog(kernel.EventQuery{PID: pid, After: after})
	if err == nil && !page.More {
		s.idleRead, s.stamp = true, stamp
	}
	return page, err
}

func decodePage(resp control.Response, err error) (kernel.EventPage, error) {
	if err == nil && resp.Error != "" {
		err = errors.New(resp.Error)
	}
	if err != nil {
		return kernel.EventPage{}, err
	}
	var page kernel.EventPage
	if err := json.Unmarshal(resp.Result, &page); err != nil {
		return kernel.EventPage{}, fmt.Errorf("decode the event log page: %w", err)
	}
	return page, nil
}

// logLine is one event on one line, long fields shortened and control
// characters escaped (termText): most of it is a model's.
func logLine(l kernel.LogEntry) string {
	head := fmt.Sprintf("%6d %s [pid %d] %s", l.Seq, timestamp(l.Time), l.PID, l.Type)
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	detail := func(name string) string {
		v, ok := l.Detail[name]
		if !ok {
			return ""
		}
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
		return string(v)
	}
	turn := 0
	if l.Turn != nil {
		turn = *l.Turn
	}
	switch l.Type {
	case kernel.LogSpawned:
		add("%s", l.Image)
		if l.ParentPID != 0 {
			add("parent %d", l.ParentPID)
		}
	case kernel.LogState:
		s := l.From + " -> " + l.To
		if l.Wait != "" {
			s += " (" + l.Wait + ")"
		}
		add("%s", s)
	case kernel.LogQuantum:
		add("turn %d", turn)
	case kernel.LogProviderCall:
		add("turn %d attempt %s: %s, %s ms", turn, detail("attempt"), detail("outcome"), detail("latency_ms"))
		if _, ok := l.Detail["prompt_tokens"]; ok {
			add("%s+%s tokens, %s tool calls", detail("prompt_tokens"), detail("completion_tokens"), detail("tool_calls"))
		}
		if fr := detail("finish_reason"); fr != "" && fr != "stop" && fr != "tool_calls" {
			add("finish %s", fr)
		}
	case kernel.LogModelOutput:
		add("turn %d: %s", turn, strconv.Quote(shorten(l.Text, 160)))
	case kernel.LogToolCall:
		add("%s %s %s", l.Name, l.CallID, shorten(string(l.Arguments), 120))
	case kernel.LogToolResult:
		outcome := "ok"
		if l.OK != nil && !*l.OK {
			outcome = "error " + l.ErrorCode
		}
		add("%s %s %s: %s", l.Name, l.CallID, outcome, shorten(string(l.Result), 160))
	case kernel.LogMessage:
		switch action := detail("action"); action {
		case "posted":
			add("posted %s from %s: %s", detail("message_id"), detail("sender"), strconv.Quote(shorten(detail("body"), 100)))
		default:
			add("%s %s", action, detail("message_ids"))
		}
		l.Reason = ""
	default:
		if l.Name != "" || l.CallID != "" {
			add("%s %s", l.Name, l.CallID)
		}
		names := make([]string, 0, len(l.Detail))
		for n := range l.Detail {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			add("%s=%s", n, shorten(detail(n), 80))
		}
	}
	if l.Reason != "" {
		add("%s", shorten(oneLine(l.Reason), 160))
	}
	if len(parts) == 0 {
		return termText(head)
	}
	return termText(head + " " + strings.Join(parts, "; "))
}
