package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/libos/libos/llm"
	"github.com/libos/libos/tools/schema"
)

// model is the fuzzing model: an llm.Provider whose every answer is drawn
// from the run's generator. It reads the request the way a model would (the
// tool table with its schemas, the tool results so far) and answers with a
// batch of calls: valid ones, invalid arguments, unknown tools, calls
// without authority, batch-ending calls in the middle. While the call is in
// flight it may make the Host act (Human messages, interrupts, checkpoints)
// or crash the runtime.
type model struct{ w *world }

func (m *model) Name() string { return "sim" }

func (m *model) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	w := m.w
	w.mu.Lock()
	if w.dead {
		w.mu.Unlock()
		return llm.Response{}, &llm.CallError{Settlement: llm.SettlementNotStarted, Err: errors.New("the simulated runtime crashed")}
	}
	w.calls++
	n := w.calls
	// Every request is one a server accepts, whatever the replies before it
	// were (the kernel mends them: llm.Response.Mend).
	if err := req.Validate(); err != nil {
		w.failLocked("request-valid", fmt.Sprintf("pid %d turn %d: %v", req.Process.PID, req.Turn, err))
	}
	view := readContext(&req)
	w.observeShown(&req, view)
	var fault error
	if w.sched.providerFault > 0 && w.chance(w.sched.providerFault) {
		fault = w.providerFault()
	}
	resp := w.respond(&req, view)
	pid := req.Process.PID
	delete(w.retried, pid) // the Host's resume reached it
	// A Host's provider: it panics now and then, or replies as a careless
	// custom provider would (the kernel mends the reply).
	panics := fault == nil && w.hchance(w.hsched.providerPanic)
	// The Host stops the run while the call is in flight, now and then.
	stop := fault == nil && !panics && w.hchance(w.hsched.stop/3)
	mangled := ""
	if fault == nil && !panics && w.hchance(w.hsched.mangle) {
		mangled = w.mangle(&resp, pid)
		w.result.Mangled++
	}
	var actions []func()
	if w.chance(0.12) {
		to := req.Process.PID
		if w.chance(0.3) && len(w.know.pids) > 0 {
			to = w.know.pids[w.intn(len(w.know.pids))]
		}
		interrupt := w.chance(0.35)
		actions = append(actions, func() { w.postHuman(to, interrupt) })
	}
	if w.chance(0.04) && len(w.know.pids) > 0 {
		pid := w.know.pids[w.intn(len(w.know.pids))]
		actions = append(actions, func() {
			cp, err := w.rt.CreateCheckpoint(pid)
			w.tracef("in flight: host checkpoint create %d -> %s %v", pid, cp.ID, errString(err))
		})
	}
	if w.chance(0.03) && len(w.know.checkpoints) > 0 {
		id := w.know.checkpoints[w.intn(len(w.know.checkpoints))]
		fork := w.chance(0.4)
		actions = append(actions, func() {
			if fork {
				rep, err := w.rt.ForkCheckpoint(id)
				w.tracef("in flight: host checkpoint fork %s -> root %d: %v", id, rep.RootPID, errString(err))
				return
			}
			rep, err := w.restore(id)
			w.tracef("in flight: host checkpoint restore %s -> restored %v killed %v: %v", id, rep.Restored, rep.Killed, errString(err))
		})
	}
	crash := w.sched.crashAtCall(n)
	line := fmt.Sprintf("model pid %d turn %d call %d: %s%s", req.Process.PID, req.Turn, n, responseLine(resp), faultLine(fault))
	switch {
	case panics:
		line += " PROVIDER PANIC"
	case mangled != "":
		line += fmt.Sprintf(" MANGLED (%s) usage %+v", mangled, resp.Usage)
	}
	w.traceLocked(line)
	w.mu.Unlock()

	for _, act := range actions {
		if w.isDead() {
			break
		}
		act()
	}
	if crash {
		w.mu.Lock()
		w.crashLocked("provider call in flight")
		w.mu.Unlock()
	}
	if w.isDead() {
		return llm.Response{}, &llm.CallError{Settlement: llm.SettlementUnknown, Err: errors.New("the simulated runtime crashed during the call")}
	}
	if fault != nil {
		return llm.Response{}, fault
	}
	if stop {
		// A provider that honours its context gives up with its error; one
		// that does not answers anyway.
		w.mu.Lock()
		stopped := w.stopLocked(fmt.Sprintf("provider call %d of pid %d in flight", n, pid))
		giveUp := w.hrng.IntN(2) == 0
		w.mu.Unlock()
		if stopped && giveUp {
			return llm.Response{}, &llm.CallError{Settlement: llm.SettlementUnknown, Err: fmt.Errorf("sim: the call gave up: %w", context.Cause(ctx))}
		}
	}
	if panics {
		w.mu.Lock()
		w.result.ProviderPanics++
		w.panicked[pid] = panicNote{incarnation: w.incarnation, restores: w.know.restores, run: w.runs}
		w.mu.Unlock()
		panic(fmt.Sprintf("sim: the provider panics in call %d", n))
	}
	return resp, nil
}

