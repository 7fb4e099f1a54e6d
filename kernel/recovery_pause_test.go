package kernel

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/libos/libos/clock"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/process"
)

// A pause the Host asked for and was acknowledged while a provider call ran
// holds across a crash before the call's result committed: the reopened
// process is paused and calls no provider, as after a clean stop.
func TestPauseAskedDuringACallSurvivesACrash(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var crashed *vfs.MemFS
	var calls atomic.Int32
	var pid int64
	h := &harness{t: t, dir: t.TempDir(), clock: clock.NewFake(epoch, true)}
	p := funcProvider(func(llm.Request) (llm.Response, error) {
		if calls.Add(1) == 1 && crashed == nil {
			if rep, err := h.rt.Signal(pid, SignalPause); err != nil || !rep.Changed {
				t.Errorf("pause during the call: %+v, %v", rep, err)
			}
			crashed = mem.CrashClone(vfs.CrashCloneCfg{})
		}
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "get_current_time", Arguments: json.RawMessage(`{}`)}}}, nil
	})
	h.open("", func(o *Options) { o.FS = mem; o.Provider = p })
	pid = h.spawn(clockGrants())
	h.run()
	h.rt.Close()
	if crashed == nil {
		t.Fatal("no crash was taken")
	}
	calls.Store(0)
	h.open("", func(o *Options) { o.FS = crashed; o.Provider = p })
	if info := h.info(pid); info.Status != process.Paused {
		t.Fatalf("after the reopen: %s, want paused", info.Status)
	}
	h.run()
	if n := calls.Load(); n != 0 {
		t.Fatalf("the paused process made %d provider calls after the reopen", n)
	}
}

// The same with the pause asked while an outside effect ran.
func TestPauseAskedDuringAnEffectSurvivesACrash(t *testing.T) {
	h := &harness{t: t, dir: t.TempDir(), clock: clock.NewFake(epoch, true)}
	pid, _ := effectCrash(t, h, refusedThenEffectScript, func(pid int64) {
		if _, err := h.rt.Signal(pid, SignalPause); err != nil {
			t.Error(err)
		}
	}, nil)
	h.run()
	if info := h.info(pid); info.Status != process.Paused {
		t.Fatalf("after the reopen and a run: %s (%s), want paused", info.Status, info.Reason)
	}
}

// A message the batch saw before its outside effect, to be announced after
// the results, is announced after a crash during that effect too: the
// process is told of it before it can exit.
func TestMessageSeenBeforeACrashedEffectIsAnnounced(t *testing.T) {
	h := &harness{t: t, dir: t.TempDir(), clock: clock.NewFake(epoch, true)}
	var told atomic.Bool
	p := funcProvider(func(req llm.Request) (llm.Response, error) {
		for _, m := range req.Messages {
			if strings.Contains(m.Content, "also update the docs") || strings.Contains(m.Content, "New messages") {
				told.Store(true)
			}
		}
		if req.Turn == 0 {
			if _, err := h.rt.PostHumanMessage(HumanMessage{To: req.Process.PID, From: "ana", Body: "also update the docs"}); err != nil {
				t.Error(err)
			}
			return llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "slow_echo", Arguments: json.RawMessage(`{"text":"x"}`)}}}, nil
		}
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: fmt.Sprintf("e%d", req.Turn), Name: "process_exit", Arguments: json.RawMessage(`{"message":"done"}`)}}}, nil
	})
	pid, _ := effectCrash(t, h, "", nil, func(o *Options) { o.Provider = p })
	told.Store(false)
	h.run()
	if !told.Load() {
		t.Fatalf("the process (%s) was never told of the message posted before the crash", h.info(pid).Status)
	}
}
