package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/images"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

func TestPlanChunks(t *testing.T) {
	mk := func(tokens ...int) []Entry {
		out := make([]Entry, len(tokens))
		for i, n := range tokens {
			out[i].Tokens = n
		}
		return out
	}
	cases := []struct {
		tokens []int
		max    int
		want   string
	}{
		{[]int{10, 10, 10, 10}, 2, "[[0 2] [2 4]]"},
		{[]int{10, 10, 10, 10}, 8, "[[0 1] [1 2] [2 3] [3 4]]"},
		{[]int{100, 1, 1, 1}, 2, "[[0 1] [1 4]]"},
		{[]int{5}, 3, "[[0 1]]"},
		{[]int{1, 1, 1, 1, 1, 1}, 1, "[[0 6]]"},
		{nil, 3, "[]"},
	}
	for _, c := range cases {
		got := planChunks(mk(c.tokens...), c.max)
		if s := fmt.Sprint(got); s != c.want && !(c.want == "[]" && len(got) == 0) {
			t.Errorf("planChunks(%v, %d) = %s, want %s", c.tokens, c.max, s, c.want)
		}
		if len(got) > c.max {
			t.Errorf("more chunks than max_chunks: %v", got)
		}
	}
}

func TestTailCut(t *testing.T) {
	e := func(roles ...llm.Role) []Entry {
		out := make([]Entry, len(roles))
		for i, r := range roles {
			out[i].Role = r
		}
		return out
	}
	u, a, tl := llm.RoleUser, llm.RoleAssistant, llm.RoleTool
	cases := []struct {
		entries  []Entry
		preserve int
		want     int
	}{
		{e(u, a, tl, a, tl), 1, 3}, // the tail would start at a tool result: keep its call
		{e(u, a, tl, a, tl), 2, 3}, // starts at the assistant call
		{e(u, a, tl, tl, u), 1, 4}, // a plain message
		{e(u, a, tl, tl, u), 2, 1}, // two results of one call stay with it
		{e(u, a, tl), 0, 3},        // nothing preserved
		{e(u, a, tl), 8, 0},        // everything preserved
	}
	for i, c := range cases {
		if got := tailCut(c.entries, c.preserve); got != c.want {
			t.Errorf("case %d: tailCut = %d, want %d", i, got, c.want)
		}
	}
}

