package kernel

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/quantum"
	"github.com/libos/libos/tools/schema"
)

// eventByReflection is Event without its MarshalJSON: what encoding/json
// makes of it by reflection.
type eventByReflection Event

// TestHandEncodersMatchEncodingJSON fills every exported field of process
// records, live-index entries, call and tool records and events with random
// values, by reflection (so a field added to
// either type is filled too), and checks that the hand-written encoders give
// exactly the bytes of encoding/json, and decode back to the same value.
func TestHandEncodersMatchEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		var r procRecord
		fillRandom(reflect.ValueOf(&r).Elem(), rng, 0)
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatalf("record %d: encoding/json: %v", i, err)
		}
		got, err := r.appendJSON(nil)
		if err != nil {
			t.Fatalf("record %d: appendJSON: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("record %d differs:\nhand        %s\nencoding/json %s", i, got, want)
		}

		var live liveEntry
		fillRandom(reflect.ValueOf(&live).Elem(), rng, 0)
		want, err = json.Marshal(live)
		if err != nil {
			t.Fatalf("live entry %d: encoding/json: %v", i, err)
		}
		if got, err = live.appendJSON(nil); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("live entry %d differs:\nhand          %s\nencoding/json %s (%v)", i, got, want, err)
		}

		var call callRecord
		fillRandom(reflect.ValueOf(&call).Elem(), rng, 0)
		var tool toolRecord
		fillRandom(reflect.ValueOf(&tool).Elem(), rng, 0)
		for _, rec := range []interface {
			appendJSON([]byte) ([]byte, error)
		}{&call, &tool} {
			want, err = json.Marshal(rec)
			if err != nil {
				t.Fatalf("%T %d: encoding/json: %v", rec, i, err)
			}
			if got, err = rec.appendJSON(nil); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%T %d differs:\nhand          %s\nencoding/json %s (%v)", rec, i, got, want, err)
			}
		}

		// A tool record hashed when it is encoded writes what one with its
		// digests filled in writes.
		late := tool
		late.args, late.result, late.hashLate = []byte(randomStrings[rng.IntN(len(randomStrings))]), []byte(tool.Code+tool.Tool), true
		tool.ArgsSHA256, tool.ResultSHA256 = sha(late.args), sha(late.result)
		late.ArgsSHA256, late.ResultSHA256 = "ignored", "ignored"
		want, _ = tool.appendJSON(nil)
		if got, err = late.appendJSON(nil); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("tool record %d hashed late differs:\nlate  %s\nfilled %s (%v)", i, got, want, err)
		}

		var ev Event
		fillRandom(reflect.ValueOf(&ev).Elem(), rng, 0)
		want, err = json.Marshal(eventByReflection(ev))
		if err != nil {
			t.Fatalf("event %d: encoding/json: %v", i, err)
		}
		// emit stores appendJSON's bytes as they are; json.Marshal would
		// compact MarshalJSON's output and hide a difference.
		got, err = ev.appendJSON(nil)
		if err != nil {
			t.Fatalf("event %d: appendJSON: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("event %d differs:\nhand          %s\nencoding/json %s", i, got, want)
		}
		if viaMethod, err := json.Marshal(ev); err != nil || !bytes.Equal(viaMethod, want) {
			t.Fatalf("event %d: json.Marshal through MarshalJSON: %s, %v", i, viaMethod, err)
		}
	}
}

// TestHandEncoderFailsOnBadTime checks that a time encoding/json refuses is
// refused by the hand encoder too, instead of written.
func TestHandEncoderFailsOnBadTime(t *testing.T) {
	r := procRecord{}
	r.CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := json.Marshal(&r); err == nil {
		t.Fatal("encoding/json accepted year 10000")
	}
	if _, err := r.appendJSON(nil); err == nil {
		t.Fatal("appendJSON accepted year 10000")
	}
}

var randomStrings = []string{
	"", "plain", "proc-7", "call_1_2_3", `quote"d`, `back\slash`, "<tag>&amp;", "tab\there", "line\nbreak",
	"\x00\x1f control", "ünïcödé", "\u2028\u2029", "bad \xff utf-8", "emoji 😀",
}

var randomTimes = []time.Time{
	{},
	time.Date(2026, 12, 1, 22, 14, 44, 0, time.UTC),
	time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC),
	time.Date(2025, 6, 7, 8, 9, 10, 500, time.FixedZone("", 5*3600+1800)),
}

