package kernel

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/libos/libos/llm"
)

// decodeBoth decodes payload with decodeEntries and with encoding/json. It
// returns whether decodeEntries took it and, if so, fails t when the two
// disagree.
func decodeBoth(t *testing.T, payload string) bool {
	t.Helper()
	var doc contextDoc
	jerr := json.Unmarshal([]byte(payload), &doc)
	got, ok := decodeEntries([]byte(payload))
	if !ok {
		return false
	}
	if jerr != nil {
		t.Fatalf("decodeEntries took a payload encoding/json refuses (%v):\n%s", jerr, payload)
	}
	if !reflect.DeepEqual(got, doc.Entries) {
		t.Fatalf("decodeEntries differs from encoding/json on\n%s\ngot  %#v\nwant %#v", payload, got, doc.Entries)
	}
	return true
}

// TestContextDecoderMatchesEncodingJSON decodes contexts of random entries,
// every field filled by reflection (a field added to Entry and not read by
// decodeEntries fails it), as encode writes them, and payloads it must hand
// to encoding/json, or read as encoding/json does: other field orders,
// unknown fields, odd strings and numbers, arguments of every shape.
func TestContextDecoderMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		c := &llmContext{}
		for range rng.IntN(6) {
			var e Entry
			fillRandom(reflect.ValueOf(&e).Elem(), rng, 0)
			c.entries = append(c.entries, e)
		}
		body, _, err := c.encode(0, nil)
		if err != nil {
			t.Fatal(err)
		}
		payload := string(body) + string(contextPayloadEnd)
		if !decodeBoth(t, payload) {
			t.Fatalf("context %d: decodeEntries did not take what encode wrote:\n%s", i, payload)
		}
	}

	taken := []string{
		`{"entries":[]}`,
		`{"entries":[{"role":"user","tokens":0}]}`,
		`{"entries":[{"role":"assistant","kind":"","content":"","tool_calls":null,"tokens":-0}]}`,
		`{"entries":[{"role":"assistant","tool_calls":[],"tokens":1}]}`,
		`{"entries":[{"role":"assistant","tool_calls":[{"id":"a","name":"n","arguments":null}],"tokens":1}]}`,
		`{"entries":[{"role":"assistant","tool_calls":[{"id":"a","name":"n","arguments": {"x" : [1, -2.5e+3, "\u00e9\n", true, false, null, {}], "y":{"z":[]}} },{"id":"b","name":"m","arguments":"str"}],"tokens":7}]}`,
		`{"entries":[{"role":"tool","content":"\ud83d\ude00 pair, \ud83d lone, \ude00 low, \uD83D\uDE00 upper, \u0041\/\b\f\n\r\t\\\"","tokens":3}]}`,
		"{\"entries\":[{\"role\":\"tool\",\"content\":\"raw \xff\xfe bytes, \xe2\x82 cut, \xf0\x9f\x98\x80 ok, \x7f del\",\"tokens\":3}]}",
		`{"entries":[{"role":"tool","kind":"\ud83d\ude00","content":"ends in a pair \ud83d\ude00","tokens":1}]}`,
		`{"entries":[{"role":"tool","kind":"\ud83d\ude00","content":"\ud83d","tokens":1}]}`,
		`{"entries":[{"role":"tool","content":"\ud800\u0041","tokens":1},{"role":"user","content":"\ud800\\u0041","tokens":1}]}`,
		`{"entries":[{"role":"tool","tool_call_id":"c","name":"t","tokens":9223372036854775807}]}`,
	}
	for _, p := range taken {
		if !decodeBoth(t, p) {
			t.Errorf("decodeEntries gave up on a payload in encode's shape:\n%s", p)
		}
	}

	// Payloads decodeEntries must leave to encoding/json: it reads them
	// differently, or refuses them, or it is the only one to read them.
	handed := []string{
		`{"entries":null}`,
		` {"entries":[]}`,
		`{"entries":[]} `,
		`{"entries":[],"more":1}`,
		`{"entries":[{"tokens":1,"role":"user"}]}`,
		`{"entries":[{"Role":"user","tokens":1}]}`,
		`{"entries":[{"role":"user","tokens":1,"extra":true}]}`,
		`{"entries":[{"role":"user","role":"tool","tokens":1}]}`,
		`{"entries":[{"role":"user","tokens":1.0}]}`,
		`{"entries":[{"role":"user","tokens":1e2}]}`,
		`{"entries":[{"role":"user","tokens":01}]}`,
		`{"entries":[{"role":"user","tokens":99999999999999999999}]}`,
		`{"entries":[{"role":"user","tokens":null}]}`,
		`{"entries":[{"role":null,"tokens":1}]}`,
		"{\"entries\":[{\"role\":\"a\x01b\",\"tokens\":1}]}",
		`{"entries":[{"role":"\x","tokens":1}]}`,
		`{"entries":[{"role":"\u12","tokens":1}]}`,
		`{"entries":[{"role":"user","tool_calls":[{"id":"a","name":"n","arguments":{"x":01}}],"tokens":1}]}`,
		`{"entries":[{"role":"user","tool_calls":[{"id":"a","name":"n","arguments":{"x":"\q"}}],"tokens":1}]}`,
		"{\"entries\":[{\"role\":\"user\",\"tool_calls\":[{\"id\":\"a\",\"name\":\"n\",\"arguments\":{\"x\":\"a\x01b\"}}],\"tokens\":1}]}",
		`{"entries":[{"role":"user","tool_calls":[{"id":"a","name":"n","arguments":{"x":"\u00g1"}}],"tokens":1}]}`,
		`{"entries":[{"role":"user","tool_calls":[{"id":"a","name":"n","arguments":[1,]}],"tokens":1}]}`,
		`{"entries":[{"role":"user","tool_calls":[{"id":"a","name":"n","arguments":1.}],"tokens":1}]}`,
		`{"entries":[{"role":"user","tool_calls":[{"id":"a","name":"n","arguments":{"":[0e]}}],"tokens":1}]}`,
		`{"entries":[{"role":"user","tool_calls":[{"id":"a","name":"n","arguments":[1e+]}],"tokens":1}]}`,
		`{"entries":[{"role":"user","tool_calls":[{"id":"a","name":"n","arguments":[-]}],"tokens":1}]}`,
		`{"entries":[{"role":"user","tool_calls":[{"id":"a","name":"n","arguments":[-1.e2]}],"tokens":1}]}`,
		`{"entries":[{"role":"user","tool_calls":[{"name":"n","id":"a","arguments":{}}],"tokens":1}]}`,
		`{"entries":[{"role":"user","tool_calls":[{"id":"a","name":"n","arguments":` + strings.Repeat("[", maxArgumentDepth+2) + strings.Repeat("]", maxArgumentDepth+2) + `}],"tokens":1}]}`,
		`{"entries":[{"role":"user","tokens":1}`,
		`{"entries":[{"role":"user","tokens":1},]}`,
		`{"entries":[{"role":"user"`,
		`{"entries":[`,
		``,
	}
	for _, p := range handed {
		if decodeBoth(t, p) {
			t.Errorf("decodeEntries took a payload it must leave to encoding/json:\n%s", p)
		}
	}
}

