package kernel

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/tools/schema"
)

// The values every commit encodes, a process record with its live-index
// entry, events, and the records of provider and tool calls, are written
// out by hand: encoding/json's reflection was the largest single cost
// under the store's write lock. Each produces exactly the bytes json.Marshal
// does (TestHandEncodersMatchEncodingJSON fills every field by reflection, so
// a field added to the types and not here fails it; every record-cache hit in
// tests also compares json.Marshal with what was stored). Rare parts (a wait,
// a batch in flight, a detail that is not a map, a detail value of a kind
// not written here) go through json.Marshal.

// jsonWriter appends JSON to buf; the first error sticks.
type jsonWriter struct {
	buf []byte
	err error
	// more says a member was written since the last '{'.
	more bool
	// keepHTML writes <, > and & as they are, as schema.Marshal does: a
	// tool's result is text the model reads, where each escape would be
	// six characters it never wrote.
	keepHTML bool
	// depth counts the objects and arrays open: a Host's result that holds
	// itself would otherwise recurse until the stack overflows, which no
	// recover catches.
	depth int
}

// maxEncodeDepth is how deep a written value may nest, as deep as
// encoding/json goes before it looks for a cycle.
const maxEncodeDepth = 1000

// enter opens a nested object or array; false, with w.err set, past
// maxEncodeDepth.
func (w *jsonWriter) enter() bool {
	if w.depth++; w.depth > maxEncodeDepth {
		if w.err == nil {
			w.err = fmt.Errorf("the value nests more than %d levels deep (does it hold itself?)", maxEncodeDepth)
		}
		return false
	}
	return true
}

func (w *jsonWriter) open() {
	w.buf = append(w.buf, '{')
	w.more = false
}

func (w *jsonWriter) close() {
	w.buf = append(w.buf, '}')
	w.more = true
}

// key writes a member's name; names are plain ASCII literals.
func (w *jsonWriter) key(name string) {
	b := w.buf // appended to in a local, stored once
	if w.more {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, name...)
	w.buf = append(b, '"', ':')
	w.more = true
}

func (w *jsonWriter) str(name, s string) {
	w.key(name)
	w.string(s)
}

func (w *jsonWriter) strOmit(name, s string) {
	if s != "" {
		w.str(name, s)
	}
}

func (w *jsonWriter) int(name string, n int64) {
	w.key(name)
	w.buf = strconv.AppendInt(w.buf, n, 10)
}

func (w *jsonWriter) intOmit(name string, n int64) {
	if n != 0 {
		w.int(name, n)
	}
}

func (w *jsonWriter) uint(name string, n uint64) {
	w.key(name)
	w.buf = strconv.AppendUint(w.buf, n, 10)
}

func (w *jsonWriter) uintOmit(name string, n uint64) {
	if n != 0 {
		w.uint(name, n)
	}
}

func (w *jsonWriter) boolOmit(name string, b bool) {
	if b {
		w.key(name)
		w.buf = append(w.buf, "true"...)
	}
}

// rfc3339 reports whether t is a time RFC 3339 can say, which time's own
// encoder does not refuse.
func rfc3339(t time.Time) bool {
	_, offset := t.Zone()
	year := t.Year()
	return year >= 0 && year <= 9999 && offset > -24*3600 && offset < 24*3600
}

func (w *jsonWriter) time(name string, t time.Time) {
	w.key(name)
	if !rfc3339(t) {
		// Outside what RFC 3339 can say: time's own encoder refuses it.
		b, err := t.MarshalJSON()
		if err != nil && w.err == nil {
			w.err = err
		}
		w.buf = append(w.buf, b...)
		return
	}
	w.buf = append(w.buf, '"')
	w.buf = t.AppendFormat(w.buf, time.RFC3339Nano)
	w.buf = append(w.buf, '"')
}

// value writes a member v as json.Marshal does.
func (w *jsonWriter) value(name string, v any) {
	w.key(name)
	w.marshal(v)
}

