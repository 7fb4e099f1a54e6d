package kernel

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/process"
	"github.com/libos/libos/skills/catalog"
	"github.com/libos/libos/tools"
)

// oracleRunner is an agent-task runner that declares one output, with the
// allowed_tools given.
func oracleRunner(allowed string) string {
	return `run:
  type: agent-task
  allowed_tools: ` + allowed + `
  inputs:
    question: {type: string, required: true, description: The question.}
  outputs:
    answer: string
`
}

// taskHarness opens a runtime whose skill catalog is one agent-task package,
// oracle, with the runner manifest given, and a capturing provider.
func taskHarness(t *testing.T, runnerYAML, script string) (*harness, *capturingProvider) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "oracle")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"SKILL.md":   "---\nname: oracle\ndescription: Answer a question in a child agent.\n---\n\n# oracle\n\nAnswer the question.\n",
		"skill.yaml": runnerYAML,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var reserved []string
	haveMeta := false
	for _, b := range BuiltinTools(tools.Config{}) {
		reserved = append(reserved, b.Name)
		haveMeta = haveMeta || b.Name == "discover_skills"
	}
	c, err := catalog.LoadCatalog([]string{dir}, catalog.CatalogOptions{Workspace: t.TempDir(), ReservedToolNames: reserved})
	if err != nil {
		t.Fatalf("LoadCatalog: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	var skills tools.SkillCatalog = c
	if !haveMeta {
		skills = catalogWithMeta{c}
	}
	var capture *capturingProvider
	h := newHarness(t, script, func(o *Options) {
		capture = &capturingProvider{Provider: o.Provider}
		o.Provider = capture
		o.Skills = skills
	})
	return h, capture
}

// oracleScript is a parent that runs oracle once and exits, and a child
// whose turns are childTurns.
func oracleScript(childTurns string) string {
	return `
processes:
  - image: skilled:v0
    turns:
      - tool_calls:
          - name: activate_skill
            arguments: {name: oracle}
      - tool_calls:
          - name: oracle
            arguments: {question: "what time is it?"}
      - tool_calls:
          - name: process_exit
            arguments: {message: done}
  - image: skill-agent:v0
    turns:
` + childTurns
}

// runOracle runs the parent to its end and returns what its oracle call
// answered.
func runOracle(t *testing.T, h *harness) map[string]any {
	t.Helper()
	pid, err := h.rt.Spawn(SpawnSpec{Image: "skilled:v0", Goal: "ask the oracle", Grants: []capabilities.Grant{spawnGrant()}})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	if info := h.info(pid); info.Status != process.Exited {
		t.Fatalf("parent %s: %s", info.Status, info.Reason)
	}
	for _, r := range h.toolResults(pid) {
		if r["_tool"] == "oracle" {
			return r
		}
	}
	t.Fatalf("the parent made no oracle call: %v", h.toolResults(pid))
	return nil
}

// A child's result is checked against the runner's declared outputs, as
// skill test checks a run's: a wrong type or no result is output_rejected,
// naming the output and the rule; members the runner does not declare pass.
func TestAgentTaskResultCheckedAgainstOutputs(t *testing.T) {
	cases := []struct {
		name, exit string
		want       []string // error message parts; none for success
	}{
		{"wrong type", `{payload: {answer: 42, junk: true}}`, []string{`output "answer" must be a string, got number`}},
		{"no result", `{}`, []string{"exited without a result", "declared outputs (answer)"}},
		{"not an object", `{payload: [noon]}`, []string{"must be a JSON object holding the declared outputs (answer)"}},
		{"declared", `{payload: {answer: noon, junk: true}}`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := taskHarness(t, oracleRunner("[get_current_time, process_exit]"), oracleScript(`      - tool_calls:
          - name: process_exit
            arguments: `+tc.exit+"\n"))
			res := runOracle(t, h)
			if tc.want == nil {
				result, _ := res["result"].(map[string]any)
				if res["ok"] != true || result["answer"] != "noon" || result["junk"] != true {
					t.Fatalf("a result holding its declared outputs: %v", res)
				}
				return
			}
			if errorCode(res) != "output_rejected" || res["effect_started"] != true {
				t.Fatalf("want output_rejected after the child ran, got %v", res)
			}
			for _, part := range append([]string{"agent-task default of skill oracle: child pid 2"}, tc.want...) {
				if !strings.Contains(errorMessage(res), part) {
					t.Fatalf("error %q does not mention %q", errorMessage(res), part)
				}
			}
		})
	}
}