// FuzzDecodeEntries builds payloads in encode's shape from fuzzed pieces
// (string contents inserted between quotes as they are, so escapes, bad
// UTF-8 and surrogates are the fuzzer's; the token count; the arguments,
// with their whitespace; which fields appear) and checks decodeEntries
// against encoding/json: whatever it takes, encoding/json reads the same.
// go test runs its seeds; -fuzz FuzzDecodeEntries searches.
func FuzzDecodeEntries(f *testing.F) {
	f.Add("user", `a\ud83d\ude00b`, "\xff\\u0041", "0", ` {"x":[1,-2.5e+3,"\u00e9"]} `, uint8(0xff))
	f.Add("tool", `\ud800\u0041`, `\ud83d`, "-0", `null`, uint8(0x3f))
	f.Add(`\"`, `\/\b\f\n\r\t`, "\xe2\x82", "9223372036854775807", `"s\u12ab"`, uint8(0x15))
	f.Add("0", "0", "0", "0", "0.", uint8(0xd4))
	f.Add("0", "0", "0", "0", `{"":[0e]}`, uint8(0x04))
	f.Fuzz(func(t *testing.T, role, content, kind, tokens, args string, fields uint8) {
		var b strings.Builder
		b.WriteString(`{"entries":[{"role":"` + role + `"`)
		if fields&1 != 0 {
			b.WriteString(`,"kind":"` + kind + `"`)
		}
		if fields&2 != 0 {
			b.WriteString(`,"content":"` + content + `"`)
		}
		if fields&4 != 0 {
			b.WriteString(`,"tool_calls":[{"id":"` + kind + `","name":"` + content + `","arguments":` + args + `}`)
			if fields&64 != 0 {
				b.WriteString(`,{"id":"","name":"","arguments":` + args + `}`)
			}
			b.WriteString(`]`)
		}
		if fields&8 != 0 {
			b.WriteString(`,"tool_call_id":"` + content + kind + `"`)
		}
		if fields&16 != 0 {
			b.WriteString(`,"name":"` + role + `"`)
		}
		b.WriteString(`,"tokens":` + tokens + `}`)
		if fields&32 != 0 {
			b.WriteString(`,{"role":"` + kind + `","tokens":1}`)
		}
		b.WriteString(`]}`)
		decodeBoth(t, b.String())
	})
}

