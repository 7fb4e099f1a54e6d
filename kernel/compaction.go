package kernel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
)

const (
	compressorImage   = "context-compressor:v0"
	jobKind           = "context_compaction_job"
	jobNamePrefix     = "context_compaction_job:"
	pressureThreshold = 0.8
	compactToolName   = "compact_process_context"
)

// summaryKeys are exactly the keys of a rolling summary.
var summaryKeys = []string{"goal", "constraints", "user_preferences", "completed", "pending", "key_references",
	"recent_decisions", "risks", "uncertainties", "next_steps"}

// compactionJob is the durable state of one compaction, kept in the
// process's job Object.
type compactionJob struct {
	State     string `json:"state"` // running, completed, failed
	Automatic bool   `json:"automatic,omitempty"`
	// Approved says a Human approved the call that started the job: an ask
	// grant allows each of its stages, as it allowed the call.
	Approved       bool                    `json:"approved,omitempty"`
	Request        tools.CompactionRequest `json:"request"`
	SourceVersion  uint64                  `json:"source_version"`
	SourceTokens   int                     `json:"source_tokens"`
	Cut            int                     `json:"cut"` // leading context entries the summary replaces
	Preserved      int                     `json:"preserved_recent_entries"`
	Entries        []Entry                 `json:"entries"` // copy of the entries being compacted
	Chunks         [][2]int                `json:"plan"`    // [start, end) into Entries, one per stage
	Stage          int                     `json:"stage"`
	CurrentChild   int64                   `json:"current_child_pid"`
	CompressorPIDs []int64                 `json:"compressor_pids"`
	Summary        json.RawMessage         `json:"rolling_summary,omitempty"`
	Error          string                  `json:"error,omitempty"`
}

// planChunks splits entries into at most maxChunks contiguous chunks of
// roughly equal token weight. Pure.
func planChunks(entries []Entry, maxChunks int) [][2]int {
	if len(entries) == 0 || maxChunks <= 0 {
		return nil
	}
	total := 0
	for _, e := range entries {
		total += e.Tokens
	}
	per := (total + maxChunks - 1) / maxChunks
	var chunks [][2]int
	start, acc := 0, 0
	for i, e := range entries {
		acc += e.Tokens
		last := len(chunks) == maxChunks-1
		if acc >= per && !last && i < len(entries)-1 {
			chunks = append(chunks, [2]int{start, i + 1})
			start, acc = i+1, 0
		}
	}
	return append(chunks, [2]int{start, len(entries)})
}

// tailCut returns where the preserved tail of entries starts: at most
// preserve entries are kept, and the tail never begins with a tool result
// whose call would be summarized away. Pure.
func tailCut(entries []Entry, preserve int) int {
	cut := len(entries) - preserve
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && cut < len(entries) && entries[cut].Role == llm.RoleTool {
		cut--
	}
	return cut
}

// validateSummary checks a compressor's exit payload: an object with exactly
// the summary keys, each a string or an array of strings, not all empty. It
// returns the canonical encoding. Pure.
func validateSummary(raw []byte) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var m map[string]json.RawMessage
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, errors.New("summary: must be a JSON object")
	}
	known := map[string]bool{}
	for _, k := range summaryKeys {
		known[k] = true
		if _, ok := m[k]; !ok {
			return nil, fmt.Errorf("summary.%s: required", k)
		}
	}
	nonEmpty := false
	out := map[string]any{}
	for k, v := range m {
		if !known[k] {
			return nil, fmt.Errorf("summary.%s: unknown key (allowed: %s)", k, strings.Join(summaryKeys, ", "))
		}
		// null decodes into a string or a list without an error, so each
		// value's JSON type is read from its first byte.
		bad := fmt.Errorf("summary.%s: must be a string or an array of strings", k)
		v = bytes.TrimSpace(v)
		if len(v) > 0 && v[0] == '"' {
			var s string
			if json.Unmarshal(v, &s) != nil {
				return nil, bad
			}
			nonEmpty = nonEmpty || strings.TrimSpace(s) != ""
			out[k] = s
			continue
		}
		var items []json.RawMessage
		if len(v) == 0 || v[0] != '[' || json.Unmarshal(v, &items) != nil {
			return nil, bad
		}
		list := make([]string, len(items))
		for i, item := range items {
			item = bytes.TrimSpace(item)
			if len(item) == 0 || item[0] != '"' || json.Unmarshal(item, &list[i]) != nil {
				return nil, fmt.Errorf("summary.%s[%d]: must be a string", k, i)
			}
			nonEmpty = nonEmpty || strings.TrimSpace(list[i]) != ""
		}
		out[k] = list
	}
	if !nonEmpty {
		return nil, errors.New("summary: every key is empty")
	}
	b, err := json.Marshal(out)
	return b, err
}