func TestValidateSummary(t *testing.T) {
	full := func(over map[string]any) string {
		m := map[string]any{}
		for _, k := range summaryKeys {
			m[k] = []string{}
		}
		for k, v := range over {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	ok := []string{
		full(map[string]any{"goal": "ship it"}),
		full(map[string]any{"next_steps": []string{"", "exit"}}),
	}
	for _, s := range ok {
		if _, err := validateSummary([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	bad := map[string]string{
		full(nil): "every key is empty",
		full(map[string]any{"goal": "g", "risks": nil}): "summary.risks: required",
		full(map[string]any{"goal": "g", "extra": "x"}): "summary.extra: unknown key",
		full(map[string]any{"goal": 7}):                 "summary.goal: must be a string or an array of strings",
		full(map[string]any{"goal": []any{"a", 1}}):     "summary.goal[1]: must be a string",
		// null decodes into a string or a list without an error.
		strings.Replace(full(map[string]any{"goal": "g"}), `"risks":[]`, `"risks":null`, 1):       "summary.risks: must be a string or an array of strings",
		strings.Replace(full(map[string]any{"goal": "g"}), `"risks":[]`, `"risks":["a",null]`, 1): "summary.risks[1]: must be a string",
		`[1]`:  "must be a JSON object",
		`null`: "must be a JSON object",
	}
	for in, want := range bad {
		if _, err := validateSummary([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", in, err, want)
		}
	}
}

const summaryPayload = `{goal: "answer the question", constraints: [], user_preferences: [], completed: ["read the clock"], pending: [], key_references: ["pid ${process.pid}"], recent_decisions: [], risks: [], uncertainties: [], next_steps: ["exit"]}`

// chattyTurns makes n turns that each read the clock with a long text, to
// grow the context.
func chattyTurns(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "      - text: %q\n        tool_calls: [{name: get_current_time, arguments: {}}]\n", strings.Repeat(fmt.Sprintf("thinking step %d. ", i), 20))
	}
	return b.String()
}

func compactionGrants() []capabilities.Grant {
	return append(clockGrants(), spawnGrant(),
		capabilities.Grant{Resource: "image:context-compressor:v0", Rights: []capabilities.Right{capabilities.Read}})
}

func contextOf(t *testing.T, h *harness, pid int64) *llmContext {
	t.Helper()
	var c *llmContext
	err := h.rt.view(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		c, err = h.rt.loadContext(tx, r)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCompactionUnderTargetIsANoOp(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: compact_process_context, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {payload: "${last}"}}]
`)
	pid := h.spawn(nil) // no spawn or image rights: the no-op needs none
	h.run()
	got := h.result(pid)
	if got["compacted"] != false || got["reason"] != "context_under_target" || got["old_version"] != got["new_version"] {
		t.Fatalf("no-op result %v", got)
	}
	for _, f := range []string{"context_oid", "compressor_pids", "source_tokens", "compacted_tokens", "preserved_recent_entries"} {
		if _, ok := got[f]; !ok {
			t.Errorf("no-op result lacks %s", f)
		}
	}
	if pids := got["compressor_pids"].([]any); len(pids) != 0 {
		t.Fatalf("compressor_pids %v", pids)
	}
	if ps, _ := h.rt.Processes(); len(ps) != 1 {
		t.Fatalf("a no-op spawned %d processes", len(ps)-1)
	}
	h.rt.view(func(tx *txn) error {
		if _, err := tx.Lookup(Namespace(pid), jobName(pid)); !errors.Is(err, objects.ErrNotFound) {
			t.Fatalf("a no-op created a job Object: %v", err)
		}
		return nil
	})
}

func TestCompactionMissingRightsFailBeforeAnything(t *testing.T) {
	script := `
processes:
  - image: base:v0
    turns:
` + chattyTurns(2) + `
      - tool_calls: [{name: compact_process_context, arguments: {target_tokens: 256, preserve_recent_entries: 1}}]
      - tool_calls: [{name: process_exit, arguments: {message: "${last.error.message}"}}]
`
	cases := map[string][]capabilities.Grant{
		"process:spawn":               append(clockGrants(), capabilities.Grant{Resource: "image:context-compressor:v0", Rights: []capabilities.Right{capabilities.Read}}),
		"image:context-compressor:v0": append(clockGrants(), spawnGrant()),
	}
	for missing, grants := range cases {
		h := newHarness(t, script)
		pid := h.spawn(grants)
		h.run()
		if msg := h.result(pid)["message"].(string); !strings.Contains(msg, missing) {
			t.Errorf("missing %s: error %q does not name it", missing, msg)
		}
		if ps, _ := h.rt.Processes(); len(ps) != 1 {
			t.Errorf("missing %s: a child exists", missing)
		}
		h.rt.view(func(tx *txn) error {
			if _, err := tx.Lookup(Namespace(pid), jobName(pid)); !errors.Is(err, objects.ErrNotFound) {
				t.Errorf("missing %s: a job Object exists", missing)
			}
			return nil
		})
	}
}

func TestMultiStageCompaction(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
`+chattyTurns(4)+`
      - tool_calls: [{name: compact_process_context, arguments: {target_tokens: 256, preserve_recent_entries: 2, max_chunks: 2}}]
      - tool_calls: [{name: process_exit, arguments: {payload: "${last}"}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: `+summaryPayload+`}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: `+summaryPayload+`}}]
`)
	pid := h.spawn(compactionGrants())
	h.run()
	got := h.result(pid)
	if got["compacted"] != true || got["reason"] != "compacted" || got["new_version"].(float64) != got["old_version"].(float64)+1 {
		t.Fatalf("result %v", got)
	}
	if pids := got["compressor_pids"].([]any); len(pids) != 2 || got["preserved_recent_entries"] != 2.0 {
		t.Fatalf("result %v", got)
	}
	if got["compacted_tokens"].(float64) >= got["source_tokens"].(float64) {
		t.Fatalf("compaction did not shrink the context: %v", got)
	}
	c := contextOf(t, h, pid)
	if c.entries[0].Kind != "summary" || !strings.Contains(c.entries[0].Content, "read the clock") {
		t.Fatalf("first entry after compaction: %+v", c.entries[0])
	}
	// summary + 2 preserved + the compaction call, its result, the exit call and its result.
	if len(c.entries) != 7 || c.generation() != 1 {
		t.Fatalf("context after compaction: %d entries, generation %d", len(c.entries), c.generation())
	}
	for _, cp := range []int64{2, 3} {
		info := h.info(cp)
		if info.Image != "context-compressor:v0" || info.Status != process.Exited || info.ParentPID != pid {
			t.Fatalf("compressor %d: %+v", cp, info)
		}
		// target_tokens is the summary's goal as well as the no-op's threshold.
		if goal, err := h.rt.GoalOf(cp); err != nil || !strings.Contains(goal.Text, "about 256 tokens") {
			t.Fatalf("compressor %d's goal does not state the target: %q, %v", cp, goal.Text, err)
		}
	}
	// The context is rebuilt from evidence after a reopen: summary and tail.
	h.rt.Close()
	h.open("")
	if c2 := contextOf(t, h, pid); len(c2.entries) != 7 || c2.entries[0].Kind != "summary" || c2.generation() != 1 {
		t.Fatalf("rebuilt context: %d entries, first %q, generation %d", len(c2.entries), c2.entries[0].Kind, c2.generation())
	}
}

// hookProvider calls hook before the wrapped provider answers a request.
type hookProvider struct {
	llm.Provider
	hook func(req llm.Request)
}

func (p hookProvider) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	p.hook(req)
	return p.Provider.Complete(ctx, req)
}

func withHook(hook func(h *harness, req llm.Request), hp **harness) func(*Options) {
	return func(o *Options) {
		inner := o.Provider
		o.Provider = hookProvider{Provider: inner, hook: func(req llm.Request) { hook(*hp, req) }}
	}
}

func failingCompactionScript() string {
	return `
processes:
  - image: base:v0
    turns:
` + chattyTurns(4) + `
      - tool_calls: [{name: compact_process_context, arguments: {target_tokens: 256, preserve_recent_entries: 2, max_chunks: 2}}]
      - tool_calls: [{name: process_exit, arguments: {payload: "${last}"}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: ` + summaryPayload + `}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: ` + summaryPayload + `}}]
`
}

func checkFailedJob(t *testing.T, h *harness, pid int64, before *llmContext, want string) {
	t.Helper()
	got := h.result(pid)
	e, ok := got["error"].(map[string]any)
	if !ok || !strings.Contains(e["message"].(string), want) {
		t.Fatalf("compaction result %v, want an error containing %q", got, want)
	}
	after := contextOf(t, h, pid)
	if after.entries[0].Kind == "summary" || after.generation() != before.generation() {
		t.Fatal("a failed compaction changed the context")
	}
	h.rt.view(func(tx *txn) error {
		r, _ := loadProc(tx, pid)
		_, job, err := loadJob(tx, r)
		if err != nil || job.State != "failed" {
			t.Fatalf("job %+v %v", job, err)
		}
		return nil
	})
}

func TestCompactionFailsOnConcurrentContextWrite(t *testing.T) {
	var h *harness
	var once sync.Once
	hook := func(h *harness, req llm.Request) {
		if i, err := h.rt.SpawnIndex(req.Process.PID); err == nil && i == 1 && req.Process.Image == "context-compressor:v0" {
			once.Do(func() {
				// Between the stages, someone else writes the caller's context.
				err := h.rt.store.Update(func(tx *objects.Txn) error {
					meta, err := tx.Lookup(Namespace(1), contextNamePrefix+"1")
					if err != nil {
						return err
					}
					_, payload, err := tx.Read(meta.OID)
					if err != nil {
						return err
					}
					_, err = tx.Write(meta.OID, meta.Version, objects.WriteSpec{Payload: payload})
					return err
				})
				if err != nil {
					panic(err)
				}
			})
		}
	}
	h = newHarness(t, failingCompactionScript(), withHook(hook, &h))
	pid := h.spawn(compactionGrants())
	before := contextOf(t, h, pid)
	h.run()
	checkFailedJob(t, h, pid, before, "the context changed since source version")
}

func TestKilledCompressorFailsTheJob(t *testing.T) {
	var h *harness
	hook := func(h *harness, req llm.Request) {
		if req.Process.Image == "context-compressor:v0" {
			if err := h.rt.Kill(req.Process.PID, "test kills the compressor"); err != nil {
				panic(err)
			}
		}
	}
	h = newHarness(t, failingCompactionScript(), withHook(hook, &h))
	pid := h.spawn(compactionGrants())
	before := contextOf(t, h, pid)
	h.run()
	checkFailedJob(t, h, pid, before, "ended killed")
}

func TestInvalidSummaryFailsTheJob(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
`+chattyTurns(3)+`
      - tool_calls: [{name: compact_process_context, arguments: {target_tokens: 256, preserve_recent_entries: 1, max_chunks: 1}}]
      - tool_calls: [{name: process_exit, arguments: {payload: "${last}"}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: {goal: "only one key"}}}]
`)
	pid := h.spawn(compactionGrants())
	before := contextOf(t, h, pid)
	h.run()
	checkFailedJob(t, h, pid, before, "summary.constraints: required")
}

func TestAutomaticMaintenanceOncePerEpisode(t *testing.T) {
	// Two tools only: a request carries its tool table, which counts
	// against the window, and the whole built-in table alone is about
	// twice this window; twenty chatty turns fill it twice.
	small := &images.Image{Name: "small", Version: "v0", SystemPrompt: "test", Tools: []string{"get_current_time", "process_exit"},
		CompletionGate: images.GateOnePhase, ToolProjection: images.ProjectionAll,
		Context: images.ContextConfig{Object: true, WindowTokens: 2200, MaxOutputTokens: 100}}
	script := `
processes:
  - image: small:v0
    turns:
` + chattyTurns(20) + `
      - tool_calls: [{name: process_exit, arguments: {message: done}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: ` + summaryPayload + `}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: ` + summaryPayload + `}}]