// The entries decoded share no memory with the payload, whose array a
// context may later grow in place or a caller reuse.
func TestDecodedEntriesOwnTheirBytes(t *testing.T) {
	payload := []byte(`{"entries":[{"role":"assistant","content":"plain","tool_calls":[{"id":"c","name":"n","arguments":{"a":1}}],"tokens":1},{"role":"tool","content":"esc\naped","tokens":1}]}`)
	entries, ok := decodeEntries(payload)
	if !ok {
		t.Fatal("not taken")
	}
	for i := range payload {
		payload[i] = 'x'
	}
	want := []Entry{
		{Role: "assistant", Content: "plain", ToolCalls: []llm.ToolCall{{ID: "c", Name: "n", Arguments: json.RawMessage(`{"a":1}`)}}, Tokens: 1},
		{Role: "tool", Content: "esc\naped", Tokens: 1},
	}
	if !reflect.DeepEqual(entries, want) {
		t.Fatalf("after the payload changed: %#v, want %#v", entries, want)
	}
}

// A context written by encode and decoded again is the same context, through
// decodeContext's own path.
func TestDecodeContextRoundTrip(t *testing.T) {
	c := &llmContext{entries: []Entry{
		{Role: "user", Content: "line one\nline \"two\" ü", Tokens: 4},
		{Role: "assistant", ToolCalls: []llm.ToolCall{{ID: "c1", Name: "sleep", Arguments: json.RawMessage(`{"seconds":1}`)}}, Tokens: 3},
		{Role: "tool", ToolCallID: "c1", Name: "sleep", Content: `{"ok":true}`, Tokens: 2},
	}}
	body, _, err := c.encode(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeContext(c.meta, append(body, contextPayloadEnd...))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.entries, c.entries) || got.tokens != 9 {
		t.Fatalf("round trip: %#v (%d tokens), want %#v", got.entries, got.tokens, c.entries)
	}
}

// BenchmarkDecodeContext decodes a context of 200 entries (replies with
// text over several lines, tool calls and their results, about 100 KB), by
// hand and with encoding/json, the same-run baseline.
func BenchmarkDecodeContext(b *testing.B) {
	c := &llmContext{}
	text := strings.Repeat("A line of a reply, with \"quotes\" and a tab\tin it.\n", 8)
	for i := range 100 {
		id := fmt.Sprintf("call_%d", i)
		c.entries = append(c.entries,
			Entry{Role: llm.RoleAssistant, Content: text, ToolCalls: []llm.ToolCall{{ID: id, Name: "read_object", Arguments: json.RawMessage(`{"oid":"0b6c1f2e-6a4d-4f7e-9c3b-2d1e0f9a8b7c","max_bytes":4096}`)}}, Tokens: 120},
			Entry{Role: llm.RoleTool, ToolCallID: id, Name: "read_object", Content: `{"ok":true,"text":"` + strings.Repeat("ü", 40) + `"}`, Tokens: 30})
	}
	body, _, err := c.encode(0, nil)
	if err != nil {
		b.Fatal(err)
	}
	payload := append(body, contextPayloadEnd...)
	b.Run("hand", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			if _, ok := decodeEntries(payload); !ok {
				b.Fatal("not taken")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(payload)))
		for b.Loop() {
			var doc contextDoc
			if err := json.Unmarshal(payload, &doc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