func (w *world) providerFault() error {
	switch w.intn(4) {
	case 0:
		return &llm.CallError{Settlement: llm.SettlementNotStarted, Err: errors.New("sim: connection refused")}
	case 1:
		return &llm.CallError{Settlement: llm.SettlementRejected, Permanent: true, StatusCode: 400, Attempts: 1, Err: errors.New("sim: rejected")}
	case 2:
		return &llm.CallError{Settlement: llm.SettlementUnknown, Attempts: 2, Err: errors.New("sim: connection reset after send")}
	}
	return errors.New("sim: an error that is not a CallError")
}

func faultLine(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf(" PROVIDER FAULT %s (%v)", llm.SettlementOf(err), err)
}

func responseLine(r llm.Response) string {
	if len(r.ToolCalls) == 0 {
		return fmt.Sprintf("text %q", r.Text)
	}
	var parts []string
	for _, c := range r.ToolCalls {
		parts = append(parts, fmt.Sprintf("%s %s(%s)", c.ID, c.Name, c.Arguments))
	}
	return strings.Join(parts, "; ")
}

// ctxView is what a model reads out of its request.
type ctxView struct {
	calls    map[string]llm.ToolCall // by id
	results  []toolResult            // in order
	children []int64
	objects  []objRef
	review   map[string]any // the latest completion_review
	active   []string       // active skills
	tools    map[string]*schema.Schema
	names    []string // tool names, sorted as the request lists them
}

type toolResult struct {
	id, name, content string
	data              map[string]any
}

type objRef struct {
	oid     string
	version float64
}

func readContext(req *llm.Request) *ctxView {
	v := &ctxView{calls: map[string]llm.ToolCall{}, tools: map[string]*schema.Schema{}}
	for _, t := range req.Tools {
		var s schema.Schema
		if json.Unmarshal(t.Parameters, &s) == nil {
			v.tools[t.Name] = &s
			v.names = append(v.names, t.Name)
		}
	}
	for _, msg := range req.Messages {
		switch msg.Role {
		case llm.RoleAssistant:
			for _, c := range msg.ToolCalls {
				v.calls[c.ID] = c
			}
		case llm.RoleTool:
			r := toolResult{id: msg.ToolCallID, name: msg.Name, content: msg.Content}
			_ = json.Unmarshal([]byte(msg.Content), &r.data)
			v.results = append(v.results, r)
			v.learn(r)
		}
	}
	return v
}