func (w *jsonWriter) marshal(v any) {
	marshal := json.Marshal
	if w.keepHTML {
		marshal = schema.Marshal
	}
	b, err := marshal(v)
	if err != nil && w.err == nil {
		w.err = err
	}
	w.buf = append(w.buf, b...)
}

// detail writes an event's detail. The maps the kernel builds for it are
// written here (keys sorted, as encoding/json sorts them); anything else
// goes through json.Marshal.
func (w *jsonWriter) detail(name string, v any) {
	m, ok := v.(map[string]any)
	if !ok || m == nil {
		w.value(name, v)
		return
	}
	w.key(name)
	w.object(m)
}

// object writes m with its keys sorted, as encoding/json does; nil is null.
func (w *jsonWriter) object(m map[string]any) {
	if m == nil {
		w.buf = append(w.buf, "null"...)
		return
	}
	defer func() { w.depth-- }()
	if !w.enter() {
		return
	}
	var small [16]string
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.open()
	for _, k := range keys {
		if w.more {
			w.buf = append(w.buf, ',')
		}
		w.string(k)
		w.buf = append(w.buf, ':')
		w.more = true
		w.any(m[k])
	}
	w.close()
}

// any writes a value of a detail or a tool's result: the kinds tools build
// are written here, anything else goes through json.Marshal.
func (w *jsonWriter) any(v any) {
	switch x := v.(type) {
	case nil:
		w.buf = append(w.buf, "null"...)
	case string:
		w.string(x)
	case int:
		w.buf = strconv.AppendInt(w.buf, int64(x), 10)
	case int64:
		w.buf = strconv.AppendInt(w.buf, x, 10)
	case uint64:
		w.buf = strconv.AppendUint(w.buf, x, 10)
	case float64:
		w.float(x)
	case bool:
		w.buf = strconv.AppendBool(w.buf, x)
	case []string:
		w.list(x)
	case map[string]any:
		w.object(x)
	case []any:
		writeArray(w, x, w.any)
	case []map[string]any:
		writeArray(w, x, w.object)
	case json.RawMessage:
		// Valid too: a Host's tool may hand back anything, and
		// json.Marshal refuses what is not JSON.
		if len(x) > 0 && compactAsIs(x, w.keepHTML) && json.Valid(x) {
			w.buf = append(w.buf, x...)
			return
		}
		w.marshal(x)
	default:
		w.marshal(v)
	}
}

// float writes f as encoding/json writes a float64: the shortest decimal
// that reads back as f, in exponent form only below 1e-6 or from 1e21, with
// a one-digit negative exponent unpadded. NaN and the infinities are refused
// by json.Marshal, with its error.
func (w *jsonWriter) float(f float64) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		w.marshal(f)
		return
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	w.buf = strconv.AppendFloat(w.buf, f, format, -1, 64)
	if n := len(w.buf); format == 'e' && n >= 4 && w.buf[n-4] == 'e' && w.buf[n-3] == '-' && w.buf[n-2] == '0' {
		w.buf[n-2] = w.buf[n-1]
		w.buf = w.buf[:n-1]
	}
}

// encodeResult encodes a tool's result as schema.Marshal does: as
// json.Marshal does, but for <, > and &, kept as they are.
func encodeResult(result map[string]any) ([]byte, error) {
	w := jsonWriter{buf: make([]byte, 0, 256), keepHTML: true}
	w.object(result)
	return w.buf, w.err
}

// compactAsIs reports whether encoding/json writes the valid JSON raw as it
// is: no whitespace outside strings, and nothing it escapes (U+2028 and
// U+2029, whose encodings start with 0xE2, and unless keepHTML, <, > and
// &).
func compactAsIs(raw []byte, keepHTML bool) bool {
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == 0xE2, !keepHTML && (c == '<' || c == '>' || c == '&'):
			return false
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}

// strings writes a member that is a list of strings.
func (w *jsonWriter) strings(name string, list []string) {
	w.key(name)
	w.list(list)
}

