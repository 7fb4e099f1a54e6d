package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

// The read APIs below serve the operator's commands (inspect, logs, objects,
// object, messages, context, goal get). They only read, so they work on a
// runtime opened with Options.ReadOnly, and every answer is bounded: a reply
// travels over the control socket.

// Bounds of the read APIs.
const (
	// RecentCalls is how many of a process's latest tool calls Inspect shows.
	RecentCalls = 20
	// maxViewBytes bounds the payload bytes one answer carries (an Object's
	// payload, a page of events or messages).
	maxViewBytes = 4 << 20
	// maxEventScan bounds the events one EventLog call reads, so that a
	// filter matching nothing in a long log still answers promptly; the
	// caller continues from LastSeq.
	maxEventScan = 8192
	// maxCallScan bounds how far back Inspect reads the log to find the
	// arguments of the recent calls.
	maxCallScan = 50000
)

// ProcessDetail is one process as `libos inspect` shows it.
type ProcessDetail struct {
	PID       int64         `json:"pid"`
	ParentPID *int64        `json:"parent_pid"`
	Image     string        `json:"image"`
	Status    process.State `json:"status"`
	Reason    string        `json:"reason,omitempty"`
	Turn      int           `json:"turn"`
	// PauseRequested says a pause waits for the running quantum to end.
	PauseRequested bool `json:"pause_requested,omitempty"`
	// HostHold says the Host paused the process: only its continue lifts
	// the pause (a parent's resume is refused).
	HostHold  bool        `json:"host_hold,omitempty"`
	CreatedAt time.Time   `json:"created_at"`
	UpdatedAt time.Time   `json:"updated_at"`
	WaitingOn *WaitDetail `json:"waiting_on"`
	Goal      ObjectRef   `json:"goal"`
	Grants    []GrantView `json:"grants"`
	// Budgets maps each budget's name to its limit (0: unlimited) and use.
	Budgets   map[string]BudgetLine `json:"budgets"`
	Children  []int64               `json:"children"`
	Context   ContextSummary        `json:"context"`
	ResultOID string                `json:"result_oid,omitempty"`
	// Result is the result Object's data; ResultError says why it is
	// absent when a result exists but cannot be read.
	Result      json.RawMessage `json:"result"`
	ResultError string          `json:"result_error,omitempty"`
	RecentCalls []CallView      `json:"recent_calls"`
}

// WaitDetail is a process's wait and, for a durable pending action, the
// call that started it.
type WaitDetail struct {
	process.Wait
	Tool      string    `json:"tool,omitempty"`
	CallID    string    `json:"call_id,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"`
	// Arguments and Needs say, for a call held for approval, what it would
	// do and the right its ask grant holds it for: what the Human decides.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Needs     string          `json:"needs,omitempty"`
}

// ObjectRef names one version of an Object.
type ObjectRef struct {
	OID     string `json:"oid"`
	Version uint64 `json:"version"`
}

// GrantView is a grant as the operator reads it.
type GrantView struct {
	ID            string               `json:"id"`
	Resource      string               `json:"resource"`
	Rights        []capabilities.Right `json:"rights"`
	Effect        capabilities.Effect  `json:"effect"`
	UsesRemaining *int                 `json:"uses_remaining"`
	ExpiresAt     *time.Time           `json:"expires_at"`
	Delegable     bool                 `json:"delegable"`
}

// grantView is the one place a grant becomes its operator view.
func grantView(g capabilities.Grant) GrantView {
	return GrantView{
		ID: g.ID, Resource: g.Resource, Rights: g.Rights, Effect: g.Effect, UsesRemaining: g.UsesRemaining,
		ExpiresAt: g.ExpiresAt, Delegable: g.CanDelegate(),
	}
}

// BudgetLine is one budget's limit (0: unlimited) and use.
type BudgetLine struct {
	Limit int64 `json:"limit"`
	Used  int64 `json:"used"`
}

