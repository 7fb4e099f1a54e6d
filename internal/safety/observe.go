package safety

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
)

// obs is everything a task is judged on, read after the run from the
// runtime directory, the effect file and the skill runs.
type obs struct {
	t         *task
	facts     map[string]string
	admission error // the skill catalog refused a package

	rootPID  int64
	procs    map[int64]kernel.ProcessInfo
	results  map[int64][]byte // result payloads by pid
	objects  map[string][]objView
	messages map[int64][]mailbox.Message
	calls    []*callObs
	byID     map[string]*callObs
	events   []kernel.Event
	// checkpoints of every root.
	checkpoints []kernel.Checkpoint
	effectLines []string
	effectRuns  []effectRun
	// store holds every file of the runtime directory, to find secrets that
	// reached the disk (retained I/O, the event log).
	store []byte
}

// objView is an Object with its payload when it is readable.
type objView struct {
	objects.Meta
	Payload []byte
}

// callObs is one tool call as the runtime recorded it.
type callObs struct {
	PID      int64
	ID       string
	Tool     string
	Answered bool
	OK       bool
	Code     string
	// Result is the result the process saw, from its context (nil when the
	// context payload did not survive a reopen).
	Result json.RawMessage
}

func (w *world) observe(rt *kernel.Runtime, o *obs) error {
	o.facts = w.facts
	o.rootPID = o.pid("ROOT")
	o.procs = map[int64]kernel.ProcessInfo{}
	o.results = map[int64][]byte{}
	o.objects = map[string][]objView{}
	o.messages = map[int64][]mailbox.Message{}
	o.byID = map[string]*callObs{}
	procs, err := rt.Processes()
	if err != nil {
		return fmt.Errorf("observe processes: %w", err)
	}
	for _, p := range procs {
		o.procs[p.PID] = p
		if p.ResultOID != "" {
			if _, payload, err := rt.ReadObject(p.ResultOID); err == nil {
				o.results[p.PID] = payload
			}
		}
		metas, err := listNamespace(rt, p.Namespace)
		if err != nil {
			return err
		}
		for _, m := range metas {
			v := objView{Meta: m}
			if _, payload, err := rt.ReadObject(m.OID); err == nil {
				v.Payload = payload
			}
			o.objects[p.Namespace] = append(o.objects[p.Namespace], v)
		}
		err = rt.Store().View(func(tx *objects.Txn) error {
			return mailbox.List(tx, p.PID, func(m *mailbox.Message) error {
				o.messages[p.PID] = append(o.messages[p.PID], *m)
				return nil
			})
		})
		if err != nil {
			return fmt.Errorf("observe the mailbox of pid %d: %w", p.PID, err)
		}
	}
	if o.checkpoints, err = rt.Checkpoints(0); err != nil {
		return fmt.Errorf("observe checkpoints: %w", err)
	}
	if err := o.readEvents(rt); err != nil {
		return err
	}
	o.readContexts()
	if o.effectLines, err = readLines(w.effect); err != nil {
		return err
	}
	if w.skills != nil {
		o.effectRuns = w.skills.effectRuns()
	}
	if o.store, err = readTree(w.curFS, w.dir); err != nil {
		return err
	}
	return nil
}

func listNamespace(rt *kernel.Runtime, ns string) ([]objects.Meta, error) {
	var metas []objects.Meta
	err := rt.Store().View(func(tx *objects.Txn) error {
		var err error
		metas, err = tx.List(ns)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list namespace %s: %w", ns, err)
	}
	return metas, nil
}

// readEvents reads the durable event log: every call started and answered.
func (o *obs) readEvents(rt *kernel.Runtime) error {
	evs, err := rt.Store().Events(0, 0)
	if err != nil {
		return fmt.Errorf("observe events: %w", err)
	}
	for _, e := range evs {
		if e.Kind != kernel.EventToolCall && e.Kind != kernel.EventToolDone && e.Kind != kernel.EventState && e.Kind != kernel.EventSpawn && e.Kind != kernel.EventCheckpoint {
			continue
		}
		var ev kernel.Event
		if err := json.Unmarshal(e.Data, &ev); err != nil {
			return fmt.Errorf("decode event %d: %w", e.Seq, err)
		}
		o.events = append(o.events, ev)
		if ev.CallID == "" {
			continue
		}
		c := o.byID[ev.CallID]
		if c == nil {
			c = &callObs{PID: ev.PID, ID: ev.CallID, Tool: ev.Tool}
			o.byID[ev.CallID] = c
			o.calls = append(o.calls, c)
		}
		if ev.Kind == kernel.EventToolDone {
			c.Answered = true
			c.OK = ev.OK != nil && *ev.OK
			c.Code = ev.Code
		}
	}
	return nil
}

// readContexts attaches to each call the result its process saw.
func (o *obs) readContexts() {
	for _, list := range o.objects {
		for _, v := range list {
			if v.Kind != "llm_context" && v.Kind != "transcript" {
				continue
			}
			var doc struct {
				Entries []struct {
					Role       llm.Role `json:"role"`
					ToolCallID string   `json:"tool_call_id"`
					Content    string   `json:"content"`
				} `json:"entries"`
			}
			if json.Unmarshal(v.Payload, &doc) != nil {
				continue
			}
			for _, e := range doc.Entries {
				if c := o.byID[e.ToolCallID]; c != nil && e.Role == llm.RoleTool {
					c.Result = json.RawMessage(e.Content)
				}
			}
		}
	}
}

func readLines(name string) ([]string, error) {
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("effect file: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out, sc.Err()
}

// readTree concatenates every file under dir. The runtime is still open, so
// Pebble may delete an obsolete file (an old OPTIONS or WAL file) between the
// listing and the read; such a file is no longer on the disk and is skipped.
func readTree(fsys vfs.FS, dir string) ([]byte, error) {
	var buf bytes.Buffer
	names, err := fsys.List(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	sort.Strings(names)
	for _, n := range names {
		p := fsys.PathJoin(dir, n)
		st, err := fsys.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		if st.IsDir() {
			sub, err := readTree(fsys, p)
			if err != nil {
				return nil, err
			}
			buf.Write(sub)
			continue
		}
		f, err := fsys.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		_, err = io.Copy(&buf, f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
	}
	return buf.Bytes(), nil
}

// seenBy reports whether secret reached pid: its results, its Objects, its
// mailbox or its result.
func (o *obs) seenBy(pid int64, secret string) bool {
	for _, c := range o.calls {
		if c.PID == pid && strings.Contains(string(c.Result), secret) {
			return true
		}
	}
	for _, v := range o.objects[kernel.Namespace(pid)] {
		// A context holds the process's own calls; its results are read
		// through the calls above.
		if v.Kind != "llm_context" && v.Kind != "transcript" && strings.Contains(string(v.Payload), secret) {
			return true
		}
	}
	for _, m := range o.messages[pid] {
		if strings.Contains(m.Body, secret) || strings.Contains(string(m.Payload), secret) {
			return true
		}
	}
	return strings.Contains(string(o.results[pid]), secret)
}

// tree lists the root and its descendants.
func (o *obs) tree() []int64 {
	out := []int64{o.rootPID}
	for i := 0; i < len(out); i++ {
		for _, p := range o.sortedPIDs() {
			if o.procs[p].ParentPID == out[i] {
				out = append(out, p)
			}
		}
	}
	return out
}

func (o *obs) sortedPIDs() []int64 {
	pids := make([]int64, 0, len(o.procs))
	for p := range o.procs {
		pids = append(pids, p)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	return pids
}

func (o *obs) fact(name string) string { return o.facts[name] }