func (v *ctxView) learn(r toolResult) {
	if r.data == nil || r.data["ok"] != true {
		if cr, ok := r.data["completion_review"].(map[string]any); ok {
			v.review = cr
		}
		return
	}
	switch r.name {
	case "spawn_child_process":
		if pid, ok := r.data["pid"].(float64); ok && !slices.Contains(v.children, int64(pid)) {
			v.children = append(v.children, int64(pid))
		}
	case "create_object", "write_object", "read_object":
		if oid, ok := r.data["oid"].(string); ok {
			ver, _ := r.data["version"].(float64)
			v.objects = append(v.objects, objRef{oid, ver})
		}
	case "activate_skill":
		if c, ok := v.calls[r.id]; ok {
			var a struct{ Name string }
			if json.Unmarshal(c.Arguments, &a) == nil && !slices.Contains(v.active, a.Name) {
				v.active = append(v.active, a.Name)
			}
		}
	case "unload_skill":
		if c, ok := v.calls[r.id]; ok {
			var a struct{ Name string }
			if json.Unmarshal(c.Arguments, &a) == nil {
				v.active = slices.DeleteFunc(v.active, func(s string) bool { return s == a.Name })
			}
		}
	case "process_exit":
		if cr, ok := r.data["completion_review"].(map[string]any); ok {
			v.review = cr
		}
	}
}

// observeShown records the tool results the process is shown: a call must
// never be answered twice with different results, and what a process was
// shown must be durable. It also learns acknowledged sends and ACKs.
func (w *world) observeShown(req *llm.Request, v *ctxView) {
	pid := req.Process.PID
	seen := w.shown[pid]
	if seen == nil {
		seen = map[string]string{}
		w.shown[pid] = seen
	}
	for _, r := range v.results {
		if prev, ok := seen[r.id]; ok {
			if prev != r.content && !w.know.forked[pid] && (w.know.restores == 0 || deniesEffect(r.name, prev, r.content)) {
				w.failLocked("answered-once", fmt.Sprintf("pid %d was shown two results for call %s (%s):\n  %s\n  %s", pid, r.id, r.name, prev, r.content))
			}
			continue
		}
		seen[r.id] = r.content
		w.shownOrder = append(w.shownOrder, shownResult{pid: pid, id: r.id, name: r.name, content: r.content})
		if !w.know.forked[pid] {
			w.checkAnswerShownLocked(pid, r)
		}
		if r.data == nil || r.data["ok"] != true {
			continue
		}
		switch r.name {
		case "send_process_message":
			id, _ := r.data["message_id"].(string)
			to, _ := r.data["recipient_pid"].(float64)
			var a struct {
				Body string `json:"body"`
			}
			if c, ok := v.calls[r.id]; ok {
				_ = json.Unmarshal(c.Arguments, &a)
			}
			if id != "" && !w.know.forked[pid] {
				w.know.post(id, postedMessage{to: int64(to), sender: fmt.Sprintf("process:%d", pid), body: a.Body})
			}
		case "read_process_messages", "receive_process_messages":
			if w.know.forked[pid] {
				continue // a fork's context repeats its original's reads
			}
			ids, _ := r.data["acked_message_ids"].([]any)
			for _, x := range ids {
				id, _ := x.(string)
				key := fmt.Sprintf("%d/%s", pid, r.id)
				if prev, ok := w.ackedBy[id]; ok && prev != key && w.know.restores == 0 {
					w.failLocked("acked-once", fmt.Sprintf("message %s was acked by call %s and again by call %s", id, prev, key))
				}
				w.ackedBy[id] = key
			}
		}
	}
}

// deniesEffect reports whether a later answer to an effect call says its
// effect never started although an earlier one showed it had. A restore
// takes a process back in time, so it may answer a call again (a sleep
// pending at the checkpoint runs again); it may never unsay an effect.
func deniesEffect(tool, before, after string) bool {
	if !isEffectTool(tool) {
		return false
	}
	var a, b struct {
		OK            bool  `json:"ok"`
		EffectStarted *bool `json:"effect_started"`
	}
	_ = json.Unmarshal([]byte(before), &a)
	_ = json.Unmarshal([]byte(after), &b)
	started := a.OK || (a.EffectStarted != nil && *a.EffectStarted)
	return started && b.EffectStarted != nil && !*b.EffectStarted
}