// compressorGoal is the goal of the compressor of one stage.
func compressorGoal(job *compactionJob, stage int) string {
	ch := job.Chunks[stage]
	type item struct {
		Role      llm.Role       `json:"role"`
		Kind      string         `json:"kind,omitempty"`
		Content   string         `json:"content,omitempty"`
		ToolCalls []llm.ToolCall `json:"tool_calls,omitempty"`
		Tool      string         `json:"tool,omitempty"`
	}
	items := make([]item, 0, ch[1]-ch[0])
	for _, e := range job.Entries[ch[0]:ch[1]] {
		items = append(items, item{Role: e.Role, Kind: e.Kind, Content: e.Content, ToolCalls: e.ToolCalls, Tool: e.Name})
	}
	var prev any
	if len(job.Summary) > 0 {
		prev = job.Summary
	}
	body, _ := json.MarshalIndent(map[string]any{
		"stage": stage + 1, "stages": len(job.Chunks), "previous_summary": prev, "entries": items,
	}, "", "  ")
	return fmt.Sprintf("Compress stage %d of %d of another process's LLM context into a new rolling summary that merges previous_summary with these entries. "+
		"Aim for a summary of about %d tokens at most (the target the compaction was asked for; a goal, not a hard limit). "+
		"Exit with payload = an object with exactly the keys %s.\n\n%s", stage+1, len(job.Chunks), job.Request.TargetTokens, strings.Join(summaryKeys, ", "), body)
}

func jobName(pid int64) string { return fmt.Sprintf("%s%d", jobNamePrefix, pid) }

func loadJob(tx *txn, r *procRecord) (objects.Meta, *compactionJob, error) {
	meta, err := tx.Lookup(r.Namespace, jobName(r.PID))
	if err != nil {
		return meta, nil, err
	}
	if meta.Kind != jobKind {
		return meta, nil, fmt.Errorf("compaction job of pid %d: object %s under the job's name is of kind %q, not %s", r.PID, meta.OID, meta.Kind, jobKind)
	}
	_, payload, err := tx.Read(meta.OID)
	if err != nil {
		return meta, nil, fmt.Errorf("compaction job of pid %d: %w", r.PID, err)
	}
	var job compactionJob
	if err := json.Unmarshal(payload, &job); err != nil {
		return meta, nil, fmt.Errorf("decode compaction job of pid %d: %w", r.PID, err)
	}
	return meta, &job, nil
}

// saveJob writes the job Object (durable: a pending compaction survives reopen).
func saveJob(tx *txn, r *procRecord, job *compactionJob) (objects.Meta, error) {
	payload, err := json.Marshal(job)
	if err != nil {
		return objects.Meta{}, err
	}
	meta, err := tx.Lookup(r.Namespace, jobName(r.PID))
	switch {
	case errors.Is(err, objects.ErrNotFound):
		return tx.Create(objects.CreateSpec{Namespace: r.Namespace, Name: jobName(r.PID), Kind: jobKind,
			Owner: fmt.Sprint(r.PID), Tier: objects.TierDurable, Payload: payload})
	case err != nil:
		return objects.Meta{}, err
	case meta.Kind != jobKind:
		return objects.Meta{}, fmt.Errorf("compaction job of pid %d: object %s under the job's name is of kind %q, not %s", r.PID, meta.OID, meta.Kind, jobKind)
	}
	return tx.Write(meta.OID, meta.Version, objects.WriteSpec{Payload: payload})
}

