package kernel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/images"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

// Tests of rules of the runtime-session contract
// (shared/spec/runtime-session-skill.md) that no other test pins, each
// through the real kernel path: real Pebble, the replay provider, the fake
// clock.

// noJob fails the test if pid has a compaction job Object.
func noJob(t *testing.T, h *harness, pid int64, what string) {
	t.Helper()
	h.rt.view(func(tx *txn) error {
		if _, err := tx.Lookup(Namespace(pid), jobName(pid)); !errors.Is(err, objects.ErrNotFound) {
			t.Errorf("%s: a job Object exists (%v)", what, err)
		}
		return nil
	})
}

// onlyProcess fails the test if the runtime holds any process besides the
// one under test: no compressor child was spawned.
func onlyProcess(t *testing.T, h *harness, what string) {
	t.Helper()
	if ps, _ := h.rt.Processes(); len(ps) != 1 {
		t.Errorf("%s: %d processes, want only the caller", what, len(ps))
	}
}

// Goal recovery after a reopen is bounded at 32,000 characters, counted in
// characters, not bytes: a goal of exactly 32,000 two-byte letters recovers
// from retained full-I/O evidence and the review issues a token; one more
// letter fails closed with "goal unavailable", naming the bound.
func TestContractRecoveredGoalBoundIsInCharacters(t *testing.T) {
	const script = `
processes:
  - image: coding:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {}}]
`
	for _, n := range []int{maxRecoveredGoalChars, maxRecoveredGoalChars + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			goal := strings.Repeat("é", n)
			h := newHarness(t, script)
			pid, err := h.rt.Spawn(SpawnSpec{Image: "coding:v0", Goal: goal})
			if err != nil {
				t.Fatal(err)
			}
			// The goal's runtime-local payload does not survive the reopen:
			// only the retained evidence can give it back.
			if err := h.rt.Close(); err != nil {
				t.Fatal(err)
			}
			h.open(script)
			if _, _, err := h.rt.ReadObject(h.info(pid).GoalOID); !errors.Is(err, objects.ErrPayloadLost) {
				t.Fatalf("goal payload after reopen: %v, want it lost", err)
			}
			h.run()
			res := h.toolResults(pid)
			if len(res) != 1 {
				t.Fatalf("%d tool results, want the probe's only", len(res))
			}
			probe := res[0]
			// The script ends after the probe; the process must not have exited.
			if h.info(pid).Status == process.Exited {
				t.Fatalf("a bare probe exited the gated process: status %v", probe["status"])
			}
			if n <= maxRecoveredGoalChars {
				review, ok := probe["completion_review"].(map[string]any)
				if !ok || probe["status"] != "completion_review_required" {
					t.Fatalf("a %d-character goal (%d bytes) must be recovered and reviewed: status %v, error %v", n, len(goal), probe["status"], probe["error"])
				}
				if tok, _ := review["review_token"].(string); len(tok) != 64 {
					t.Fatalf("review without a token: %v", review)
				}
				sum := sha256.Sum256([]byte(goal))
				if got := review["goal"].(map[string]any)["sha256"]; got != hex.EncodeToString(sum[:]) {
					t.Fatalf("recovered goal hash %v, want the exact goal's", got)
				}
				return
			}
			e, ok := probe["error"].(map[string]any)
			if !ok {
				t.Fatalf("a %d-character goal must fail closed: status %v", n, probe["status"])
			}
			msg, _ := e["message"].(string)
			if !strings.Contains(msg, "goal unavailable") || !strings.Contains(msg, fmt.Sprint(maxRecoveredGoalChars)) ||
				!strings.Contains(msg, fmt.Sprint(n)) {
				t.Fatalf("the refusal must say the goal is unavailable and name the bound: %q", msg)
			}
			if _, ok := probe["completion_review"]; ok {
				t.Fatalf("no review (and no token) may be issued: status %v", probe["status"])
			}
		})
	}
}

// force=true skips only the under-target no-op: a context of a few hundred
// tokens, under the default target of 4000, is compacted by one compressor.
func TestContractForcedCompactionIgnoresTarget(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
`+chattyTurns(2)+`
      - tool_calls: [{name: compact_process_context, arguments: {force: true, target_tokens: 4000, preserve_recent_entries: 1, max_chunks: 1}}]
      - tool_calls: [{name: process_exit, arguments: {payload: "${last}"}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: `+summaryPayload+`}}]
