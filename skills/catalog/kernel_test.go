package catalog_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/clock"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/process"
	"github.com/libos/libos/skills/catalog"
	"github.com/libos/libos/tools"
)

// recorder keeps every request the replay provider answers.
type recorder struct {
	llm.Provider
	mu   sync.Mutex
	reqs []llm.Request
}

func (r *recorder) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.Provider.Complete(ctx, req)
}

// withMeta adds the skill meta tools when the runtime's built-in families
// do not already include them.
type withMeta struct{ *catalog.Catalog }

func (w withMeta) Tools() []*tools.Tool {
	return append(catalog.MetaTools(tools.Config{}), w.Catalog.Tools()...)
}

func runtimeCatalog(c *catalog.Catalog) tools.SkillCatalog {
	for _, b := range kernel.BuiltinTools(tools.Config{}) {
		if b.Name == "discover_skills" {
			return c
		}
	}
	return withMeta{c}
}

// A javascript runner and a bundled tool called by an agent process through
// the real kernel: the module runs in the catalog's worker pool as an
// outside effect, and its output is what the process sees.
func TestJavaScriptSkillThroughKernel(t *testing.T) {
	script, err := llm.ParseScript([]byte(`
processes:
  - image: skilled:v0
    turns:
      - tool_calls:
          - name: activate_skill
            arguments: {name: tally}
      - tool_calls:
          - name: read_skill_resource
            arguments: {name: tally, path: lib/words.mjs}
          - name: tally
            arguments: {text: "one three fives"}
      - tool_calls:
          - name: text_upper
            arguments: {text: "${last.output.longest}"}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last.output}"}
`))
	if err != nil {
		t.Fatal(err)
	}
	cat := loadAgent(t)
	rt, err := kernel.Open(t.TempDir(), kernel.Options{
		Clock:  clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), true),
		Skills: runtimeCatalog(cat),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	replay, err := llm.NewReplay(script, rt)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Provider: replay}
	rt.SetProvider(rec)
	pid, err := rt.Spawn(kernel.SpawnSpec{Image: "skilled:v0", Goal: "count", Grants: []capabilities.Grant{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.RunUntilIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	info, err := rt.Process(pid)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != process.Exited {
		t.Fatalf("status %s: %s", info.Status, info.Reason)
	}
	_, payload, err := rt.ReadObject(info.ResultOID)
	if err != nil {
		t.Fatal(err)
	}
	if string(payload) != `{"text":"THREE"}` {
		t.Fatalf("result %s", payload)
	}

	// The results the model saw, from the last request.
	last := rec.reqs[len(rec.reqs)-1]
	var results []map[string]any
	for _, m := range last.Messages {
		if m.Role == llm.RoleTool {
			var r map[string]any
			if err := json.Unmarshal([]byte(m.Content), &r); err != nil {
				t.Fatal(err)
			}
			results = append(results, r)
		}
	}
	if len(results) != 4 {
		t.Fatalf("%d tool results", len(results))
	}
	if text, _ := results[1]["text"].(string); !strings.Contains(text, "export function split") {
		t.Fatalf("read_skill_resource: %v", results[1])
	}
	if out, _ := json.Marshal(results[2]["output"]); string(out) != `{"longest":"three","words":3}` || results[2]["status"] != "sealed" {
		t.Fatalf("tally: %v", results[2])
	}
}