// startCompaction is the whole decision of a compaction request: the
// no-op, the authority and budget checks, the plan, the job and the first
// compressor. callID is the calling tool call ("" for automatic maintenance).
func (k *Runtime) startCompaction(tx *txn, r *procRecord, c *llmContext, req tools.CompactionRequest, callID string) (tools.Outcome, error) {
	im, err := k.image(r.Image)
	if err != nil {
		return tools.Outcome{}, err
	}
	if !im.Context.Object {
		return tools.Outcome{}, tools.Errorf(tools.CodeNotFound, "this process has no LLM context Object (its prompt has no %q heading)", contextHeading)
	}
	// A Human's approval of the call covers every check of the compaction
	// it starts, its later stages included (compactionJob.Approved).
	approved := callID != "" && r.ApprovedCall == callID
	if _, err := k.check(tx, r, approved, authority.CompactionSource, authority.Params{OID: c.meta.OID, Namespace: c.meta.Namespace}); err != nil {
		return tools.Outcome{}, err
	}
	source := compactionSource(c, callID)
	cut := tailCut(source, req.PreserveRecentEntries)
	if !req.Force && c.tokens < req.TargetTokens {
		// The call's own result is written with this commit, as a new
		// version of the context: that is the version a read-back finds,
		// unchanged by the compaction.
		written := c.meta.Version + 1
		return tools.Outcome{Result: map[string]any{
			"compacted": false, "reason": "context_under_target", "context_oid": c.meta.OID,
			"old_version": written, "new_version": written, "compressor_pids": []int64{},
			"source_tokens": c.tokens, "compacted_tokens": c.tokens, "preserved_recent_entries": len(source) - cut,
		}}, nil
	}
	if _, err := k.check(tx, r, approved, authority.CompactionJob, authority.Params{Namespace: r.Namespace}); err != nil {
		return tools.Outcome{}, err
	}
	// A stage's authority is probed before anything exists, and required
	// (reserving one-shots) as each stage's compressor starts. An ask grant
	// holds a call for its Human; automatic maintenance has none to ask.
	if callID == "" {
		if err := k.permits(r, authority.CompactionStage, authority.Params{Image: compressorImage}); err != nil {
			return tools.Outcome{}, err
		}
	} else if err := k.probe(r, approved, authority.CompactionStage, authority.Params{Image: compressorImage}); err != nil {
		return tools.Outcome{}, err
	}
	switch {
	case len(source) == 0:
		return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "nothing to compact: the context holds no entries before this call")
	case cut == 0:
		return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments,
			"preserve_recent_entries: all %d entries before this call are in the preserved tail; nothing to compact", len(source))
	}
	job := &compactionJob{
		State: "running", Automatic: callID == "", Approved: approved, Request: req, SourceTokens: c.tokens, Cut: cut,
		Preserved: len(source) - cut, Entries: append([]Entry(nil), source[:cut]...), CompressorPIDs: []int64{},
	}
	job.Chunks = planChunks(job.Entries, req.MaxChunks)
	if err := checkStageBudgets(tx, r, int64(len(job.Chunks))); err != nil {
		return tools.Outcome{}, err
	}
	if _, old, err := loadJob(tx, r); err == nil && old.State == "running" {
		return tools.Outcome{}, tools.Errorf(tools.CodeConflict, "a compaction job of this process is already running")
	}
	child, err := k.spawnCompressor(tx, r, job)
	if err != nil {
		return tools.Outcome{}, err
	}
	if _, err := saveJob(tx, r, job); err != nil {
		return tools.Outcome{}, err
	}
	// The source version is the one this commit writes: record it once the
	// context is flushed.
	tx.onFlush(func() error {
		job.SourceVersion = c.meta.Version
		_, err := saveJob(tx, r, job)
		return err
	})
	return tools.Outcome{Block: &tools.Block{Wait: process.Wait{Kind: process.WaitChild, ChildPID: child}}}, nil
}

// compactionSource is what a compaction started by callID summarizes: the
// context before the calling turn, so the call's own assistant message and
// results stay after the summary (all of it for automatic maintenance).
func compactionSource(c *llmContext, callID string) []Entry {
	if callID != "" {
		for i := len(c.entries) - 1; i >= 0; i-- {
			if c.entries[i].Role == llm.RoleAssistant {
				return c.entries[:i]
			}
		}
	}
	return c.entries
}