// fillRandom sets v, and everything under it, to random values.
func fillRandom(v reflect.Value, rng *rand.Rand, depth int) {
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(randomTimes[rng.IntN(len(randomTimes))]))
		return
	case reflect.TypeFor[json.RawMessage]():
		raws := []string{"", `{"sender":"human:h"}`, ` { "a" : [1, "<b>"] } `}
		if s := raws[rng.IntN(len(raws))]; s != "" {
			v.SetBytes([]byte(s))
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillRandom(v.Field(i), rng, depth+1)
			}
		}
	case reflect.Pointer:
		if depth < 6 && rng.IntN(3) > 0 {
			p := reflect.New(v.Type().Elem())
			fillRandom(p.Elem(), rng, depth+1)
			v.Set(p)
		}
	case reflect.Slice:
		switch n := rng.IntN(4); {
		case n == 0 || depth >= 6:
		case n == 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			s := reflect.MakeSlice(v.Type(), n-1, n-1)
			for i := range n - 1 {
				fillRandom(s.Index(i), rng, depth+1)
			}
			v.Set(s)
		}
	case reflect.Map:
		if depth < 6 && rng.IntN(2) == 0 {
			m := reflect.MakeMap(v.Type())
			for range rng.IntN(3) {
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				fillRandom(k, rng, depth+1)
				fillRandom(e, rng, depth+1)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	case reflect.Interface:
		details := []any{nil, map[string]any{"b": "<x>", "a": 1.5}, []int{1, 2}, &struct {
			N string `json:"n"`
		}{"ü"}, (*int)(nil), map[string]any(nil), map[string]any{},
			map[string]any{"decision": "allow", "resource": "clock:now", "grant_id": "g-1", "attempt": 2, "latency_ms": int64(-3), "ok": true, "list": []string{"a", "<b>"}, "none": []string(nil)},
			map[string]any{"result": json.RawMessage(`{"status":"ok","text":"two words, \"quoted\" \\ done","n":[1,2]}`)},
			map[string]any{"arguments": json.RawMessage(` { "a" : 1 } `), "authority": []string{"allowed by grant host-1"}},
			map[string]any{"result": json.RawMessage(`{"html":"<b>&amp;"}`), "sep": json.RawMessage("\"\u2028\""), "empty": json.RawMessage(nil)},
			map[string]any{"z\"key": json.RawMessage(`"a\"b"`), "<k>": json.RawMessage("[true,null,\"x\\ty\"]")},
		}
		if d := details[rng.IntN(len(details))]; d != nil {
			v.Set(reflect.ValueOf(d))
		}
	case reflect.String:
		v.SetString(randomStrings[rng.IntN(len(randomStrings))])
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if rng.IntN(3) > 0 {
			v.SetInt(rng.Int64N(1<<40) - 1<<39)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if rng.IntN(3) > 0 {
			v.SetUint(rng.Uint64N(1 << 40))
		}
	case reflect.Float32, reflect.Float64:
		v.SetFloat(rng.Float64())
	default:
		panic("fillRandom: no rule for " + v.Type().String())
	}
}

// TestResultEncoderMatchesEncodingJSON encodes random tool results, nested
// and of every kind tools build, and a few encoding/json writes with
// care (floats at the edges of its exponent form, HTML characters, odd
// strings), by hand and with schema.Marshal (json.Marshal keeping <, >
// and &, which the model reads as written).
func TestResultEncoderMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	floats := []float64{0, math.Copysign(0, -1), 1, -1.5, 0.1, 1e-6, 9.99e-7, 1e-7, 123456789, 1e20, 1e21, 1.5e21, -2e-9, 5e-324, math.MaxFloat64, 1.0 / 3}
	var value func(depth int) any
	value = func(depth int) any {
		switch n := rng.IntN(13); {
		case n == 0:
			return nil
		case n == 1:
			return randomStrings[rng.IntN(len(randomStrings))]
		case n == 2:
			return rng.IntN(2000) - 1000
		case n == 3:
			return rng.Int64() - rng.Int64()
		case n == 4:
			return floats[rng.IntN(len(floats))]
		case n == 5:
			return rng.Float64() * math.Pow(10, float64(rng.IntN(50)-25))
		case n == 6:
			return rng.IntN(2) == 0
		case n == 7:
			return []string{randomStrings[rng.IntN(len(randomStrings))], "b"}
		case n == 8:
			raws := []string{`{"a":1}`, ` [1, 2] `, `"<b>"`, `{"x":"\u2028"}`}
			return json.RawMessage(raws[rng.IntN(len(raws))])
		case n == 9:
			return rng.Uint64()
		case depth >= 4:
			return "leaf"
		case n == 10:
			list := make([]any, rng.IntN(4))
			for i := range list {
				list[i] = value(depth + 1)
			}
			return list
		case n == 11:
			list := make([]map[string]any, rng.IntN(3))
			for i := range list {
				list[i] = object(rng, depth+1, value)
			}
			return list
		default:
			return object(rng, depth+1, value)
		}
	}
	for i := range 3000 {
		result := object(rng, 0, value)
		want, werr := schema.Marshal(result)
		got, gerr := encodeResult(result)
		if (werr != nil) != (gerr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("result %d differs:\nhand          %s (%v)\nencoding/json %s (%v)", i, got, gerr, want, werr)
		}
	}
	for _, bad := range []any{math.NaN(), math.Inf(1), math.Inf(-1), json.RawMessage(`{"a":`), json.RawMessage(`1 2`)} {
		if _, err := encodeResult(map[string]any{"x": bad}); err == nil {
			t.Fatalf("%v was encoded; encoding/json refuses it", bad)
		}
	}
	kept := map[string]any{"html": "<b>&amp;</b>", "raw": json.RawMessage(`{"a":"<i>"}`)}
	if got, _ := encodeResult(kept); string(got) != `{"html":"<b>&amp;</b>","raw":{"a":"<i>"}}` {
		t.Fatalf("a result's HTML characters: %s, want them as written", got)
	}
}