// list writes a list of strings; nil is null.
func (w *jsonWriter) list(list []string) { writeArray(w, list, w.string) }

// writeArray writes list, each element with write; nil is null.
func writeArray[T any](w *jsonWriter, list []T, write func(T)) {
	if list == nil {
		w.buf = append(w.buf, "null"...)
		return
	}
	defer func() { w.depth-- }()
	if !w.enter() {
		return
	}
	w.buf = append(w.buf, '[')
	for i, e := range list {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		write(e)
	}
	w.buf = append(w.buf, ']')
}

func (w *jsonWriter) stringsOmit(name string, list []string) {
	if len(list) > 0 {
		w.strings(name, list)
	}
}

// string writes s quoted. Text of printable ASCII that encoding/json leaves
// as it is (no quote, backslash or HTML character) is copied; anything else
// goes through json.Marshal, whose escaping is the reference.
func (w *jsonWriter) string(s string) {
	plain := &jsonPlain
	if w.keepHTML {
		plain = &jsonPlainHTML
	}
	for i := 0; i < len(s); i++ {
		if !plain[s[i]] {
			w.marshal(s)
			return
		}
	}
	b := append(w.buf, '"')
	b = append(b, s...)
	w.buf = append(b, '"')
}

// jsonPlain marks the bytes encoding/json writes as they are in a string:
// printable ASCII but the quote, the backslash and the HTML characters.
var jsonPlain = func() (plain [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		plain[c] = true
	}
	for _, c := range `"\<>&` {
		plain[c] = false
	}
	return plain
}()

// jsonPlainHTML is jsonPlain when <, > and & are kept (keepHTML).
var jsonPlainHTML = func() (plain [256]bool) {
	plain = jsonPlain
	for _, c := range `<>&` {
		plain[c] = true
	}
	return plain
}()

// encodesSafely reports whether appendJSON cannot fail on r. Its only
// failures are a time RFC 3339 cannot say and a value encoding/json
// refuses, which only a wait or a dispatch could hold.
func (r *procRecord) encodesSafely() bool {
	if r.Wait != nil || r.Dispatch != nil || !rfc3339(r.CreatedAt) || !rfc3339(r.UpdatedAt) || !rfc3339(r.WallMark) {
		return false
	}
	for i := range r.Grants {
		if e := r.Grants[i].ExpiresAt; e != nil && !rfc3339(*e) {
			return false
		}
	}
	return true
}

// AppendValue is appendJSON, as objects.ValueEncoder.
func (r *procRecord) AppendValue(dst []byte) ([]byte, error) { return r.appendJSON(dst) }

