package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/libos/libos/images"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

// testCatalog is a skill catalog with one skill whose tool has an outside effect.
type testCatalog struct{ tools []*tools.Tool }

func (c testCatalog) Skills() []tools.SkillInfo {
	return []tools.SkillInfo{{Name: "echoer", Description: "echoes", Tools: []string{"slow_echo"}}}
}
func (c testCatalog) Tools() []*tools.Tool { return c.tools }

func TestOutsideEffectRunsBetweenCommits(t *testing.T) {
	var ran atomic.Int32
	var storeFree atomic.Bool
	var h *harness
	echo := &tools.Tool{
		Name:   "slow_echo",
		Schema: schema.Object(map[string]*schema.Schema{"text": {Type: "string"}}, "text"),
		Scopes: []string{"echo"},
		Invoke: func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
			var args struct{ Text string }
			json.Unmarshal(raw, &args)
			return tools.Outcome{Effect: func(ctx context.Context) (map[string]any, error) {
				ran.Add(1)
				// The store lock is free while an effect runs: another
				// commit goes through.
				storeFree.Store(h.rt.PutMeta("probe", 1) == nil)
				if args.Text == "fail" {
					return nil, errors.New("echo failed")
				}
				return map[string]any{"echo": args.Text}, nil
			}}, nil
		},
	}
	im := &images.Image{Name: "echo", Version: "v0", SystemPrompt: "test", Tools: []string{images.BuiltinTools, "slow_echo"},
		CompletionGate: images.GateOnePhase, ToolProjection: images.ProjectionAll}
	h = newHarness(t, `
processes:
  - image: echo:v0
    turns:
      - tool_calls:
          - name: slow_echo
            arguments: {text: hello}
          - name: slow_echo
            arguments: {text: fail}
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
`, func(o *Options) {
		o.Skills = testCatalog{tools: []*tools.Tool{echo}}
		o.Images = map[string]*images.Image{"echo:v0": im}
	})
	pid, err := h.rt.Spawn(SpawnSpec{Image: "echo:v0", Goal: "echo", Grants: clockGrants()})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	res := h.toolResults(pid)
	if ran.Load() != 2 || !storeFree.Load() {
		t.Fatalf("effects ran %d times, store free during effect: %v", ran.Load(), storeFree.Load())
	}
	if res[0]["echo"] != "hello" || res[0]["ok"] != true {
		t.Fatalf("first effect: %v", res[0])
	}
	if e := res[1]["error"].(map[string]any); e["message"] != "echo failed" || res[1]["effect_started"] != true {
		t.Fatalf("failed effect: %v", res[1])
	}
	if res[2]["iso8601"] == nil {
		t.Fatalf("the call after effects runs: %v", res[2])
	}
	if got := h.result(pid); got["timezone"] != "UTC" {
		t.Fatalf("result %v", got)
	}
}