// checkStageBudgets refuses up front what the budgets of r and its ancestors
// cannot carry for stages compressors, before any job or child exists.
func checkStageBudgets(tx *txn, r *procRecord, stages int64) error {
	recs, err := chain(tx, r)
	if err != nil {
		return err
	}
	accts := make([]capabilities.Account, len(recs))
	for i, rec := range recs {
		accts[i] = capabilities.Account{PID: rec.PID, Limits: rec.Limits, Used: rec.Used}
	}
	_, err = capabilities.Charge(accts, capabilities.Budget{Children: stages, LLMCalls: stages, ToolCalls: stages})
	return err
}

// spawnCompressor starts the compressor of the job's current stage. It holds
// nothing beyond its own namespace.
func (k *Runtime) spawnCompressor(tx *txn, r *procRecord, job *compactionJob) (pid int64, err error) {
	// A stage that cannot start takes nothing: a later stage runs in a
	// resume, whose writes stay, so a one-shot use reserved before a later
	// requirement refused would be spent on no compressor.
	sp, saved := tx.savepoint(), r.snapshot()
	defer func() {
		if err != nil {
			tx.rollbackTo(sp)
			r.restore(saved)
		}
	}()
	// Every stage needs the authority, as the first did.
	if _, err := k.check(tx, r, job.Approved, authority.CompactionStage, authority.Params{Image: compressorImage}); err != nil {
		return 0, err
	}
	im, err := k.image(compressorImage)
	if err != nil {
		return 0, err
	}
	if err := charge(tx, r, capabilities.Budget{Children: 1}); err != nil {
		return 0, err
	}
	if err := saveProc(tx, r); err != nil {
		return 0, err
	}
	child, err := k.createProcess(tx, im, r.PID, compressorGoal(job, job.Stage), nil, capabilities.Budget{})
	if err != nil {
		return 0, err
	}
	child.CompactionOf = r.PID
	if err := saveProc(tx, child); err != nil {
		return 0, err
	}
	if err := tx.Set(childKey(r.PID, child.PID), nil); err != nil {
		return 0, err
	}
	tx.markCommit(commitSpawn)
	job.CurrentChild = child.PID
	job.CompressorPIDs = append(job.CompressorPIDs, child.PID)
	return child.PID, nil
}

// resumeCompaction advances r's job after its compressor ended: a stage
// still running is waited on, a failed one fails the job, a finished one
// starts the next stage or, after the last, replaces the context.
func (k *Runtime) resumeCompaction(tx *txn, r *procRecord, c *llmContext) (tools.Outcome, error) {
	_, job, err := loadJob(tx, r)
	if err != nil {
		return tools.Outcome{}, err
	}
	if job.State != "running" {
		return tools.Outcome{}, tools.Errorf(tools.CodeFailed, "the compaction job is %s, not running", job.State)
	}
	fail := func(format string, a ...any) (tools.Outcome, error) { return failJob(tx, r, job, format, a...) }
	block := func(pid int64) (tools.Outcome, error) { return awaitCompressor(tx, r, job, pid) }
	child, err := loadProc(tx, job.CurrentChild)
	if err != nil {
		return tools.Outcome{}, err
	}
	switch child.State {
	case process.Exited:
	case process.Failed, process.Killed:
		return fail("compressor pid %d of stage %d ended %s: %s", child.PID, job.Stage+1, child.State, child.Reason)
	default:
		return block(child.PID)
	}
	var payload []byte
	if child.ResultOID != "" {
		_, payload, err = tx.Read(child.ResultOID)
	}
	if errors.Is(err, objects.ErrPayloadLost) {
		// The summary vanished with a reopen: run the stage again.
		pid, err := k.spawnCompressor(tx, r, job)
		if err != nil {
			return fail("rerun stage %d: %v", job.Stage+1, err)
		}
		return block(pid)
	}
	if err != nil {
		return tools.Outcome{}, err
	}
	summary, verr := validateSummary(payload)
	if verr != nil {
		return fail("compressor pid %d of stage %d: %v", child.PID, job.Stage+1, verr)
	}
	job.Summary = summary
	job.Stage++
	if job.Stage < len(job.Chunks) {
		pid, err := k.spawnCompressor(tx, r, job)
		if err != nil {
			return fail("stage %d: %v", job.Stage+1, err)
		}
		return block(pid)
	}
	return k.completeCompaction(tx, r, c, job)
}