// respond draws the answer to one request.
func (w *world) respond(req *llm.Request, v *ctxView) llm.Response {
	resp := llm.Response{Model: "sim", FinishReason: "tool_calls"}
	var calls []llm.ToolCall
	add := func(name string, args any) {
		w.ids++
		id := fmt.Sprintf("c%d", w.ids)
		if name == "checkpoint_restore" {
			w.know.restores++ // counted as it may begin (knowledge.restores)
		}
		var raw json.RawMessage
		switch a := args.(type) {
		case json.RawMessage:
			raw = a
		case map[string]any:
			if a["line"] == effectLinePending {
				// The effect's line names its process and call, so the
				// effect log can be matched with the tool records.
				a["line"] = fmt.Sprintf("%d %s", req.Process.PID, id)
			}
			raw, _ = json.Marshal(a)
		default:
			raw, _ = json.Marshal(a)
		}
		calls = append(calls, llm.ToolCall{ID: id, Name: name, Arguments: raw})
	}
	switch {
	case req.Process.Image == "context-compressor:v0":
		w.compressorTurn(v, add)
	case w.calls > w.cfg.MaxCalls || req.Turn >= 14:
		w.exitTurn(req, v, add, true)
	case w.chance(0.04):
		resp.Text, resp.FinishReason = "thinking "+w.unique(), "stop"
	default:
		exitP := min(0.02+0.04*float64(req.Turn), 0.85)
		n := 1 + w.intn(4)
		exitAt := -1
		if w.chance(exitP) {
			exitAt = w.intn(n)
		}
		for i := 0; i < n; i++ {
			if i == exitAt {
				w.exitTurn(req, v, add, false)
				continue
			}
			w.oneCall(req, v, add)
		}
	}
	resp.ToolCalls = calls
	// Usage stays below what the kernel reserved, so a token overrun is
	// never the model's doing: the prompt is counted at half its estimate.
	prompt := 0
	for _, m := range req.Messages {
		prompt += estimator{}.Estimate(m.Content)
	}
	out := 0
	for _, c := range calls {
		out += (len(c.Name) + len(c.Arguments) + 3) / 4
	}
	resp.Usage = llm.Usage{PromptTokens: prompt / 2, CompletionTokens: min(out, 1000)}
	return resp
}

// compressorTurn answers a context compressor: a valid summary, mostly.
func (w *world) compressorTurn(v *ctxView, add func(string, any)) {
	summary := map[string]any{
		"goal": "simulated goal", "constraints": []string{}, "user_preferences": []string{},
		"completed": []string{"work " + w.unique()}, "pending": []string{}, "key_references": []string{},
		"recent_decisions": []string{}, "risks": []string{}, "uncertainties": []string{}, "next_steps": []string{"continue"},
	}
	switch r := w.intn(20); {
	case r == 0:
		delete(summary, "goal")
	case r == 1:
		add("get_current_time", map[string]any{})
	}
	add("process_exit", map[string]any{"payload": summary})
}

// exitTurn ends the process: a gated image goes through its completion
// review (probe, read what is unread, submit); alone means the batch holds
// nothing else.
func (w *world) exitTurn(req *llm.Request, v *ctxView, add func(string, any), alone bool) {
	if req.Process.Image != "coding:v0" {
		switch w.intn(4) {
		case 0:
			add("process_exit", map[string]any{"message": "done " + w.unique()})
		case 1:
			if len(v.objects) > 0 && w.chance(0.5) {
				add("process_exit", map[string]any{"result_oid": v.objects[w.intn(len(v.objects))].oid})
			} else {
				add("process_exit", map[string]any{"result_oid": "no-such-object"})
			}
		default:
			add("process_exit", map[string]any{"payload": map[string]any{"done": true, "n": w.intn(100)}})
		}
		return
	}
	r := v.review
	if r == nil || (!alone && w.chance(0.3)) {
		add("process_exit", map[string]any{})
		return
	}
	unread := strList(r["unread_human_message_ids"])
	if len(unread) > 0 {
		add("read_process_messages", map[string]any{"message_ids": unread})
		add("process_exit", map[string]any{})
		return
	}
	acked := strList(r["acknowledged_human_message_ids"])
	refs := strList(r["expected_source_refs"])
	observed := strList(r["observed_successful_tool_calls"])
	goal, _ := r["goal"].(map[string]any)
	goalOID, _ := goal["oid"].(string)
	check := map[string]any{"requirement": "the simulated goal", "source_refs": refs, "status": "completed",
		"evidence_tool_calls": first(observed), "evidence_summary": "done"}
	if len(observed) == 0 {
		check["status"], check["evidence_summary"] = "blocked", "nothing could be observed"
	}
	evidence := map[string]any{"goal_oid": goalOID, "reviewed_message_ids": acked,
		"acceptance_checks": []any{check}, "final_verification": first(observed)}
	token, _ := r["review_token"].(string)
	switch w.intn(8) {
	case 0:
		token = "stale-" + w.unique()
	case 1:
		evidence["reviewed_message_ids"] = []string{"msg_0_0"}
	case 2:
		add("get_current_time", map[string]any{})
		add("process_exit", map[string]any{})
		return
	}
	if acked == nil {
		evidence["reviewed_message_ids"] = []string{}
	}
	add("process_exit", map[string]any{"review_token": token, "completion_evidence": evidence, "payload": map[string]any{"done": true}})
}

