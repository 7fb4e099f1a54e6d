package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/process"
	"github.com/libos/libos/skills/catalog"
	"github.com/libos/libos/tools"
)

// capturingProvider records every request before the replay answers it.
type capturingProvider struct {
	llm.Provider
	mu   sync.Mutex
	reqs []llm.Request
}

func (c *capturingProvider) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.mu.Unlock()
	return c.Provider.Complete(ctx, req)
}

// requests returns the captured requests of one image, in order.
func (c *capturingProvider) requests(image string) []llm.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []llm.Request
	for _, r := range c.reqs {
		if r.Process.Image == image {
			out = append(out, r)
		}
	}
	return out
}

func schemaNames(req llm.Request) []string {
	names := make([]string, len(req.Tools))
	for i, t := range req.Tools {
		names[i] = t.Name
	}
	return names
}

// catalogWithMeta is a skill catalog that also supplies the skill meta tools
// while the runtime's built-in families do not include them yet.
type catalogWithMeta struct{ *catalog.Catalog }

func (c catalogWithMeta) Tools() []*tools.Tool {
	return append(catalog.MetaTools(tools.Config{}), c.Catalog.Tools()...)
}

// agentCatalog loads the agent skill fixtures for a runtime.
func agentCatalog(t *testing.T) tools.SkillCatalog {
	t.Helper()
	var reserved []string
	haveMeta := false
	for _, b := range BuiltinTools(tools.Config{}) {
		reserved = append(reserved, b.Name)
		haveMeta = haveMeta || b.Name == "discover_skills"
	}
	c, err := catalog.LoadCatalog([]string{filepath.Join("..", "testdata", "skills", "agent")},
		catalog.CatalogOptions{Workspace: t.TempDir(), ReservedToolNames: reserved})
	if err != nil {
		t.Fatalf("LoadCatalog: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if haveMeta {
		return c
	}
	return catalogWithMeta{c}
}

// skillHarness opens a runtime with the agent skill catalog and a capturing
// provider.
func skillHarness(t *testing.T, script string) (*harness, *capturingProvider) {
	t.Helper()
	var capture *capturingProvider
	h := newHarness(t, script, func(o *Options) {
		capture = &capturingProvider{Provider: o.Provider}
		o.Provider = capture
		o.Skills = agentCatalog(t)
	})
	return h, capture
}

func scopeGrant(scope string, uses ...int) capabilities.Grant {
	g := capabilities.Grant{Resource: capabilities.ScopeResource(scope), Rights: []capabilities.Right{capabilities.Execute}}
	if len(uses) > 0 {
		n := uses[0]
		g.UsesRemaining = &n
	}
	return g
}

func errorCode(res map[string]any) string {
	e, _ := res["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func errorMessage(res map[string]any) string {
	e, _ := res["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return msg
}

var metaOnly = []string{"activate_skill", "discover_skills", "process_exit", "read_skill_resource", "unload_skill"}

const echoScript = `
processes:
  - image: skilled:v0
    turns:
      - tool_calls:
          - name: discover_skills
            arguments: {}
          - name: echo
            arguments: {text: too early}
      - tool_calls:
          - name: activate_skill
            arguments: {name: echo}
      - tool_calls:
          - name: echo
            arguments: {text: hello, tags: [x]}
          - name: echo
            arguments: {text: again}
      - tool_calls:
          - name: unload_skill
            arguments: {name: echo}
      - tool_calls:
          - name: process_exit
            arguments: {message: done}
`

func TestSkillToolAfterActivation(t *testing.T) {
	h, capture := skillHarness(t, echoScript)
	pid, err := h.rt.Spawn(SpawnSpec{Image: "skilled:v0", Goal: "echo", Grants: []capabilities.Grant{scopeGrant("echo.use")}})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	if info := h.info(pid); info.Status != process.Exited {
		t.Fatalf("status %s: %s", info.Status, info.Reason)
	}
	res := h.toolResults(pid)
	if len(res) != 7 {
		t.Fatalf("%d results: %v", len(res), res)
	}
	// Before activation the skill's tool is not in the table.
	if res[0]["_tool"] != "discover_skills" || res[0]["count"] != 5.0 {
		t.Fatalf("discover: %v", res[0])
	}
	if errorCode(res[1]) != tools.CodeUnknownTool {
		t.Fatalf("echo before activation: %v", res[1])
	}
	if res[2]["_tool"] != "activate_skill" || !strings.Contains(res[2]["manual"].(string), "# echo") {
		t.Fatalf("activate: %v", res[2])
	}
	// The subprocess ran between commits and its output is the result.
	for i, want := range []string{`{"tags":["x"],"text":"hello","times":1}`, `{"text":"again","times":1}`} {
		r := res[3+i]
		out, _ := json.Marshal(r["output"])
		if r["ok"] != true || r["status"] != "sealed" || r["exit_code"] != 0.0 || string(out) != want {
			t.Fatalf("echo call %d: %v", i, r)
		}
	}
	if res[5]["_tool"] != "unload_skill" || res[5]["unloaded"] != true {
		t.Fatalf("unload: %v", res[5])
	}

	// What the provider was shown, turn by turn: the skills projection
	// first, the skill's tools (and the tools its allowed-tools names) only
	// while it is active.
	reqs := capture.requests("skilled:v0")
	if len(reqs) != 5 {
		t.Fatalf("%d requests", len(reqs))
	}
	withEcho := slices.Sorted(slices.Values(append(slices.Clone(metaOnly), "echo", "echo_raw", "get_current_time")))
	for turn, want := range [][]string{metaOnly, metaOnly, withEcho, withEcho, metaOnly} {
		if got := schemaNames(reqs[turn]); !slices.Equal(got, want) {
			t.Fatalf("turn %d tools %v, want %v", turn, got, want)
		}
	}
	// The schema shown is the catalog's, exactly.
	echo, _ := h.rt.broker.Lookup("echo")
	want, _ := json.Marshal(echo.Schema)
	for _, ts := range reqs[2].Tools {
		if ts.Name == "echo" && string(ts.Parameters) != string(want) {
			t.Fatalf("echo schema shown %s, want %s", ts.Parameters, want)
		}
	}
}

func TestSkillToolNeedsScopeGrant(t *testing.T) {
	script := `
processes:
  - image: skilled:v0
    turns:
      - tool_calls:
          - name: activate_skill
            arguments: {name: echo}
      - tool_calls:
          - name: echo
            arguments: {text: one}
          - name: echo
            arguments: {text: two}
      - tool_calls:
          - name: process_exit
            arguments: {message: done}
`
	cases := []struct {
		name   string
		grants []capabilities.Grant
		want   []string // error code per echo call, "" for success
	}{
		{"no grant", nil, []string{tools.CodeDenied, tools.CodeDenied}},
		{"other scope", []capabilities.Grant{scopeGrant("delegate.run")}, []string{tools.CodeDenied, tools.CodeDenied}},
		{"granted", []capabilities.Grant{scopeGrant("echo.use")}, []string{"", ""}},
		{"one use", []capabilities.Grant{scopeGrant("echo.use", 1)}, []string{"", tools.CodeDenied}},
		{"denied beats allowed", []capabilities.Grant{scopeGrant("echo.use"), {Resource: "scope:echo.use", Rights: []capabilities.Right{capabilities.Execute}, Effect: capabilities.Deny}}, []string{tools.CodeDenied, tools.CodeDenied}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := skillHarness(t, script)
			pid, err := h.rt.Spawn(SpawnSpec{Image: "skilled:v0", Goal: "echo", Grants: tc.grants})
			if err != nil {
				t.Fatal(err)
			}
			h.run()
			res := h.toolResults(pid)
			for i, code := range tc.want {
				r := res[1+i]
				if errorCode(r) != code {
					t.Fatalf("echo call %d: %v, want code %q", i, r, code)
				}
				if code == tools.CodeDenied && (r["effect_started"] != false || !strings.Contains(errorMessage(r), "scope:echo.use")) {
					t.Fatalf("a refused call names the scope and starts nothing: %v", r)
				}
				if code == "" && r["status"] != "sealed" {
					t.Fatalf("admitted call: %v", r)
				}
			}
		})
	}
}

// A batch's calls run against the table the model was shown for its reply:
// a skill activated by one of them adds its tools from the next reply on,
// even after an outside effect of the batch ran between commits, and a skill
// unloaded by one of them takes its tools away at once.
func TestSkillTableFollowsTheBatch(t *testing.T) {
	h, _ := skillHarness(t, `
processes:
  - image: skilled:v0
    turns:
      - tool_calls:
          - name: activate_skill
            arguments: {name: echo}
      - tool_calls:
          - name: activate_skill
            arguments: {name: tally}
          - name: echo
            arguments: {text: effect between}
          - name: tally
            arguments: {text: too early}
      - tool_calls:
          - name: unload_skill
            arguments: {name: echo}
          - name: echo
            arguments: {text: unloaded}
      - tool_calls:
          - name: tally
            arguments: {text: now it runs}
      - tool_calls:
          - name: process_exit
            arguments: {message: done}
`)
	pid, err := h.rt.Spawn(SpawnSpec{Image: "skilled:v0", Goal: "tables", Grants: []capabilities.Grant{scopeGrant("echo.use")}})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	if info := h.info(pid); info.Status != process.Exited {
		t.Fatalf("status %s: %s", info.Status, info.Reason)
	}
	res := h.toolResults(pid)
	if len(res) != 8 {
		t.Fatalf("%d results: %v", len(res), res)
	}
	if res[2]["_tool"] != "echo" || res[2]["status"] != "sealed" {
		t.Fatalf("echo, an outside effect: %v", res[2])
	}
	if res[3]["_tool"] != "tally" || errorCode(res[3]) != tools.CodeUnknownTool || !strings.Contains(errorMessage(res[3]), "activated in this turn") {
		t.Fatalf("tally in the batch that activated it, after an effect: %v", res[3])
	}
	if res[5]["_tool"] != "echo" || errorCode(res[5]) != tools.CodeUnknownTool || res[5]["effect_started"] != false {
		t.Fatalf("echo in the batch that unloaded it: %v", res[5])
	}
	if res[6]["_tool"] != "tally" || res[6]["ok"] != true {
		t.Fatalf("tally from the next reply on: %v", res[6])
	}
}

func TestSkilledImageProjection(t *testing.T) {
	h, capture := skillHarness(t, `
processes:
  - image: skilled:v0
    turns:
      - tool_calls:
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: activate_skill
            arguments: {name: agent-libos-runtime-session}
      - tool_calls:
          - name: get_current_time
            arguments: {}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
  - image: base:v0
    turns:
      - tool_calls:
          - name: echo
            arguments: {text: hidden}
      - tool_calls:
          - name: process_exit
            arguments: {message: done}
`)
	pid, err := h.rt.Spawn(SpawnSpec{Image: "skilled:v0", Goal: "time", Grants: clockGrants()})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	res := h.toolResults(pid)
	if errorCode(res[0]) != tools.CodeUnknownTool {
		t.Fatalf("a built-in outside the projection cannot be called: %v", res[0])
	}
	if got := h.result(pid); got["timezone"] != "UTC" || got["unix_seconds"] != float64(epoch.Unix()) {
		t.Fatalf("after activation the skill's tool runs: %v", got)
	}
	reqs := capture.requests("skilled:v0")
	if got := schemaNames(reqs[0]); !slices.Equal(got, metaOnly) {
		t.Fatalf("skilled:v0 first turn shows %v, want %v", got, metaOnly)
	}
	// The runtime-session skill adds the session tools the runtime has.
	want := slices.Clone(metaOnly)
	for _, n := range []string{"get_current_time", "sleep", "compact_process_context"} {
		if _, ok := h.rt.broker.Lookup(n); ok {
			want = append(want, n)
		}
	}
	sort.Strings(want)
	if got := schemaNames(reqs[2]); !slices.Equal(got, want) {
		t.Fatalf("after activating the runtime-session skill: %v, want %v", got, want)
	}

	// base:v0 keeps its whole built-in table from the first turn, and skill
	// tools are not in it.
	base, err := h.rt.Spawn(SpawnSpec{Image: "base:v0", Goal: "base", Grants: clockGrants()})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	var builtins []string
	for _, b := range BuiltinTools(tools.Config{MaxSleepSeconds: 60}) {
		builtins = append(builtins, b.Name)
	}
	sort.Strings(builtins)
	if got := schemaNames(capture.requests("base:v0")[0]); !slices.Equal(got, builtins) {
		t.Fatalf("base:v0 shows %v, want the built-ins %v", got, builtins)
	}
	if r := h.toolResults(base)[0]; errorCode(r) != tools.CodeUnknownTool {
		t.Fatalf("base:v0 calling a skill tool it did not activate: %v", r)
	}
}

func TestAgentTaskChildToolTable(t *testing.T) {
	h, capture := skillHarness(t, `
processes:
  - image: skilled:v0
    turns:
      - tool_calls:
          - name: activate_skill
            arguments: {name: delegate}
      - tool_calls:
          - name: delegate
            arguments: {question: "what time is it?"}
      - tool_calls:
          - name: process_exit
            arguments: {payload: {answer: "${last.result.answer}", child: "${last.child_pid}", status: "${last.status}"}}
  - image: skill-agent:v0
    turns:
      - tool_calls:
          - name: get_current_time
            arguments: {}
          - name: echo
            arguments: {text: not declared}
          - name: sleep
            arguments: {seconds: 1}
      - tool_calls:
          - name: process_exit
            arguments: {payload: {answer: noon}}
`)
	grants := append(clockGrants(), spawnGrant(), scopeGrant("delegate.run"), scopeGrant("echo.use"))
	pid, err := h.rt.Spawn(SpawnSpec{Image: "skilled:v0", Goal: "delegate", Grants: grants})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	got := h.result(pid)
	child := int64(got["child"].(float64))
	if got["answer"] != "noon" || got["status"] != "exited" {
		t.Fatalf("parent result %v", got)
	}
	info := h.info(child)
	if info.ParentPID != pid || info.Image != "skill-agent:v0" || info.Status != process.Exited || info.Limits.WallSeconds != 91 {
		t.Fatalf("child %+v", info)
	}

	// The child was shown exactly the runner's allowed_tools, each with the
	// catalog's schema, from its first provider call.
	reqs := capture.requests("skill-agent:v0")
	if len(reqs) != 2 {
		t.Fatalf("child made %d provider calls", len(reqs))
	}
	for _, req := range reqs {
		if names := schemaNames(req); !slices.Equal(names, []string{"echo", "get_current_time", "process_exit"}) {
			t.Fatalf("child tools %v", names)
		}
		for _, ts := range req.Tools {
			tl, _ := h.rt.broker.Lookup(ts.Name)
			want, _ := json.Marshal(tl.Schema)
			if string(ts.Parameters) != string(want) || ts.Description != tl.Description {
				t.Fatalf("child sees %s as %s, the catalog has %s", ts.Name, ts.Parameters, want)
			}
		}
	}
	var prompt strings.Builder
	for _, m := range reqs[0].Messages {
		prompt.WriteString(m.Content)
	}
	for _, part := range []string{"The child reads the clock once", `{"question":"what time is it?"}`} {
		if !strings.Contains(prompt.String(), part) {
			t.Fatalf("the child's goal carries the manual and the inputs; %q missing from %v", part, reqs[0].Messages)
		}
	}

	res := h.toolResults(child)
	// The child holds only the scope its runner declared: no clock grant.
	if errorCode(res[0]) != tools.CodeDenied || !strings.Contains(errorMessage(res[0]), "clock:now") {
		t.Fatalf("child get_current_time: %v", res[0])
	}
	// echo owns echo.use, which the runner did not declare: refused even
	// though the parent holds that scope.
	if errorCode(res[1]) != tools.CodeDenied || !strings.Contains(errorMessage(res[1]), `owns scope "echo.use"`) {
		t.Fatalf("child echo: %v", res[1])
	}
	// sleep is not in the table at all.
	if errorCode(res[2]) != tools.CodeUnknownTool {
		t.Fatalf("child sleep: %v", res[2])
	}
}

func TestAgentTaskUnknownToolFailsBeforeProviderCall(t *testing.T) {
	h, capture := skillHarness(t, `
processes:
  - image: skilled:v0
    turns:
      - tool_calls:
          - name: activate_skill
            arguments: {name: broken-delegate}
      - tool_calls:
          - name: broken-delegate
            arguments: {anything: [1]}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
  - image: skill-agent:v0
    turns:
      - tool_calls:
          - name: process_exit
            arguments: {message: must never run}
`)
	pid, err := h.rt.Spawn(SpawnSpec{Image: "skilled:v0", Goal: "broken", Grants: []capabilities.Grant{spawnGrant()}})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	got := h.result(pid)
	if errorCode(got) != tools.CodeInvalidArguments || !strings.Contains(errorMessage(got), `allowed_tools[1]: "no_such_tool" does not resolve`) {
		t.Fatalf("parent saw %v", got)
	}
	if n := len(capture.requests("skill-agent:v0")); n != 0 {
		t.Fatalf("%d provider calls for the child", n)
	}
	procs, err := h.rt.Processes()
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 1 {
		t.Fatalf("the child must not exist: %+v", procs)
	}
	// The refused spawn charged nothing.
	if used := h.info(pid).Used; used.Children != 0 {
		t.Fatalf("children charged: %+v", used)
	}
}

// An agent-task child's table is fixed: activating a skill gives it the
// manual and names only the skill's tools that table holds, never ones it
// is not shown.
func TestActivateSkillInAFixedTable(t *testing.T) {
	h, _ := skillHarness(t, "")
	pid := h.spawn(nil)
	err := h.rt.update(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		r.ToolTable = []string{"activate_skill", "echo", "process_exit"}
		sys := h.rt.newSyscalls(tx, r, nil, &tools.Tool{Name: "activate_skill"}, "c1")
		info, err := sys.ActivateSkill("echo")
		if err != nil {
			return err
		}
		if !slices.Equal(info.Tools, []string{"echo"}) || !strings.Contains(info.Manual, "# echo") {
			t.Errorf("activation in a fixed table names %v (manual %q), want [echo] and the manual", info.Tools, info.Manual)
		}
		r.ToolTable = nil
		info, err = sys.ActivateSkill("echo")
		if err != nil {
			return err
		}
		if len(info.Tools) != 3 {
			t.Errorf("activation in an image's table names %v, want the skill's tools and the one its allowed-tools names", info.Tools)
		}
		return errors.New("rolled back")
	})
	if err == nil || err.Error() != "rolled back" {
		t.Fatal(err)
	}
}