// A result over the 16 KiB wait_child_process inlines reaches the parent
// whole up to the bound of any runner's output (its result Object is in the
// child's namespace, which the parent cannot read), and is described past it.
func TestAgentTaskLargeResultReachesParent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bytes int
	}{{"under the bound", 40 << 10}, {"over the bound", catalog.MaxInlineOutputBytes + 1}} {
		t.Run(tc.name, func(t *testing.T) {
			answer := strings.Repeat("a", tc.bytes)
			h, _ := taskHarness(t, oracleRunner("[get_current_time, process_exit]"), oracleScript(`      - tool_calls:
          - name: process_exit
            arguments: {payload: {answer: `+answer+"}}\n"))
			res := runOracle(t, h)
			if res["ok"] != true {
				t.Fatalf("oracle: %v", res)
			}
			whole, _ := json.Marshal(map[string]string{"answer": answer})
			if tc.bytes < catalog.MaxInlineOutputBytes {
				if result, _ := res["result"].(map[string]any); result["answer"] != answer {
					t.Fatalf("a %d-byte result must be inlined: %v", len(whole), res["result_bytes"])
				}
				return
			}
			prefix, _ := res["result_prefix"].(string)
			if res["result"] != nil || res["result_truncated"] != true || res["result_bytes"] != float64(len(whole)) ||
				len(prefix) != catalog.MaxInlineOutputBytes || !strings.HasPrefix(string(whole), prefix) || len(res["result_sha256"].(string)) != 64 {
				t.Fatalf("a result over the bound is described: truncated %v, %v bytes", res["result_truncated"], res["result_bytes"])
			}
		})
	}
}

// The child of a runner whose allowed_tools leave out process_exit, as
// runx's always do, still has it: it is how the child hands back its
// answer, and without it the task could never succeed.
func TestAgentTaskChildCanAlwaysExit(t *testing.T) {
	h, capture := taskHarness(t, oracleRunner("[get_current_time]"), oracleScript(`      - tool_calls:
          - name: process_exit
            arguments: {payload: {answer: noon}}
`))
	res := runOracle(t, h)
	if result, _ := res["result"].(map[string]any); res["ok"] != true || res["status"] != "exited" || result["answer"] != "noon" {
		t.Fatalf("oracle: %v", res)
	}
	reqs := capture.requests("skill-agent:v0")
	if len(reqs) != 1 {
		t.Fatalf("the child made %d provider calls", len(reqs))
	}
	if names := schemaNames(reqs[0]); !slices.Equal(names, []string{"get_current_time", "process_exit"}) {
		t.Fatalf("child tools %v", names)
	}
}

// timeout_seconds is terminal: a child still running at the deadline, here
// waiting for a message that never comes, is killed, and the call answers
// resource_limit as a cli-tool's timeout does. A child that ends before it
// is unaffected, and the deadline's timer then does nothing.
func TestAgentTaskTimeoutEndsTheChild(t *testing.T) {
	runner := strings.Replace(oracleRunner("[receive_process_messages, process_exit]"), "  type: agent-task\n", "  type: agent-task\n  timeout_seconds: 2\n", 1)
	h, _ := taskHarness(t, runner, oracleScript(`      - tool_calls:
          - name: receive_process_messages
            arguments: {sender: "human:nobody"}
`))
	start := h.clock.Now()
	res := runOracle(t, h)
	if errorCode(res) != "resource_limit" || res["effect_started"] != true ||
		!strings.Contains(errorMessage(res), "timeout_seconds of 2 and was killed") {
		t.Fatalf("a child past its timeout: %v", res)
	}
	if child := h.info(2); child.Status != process.Killed {
		t.Fatalf("the child: %s (%s), want killed", child.Status, child.Reason)
	}
	if waited := h.clock.Now().Sub(start); waited < 2*time.Second {
		t.Fatalf("the call ended after %s, before its deadline", waited)
	}

	h2, _ := taskHarness(t, runner, oracleScript(`      - tool_calls:
          - name: process_exit
            arguments: {payload: {answer: noon}}
`))
	if res := runOracle(t, h2); res["ok"] != true {
		t.Fatalf("a child ending in time: %v", res)
	}
}