// failJob records why r's job failed; the context stays as it was.
func failJob(tx *txn, r *procRecord, job *compactionJob, format string, a ...any) (tools.Outcome, error) {
	job.State, job.Error = "failed", fmt.Sprintf(format, a...)
	if _, err := saveJob(tx, r, job); err != nil {
		return tools.Outcome{}, err
	}
	return tools.Outcome{}, tools.Errorf(tools.CodeFailed, "compaction failed, the context is unchanged: %s", job.Error)
}

// releaseJob fails r's compaction job if it is still running: the pending
// action that drove it was answered without it (its Resume panicked, and
// what it did was rolled back), and a job left running would refuse every
// later compaction of r.
func releaseJob(tx *txn, r *procRecord, why error) error {
	_, job, err := loadJob(tx, r)
	switch {
	case errors.Is(err, objects.ErrNotFound):
		return nil
	case err != nil:
		return err
	case job.State != "running":
		return nil
	}
	job.State, job.Error = "failed", fmt.Sprintf("the tool resuming it failed: %v", why)
	_, err = saveJob(tx, r, job)
	return err
}

// awaitCompressor saves r's job and blocks r on the compressor pid.
func awaitCompressor(tx *txn, r *procRecord, job *compactionJob, pid int64) (tools.Outcome, error) {
	if _, err := saveJob(tx, r, job); err != nil {
		return tools.Outcome{}, err
	}
	return tools.Outcome{Block: &tools.Block{Wait: process.Wait{Kind: process.WaitChild, ChildPID: pid}}}, nil
}

// completeCompaction replaces the summarized prefix of r's context with the
// job's final summary, if the context is still the one the job copied.
func (k *Runtime) completeCompaction(tx *txn, r *procRecord, c *llmContext, job *compactionJob) (tools.Outcome, error) {
	if c.meta.Version != job.SourceVersion {
		return failJob(tx, r, job, "the context changed since source version %d (now %d)", job.SourceVersion, c.meta.Version)
	}
	// The version alone does not show a payload lost and rebuilt differently
	// (a reopen with retention off): the compacted prefix must be the one
	// the job copied.
	if job.Cut > len(c.entries) || !samePrefix(c.entries[:job.Cut], job.Entries) {
		return failJob(tx, r, job, "the context entries the job summarized are no longer the context's (its payload was lost or rebuilt since)")
	}
	oldVersion := c.meta.Version
	summaryEntry := Entry{Role: llm.RoleUser, Kind: "summary",
		Content: fmt.Sprintf("(context summary of %d earlier entries)\n%s", job.Cut, job.Summary)}
	summaryEntry.Tokens = k.entryTokens(&summaryEntry)
	replaced := 0
	for _, e := range job.Entries {
		replaced += e.Tokens
	}
	if summaryEntry.Tokens >= replaced {
		// A summary is the compressors' output: one that would grow the
		// context is refused as any invalid output is.
		return failJob(tx, r, job, "the summary (%d tokens) is not smaller than the %d entries it would replace (%d tokens)", summaryEntry.Tokens, job.Cut, replaced)
	}
	entries := append([]Entry{summaryEntry}, c.entries[job.Cut:]...)
	k.replaceContext(tx, r, c, entries)
	tx.markCommit(commitCompaction)
	job.State = "completed"
	if _, err := saveJob(tx, r, job); err != nil {
		return tools.Outcome{}, err
	}
	return tools.Outcome{Result: map[string]any{
		"compacted": true, "reason": "compacted", "context_oid": c.meta.OID,
		"old_version": oldVersion, "new_version": oldVersion + 1, "compressor_pids": job.CompressorPIDs,
		"source_tokens": job.SourceTokens, "compacted_tokens": c.tokens, "preserved_recent_entries": job.Preserved,
	}}, nil
}