`)
	pid := h.spawn(compactionGrants())
	h.run()
	got := h.result(pid)
	if got["compacted"] != true || got["reason"] != "compacted" {
		t.Fatalf("a forced compaction of a small context must compact: %v", got)
	}
	if src, _ := got["source_tokens"].(float64); src <= 0 || src >= 4000 {
		t.Fatalf("the context must be under the target (a few hundred tokens): %v", got)
	}
	pids, _ := got["compressor_pids"].([]any)
	if len(pids) != 1 {
		t.Fatalf("compressor_pids %v, want one", got["compressor_pids"])
	}
	cp := int64(pids[0].(float64))
	if info := h.info(cp); info.Image != compressorImage || info.ParentPID != pid || info.Status != process.Exited {
		t.Fatalf("compressor %+v", info)
	}
	if ps, _ := h.rt.Processes(); len(ps) != 2 {
		t.Fatalf("%d processes, want the caller and one compressor", len(ps))
	}
	if c := contextOf(t, h, pid); c.entries[0].Kind != "summary" || c.generation() != 1 {
		t.Fatalf("context after a forced compaction: first %q, generation %d", c.entries[0].Kind, c.generation())
	}
}

// Every fresh manual compaction needs read, write and materialize on the
// current context Object: a deny of any one of them refuses even an
// under-target call, naming the right, and creates no job Object.
func TestContractCompactionNeedsEachContextRight(t *testing.T) {
	const script = `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: compact_process_context, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {payload: "${last}"}}]
`
	for _, right := range []capabilities.Right{capabilities.Read, capabilities.Write, capabilities.Materialize} {
		t.Run(string(right), func(t *testing.T) {
			h := newHarness(t, script)
			// The runtime gives every process read, write and materialize on
			// its namespace; the deny takes one of them away from the
			// context Object, and deny beats allow.
			pid := h.spawn([]capabilities.Grant{{Resource: "object_namespace:" + Namespace(1),
				Rights: []capabilities.Right{right}, Effect: capabilities.Deny}})
			if pid != 1 {
				t.Fatalf("pid %d", pid)
			}
			h.run()
			got := h.result(pid)
			e, ok := got["error"].(map[string]any)
			if !ok || e["code"] != "denied" {
				t.Fatalf("deny of %s: an under-target call must be denied: %v", right, got)
			}
			want := fmt.Sprintf("%s on object:%s", right, contextOf(t, h, pid).meta.OID)
			if msg, _ := e["message"].(string); !strings.Contains(msg, want) {
				t.Fatalf("deny of %s: refusal %q does not name %q", right, msg, want)
			}
			noJob(t, h, pid, string(right))
			onlyProcess(t, h, string(right))
		})
	}
}

// On an image without a context Object, even a forced compaction answers
// not_found and creates neither a child nor a job.
func TestContractNoContextObjectNotFound(t *testing.T) {
	plain := &images.Image{Name: "plain", Version: "v0", SystemPrompt: "test", Tools: []string{images.BuiltinTools},
		CompletionGate: images.GateOnePhase, ToolProjection: images.ProjectionAll,
		Context: images.ContextConfig{Object: false, WindowTokens: 32000, MaxOutputTokens: 100}}
	h := newHarness(t, `
processes:
  - image: plain:v0
    turns:
`+chattyTurns(2)+`
      - tool_calls: [{name: compact_process_context, arguments: {force: true, target_tokens: 256, preserve_recent_entries: 1, max_chunks: 1}}]
      - tool_calls: [{name: process_exit, arguments: {payload: "${last}"}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: `+summaryPayload+`}}]