// appendJSON appends r as json.Marshal encodes it.
func (r *procRecord) appendJSON(buf []byte) ([]byte, error) {
	w := jsonWriter{buf: buf}
	w.open()
	w.int("pid", r.PID)
	w.int("parent_pid", r.ParentPID)
	w.str("image", r.Image)
	w.str("state", string(r.State))
	w.uint("gen", r.Gen)
	if r.Wait != nil {
		w.value("wait", r.Wait)
	}
	w.strOmit("paused_from", string(r.PausedFrom))
	w.strOmit("reason", r.Reason)
	w.strOmit("result_oid", r.ResultOID)
	w.str("goal_oid", r.GoalOID)
	w.str("namespace", r.Namespace)
	w.int("turn", int64(r.Turn))
	w.grants("grants", r.Grants)
	w.budget("limits", r.Limits)
	w.budget("used", r.Used)
	w.time("created_at", r.CreatedAt)
	w.time("updated_at", r.UpdatedAt)
	w.strOmit("context_oid", r.ContextOID)
	w.int("root_pid", r.RootPID)
	w.stringsOmit("observed_tools", r.ObservedTools)
	w.strOmit("resume_pending", r.ResumePending)
	w.int("retained_entries", int64(r.RetainedEntries))
	w.uint("tool_calls", r.ToolCalls)
	w.uint("retain_seq", r.RetainSeq)
	w.intOmit("reserved_tokens", r.ReservedTokens)
	w.strOmit("evidence_sha256", r.EvidenceSHA256)
	w.stringsOmit("active_skills", r.ActiveSkills)
	w.strings("tool_table", r.ToolTable)
	w.strings("scopes", r.Scopes)
	if r.Dispatch != nil {
		w.value("dispatch", r.Dispatch)
	}
	w.intOmit("compaction_of", r.CompactionOf)
	w.boolOmit("pressure_episode", r.PressureEpisode)
	if !r.WallMark.IsZero() {
		w.time("wall_mark", r.WallMark)
	}
	w.int("replies", int64(r.Replies))
	w.boolOmit("pause_requested", r.PauseRequested)
	w.boolOmit("host_hold", r.HostHold)
	w.uintOmit("notified_seq", r.NotifiedSeq)
	w.boolOmit("interrupted_turn", r.InterruptedTurn)
	w.intOmit("provider_failures", int64(r.ProviderFailures))
	w.boolOmit("window_retried", r.WindowRetried)
	w.boolOmit("force_maintenance", r.ForceMaintenance)
	w.intOmit("text_only_turns", int64(r.TextOnlyTurns))
	w.strOmit("approved_call", r.ApprovedCall)
	w.close()
	return w.buf, w.err
}

// appendJSON appends e as json.Marshal encodes it.
func (e liveEntry) appendJSON(buf []byte) ([]byte, error) {
	w := jsonWriter{buf: buf}
	w.open()
	w.str("s", string(e.State))
	w.uint("g", e.Gen)
	w.strOmit("w", string(e.Wait))
	if !e.Until.IsZero() {
		w.time("u", e.Until)
	}
	w.close()
	return w.buf, w.err
}

// encodesSafely reports whether appendJSON cannot fail on c: only a time
// RFC 3339 cannot say fails.
func (c *callRecord) encodesSafely() bool { return rfc3339(c.StartedAt) && rfc3339(c.FinishedAt) }

// AppendValue is appendJSON, as objects.ValueEncoder.
func (c *callRecord) AppendValue(dst []byte) ([]byte, error) { return c.appendJSON(dst) }

// appendJSON appends c as json.Marshal encodes it.
func (c *callRecord) appendJSON(buf []byte) ([]byte, error) {
	w := jsonWriter{buf: buf}
	w.open()
	w.int("turn", int64(c.Turn))
	w.intOmit("attempt", int64(c.Attempt))
	w.str("status", c.Status)
	w.strOmit("settlement", c.Settlement)
	w.str("request_sha256", c.RequestSHA256)
	w.time("started_at", c.StartedAt)
	if !c.FinishedAt.IsZero() {
		w.time("finished_at", c.FinishedAt)
	}
	w.int("reserved_tokens", c.ReservedTokens)
	if c.Usage != nil {
		w.key("usage")
		w.open()
		w.int("prompt_tokens", int64(c.Usage.PromptTokens))
		w.int("completion_tokens", int64(c.Usage.CompletionTokens))
		w.close()
	}
	w.strOmit("error", c.Error)
	w.int("tool_calls", int64(c.ToolCalls))
	w.close()
	return w.buf, w.err
}

// encodesSafely reports that appendJSON cannot fail on a tool record: it
// writes strings, integers and a flag.
func (t *toolRecord) encodesSafely() bool { return true }

// AppendValue is appendJSON, as objects.ValueEncoder.
func (t *toolRecord) AppendValue(dst []byte) ([]byte, error) { return t.appendJSON(dst) }