// object is a random map of up to 20 members (more than the encoder's
// sorting buffer) whose values come from value.
func object(rng *rand.Rand, depth int, value func(int) any) map[string]any {
	if rng.IntN(10) == 0 {
		return nil
	}
	m := map[string]any{}
	for range rng.IntN(21) {
		m[randomStrings[rng.IntN(len(randomStrings))]+strconv.Itoa(rng.IntN(30))] = value(depth)
	}
	return m
}

// Event stays a comparable type: a Host may compare events or key a map by
// them, so what only the runtime needs stays off it.
var _ = Event{} == Event{}

// TestEventsEncodedAfterTheirCommitsFunction checks that an event is
// logged as it was emitted, though it is encoded after the transaction's
// function returns: with LIBOS_CHECK_CACHES=1 (as in every kernel test), a
// detail changed in its commit after its emit fails the commit, and the
// store with it, instead of being logged as changed.
func TestEventsEncodedAfterTheirCommitsFunction(t *testing.T) {
	h := newHarness(t, "")
	if err := h.rt.update(func(tx *txn) error {
		return h.rt.emit(tx, Event{Kind: EventCheckpoint, Reason: "kept", Detail: map[string]any{"n": 1}})
	}); err != nil {
		t.Fatal(err)
	}
	evs, err := h.rt.Store().Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || !strings.Contains(string(evs[0].Data), `"detail":{"n":1}`) {
		t.Fatalf("the log holds %v, want the event as emitted", evs)
	}
	err = h.rt.update(func(tx *txn) error {
		changed := map[string]any{"n": 1}
		if err := h.rt.emit(tx, Event{Kind: EventCheckpoint, Reason: "changed", Detail: changed}); err != nil {
			return err
		}
		changed["n"] = 3
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "changed after it was emitted") {
		t.Fatalf("a detail changed in its commit after the emit: %v, want the commit refused", err)
	}
}

// TestEventTheEncoderRefusesIsKept checks what a runtime without the check
// does with a detail value the event encoder refuses (NaN): the commit goes
// through, and the log and the OnEvent hook both hold the event with the
// encoder's complaint in place of its detail.
func TestEventTheEncoderRefusesIsKept(t *testing.T) {
	t.Setenv("LIBOS_CHECK_CACHES", "0")
	h := newHarness(t, "")
	if err := h.rt.update(func(tx *txn) error {
		return h.rt.emit(tx, Event{Kind: EventCheckpoint, PID: 7, Reason: "odd", Detail: map[string]any{"x": math.NaN()}})
	}); err != nil {
		t.Fatalf("the commit of an event with a NaN: %v", err)
	}
	evs, err := h.rt.Store().Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || !strings.Contains(string(evs[0].Data), `"reason":"odd","detail":{"encoding_error":`) {
		t.Fatalf("the log holds %v, want the event with the encoder's complaint", evs)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	last := h.events[len(h.events)-1]
	if d, ok := last.Detail.(map[string]any); !ok || d["encoding_error"] == nil || last.Seq != evs[0].Seq {
		t.Fatalf("the hook got %+v, want the event as logged", last)
	}
}

// TestRecordsEncodedAfterTheirCommitsFunction checks that a process record
// whose encoding cannot fail is encoded when its batch is built, after the
// transaction's function returns: with LIBOS_CHECK_CACHES=1 (as in every
// kernel test), a saved copy changed after it was written fails the commit,
// and the store with it, instead of being stored as changed. A record that
// could fail to encode is encoded in the function, where a failure fails
// only its commit. A call record is encoded late as well.
func TestRecordsEncodedAfterTheirCommitsFunction(t *testing.T) {
	h := newHarness(t, "")
	pid := h.spawn(clockGrants())
	write := func(change func(r *procRecord), after func(saved *procRecord)) error {
		return h.rt.store.Update(func(otx *objects.Txn) error {
			tx := &txn{Txn: otx, records: h.rt.records}
			r, err := loadProc(tx, pid)
			if err != nil {
				return err
			}
			r.Turn++
			change(r)
			if err := saveProc(tx, r); err != nil {
				return err
			}
			saved := tx.procs[pid].copy
			if err := writeProcs(tx); err != nil {
				return err
			}
			after(saved)
			return nil
		})
	}
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	err := write(func(r *procRecord) {
		r.Grants = append(capabilities.CloneGrants(r.Grants), capabilities.Grant{ID: "far", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow, ExpiresAt: &far})
	}, func(*procRecord) {})
	if err == nil || errors.Is(err, objects.ErrFailed) || !strings.Contains(err.Error(), "encode record") {
		t.Fatalf("a record that fails to encode: %v, want its commit refused, the store working", err)
	}
	if err := write(func(*procRecord) {}, func(*procRecord) {}); err != nil {
		t.Fatalf("the commit after a refused record: %v", err)
	}
	err = write(func(*procRecord) {}, func(saved *procRecord) { saved.Reason = "changed after its write" })
	if !errors.Is(err, objects.ErrFailed) || !strings.Contains(err.Error(), "changed after it was staged") {
		t.Fatalf("a record changed after its write: %v, want the commit and the store failed", err)
	}

	h = newHarness(t, "")
	err = h.rt.update(func(tx *txn) error {
		cr := callRecord{Turn: 1, Status: "started", StartedAt: epoch}
		if err := putRecord(tx, callKey(pid, 1), &cr); err != nil {
			return err
		}
		cr.Status = "changed after its write"
		return nil
	})
	if !errors.Is(err, objects.ErrFailed) || !strings.Contains(err.Error(), "changed after it was staged") {
		t.Fatalf("a call record changed after its write: %v, want the commit and the store failed", err)
	}
}

// TestRecordsThatCouldFailToEncode checks encodesSafely against the
// encoder: a wait, a dispatch, or a time RFC 3339 cannot say makes a record
// one to encode in its commit's function.
func TestRecordsThatCouldFailToEncode(t *testing.T) {
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, r := range map[string]*procRecord{
		"wait":      {Record: process.Record{Wait: &process.Wait{Kind: process.WaitTimer}}},
		"dispatch":  {Dispatch: &quantum.Batch{}},
		"created":   {Record: process.Record{CreatedAt: far}},
		"wall mark": {WallMark: far},
		"grant":     {Record: process.Record{Grants: []capabilities.Grant{{ID: "g", Resource: "r", ExpiresAt: &far}}}},
	} {
		if r.encodesSafely() {
			t.Errorf("%s: a record that could fail to encode is said to encode safely", name)
		}
	}
	if (&callRecord{StartedAt: far}).encodesSafely() || (&callRecord{StartedAt: epoch, FinishedAt: far}).encodesSafely() {
		t.Error("a call record with a time RFC 3339 cannot say is said to encode safely")
	}
	if _, err := (&callRecord{StartedAt: far}).appendJSON(nil); err == nil {
		t.Error("a call record started in year 10000 encoded: the check guards nothing")
	}
	if !(&callRecord{StartedAt: epoch}).encodesSafely() || !(&toolRecord{}).encodesSafely() {
		t.Error("a plain call or tool record is said to be unsafe to encode")
	}
	ok := &procRecord{Record: process.Record{CreatedAt: epoch, Grants: []capabilities.Grant{{ID: "g", Resource: "r", ExpiresAt: &epoch}}}}
	if !ok.encodesSafely() {
		t.Fatal("a plain record is said to be unsafe to encode")
	}
	if _, err := ok.appendJSON(nil); err != nil {
		t.Fatal(err)
	}
	bad := &procRecord{Record: process.Record{Grants: []capabilities.Grant{{ID: "g", Resource: "r", ExpiresAt: &far}}}}
	if _, err := bad.appendJSON(nil); err == nil {
		t.Fatal("a grant expiring in year 10000 encoded: the check guards nothing")
	}
}