`, func(o *Options) { o.Images = map[string]*images.Image{"plain:v0": plain} })
	// Every right a real compaction needs: only the missing context Object
	// can stop it.
	pid, err := h.rt.Spawn(SpawnSpec{Image: "plain:v0", Goal: "g", Grants: compactionGrants()})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	got := h.result(pid)
	e, ok := got["error"].(map[string]any)
	if !ok || e["code"] != "not_found" {
		t.Fatalf("a forced compaction without a context Object must answer not_found: %v", got)
	}
	onlyProcess(t, h, "no context Object")
	noJob(t, h, pid, "no context Object")
}

// The Host's sleep maximum (Options.MaxSleepSeconds) bounds sleep: with 120,
// 121 is refused naming the bound, 90.5 sleeps 90.5 seconds on the runtime
// clock, and 0 returns at once.
func TestContractSleepMaximumFromHost(t *testing.T) {
	h := newHarness(t, `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: sleep, arguments: {seconds: 121}}]
      - tool_calls: [{name: sleep, arguments: {seconds: 90.5}}]
      - tool_calls: [{name: sleep, arguments: {seconds: 0}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
`, func(o *Options) { o.MaxSleepSeconds = 120 })
	pid := h.spawn(clockGrants())
	h.run()
	if st := h.info(pid).Status; st != process.Exited {
		t.Fatalf("status %s", st)
	}
	res := h.toolResults(pid)
	if len(res) != 4 {
		t.Fatalf("tool results %v", res)
	}
	e, ok := res[0]["error"].(map[string]any)
	if !ok || e["code"] != "invalid_arguments" || !strings.Contains(e["message"].(string), "must be <= 120") {
		t.Fatalf("sleep 121 must be refused naming the bound: %v", res[0])
	}
	if res[1]["_tool"] != "sleep" || res[1]["requested_seconds"] != 90.5 || res[1]["elapsed_seconds"] != 90.5 {
		t.Fatalf("sleep 90.5: %v", res[1])
	}
	if res[2]["_tool"] != "sleep" || res[2]["requested_seconds"] != 0.0 || res[2]["elapsed_seconds"] != 0.0 {
		t.Fatalf("sleep 0: %v", res[2])
	}
	if want := epoch.Add(90500 * time.Millisecond); !h.clock.Now().Equal(want) {
		t.Fatalf("fake clock at %v, want %v: only the 90.5-second sleep waits", h.clock.Now(), want)
	}
}

// A compaction's versions are the context Object's: old_version is its
// version once the call's commit landed, new_version one more, and the next
// read of the context Object sees new_version.
func TestContractCompactionVersionsMatchTheContext(t *testing.T) {
	var h *harness
	var mu sync.Mutex
	var landed []uint64
	hook := func(h *harness, req llm.Request) {
		if req.Process.Image != compressorImage {
			return
		}
		// The compressor runs once the call's commit landed, while the
		// caller waits: the caller's context is at the version that commit
		// wrote.
		var v uint64
		h.rt.view(func(tx *txn) error {
			meta, err := tx.Lookup(Namespace(1), contextNamePrefix+"1")
			if err == nil {
				v = meta.Version
			}
			return err
		})
		mu.Lock()
		landed = append(landed, v)
		mu.Unlock()
	}
	h = newHarness(t, `
processes:
  - image: base:v0
    turns:
`+chattyTurns(3)+`
      - tool_calls: [{name: compact_process_context, arguments: {target_tokens: 256, preserve_recent_entries: 1, max_chunks: 1}}]
      - tool_calls: [{name: read_object, arguments: {namespace: "proc-1", name: "llm_context:1"}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
  - image: context-compressor:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {payload: `+summaryPayload+`}}]
`, withHook(hook, &h))
	pid := h.spawn(compactionGrants())
	h.run()
	if st := h.info(pid).Status; st != process.Exited {
		t.Fatalf("status %s", st)
	}
	var compaction, read map[string]any
	for _, r := range h.toolResults(pid) {
		switch r["_tool"] {
		case compactToolName:
			compaction = r
		case "read_object":
			read = r
		}
	}
	if compaction["compacted"] != true {
		t.Fatalf("compaction %v", compaction)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(landed) != 1 || landed[0] == 0 {
		t.Fatalf("context versions seen by the compressor's calls: %v", landed)
	}
	oldV, newV := compaction["old_version"].(float64), compaction["new_version"].(float64)
	if uint64(oldV) != landed[0] || newV != oldV+1 {
		t.Fatalf("old_version %v, new_version %v; the context was at version %d when the call's commit landed", oldV, newV, landed[0])
	}
	if compaction["context_oid"] != read["oid"] || read["version"] != newV {
		t.Fatalf("the next read of the context Object %v, want version %v of %v", read, newV, compaction["context_oid"])
	}
	h.rt.view(func(tx *txn) error {
		r, _ := loadProc(tx, pid)
		if _, job, err := loadJob(tx, r); err != nil || job.SourceVersion != landed[0] || job.State != "completed" {
			t.Errorf("job %+v %v", job, err)
		}
		return nil
	})
}

// preAckToken is the placeholder the replay script submits as a review
// token; tokenProvider puts the real pre-ACK token in its place.
const preAckToken = "PRE-ACK-TOKEN"

// tokenProvider wraps a provider: it keeps the review token of the first
// completion review a process was shown, and writes it wherever a reply's
// tool call arguments hold preAckToken.
type tokenProvider struct {
	llm.Provider
	mu    sync.Mutex
	first string
}

func (p *tokenProvider) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	p.mu.Lock()
	if p.first == "" {
		for _, m := range req.Messages {
			if m.Role != llm.RoleTool || m.Name != "process_exit" {
				continue
			}
			var res struct {
				Review struct {
					Token string `json:"review_token"`
				} `json:"completion_review"`
			}
			if json.Unmarshal([]byte(m.Content), &res) == nil && res.Review.Token != "" {
				p.first = res.Review.Token
				break
			}
		}
	}
	first := p.first
	p.mu.Unlock()
	resp, err := p.Provider.Complete(ctx, req)
	for i, c := range resp.ToolCalls {
		if bytes.Contains(c.Arguments, []byte(preAckToken)) {
			if first == "" {
				return resp, errors.New("tokenProvider: no review token seen yet")
			}
			resp.ToolCalls[i].Arguments = bytes.ReplaceAll(c.Arguments, []byte(preAckToken), []byte(first))
		}
	}
	return resp, err
}

// A real pre-ACK review token, submitted after the ACK with evidence that is
// otherwise valid, is refused with exactly one error, review_token_current;
// the post-ACK token with the same evidence exits.
func TestContractPreAckTokenRefusedAfterAck(t *testing.T) {
	evidence := `
              completion_evidence:
                goal_oid: "${process.goal_oid}"
                reviewed_message_ids: ["${last.completion_review.acknowledged_human_message_ids.0}"]
                acceptance_checks:
                  - requirement: do the goal and the follow-up
                    source_refs: ["${process.goal_oid}", "${last.completion_review.acknowledged_human_message_ids.0}"]
                    status: completed
                    evidence_tool_calls: [read_process_messages]
                    evidence_summary: read and acknowledged the follow-up from alice
                final_verification: [read_process_messages]`
	script := `
processes:
  - image: coding:v0
    turns:
      - tool_calls: [{name: process_exit, arguments: {}}]
      - tool_calls: [{name: read_process_messages, arguments: {}}]
      - tool_calls: [{name: process_exit, arguments: {}}]
      - tool_calls:
          - name: process_exit
            arguments:
              review_token: ` + preAckToken + `
              message: done` + evidence + `
      - tool_calls:
          - name: process_exit
            arguments:
              review_token: "${last.completion_review.review_token}"
              message: done` + evidence + `
`
	tp := &tokenProvider{}
	h := newHarness(t, script, func(o *Options) { tp.Provider = o.Provider; o.Provider = tp })
	pid, err := h.rt.Spawn(SpawnSpec{Image: "coding:v0", Goal: "fix the bug"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.rt.PostHumanMessage(HumanMessage{To: pid, From: "alice", Body: "also update the docs"}); err != nil {
		t.Fatal(err)
	}
	h.run()
	res := h.toolResults(pid)
	if len(res) != 5 {
		var seen []string
		for _, r := range res {
			seen = append(seen, fmt.Sprintf("%v %v", r["_tool"], r["status"]))
		}
		t.Fatalf("%d tool results (%s), want 5: two probes around the read, the refused and the accepted submission", len(res), strings.Join(seen, "; "))
	}
	review := func(i int) map[string]any {
		r, ok := res[i]["completion_review"].(map[string]any)
		if !ok || res[i]["status"] != "completion_review_required" {
			t.Fatalf("result %d: status %v, error %v", i, res[i]["status"], res[i]["error"])
		}
		return r
	}
	pre, post := review(0), review(2)
	if ids := pre["unread_human_message_ids"].([]any); len(ids) != 1 {
		t.Fatalf("the first probe must see the unread message: %v", pre)
	}
	if acked := res[1]["acked_message_ids"].([]any); len(acked) != 1 {
		t.Fatalf("the read must ACK the message: %v", res[1])
	}
	if pre["review_token"] != tp.first || post["review_token"] == tp.first {
		t.Fatalf("the ACK must change the token: pre %v, post %v, submitted %v", pre["review_token"], post["review_token"], tp.first)
	}
	refused := review(3)
	errs, _ := refused["validation_errors"].([]any)
	if len(errs) != 1 || errs[0].(map[string]any)["rule"] != process.RuleReviewToken || errs[0].(map[string]any)["field"] != "review_token" {
		t.Fatalf("the pre-ACK token must be refused with exactly one %s error: %v", process.RuleReviewToken, errs)
	}
	if refused["review_token"] != post["review_token"] {
		t.Fatalf("the refusal carries the current token: %v", refused["review_token"])
	}
	if res[4]["status"] != "exited" {
		t.Fatalf("the post-ACK token with the same evidence must exit: %v", res[4])
	}
	if got := h.result(pid); got["message"] != "done" {
		t.Fatalf("result %v", got)
	}
}