// appendJSON appends t as json.Marshal encodes it.
func (t *toolRecord) appendJSON(buf []byte) ([]byte, error) {
	w := jsonWriter{buf: buf}
	w.open()
	w.int("turn", int64(t.Turn))
	w.str("call_id", t.CallID)
	w.str("tool", t.Tool)
	w.key("ok")
	w.buf = strconv.AppendBool(w.buf, t.OK)
	if t.hashLate {
		w.sha256("arguments_sha256", t.args)
		w.sha256("result_sha256", t.result)
	} else {
		w.str("arguments_sha256", t.ArgsSHA256)
		w.str("result_sha256", t.ResultSHA256)
	}
	w.strOmit("code", t.Code)
	w.stringsOmit("authority", t.Authority)
	w.close()
	return w.buf, w.err
}

// sha256 writes the SHA-256 of b, in hex, as the string field name: what
// sha(b) gives, without the string.
func (w *jsonWriter) sha256(name string, b []byte) {
	sum := sha256.Sum256(b)
	w.key(name)
	w.buf = append(w.buf, '"')
	w.buf = hex.AppendEncode(w.buf, sum[:])
	w.buf = append(w.buf, '"')
}

func (w *jsonWriter) budget(name string, b capabilities.Budget) {
	w.key(name)
	w.open()
	w.int("tool_calls", b.ToolCalls)
	w.int("llm_calls", b.LLMCalls)
	w.int("llm_tokens", b.LLMTokens)
	w.int("children", b.Children)
	w.int("wall_seconds", b.WallSeconds)
	w.close()
}

func (w *jsonWriter) grants(name string, grants []capabilities.Grant) {
	w.key(name)
	if grants == nil {
		w.buf = append(w.buf, "null"...)
		return
	}
	w.buf = append(w.buf, '[')
	for i := range grants {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		g := &grants[i]
		w.open()
		w.str("id", g.ID)
		w.str("resource", g.Resource)
		w.key("rights")
		if g.Rights == nil {
			w.buf = append(w.buf, "null"...)
		} else {
			w.buf = append(w.buf, '[')
			for j, right := range g.Rights {
				if j > 0 {
					w.buf = append(w.buf, ',')
				}
				w.string(string(right))
			}
			w.buf = append(w.buf, ']')
		}
		w.str("effect", string(g.Effect))
		if g.UsesRemaining != nil {
			w.int("uses_remaining", int64(*g.UsesRemaining))
		}
		if g.ExpiresAt != nil {
			w.time("expires_at", *g.ExpiresAt)
		}
		if g.Delegable != nil {
			w.key("delegable")
			w.buf = strconv.AppendBool(w.buf, *g.Delegable)
		}
		w.close()
	}
	w.buf = append(w.buf, ']')
}

// MarshalJSON encodes e as encoding/json would without this method.
func (e Event) MarshalJSON() ([]byte, error) {
	return e.appendJSON(make([]byte, 0, eventEncodingSize))
}

// eventEncodingSize and recordEncodingSize are the buffers the encoders
// start with: most events and records fit.
const (
	eventEncodingSize  = 256
	recordEncodingSize = 1024
)

// appendJSON appends e as json.Marshal encodes it.
func (e *Event) appendJSON(buf []byte) ([]byte, error) {
	w := jsonWriter{buf: buf}
	w.open()
	w.uint("seq", e.Seq)
	w.time("time", e.Time)
	w.str("kind", e.Kind)
	w.intOmit("pid", e.PID)
	w.intOmit("parent", e.Parent)
	w.strOmit("image", e.Image)
	w.strOmit("from", e.From)
	w.strOmit("to", e.To)
	w.strOmit("wait", e.Wait)
	w.strOmit("reason", e.Reason)
	w.intOmit("turn", int64(e.Turn))
	w.strOmit("tool", e.Tool)
	w.strOmit("call_id", e.CallID)
	w.strOmit("args", e.Args)
	if e.OK != nil {
		w.key("ok")
		w.buf = strconv.AppendBool(w.buf, *e.OK)
	}
	w.strOmit("code", e.Code)
	w.strOmit("summary", e.Summary)
	if e.Detail != nil {
		w.detail("detail", e.Detail)
	}
	w.close()
	return w.buf, w.err
}