// rebaseRestoredJob keeps the job of r, a process a checkpoint restore
// brought back, valid across the restore: the restore writes the context it
// captured at version captured as a new version with the same entries, so a
// running job copied from version captured now names the context's current
// version. A job copied from another version is left to fail as it would
// have; the entries are checked again when it completes (samePrefix).
func rebaseRestoredJob(tx *txn, r *procRecord, captured uint64) error {
	_, job, err := loadJob(tx, r)
	if errors.Is(err, objects.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if job.State != "running" || job.SourceVersion != captured {
		return nil
	}
	cur, err := tx.StatShared(r.ContextOID)
	if err != nil {
		return fmt.Errorf("context of pid %d: %w", r.PID, err)
	}
	job.SourceVersion = cur.Version
	_, err = saveJob(tx, r, job)
	return err
}

// samePrefix reports whether two entry lists are equal.
func samePrefix(a, b []Entry) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// compressorGoalFor rebuilds a compressor's lost goal from its parent's job.
func (k *Runtime) compressorGoalFor(tx *txn, child *procRecord) (string, error) {
	parent, err := loadProc(tx, child.CompactionOf)
	if err != nil {
		return "", err
	}
	_, job, err := loadJob(tx, parent)
	if err != nil {
		return "", err
	}
	if job.CurrentChild != child.PID || job.Stage >= len(job.Chunks) {
		return "", fmt.Errorf("pid %d is not the current compressor of pid %d", child.PID, parent.PID)
	}
	return compressorGoal(job, job.Stage), nil
}

// maintain runs before a provider call: past the pressure threshold, once
// per episode, it starts automatic compaction when the process holds execute
// on context:maintenance, and gives a pressure notice otherwise. It reports
// whether the process now waits for a compaction.
func (k *Runtime) maintain(tx *txn, r *procRecord, c *llmContext, projected, window int) (bool, error) {
	if float64(projected) < pressureThreshold*float64(window) {
		r.PressureEpisode = false
		return false, nil
	}
	if r.PressureEpisode {
		return false, nil
	}
	r.PressureEpisode = true
	reason := "it lacks execute on context:maintenance"
	if k.permits(r, authority.ContextMaintenance, authority.Params{}) == nil {
		sp := tx.savepoint()
		saved := r.snapshot()
		if err := k.require(tx, r, authority.ContextMaintenance, authority.Params{}); err != nil {
			return false, err
		}
		// Pressure is established, so the run is forced; the summary aims at
		// well under the threshold.
		// As few stages as the compressor's window allows: each costs a child
		// and its model calls.
		chunks := 1
		if cim, err := k.image(compressorImage); err == nil {
			chunks = maintenanceStages(c.tokens, cim.Context.WindowTokens)
		}
		req := tools.CompactionRequest{TargetTokens: max(256, window*2/5), PreserveRecentEntries: 8, MaxChunks: chunks, Force: true}
		out, err := k.startCompaction(tx, r, c, req, "")
		if err == nil && out.Block != nil {
			id := fmt.Sprintf("auto-%d", r.Turn)
			p := &pendingAction{ID: id, PID: r.PID, Tool: compactToolName, State: pendingStatePending, StartedAt: k.now()}
			if err := savePending(tx, p); err != nil {
				return false, err
			}
			r.ResumePending = id
			w := out.Block.Wait
			w.PendingID = id
			if err := k.step(tx, r, process.Input{Kind: process.Dispatch}); err != nil {
				return false, err
			}
			return true, k.step(tx, r, process.Input{Kind: process.Block, Wait: &w})
		}
		tx.rollbackTo(sp)
		r.restore(saved)
		if err != nil {
			reason = "automatic compaction could not start: " + err.Error()
		} else {
			reason = "the context is under the compaction target"
		}
	}
	notice := fmt.Sprintf("(runtime notice) Context pressure: about %d of %d tokens (over %d%%). Automatic maintenance did not run (%s). "+
		"If your prompt shows the %q heading, consider compact_process_context.", projected, window, int(pressureThreshold*100), reason, contextHeading)
	return false, k.appendEntries(tx, r, c, Entry{Role: llm.RoleUser, Kind: "notice", Content: notice})
}

// maintenanceStages is how many stages automatic maintenance plans for a
// context of tokens: as few as a compressor with window tokens allows, half
// of it a stage, at most 8. A Host's compressor image with a window too
// small to halve gets one stage.
func maintenanceStages(tokens, window int) int {
	half := window / 2
	if half <= 0 {
		return 1
	}
	return min(8, max(1, (tokens+half-1)/half))
}