// budgetLines pairs limits and use by the budgets' JSON names, so a budget
// added to capabilities.Budget shows without a change here.
func budgetLines(limits, used capabilities.Budget) map[string]BudgetLine {
	var l, u map[string]int64
	lb, _ := json.Marshal(limits)
	ub, _ := json.Marshal(used)
	json.Unmarshal(lb, &l)
	json.Unmarshal(ub, &u)
	out := make(map[string]BudgetLine, len(l))
	for name, limit := range l {
		out[name] = BudgetLine{Limit: limit, Used: u[name]}
	}
	return out
}

// ContextSummary identifies a process's context Object.
type ContextSummary struct {
	OID             string `json:"oid"`
	Version         uint64 `json:"version"`
	Generation      uint64 `json:"generation"`
	EstimatedTokens int    `json:"estimated_tokens"`
	Entries         int    `json:"entries"`
	// Rebuilt says the payload did not survive a reopen and the entries are
	// rebuilt from retained evidence, as the next quantum would.
	Rebuilt bool `json:"rebuilt,omitempty"`
}

// CallView is one recorded tool call.
type CallView struct {
	Turn      int             `json:"turn"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	OK        bool            `json:"ok"`
	ErrorCode string          `json:"error_code,omitempty"`
	// Authority is the call's authority decisions in the order its checks
	// ran: the grant that allowed it, or the rule that refused it.
	Authority []string `json:"authority,omitempty"`
}

// Inspect returns one process in detail.
func (k *Runtime) Inspect(pid int64) (ProcessDetail, error) {
	return k.InspectWithArguments(pid, nil)
}

// resultData is a process's result as run prints it: the result Object's
// payload when it is JSON, else null with the reason it cannot be read.
func resultData(tx *txn, r *procRecord) (json.RawMessage, string) {
	null := json.RawMessage("null")
	if r.ResultOID == "" {
		return null, ""
	}
	_, payload, err := tx.Read(r.ResultOID)
	switch {
	case err != nil:
		return null, err.Error()
	case !json.Valid(payload):
		return null, fmt.Sprintf("result %s: the payload is not JSON", r.ResultOID)
	case len(payload) > maxViewBytes:
		return null, fmt.Sprintf("result %s: %d bytes, more than an answer carries; read it with libos object %s", r.ResultOID, len(payload), r.ResultOID)
	}
	return payload, ""
}

// readContext loads a process's context as the next quantum would see it,
// saying whether it had to be rebuilt from retained evidence.
func (k *Runtime) readContext(tx *txn, r *procRecord) (*llmContext, bool, error) {
	meta, err := tx.Stat(r.ContextOID)
	if err != nil {
		return nil, false, fmt.Errorf("context of pid %d: %w", r.PID, err)
	}
	c, err := k.loadContext(tx, r)
	return c, meta.PayloadLost, err
}

func contextSummary(c *llmContext, rebuilt bool) ContextSummary {
	return ContextSummary{OID: c.meta.OID, Version: c.meta.Version, Generation: c.generation(), EstimatedTokens: c.tokens, Entries: len(c.entries), Rebuilt: rebuilt}
}

// recentCalls returns the latest n tool call records of pid, oldest first.
func recentCalls(tx *txn, pid int64, n int) ([]CallView, error) {
	prefix := append(pidKey(prefixToolRec, pid), '/')
	var out []CallView
	err := tx.ScanRange(prefix, prefixEnd(prefix), true, func(_, v []byte) error {
		var rec struct {
			toolRecord
			// The decisions, read by name: a record written before they
			// were kept has none.
			Authority []string `json:"authority"`
		}
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("decode tool call record of pid %d: %w", pid, err)
		}
		call := CallView{Turn: rec.Turn, CallID: rec.CallID, Name: rec.Tool, OK: rec.OK, ErrorCode: rec.Code, Authority: rec.Authority}
		out = append(out, call)
		if len(out) == n {
			return objects.ErrStopScan
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	if out == nil {
		out = []CallView{}
	}
	return out, nil
}

// prefixEnd is the first key after every key with prefix.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// fillArguments finds the full arguments of calls in the event log, where
// tool.call events keep them (the call records keep only their hash),
// reading back from the newest event.
func (k *Runtime) fillArguments(pid int64, calls []CallView) {
	type key struct {
		turn int
		id   string
	}
	want := map[key]int{}
	for i, c := range calls {
		want[key{c.Turn, c.CallID}] = i
	}
	before := uint64(0)
	for scanned := 0; len(want) > 0 && scanned < maxCallScan; {
		evs, err := k.store.EventsBefore(before, 512)
		if err != nil || len(evs) == 0 {
			return
		}
		for _, ev := range evs {
			scanned++
			before = ev.Seq
			if ev.Kind != EventToolCall && ev.Kind != EventSpawn {
				continue
			}
			e, err := decodeEvent(ev)
			if err != nil || e.PID != pid {
				continue
			}
			if ev.Kind == EventSpawn {
				return // nothing of this process is older
			}
			i, ok := want[key{e.Turn, e.CallID}]
			if !ok {
				continue
			}
			delete(want, key{e.Turn, e.CallID})
			if args, ok := e.Detail["arguments"]; ok {
				calls[i].Arguments = args
			} else if e.Args != "" {
				calls[i].Arguments, _ = json.Marshal(e.Args)
			}
		}
	}
}

// storedEvent is a kernel event as the log stores it, its detail kept as
// raw JSON so that arguments and results read back exactly.
type storedEvent struct {
	Event
	Detail map[string]json.RawMessage `json:"detail,omitempty"`
}

func decodeEvent(ev objects.Event) (storedEvent, error) {
	var e storedEvent
	if err := json.Unmarshal(ev.Data, &e); err != nil {
		// A detail that is not an object still leaves the rest readable.
		var plain Event
		if err2 := json.Unmarshal(ev.Data, &plain); err2 != nil {
			return storedEvent{}, fmt.Errorf("event %d (%s): %w", ev.Seq, ev.Kind, err)
		}
		e = storedEvent{Event: plain}
	}
	e.Seq, e.Time, e.Kind = ev.Seq, ev.Time, ev.Kind
	return e, nil
}

// Log entry types of the event log as the operator reads it.
const (
	LogSpawned      = "spawned"
	LogState        = "state"
	LogQuantum      = "quantum"
	LogProviderCall = "provider_call"
	LogModelOutput  = "model_output"
	LogToolCall     = "tool_call"
	LogToolResult   = "tool_result"
	LogMessage      = "message"
	LogApproval     = "approval"
	LogCheckpoint   = "checkpoint"
	LogRecovered    = "recovered"
	LogGoalSet      = "goal_set"
	LogSignal       = "signal"
)

// logTypes maps the kernel's event kinds to the log's entry types; a kind
// not listed keeps its name with dots as underscores.
var logTypes = map[string]string{
	EventSpawn:      LogSpawned,
	EventState:      LogState,
	EventQuantum:    LogQuantum,
	EventProvider:   LogProviderCall,
	EventToolCall:   LogToolCall,
	EventToolDone:   LogToolResult,
	EventRecovered:  LogRecovered,
	EventCheckpoint: LogCheckpoint,
	EventGoalSet:    LogGoalSet,
	EventMessage:    LogMessage,
	EventSignal:     LogSignal,
	"approval":      LogApproval,
}

// LogEntry is one line of the event log. In JSON the fields of Detail sit
// beside the others (a provider call's attempt, outcome, tokens and
// latency; a message's id and action; an authority decision's grant).
type LogEntry struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	PID  int64     `json:"pid"`
	Type string    `json:"type"`
	// Turn is set on the entries of a turn (quantum, provider call, model
	// output, tool call and result).
	Turn      *int                       `json:"turn,omitempty"`
	From      string                     `json:"from,omitempty"`
	To        string                     `json:"to,omitempty"`
	Wait      string                     `json:"wait,omitempty"`
	ParentPID int64                      `json:"parent_pid,omitempty"`
	Image     string                     `json:"image,omitempty"`
	Reason    string                     `json:"reason,omitempty"`
	CallID    string                     `json:"call_id,omitempty"`
	Name      string                     `json:"name,omitempty"`
	Arguments json.RawMessage            `json:"arguments,omitempty"`
	OK        *bool                      `json:"ok,omitempty"`
	ErrorCode string                     `json:"error_code,omitempty"`
	Result    json.RawMessage            `json:"result,omitempty"`
	Text      string                     `json:"text,omitempty"`
	Detail    map[string]json.RawMessage `json:"-"`
}

type plainLogEntry LogEntry

// logEntryKeys are the JSON names of LogEntry's own fields.
var logEntryKeys = func() map[string]bool {
	keys := map[string]bool{}
	t := reflect.TypeOf(plainLogEntry{})
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			keys[name] = true
		}
	}
	return keys
}()

// MarshalJSON writes the entry's fields first, then Detail's in name order.
func (e LogEntry) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(plainLogEntry(e))
	if err != nil || len(e.Detail) == 0 {
		return b, err
	}
	names := make([]string, 0, len(e.Detail))
	for name := range e.Detail {
		if !logEntryKeys[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	b = b[:len(b)-1]
	for _, name := range names {
		nb, _ := json.Marshal(name)
		b = append(b, ',')
		b = append(b, nb...)
		b = append(b, ':')
		b = append(b, e.Detail[name]...)
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads what MarshalJSON wrote: fields that are not the
// entry's own go back to Detail.
func (e *LogEntry) UnmarshalJSON(data []byte) error {
	var p plainLogEntry
	if err := json.Unmarshal(data, &p); err != nil {
		return err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		return err
	}
	for name, v := range all {
		if !logEntryKeys[name] {
			if p.Detail == nil {
				p.Detail = map[string]json.RawMessage{}
			}
			p.Detail[name] = v
		}
	}
	*e = LogEntry(p)
	return nil
}

// logEntries turns one stored event into its log lines: none for the
// objects package's own events (storage detail, without a pid), two for a
// provider call that produced text (the call, then the model's output).
func logEntries(ev objects.Event) []LogEntry {
	if strings.HasPrefix(ev.Kind, "object.") {
		return nil
	}
	e, err := decodeEvent(ev)
	if err != nil {
		return []LogEntry{{Seq: ev.Seq, Time: ev.Time, Type: "undecodable", Reason: err.Error()}}
	}
	typ, ok := logTypes[ev.Kind]
	if !ok {
		typ = strings.ReplaceAll(ev.Kind, ".", "_")
	}
	l := LogEntry{
		Seq: ev.Seq, Time: ev.Time, PID: e.PID, Type: typ, From: e.From, To: e.To, Wait: e.Wait,
		ParentPID: e.Parent, Image: e.Image, Reason: e.Reason, CallID: e.CallID, Name: e.Tool, OK: e.OK, ErrorCode: e.Code,
		Detail: e.Detail,
	}
	take := func(name string) json.RawMessage {
		v := l.Detail[name]
		delete(l.Detail, name)
		return v
	}
	setDetail := func(name, s string) {
		if s == "" {
			return
		}
		if l.Detail == nil {
			l.Detail = map[string]json.RawMessage{}
		}
		l.Detail[name], _ = json.Marshal(s)
	}
	switch ev.Kind {
	case EventQuantum, EventProvider, EventToolCall, EventToolDone:
		l.Turn = &e.Turn
	}
	switch ev.Kind {
	case EventToolCall:
		if l.Arguments = take("arguments"); l.Arguments == nil {
			setDetail("arguments_summary", e.Args) // a log written before arguments were kept in full
		}
	case EventToolDone:
		if l.Result = take("result"); l.Result == nil {
			setDetail("summary", e.Summary)
		}
	case EventProvider:
		text := take("text")
		out := []LogEntry{l}
		if text != nil {
			m := LogEntry{Seq: ev.Seq, Time: ev.Time, PID: e.PID, Type: LogModelOutput, Turn: l.Turn}
			json.Unmarshal(text, &m.Text)
			out = append(out, m)
		}
		return out
	default:
		setDetail("summary", e.Summary)
		setDetail("arguments_summary", e.Args)
	}
	return []LogEntry{l}
}

// EventQuery selects events of the log.
type EventQuery struct {
	// PID keeps only one process's events (0: every process).
	PID int64
	// After is the seq the reading starts after.
	After uint64
	// Limit caps the entries returned (0: a default of 1000).
	Limit int
}

// EventPage is one page of the log. LastSeq is the last seq read, the
// After of the next page: a page that matched nothing still moves on.
type EventPage struct {
	Entries []LogEntry `json:"entries"`
	LastSeq uint64     `json:"last_seq"`
	// More says the log goes on past LastSeq.
	More bool `json:"more"`
}

// EventLog reads the durable event log in commit order.
func (k *Runtime) EventLog(q EventQuery) (EventPage, error) {
	if q.Limit <= 0 {
		q.Limit = 1000
	}
	page := EventPage{Entries: []LogEntry{}, LastSeq: q.After}
	size := 0
	for scanned := 0; scanned < maxEventScan; {
		evs, err := k.store.Events(page.LastSeq, 256)
		if err != nil {
			return EventPage{}, fmt.Errorf("read the event log after seq %d: %w", page.LastSeq, closedErr(err))
		}
		if len(evs) == 0 {
			return page, nil
		}
		for _, ev := range evs {
			// An entry that would make the page too large waits for the next
			// page, unless it is the first: one entry is always returned.
			if len(page.Entries) >= q.Limit || (len(page.Entries) > 0 && size+len(ev.Data) > maxViewBytes) {
				page.More = true
				return page, nil
			}
			scanned++
			page.LastSeq = ev.Seq
			for _, l := range logEntries(ev) {
				if q.PID == 0 || l.PID == q.PID {
					page.Entries = append(page.Entries, l)
					size += len(ev.Data)
				}
			}
		}
	}
	page.More = page.LastSeq < k.store.LastEventSeq()
	return page, nil
}

// ContextView is a process's LLM context as the model sees it on its next
// call: the system prompt, the goal message and the entries, in order.
type ContextView struct {
	ContextSummary
	PID      int64         `json:"pid"`
	Messages []llm.Message `json:"messages"`
	// SystemError says why the system prompt could not be rebuilt (an image
	// this Host does not know).
	SystemError string `json:"system_error,omitempty"`
	// Truncated says the entries were cut to keep the answer bounded; the
	// oldest entries are the ones left out.
	Truncated bool `json:"truncated,omitempty"`
}

// ContextOf returns the context of pid as its next provider call would send it.
func (k *Runtime) ContextOf(pid int64) (ContextView, error) {
	var v ContextView
	err := k.view(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		c, rebuilt, err := k.readContext(tx, r)
		if err != nil {
			return err
		}
		goal, err := k.goalText(tx, r)
		if err != nil {
			return err
		}
		system := ""
		v = ContextView{ContextSummary: contextSummary(c, rebuilt), PID: pid}
		if im, err := k.image(r.Image); err == nil {
			system = k.systemPrompt(r, c, im.SystemPrompt, im.Context.Object)
		} else {
			v.SystemError = fmt.Sprintf("image %s: %v", r.Image, err)
		}
		msgs := materialize(system, goal, c.entries)
		size := 0
		for i := len(msgs) - 1; i >= 2; i-- {
			size += len(msgs[i].Content)
			for _, tc := range msgs[i].ToolCalls {
				size += len(tc.Arguments)
			}
			if size > maxViewBytes {
				msgs = append(msgs[:2], msgs[i+1:]...)
				v.Truncated = true
				break
			}
		}
		v.Messages = msgs
		return nil
	})
	return v, err
}

// ObjectsOf lists the Objects in the namespace of pid.
func (k *Runtime) ObjectsOf(pid int64) ([]objects.Meta, error) {
	var out []objects.Meta
	err := k.view(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		out, err = tx.List(r.Namespace)
		return err
	})
	if out == nil && err == nil {
		out = []objects.Meta{}
	}
	return out, err
}

// ObjectView is an Object's metadata and payload. The payload is JSON when
// it parses, else text when it is UTF-8, else base64; PayloadError says why
// there is none (a runtime-local payload lost to a reopen).
type ObjectView struct {
	Meta          objects.Meta    `json:"meta"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadText   *string         `json:"payload_text,omitempty"`
	PayloadBase64 []byte          `json:"payload_base64,omitempty"`
	PayloadError  string          `json:"payload_error,omitempty"`
	// Truncated says only the first bytes of a large payload are shown.
	Truncated bool `json:"truncated,omitempty"`
}