`
	withSmall := func(o *Options) { o.Images = map[string]*images.Image{"small:v0": small} }
	// With execute on context:maintenance, the kernel compacts by itself.
	h := newHarness(t, script, withSmall)
	grants := append(compactionGrants(), capabilities.Grant{Resource: "context:maintenance", Rights: []capabilities.Right{capabilities.Execute}})
	pid, err := h.rt.Spawn(SpawnSpec{Image: "small:v0", Goal: "g", Grants: grants})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	if info := h.info(pid); info.Status != process.Exited {
		t.Fatalf("status %s: %s", info.Status, info.Reason)
	}
	ps, _ := h.rt.Processes()
	compressors := 0
	for _, p := range ps {
		if p.Image == "context-compressor:v0" {
			compressors++
		}
	}
	c := contextOf(t, h, pid)
	if compressors == 0 || c.generation() == 0 {
		for _, e := range c.entries {
			if e.Kind == "notice" {
				t.Log(e.Content)
			}
		}
		t.Fatalf("automatic maintenance did not run: %d compressors, generation %d (tokens %d)", compressors, c.generation(), c.tokens)
	}
	// Twenty chatty turns make two pressure episodes: one compaction each,
	// never one per quantum.
	if compressors != 2 || c.generation() != 2 {
		t.Fatalf("once per episode: %d compressor runs, generation %d", compressors, c.generation())
	}
	if last := c.entries[len(c.entries)-1]; last.Role != llm.RoleTool {
		t.Fatalf("the process ran on after maintenance: last entry %+v", last)
	}

	// Without the right, the process gets one pressure notice per episode.
	h2 := newHarness(t, script, withSmall)
	pid2, _ := h2.rt.Spawn(SpawnSpec{Image: "small:v0", Goal: "g", Grants: compactionGrants()})
	h2.run()
	notices := 0
	for _, e := range contextOf(t, h2, pid2).entries {
		if e.Kind == "notice" && strings.Contains(e.Content, "Context pressure") {
			notices++
		}
	}
	if notices != 1 {
		t.Fatalf("pressure notices: %d, want 1", notices)
	}
	if ps, _ := h2.rt.Processes(); len(ps) != 1 {
		t.Fatal("no compaction may run without execute on context:maintenance")
	}
}

func TestCompressorHasNoContextObject(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: `+summaryPayload+`}}]
`)
	var sawHeading bool
	pid, err := h.rt.Spawn(SpawnSpec{Image: "context-compressor:v0", Goal: "g"})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	h.rt.view(func(tx *txn) error {
		_, err := tx.Lookup(Namespace(pid), contextNamePrefix+fmt.Sprint(pid))
		sawHeading = err == nil
		return nil
	})
	if sawHeading {
		t.Fatal("context-compressor:v0 must not have a context Object")
	}
}

