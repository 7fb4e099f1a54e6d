package crashtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

// More raw key prefixes of the kernel: its full-I/O evidence and its tool
// call records. The kernel exposes no read API for them; their JSON fields
// are decoded here as the kernel writes them.
const (
	keyEvidence = "k/io/"
	keyToolRecs = "k/tc/"
)

// evidenceItem is one retained full-I/O item (k/io/<pid>/<seq>).
type evidenceItem struct {
	Kind  string `json:"kind"`
	Entry *struct {
		Role       string `json:"role"`
		Content    string `json:"content"`
		ToolCallID string `json:"tool_call_id"`
		Name       string `json:"name"`
	} `json:"entry"`
}

// toolRecord is the kernel's audit record of one tool call (k/tc/<pid>/<seq>).
type toolRecord struct {
	CallID       string `json:"call_id"`
	Tool         string `json:"tool"`
	OK           bool   `json:"ok"`
	ResultSHA256 string `json:"result_sha256"`
	Code         string `json:"code"`
}

// procExtra holds the kernel's fields beside process.Record in k/p/.
type procExtra struct {
	EvidenceSHA256 string `json:"evidence_sha256"`
}

// toolResult is one tool result a process has durably as evidence.
type toolResult struct {
	tool    string
	content string
}

// final is what a finished scenario's directory holds, read through
// kernel.Open without a provider.
type final struct {
	procs    map[int64]kernel.ProcessInfo
	records  map[int64]process.Record
	extra    map[int64]procExtra
	results  map[int64]objects.Meta // result Object metadata by pid
	objects  map[string]objects.Meta
	payloads map[string][]byte // durable payloads by OID
	mail     map[int64][]mailbox.Message
	// evidence maps pid -> tool_call_id -> the retained tool result.
	evidence map[int64]map[string]toolResult
	records2 map[int64][]toolRecord // tool call records in order
	spawns   map[int64]int          // process.spawned events per pid
	// resets counts each process's evidence resets (compactions).
	resets      map[int64]int
	checkpoints []kernel.Checkpoint
	problems    []string
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// inspect opens dir through the kernel, without a provider, and reads
// everything the invariants need. Structural problems found while reading
// (a call recorded twice, a tool record without evidence, a process that
// left a terminal state in the event log) are collected in problems.
func inspect(dir string) (*final, error) {
	rt, err := kernel.Open(dir, kernel.Options{})
	if err != nil {
		return nil, fmt.Errorf("kernel.Open: %w", err)
	}
	defer rt.Close()
	f := &final{
		procs: map[int64]kernel.ProcessInfo{}, records: map[int64]process.Record{}, extra: map[int64]procExtra{},
		results: map[int64]objects.Meta{}, objects: map[string]objects.Meta{}, payloads: map[string][]byte{},
		mail: map[int64][]mailbox.Message{}, evidence: map[int64]map[string]toolResult{},
		records2: map[int64][]toolRecord{}, spawns: map[int64]int{}, resets: map[int64]int{},
	}
	bad := func(format string, args ...any) { f.problems = append(f.problems, fmt.Sprintf(format, args...)) }
	infos, err := rt.Processes()
	if err != nil {
		return nil, err
	}
	for _, p := range infos {
		f.procs[p.PID] = p
		if p.ResultOID != "" {
			meta, _, err := rt.ReadObject(p.ResultOID)
			if err != nil && !errors.Is(err, objects.ErrPayloadLost) {
				return nil, fmt.Errorf("result of pid %d: %w", p.PID, err)
			}
			f.results[p.PID] = meta
		}
	}
	err = rt.Store().View(func(tx *objects.Txn) error {
		for pid := range f.procs {
			raw, err := tx.Get(fmt.Appendf(nil, "%s%020d", keyProcs, pid))
			if err != nil {
				return err
			}
			var rec process.Record
			var extra procExtra
			if err := json.Unmarshal(raw, &rec); err != nil {
				return err
			}
			if err := json.Unmarshal(raw, &extra); err != nil {
				return err
			}
			f.records[pid], f.extra[pid] = rec, extra

			metas, err := tx.List(kernel.Namespace(pid))
			if err != nil {
				return err
			}
			for _, m := range metas {
				f.objects[m.OID] = m
				if m.Tier == objects.TierDurable {
					_, payload, err := tx.Read(m.OID)
					if err != nil {
						return fmt.Errorf("durable object %s: %w", m.OID, err)
					}
					f.payloads[m.OID] = payload
				}
			}
			if err := mailbox.List(tx, pid, func(m *mailbox.Message) error {
				f.mail[pid] = append(f.mail[pid], *m)
				return nil
			}); err != nil {
				return err
			}

			// A compaction retains a reset marker and then the whole new
			// context again, so a preserved result appears once per epoch.
			ev := map[string]toolResult{}
			f.evidence[pid] = ev
			epoch := map[string]bool{}
			if err := tx.Scan(fmt.Appendf(nil, "%s%020d/", keyEvidence, pid), func(_, v []byte) error {
				var item evidenceItem
				if err := json.Unmarshal(v, &item); err != nil {
					return fmt.Errorf("decode evidence of pid %d: %w", pid, err)
				}
				if item.Kind == "reset" {
					f.resets[pid]++
					epoch = map[string]bool{}
					return nil
				}
				if item.Kind != "entry" || item.Entry == nil || item.Entry.Role != "tool" {
					return nil
				}
				id := item.Entry.ToolCallID
				if epoch[id] {
					bad("pid %d: call %s has two retained results in one context", pid, id)
				}
				epoch[id] = true
				if prev, ok := ev[id]; ok && prev.content != item.Entry.Content {
					bad("pid %d: call %s has two different retained results:\n    %s\n    %s", pid, id, prev.content, item.Entry.Content)
				}
				ev[id] = toolResult{tool: item.Entry.Name, content: item.Entry.Content}
				return nil
			}); err != nil {
				return err
			}
			seenCalls := map[string]bool{}
			if err := tx.Scan(fmt.Appendf(nil, "%s%020d/", keyToolRecs, pid), func(_, v []byte) error {
				var tr toolRecord
				if err := json.Unmarshal(v, &tr); err != nil {
					return fmt.Errorf("decode tool record of pid %d: %w", pid, err)
				}
				if seenCalls[tr.CallID] {
					bad("pid %d: call %s (%s) is recorded twice", pid, tr.CallID, tr.Tool)
				}
				seenCalls[tr.CallID] = true
				f.records2[pid] = append(f.records2[pid], tr)
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Tool records and retained results pair up one to one, with the
	// recorded hash.
	for pid, recs := range f.records2 {
		for _, tr := range recs {
			res, ok := f.evidence[pid][tr.CallID]
			switch {
			case !ok:
				bad("pid %d: call %s (%s) is recorded without a retained result", pid, tr.CallID, tr.Tool)
			case sha([]byte(res.content)) != tr.ResultSHA256:
				bad("pid %d: call %s (%s): the retained result does not have the recorded hash", pid, tr.CallID, tr.Tool)
			}
		}
		if n, m := len(recs), len(f.evidence[pid]); n != m {
			bad("pid %d: %d tool call records but %d retained tool results", pid, n, m)
		}
	}
	if f.checkpoints, err = rt.Checkpoints(0); err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	events, err := rt.Store().Events(0, 0)
	if err != nil {
		return nil, err
	}
	ended := map[int64]string{}
	for _, e := range events {
		var ev kernel.Event
		if err := json.Unmarshal(e.Data, &ev); err != nil {
			return nil, fmt.Errorf("decode event %d: %w", e.Seq, err)
		}
		switch ev.Kind {
		case kernel.EventSpawn:
			f.spawns[ev.PID]++
		case kernel.EventState:
			if was, done := ended[ev.PID]; done {
				bad("event %d: pid %d went %s -> %s after it had ended %s", e.Seq, ev.PID, ev.From, ev.To, was)
			}
			if process.State(ev.To).Terminal() {
				ended[ev.PID] = ev.To
			}
		}
	}
	return f, nil
}

// checkFinal checks the invariants of a finished tree scenario against the
// tool results its processes were shown. Every run, interrupted or not,
// must pass:
//   - every tool result a process was shown is durable evidence: a
//     retained result with the same content, paired with a tool call
//     record carrying its hash; no call is recorded twice;
//   - no effect performed twice: exactly the scenario's processes, each
//     spawned once (a compaction stage whose runtime-local summary a crash
//     lost runs again with a new compressor, which the compaction job must
//     list); the skill's outside effect run at most once, and exactly once
//     when its result is known; no message posted twice; the worker's
//     Object written once per scripted write; one compaction; one
//     checkpoint;
//   - no message lost or acked twice: every message is acked, by exactly
//     one durable read;
//   - Object versions a process was shown are never ahead of the durable
//     version;
//   - the one-shot spawn grant is used up and its second use was refused;
//   - no process left a terminal state (event log), and the gated root
//     recorded its completion evidence.
func checkFinal(f *final, sc scenario, shown map[int64]map[string]string, effects []byte) []string {
	problems := slices.Clone(f.problems)
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	// Seen implies durable.
	for pid, calls := range shown {
		for id, content := range calls {
			res, ok := f.evidence[pid][id]
			switch {
			case !ok:
				bad("pid %d was shown the result of call %s, which is not durable evidence: %s", pid, id, content)
			case res.content != content:
				bad("pid %d was shown a result of call %s that differs from the retained one:\n    shown:    %s\n    retained: %s", pid, id, content, res.content)
			}
		}
	}

	// Exactly the expected processes, each spawned once, all ended: the
	// root, the worker, the greeter, and the root's compressors (pids 4
	// and up; a stage whose runtime-local summary a crash lost runs again
	// with a new compressor, so there may be more than the two stages).
	var pids, compressors []int64
	for pid := range f.procs {
		pids = append(pids, pid)
		if pid >= 4 {
			compressors = append(compressors, pid)
		}
	}
	slices.Sort(pids)
	slices.Sort(compressors)
	if len(pids) < 5 || !slices.Equal(pids[:3], []int64{1, 2, 3}) {
		bad("pids %v, want 1, 2, 3 and the compressors", pids)
	}
	for _, pid := range pids {
		p := f.procs[pid]
		if _, ok := sc.entry(pid, p.Image); !ok {
			bad("pid %d (image %s) is not a process of the scenario", pid, p.Image)
		}
		if f.spawns[pid] != 1 {
			bad("pid %d has %d spawn events, want 1", pid, f.spawns[pid])
		}
		if !p.Status.Terminal() {
			bad("pid %d is %s, want terminal", pid, p.Status)
		}
	}
	for pid, parent := range map[int64]int64{2: 1, 3: 2} {
		if p := f.procs[pid]; p.ParentPID != parent {
			bad("pid %d has parent %d, want %d", pid, p.ParentPID, parent)
		}
	}
	for _, pid := range compressors {
		if p := f.procs[pid]; p.ParentPID != 1 || p.Image != "context-compressor:v0" {
			bad("compressor pid %d: parent %d image %s, want a context-compressor:v0 child of the root", pid, p.ParentPID, p.Image)
		}
	}

	// The compaction completed once and names every compressor it ran.
	job, err := compactionJob(f)
	switch {
	case err != nil:
		bad("%v", err)
	case job.State != "completed" || len(job.Plan) != 2:
		bad("the root's compaction job is %s with %d stages, want completed with 2", job.State, len(job.Plan))
	case !slices.Equal(job.CompressorPIDs, compressors):
		bad("the compaction job ran compressors %v, but the compressor processes are %v", job.CompressorPIDs, compressors)
	}
	if f.resets[1] != 1 {
		bad("the root's evidence has %d resets, want 1 (one compaction)", f.resets[1])
	}

	// The skill's outside effect ran at most once: exactly once when its
	// result is known, at most once when the runtime died while it ran
	// (then the call is answered with an unknown settlement, never re-run).
	lines := strings.Count(string(effects), "\n")
	var effect []toolResult
	for _, res := range f.evidence[2] {
		if res.tool == "crash-effect" {
			effect = append(effect, res)
		}
	}
	if len(effect) != 1 {
		bad("the worker has %d retained crash-effect results, want 1", len(effect))
	} else {
		var res struct {
			OK    bool `json:"ok"`
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal([]byte(effect[0].content), &res)
		switch {
		case res.OK && lines != 1:
			bad("the crash-effect call succeeded but its effect ran %d times", lines)
		case !res.OK && res.Error.Code != "settlement_unknown":
			bad("the crash-effect call failed: %s", effect[0].content)
		case lines > 1:
			bad("the crash-effect effect ran %d times", lines)
		}
	}

	// One checkpoint of the root's subtree, created once.
	if len(f.checkpoints) != 1 || f.checkpoints[0].RootPID != 1 {
		bad("checkpoints %+v, want exactly one of pid 1", f.checkpoints)
	}

	// Messages: none lost, none duplicated, each acked by exactly one read.
	acks := map[string]int{}
	for _, calls := range f.evidence {
		for _, res := range calls {
			if res.tool != "read_process_messages" && res.tool != "receive_process_messages" {
				continue
			}
			var page struct {
				Acked []string `json:"acked_message_ids"`
			}
			if err := json.Unmarshal([]byte(res.content), &page); err != nil {
				bad("decode a retained %s result: %v", res.tool, err)
				continue
			}
			for _, id := range page.Acked {
				acks[id]++
			}
		}
	}
	for pid, msgs := range f.mail {
		bodies := map[string]int{}
		for _, m := range msgs {
			bodies[m.Sender+"\x00"+m.Body]++
			if m.Status != mailbox.StatusAcked {
				bad("message %s to pid %d from %s is %s, want acked", m.ID, pid, m.Sender, m.Status)
			}
			if acks[m.ID] != 1 {
				bad("message %s to pid %d from %s was acked by %d durable reads, want 1", m.ID, pid, m.Sender, acks[m.ID])
			}
		}
		for k, n := range bodies {
			if n > 1 {
				sender, body, _ := strings.Cut(k, "\x00")
				bad("pid %d received %q from %s %d times", pid, body, sender, n)
			}
		}
	}

	// Versions the processes were shown are durable.
	for pid, calls := range shown {
		for id, content := range calls {
			var res struct {
				OID     string `json:"oid"`
				Version uint64 `json:"version"`
			}
			if json.Unmarshal([]byte(content), &res) != nil || res.OID == "" || res.Version == 0 {
				continue
			}
			oid, version := res.OID, res.Version
			if m, ok := f.objects[oid]; !ok || m.Version < version {
				bad("pid %d was shown object %s at version %d (call %s); durable: %+v", pid, oid, version, id, m)
			}
		}
	}

	// One-shot: used once, refused after.
	worker := f.records[2]
	oneShot := -1
	for _, g := range worker.Grants {
		if g.Resource == "process:spawn" && g.Has(capabilities.Write) && g.UsesRemaining != nil {
			oneShot = *g.UsesRemaining
		}
	}
	if oneShot != 0 {
		bad("the worker's one-shot spawn grant has %d uses left, want 0 (grants %+v)", oneShot, worker.Grants)
	}
	var spawnResults []string
	for _, tr := range f.records2[2] {
		if tr.Tool == "spawn_child_process" {
			spawnResults = append(spawnResults, fmt.Sprintf("ok=%v code=%q", tr.OK, tr.Code))
		}
	}
	if want := []string{`ok=true code=""`, `ok=false code="denied"`}; !slices.Equal(spawnResults, want) {
		bad("the worker's spawns ended %v, want %v (the second refused: the one-shot is used up)", spawnResults, want)
	}

	// The root passed its completion review.
	if f.procs[1].Status == process.Exited && f.extra[1].EvidenceSHA256 == "" {
		bad("the gated root exited without recorded completion evidence")
	}
	return problems
}

// summary is the part of a finished scenario an interrupted run must end
// with exactly as an uninterrupted one does.
type summary struct {
	// Statuses, Reasons and ResultSHA256 cover the root, the worker and
	// the greeter; the compressors are checked by checkFinal.
	Statuses map[int64]string
	Reasons  map[int64]string
	// ResultSHA256 are the result payload hashes (durable metadata, so
	// they survive a reopen that loses the runtime-local payload).
	ResultSHA256 map[int64]string
	// Mail is, per pid, each message's id, sender, body and status.
	Mail map[int64][]string
	// Objects are the Objects of the root, worker and greeter other than
	// goals, results, contexts and compaction jobs: namespace/name@version
	// with the payload hash.
	Objects []string
	// Durable are the durable payloads by namespace/name.
	Durable map[string]string
	// Compaction is the root's compaction job state and stage count, and
	// its context generation.
	Compaction string
	// Checkpoints counts the checkpoints.
	Checkpoints int
}

func summarize(f *final) summary {
	s := summary{Statuses: map[int64]string{}, Reasons: map[int64]string{}, ResultSHA256: map[int64]string{}, Mail: map[int64][]string{}, Durable: map[string]string{}}
	for pid, p := range f.procs {
		if pid > 3 {
			continue
		}
		s.Statuses[pid] = string(p.Status)
		if p.Reason != "" {
			s.Reasons[pid] = p.Reason
		}
		if m, ok := f.results[pid]; ok {
			s.ResultSHA256[pid] = m.PayloadSHA256
		}
	}
	for pid, msgs := range f.mail {
		for _, m := range msgs {
			s.Mail[pid] = append(s.Mail[pid], fmt.Sprintf("%s from %s: %q (%s)", m.ID, m.Sender, m.Body, m.Status))
		}
	}
	compressorNS := map[string]bool{}
	for pid := range f.procs {
		if pid > 3 {
			compressorNS[kernel.Namespace(pid)] = true
		}
	}
	for _, m := range f.objects {
		switch {
		case compressorNS[m.Namespace]:
			continue
		case m.Kind == "goal", m.Kind == "result", m.Kind == "llm_context", m.Kind == "context_compaction_job":
			continue
		}
		s.Objects = append(s.Objects, fmt.Sprintf("%s/%s@%d %s", m.Namespace, m.Name, m.Version, m.PayloadSHA256))
		if p, ok := f.payloads[m.OID]; ok {
			s.Durable[m.Namespace+"/"+m.Name] = string(p)
		}
	}
	slices.Sort(s.Objects)
	if job, err := compactionJob(f); err == nil {
		s.Compaction = fmt.Sprintf("%s in %d stages", job.State, len(job.Plan))
	}
	for _, m := range f.objects {
		if m.Kind == "llm_context" && m.Namespace == kernel.Namespace(1) {
			s.Compaction += fmt.Sprintf(", root context generation %s", m.Labels["generation"])
		}
	}
	s.Checkpoints = len(f.checkpoints)
	return s
}

// compactionRecord is the part of the root's durable compaction job Object
// the checks read.
type compactionRecord struct {
	State          string   `json:"state"`
	Plan           [][2]int `json:"plan"`
	CompressorPIDs []int64  `json:"compressor_pids"`
}

func compactionJob(f *final) (compactionRecord, error) {
	var job compactionRecord
	for oid, m := range f.objects {
		if m.Kind == "context_compaction_job" && m.Namespace == kernel.Namespace(1) {
			err := json.Unmarshal(f.payloads[oid], &job)
			return job, err
		}
	}
	return job, errors.New("the root has no compaction job Object")
}

// diffSummaries lists how got differs from want.
func diffSummaries(want, got summary) []string {
	a, _ := json.MarshalIndent(want, "", "  ")
	b, _ := json.MarshalIndent(got, "", "  ")
	if bytes.Equal(a, b) {
		return nil
	}
	return []string{fmt.Sprintf("final results differ from the uninterrupted run:\nwant %s\ngot  %s", a, b)}
}