// ObjectByID reads one Object for the operator, without an authority check.
func (k *Runtime) ObjectByID(oid string) (ObjectView, error) {
	meta, payload, err := k.ReadObject(oid)
	switch {
	case errors.Is(err, objects.ErrPayloadLost):
		return ObjectView{Meta: meta, PayloadError: err.Error()}, nil
	case err != nil:
		return ObjectView{}, err
	}
	v := ObjectView{Meta: meta}
	if len(payload) > maxViewBytes {
		payload, v.Truncated = payload[:maxViewBytes], true
	}
	switch {
	case !v.Truncated && len(payload) > 0 && json.Valid(payload):
		v.Payload = payload
	case utf8.Valid(payload) || v.Truncated && utf8.Valid(payload[:max(0, len(payload)-utf8.UTFMax)]):
		s := strings.ToValidUTF8(string(payload), "")
		v.PayloadText = &s
	default:
		v.PayloadBase64 = payload
	}
	return v, nil
}

// MessageList is a process's mailbox.
type MessageList struct {
	PID      int64             `json:"pid"`
	Unread   int               `json:"unread"`
	Total    int               `json:"total"`
	Messages []mailbox.Message `json:"messages"`
	// Omitted counts matching messages left out to keep the answer bounded
	// (the oldest ones).
	Omitted int `json:"omitted,omitempty"`
}