func first(s []string) []string {
	if len(s) == 0 {
		return []string{}
	}
	return s[:1]
}

func strList(x any) []string {
	list, _ := x.([]any)
	var out []string
	for _, e := range list {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// effectLinePending marks an effect line that add fills in with the call id.
const effectLinePending = "\x00pending"

// catalogOnly are tools that exist but that a table may not show: calling
// them is a call of a tool the process was not given.
var catalogOnly = []string{effectTool, "checkpoint_restore", "spawn_child_process", "activate_skill"}

// oneCall draws one call that is not an exit.
func (w *world) oneCall(req *llm.Request, v *ctxView, add func(string, any)) {
	switch r := w.intn(100); {
	case r < 6:
		add([]string{"no_such_tool", "rm_rf", "Sleep"}[w.intn(3)], map[string]any{})
		return
	case r < 16:
		if len(v.names) > 0 {
			name := v.names[w.intn(len(v.names))]
			add(name, w.invalidArgs(name, w.validArgs(req, v, name)))
			return
		}
	case r < 21:
		name := catalogOnly[w.intn(len(catalogOnly))]
		if _, shown := v.tools[name]; !shown {
			add(name, w.validArgs(req, v, name))
			return
		}
	}
	if len(v.names) == 0 {
		add("process_exit", map[string]any{})
		return
	}
	// The effect and the skill that shows it are drawn often: a batch
	// mixing a refused call with an effect is where defects hide.
	if _, ok := v.tools[effectTool]; ok && w.chance(0.35) {
		add(effectTool, w.validArgs(req, v, effectTool))
		return
	}
	if w.hsched.hostCalls > 0 && w.chance(w.hsched.hostCalls) {
		// A Host's tool, shown by base:v0 (hostImages).
		name := []string{hostCallTool, hostEffectTool, hostWaitTool}[w.intn(3)]
		if _, ok := v.tools[name]; ok {
			add(name, w.validArgs(req, v, name))
			return
		}
	}
	if _, ok := v.tools["activate_skill"]; ok && !slices.Contains(v.active, "sim-effect") && w.chance(0.4) {
		add("activate_skill", map[string]any{"name": "sim-effect"})
		return
	}
	var name string
	for {
		name = v.names[w.intn(len(v.names))]
		if name != "process_exit" {
			break
		}
		if len(v.names) == 1 {
			add("process_exit", map[string]any{})
			return
		}
	}
	add(name, w.validArgs(req, v, name))
}

// childGrantPool is what a model may hand a child; some of it is wider
// than what the parent holds, which the kernel must refuse.
var childGrantPool = []map[string]any{
	{"resource": "clock:now", "rights": []string{"read"}},
	{"resource": "clock:sleep", "rights": []string{"read"}},
	{"resource": "process:spawn", "rights": []string{"write"}},
	{"resource": "process:spawn", "rights": []string{"write"}, "uses_remaining": 1},
	{"resource": "scope:sim-effect", "rights": []string{"execute"}},
	{"resource": "scope:sim-effect", "rights": []string{"execute"}, "effect": "deny"},
	{"resource": "checkpoint:process:*", "rights": []string{"read", "write"}},
	{"resource": "image:base:v0", "rights": []string{"read"}},
	{"resource": "image:context-compressor:v0", "rights": []string{"read"}},
	{"resource": "object_namespace:proc-*", "rights": []string{"read", "write"}},
}

func (w *world) pickPID(req *llm.Request, v *ctxView) int64 {
	switch r := w.intn(10); {
	case r < 6 && len(v.children) > 0:
		return v.children[w.intn(len(v.children))]
	case r < 7 && req.Process.ParentPID != 0:
		return req.Process.ParentPID
	case r < 8:
		return req.Process.PID
	case len(w.know.pids) > 0 && r < 9:
		return w.know.pids[w.intn(len(w.know.pids))]
	}
	return int64(1 + w.intn(40))
}

func (w *world) pickObject(v *ctxView) (string, float64) {
	if len(v.objects) == 0 || w.chance(0.1) {
		return "00000000-0000-4000-8000-000000000000", 1
	}
	o := v.objects[w.intn(len(v.objects))]
	return o.oid, o.version
}

// validArgs draws arguments the tool's schema accepts (authority and the
// state may still refuse them).
func (w *world) validArgs(req *llm.Request, v *ctxView, name string) map[string]any {
	pid := req.Process.PID
	switch name {
	case "get_current_time":
		return map[string]any{"timezone": []string{"UTC", "Asia/Tokyo", "Europe/Paris", "Mars/Olympus"}[w.intn(4)]}
	case "sleep":
		// Never 0: a timer already due while a quantum runs would race the
		// scheduler's own commit against the worker's.
		return map[string]any{"seconds": 1 + w.intn(20)}
	case "compact_process_context":
		return map[string]any{"target_tokens": 256, "preserve_recent_entries": w.intn(4), "max_chunks": 1 + w.intn(3), "force": w.chance(0.7)}
	case "spawn_child_process":
		images := []string{"base:v0", "base:v0", "base:v0", "coding:v0", "skilled:v0", "context-compressor:v0", "nope:v9"}
		args := map[string]any{"image": images[w.intn(len(images))], "goal": "child goal " + w.unique()}
		var caps []any
		for _, g := range childGrantPool {
			if w.chance(0.3) {
				caps = append(caps, g)
			}
		}
		if caps != nil {
			args["capabilities"] = caps
		}
		if w.chance(0.6) {
			args["budget"] = map[string]any{"tool_calls": 2 + w.intn(14), "llm_calls": 2 + w.intn(7), "children": 1 + w.intn(2)}
		}
		return args
	case "wait_child_process":
		return map[string]any{"child_pid": w.pickPID(req, v), "block": w.chance(0.8)}
	case "signal_child_process":
		return map[string]any{"child_pid": w.pickPID(req, v), "signal": []string{"kill", "pause", "resume", "resume"}[w.intn(4)]}
	case "send_process_message":
		args := map[string]any{"recipient_pid": w.pickPID(req, v), "body": fmt.Sprintf("note from %d %s", pid, w.unique())}
		if w.chance(0.2) {
			args["kind"] = "interrupt"
		}
		return args
	case "read_process_messages", "receive_process_messages":
		args := map[string]any{}
		switch w.intn(4) {
		case 0:
			args["sender"] = "human:sim"
		case 1:
			if req.Process.ParentPID != 0 {
				args["sender"] = fmt.Sprintf("process:%d", req.Process.ParentPID)
			}
		case 2:
			args["ack"] = false
		}
		if name == "receive_process_messages" && w.chance(0.3) {
			args["block"] = false
		}
		return args
	case "create_object":
		args := map[string]any{"name": "obj-" + w.unique(), "payload": map[string]any{"n": w.intn(1000)}, "durable": w.chance(0.5)}
		if w.chance(0.15) {
			args["namespace"] = fmt.Sprintf("proc-%d", w.pickPID(req, v))
		}
		return args
	case "read_object":
		oid, _ := w.pickObject(v)
		return map[string]any{"oid": oid}
	case "write_object":
		oid, ver := w.pickObject(v)
		if w.chance(0.2) {
			ver++
		}
		return map[string]any{"oid": oid, "expected_version": max(1, int(ver)), "payload": map[string]any{"w": w.unique()}}
	case "list_objects":
		if w.chance(0.3) {
			return map[string]any{"namespace": fmt.Sprintf("proc-%d", w.pickPID(req, v))}
		}
		return map[string]any{}
	case "checkpoint_create", "checkpoint_list":
		if w.chance(0.3) {
			return map[string]any{"pid": w.pickPID(req, v)}
		}
		return map[string]any{}
	case "checkpoint_restore", "checkpoint_fork":
		id := "cp-999"
		if len(w.know.checkpoints) > 0 && w.chance(0.85) {
			id = w.know.checkpoints[w.intn(len(w.know.checkpoints))]
		}
		return map[string]any{"checkpoint_id": id}
	case "discover_skills":
		return map[string]any{}
	case "activate_skill", "unload_skill":
		return map[string]any{"name": []string{"sim-effect", "sim-effect", "runtime-session", "nope"}[w.intn(4)]}
	case "read_skill_resource":
		return map[string]any{"name": "sim-effect", "path": []string{"SKILL.md", "skill.yaml", "../../../etc/passwd"}[w.intn(3)]}
	case effectTool:
		return map[string]any{"line": effectLinePending}
	case hostCallTool, hostEffectTool, hostWaitTool:
		return w.hostToolArgs(name)
	}
	if s, ok := v.tools[name]; ok {
		if m, ok := w.fromSchema(s, 0).(map[string]any); ok {
			return m
		}
	}
	return map[string]any{}
}

// invalidArgs breaks valid arguments so the schema must refuse them.
func (w *world) invalidArgs(name string, args map[string]any) json.RawMessage {
	switch w.intn(5) {
	case 0:
		args["bogus_field"] = true
	case 1:
		return json.RawMessage(`[1,2,3]`)
	case 2:
		for k := range args {
			args[k] = []any{"wrong", "type"}
		}
		if len(args) == 0 {
			args["x"] = 1
		}
	case 3:
		switch name {
		case "sleep":
			args["seconds"] = -1 - w.intn(5)
		case "wait_child_process", "signal_child_process":
			args["child_pid"] = 0
		default:
			args["bogus_field"] = "x"
		}
	default:
		return json.RawMessage(`null`)
	}
	b, _ := json.Marshal(args)
	return b
}

// fromSchema draws a value the schema accepts, for tools the model has no
// special knowledge of.
func (w *world) fromSchema(s *schema.Schema, depth int) any {
	if len(s.Enum) > 0 {
		return s.Enum[w.intn(len(s.Enum))]
	}
	switch s.Type {
	case "object":
		out := map[string]any{}
		var keys []string
		for k := range s.Properties {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if slices.Contains(s.Required, k) || (depth < 2 && w.chance(0.3)) {
				out[k] = w.fromSchema(s.Properties[k], depth+1)
			}
		}
		return out
	case "string":
		n := 3
		if s.MinLength != nil {
			n = max(n, *s.MinLength)
		}
		if s.MaxLength != nil {
			n = min(n, *s.MaxLength)
		}
		return strings.Repeat("s", n)
	case "integer", "number":
		lo, hi := 0.0, 10.0
		if s.Minimum != nil {
			lo = *s.Minimum
		}
		if s.Maximum != nil {
			hi = *s.Maximum
		}
		if hi < lo {
			hi = lo
		}
		return int(lo) + w.intn(int(hi-lo)+1)
	case "boolean":
		return w.chance(0.5)
	case "array":
		if s.Items == nil || depth >= 2 {
			return []any{}
		}
		n := 0
		if s.MinItems != nil {
			n = *s.MinItems
		}
		out := make([]any, 0, n)
		for i := 0; i < n; i++ {
			out = append(out, w.fromSchema(s.Items, depth+1))
		}
		return out
	}
	return nil
}