func TestCompactionRefusedWhenBudgetsCannotCarryIt(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
`+chattyTurns(4)+`
      - tool_calls: [{name: compact_process_context, arguments: {target_tokens: 256, preserve_recent_entries: 2, max_chunks: 2}}]
      - tool_calls: [{name: process_exit, arguments: {message: "${last.error.message}"}}]
`)
	pid, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "g", Grants: compactionGrants(), Budget: capabilities.Budget{LLMCalls: 6}})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	if msg := h.result(pid)["message"].(string); !strings.Contains(msg, "llm_calls") {
		t.Fatalf("the refusal must name the budget: %q", msg)
	}
	if ps, _ := h.rt.Processes(); len(ps) != 1 {
		t.Fatal("a compaction the budget cannot carry spawned a compressor")
	}
	h.rt.view(func(tx *txn) error {
		if _, err := tx.Lookup(Namespace(pid), jobName(pid)); !errors.Is(err, objects.ErrNotFound) {
			t.Fatal("a refused compaction created a job Object")
		}
		return nil
	})
}

func TestMaintenanceStages(t *testing.T) {
	for _, c := range []struct{ tokens, window, want int }{
		{100, 32000, 1}, {20000, 32000, 2}, {1_000_000, 32000, 8},
		{5000, 1, 1}, {5000, 0, 1}, {0, 2, 1},
	} {
		if got := maintenanceStages(c.tokens, c.window); got != c.want {
			t.Errorf("maintenanceStages(%d, %d) = %d, want %d", c.tokens, c.window, got, c.want)
		}
	}
}