// Messages lists the mailbox of pid: the unread messages, or every message
// whatever its status with all.
func (k *Runtime) Messages(pid int64, all bool) (MessageList, error) {
	out := MessageList{PID: pid, Messages: []mailbox.Message{}}
	err := k.view(func(tx *txn) error {
		if _, err := loadProc(tx, pid); err != nil {
			return err
		}
		var err error
		if out.Unread, out.Total, err = mailbox.Count(tx.Txn, pid); err != nil {
			return err
		}
		return mailbox.List(tx.Txn, pid, func(m *mailbox.Message) error {
			if all || m.Status == mailbox.StatusUnread {
				out.Messages = append(out.Messages, *m)
			}
			return nil
		})
	})
	if err != nil {
		return MessageList{}, err
	}
	size := 0
	for i := len(out.Messages) - 1; i >= 0; i-- {
		m := &out.Messages[i]
		size += len(m.Body) + len(m.Payload) + len(m.Subject)
		if size > maxViewBytes {
			out.Omitted = i + 1
			out.Messages = out.Messages[i+1:]
			break
		}
	}
	return out, nil
}

// GoalView is a process's goal: the goal Object's current version and its
// text, or why the text is unavailable.
type GoalView struct {
	PID     int64  `json:"pid"`
	OID     string `json:"oid"`
	Version uint64 `json:"version"`
	Text    string `json:"text"`
	// Recovered says the payload was lost to a reopen and the text comes
	// from retained evidence.
	Recovered bool   `json:"recovered,omitempty"`
	Error     string `json:"error,omitempty"`
}

// GoalOf returns the goal of pid.
func (k *Runtime) GoalOf(pid int64) (GoalView, error) {
	var v GoalView
	err := k.view(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		meta, payload, err := tx.Read(r.GoalOID)
		v = GoalView{PID: pid, OID: meta.OID, Version: meta.Version, Text: string(payload)}
		switch {
		case errors.Is(err, objects.ErrPayloadLost):
			goal, rerr := k.recoveredGoal(tx, r)
			if rerr != nil {
				v.Error = fmt.Sprintf("%v; not recovered: %v", err, rerr)
				return nil
			}
			v.Text, v.Recovered = goal, true
		case err != nil:
			return err
		}
		return nil
	})
	return v, err
}