// The scope grant an agent-task child is handed is no wider than the
// caller's grant that allows it, so the kernel's widening check lets it
// through: an approved ask hands down an ask, an expiring grant its expiry,
// a one-shot one use: the one the call's own check reserved, since starting
// the task exercises no scope, so a task costs the caller one use, and a
// grant of a single use can start one.
func TestAgentTaskScopeGrantsFollowTheCallers(t *testing.T) {
	runner := strings.Replace(oracleRunner("[process_exit]"), "  type: agent-task\n", "  type: agent-task\n  scopes: [oracle.ask]\n", 1)
	script := oracleScript(`      - tool_calls:
          - name: process_exit
            arguments: {payload: {answer: noon}}
`)
	expiry := epoch.Add(24 * time.Hour)
	ask := scopeGrant("oracle.ask")
	ask.Effect = capabilities.Ask
	expiring := scopeGrant("oracle.ask")
	expiring.ExpiresAt = &expiry
	oneShot := func(caller int) func(t *testing.T, g, held capabilities.Grant) {
		return func(t *testing.T, g, held capabilities.Grant) {
			if g.UsesRemaining == nil || *g.UsesRemaining != 1 {
				t.Fatalf("the child's grant %+v, want one use", g)
			}
			if held.UsesRemaining == nil || *held.UsesRemaining != caller {
				t.Fatalf("the caller's grant %+v, want %d uses left", held, caller)
			}
		}
	}
	for _, c := range []struct {
		name  string
		grant capabilities.Grant
		check func(t *testing.T, child, caller capabilities.Grant)
	}{
		{"approved ask", ask, func(t *testing.T, g, _ capabilities.Grant) {
			if g.Effect != capabilities.Ask {
				t.Fatalf("the child's grant %+v, want an ask", g)
			}
		}},
		{"expiring", expiring, func(t *testing.T, g, _ capabilities.Grant) {
			if g.ExpiresAt == nil || !g.ExpiresAt.Equal(expiry) {
				t.Fatalf("the child's grant %+v, want the caller's expiry", g)
			}
		}},
		{"one-shot of three uses", scopeGrant("oracle.ask", 3), oneShot(2)},
		{"one-shot of one use", scopeGrant("oracle.ask", 1), oneShot(0)},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, _ := taskHarness(t, runner, script)
			pid, err := h.rt.Spawn(SpawnSpec{Image: "skilled:v0", Goal: "ask the oracle", Grants: []capabilities.Grant{spawnGrant(), c.grant}})
			if err != nil {
				t.Fatal(err)
			}
			h.run()
			if list, _ := h.rt.Approvals(); len(list) == 1 {
				if err := h.rt.Approve(ApprovalRef{PID: pid, CallID: list[0].CallID, ID: list[0].ID}); err != nil {
					t.Fatal(err)
				}
				h.run()
			}
			var oracle map[string]any
			for _, r := range h.toolResults(pid) {
				if r["_tool"] == "oracle" {
					oracle = r
				}
			}
			if oracle["ok"] != true {
				t.Fatalf("the oracle call: %v", oracle)
			}
			scopeGrantOf := func(pid int64) (held capabilities.Grant) {
				h.rt.view(func(tx *txn) error {
					r, err := loadProc(tx, pid)
					if err != nil {
						return err
					}
					for _, g := range r.Grants {
						if g.Resource == "scope:oracle.ask" {
							held = g
						}
					}
					return nil
				})
				return held
			}
			c.check(t, scopeGrantOf(2), scopeGrantOf(pid))
		})
	}
}
