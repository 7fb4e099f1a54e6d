package jsrunner

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dop251/goja"
)

// encodeValue renders v with the output encoder, or the refusal.
func encodeValue(t testing.TB, e *engine, v goja.Value) string {
	t.Helper()
	enc := newJSONEncoder(64<<20, e)
	var err error
	fn, _ := goja.AssertFunction(e.vm.ToValue(func(goja.FunctionCall) goja.Value {
		err = enc.encode(v)
		return goja.Undefined()
	}))
	if _, callErr := fn(goja.Undefined()); callErr != nil {
		return "engine error: " + callErr.Error()
	}
	if err != nil {
		return "refused: " + err.Error()
	}
	return string(enc.buf)
}

// compareWithJSONParse checks that decodeJSON builds the same value as the
// engine's JSON.parse.
func compareWithJSONParse(t testing.TB, doc []byte) {
	e := newEngine()
	vm := e.vm
	parse, _ := goja.AssertFunction(vm.Get("JSON").ToObject(vm).Get("parse"))
	want, wantErr := parse(goja.Undefined(), vm.ToValue(string(doc)))
	got, gotErr := decodeJSON(e, doc)
	if wantErr != nil && strings.Contains(wantErr.Error(), "cannot unmarshal number") {
		// The engine refuses numbers beyond float64; the language (and
		// decodeJSON) rounds them to ±Infinity. TestDecodeJSONSpecialCases covers it.
		return
	}
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("%q: JSON.parse error %v, decodeJSON error %v", doc, wantErr, gotErr)
	}
	if wantErr != nil {
		return
	}
	if g, w := encodeValue(t, e, got), encodeValue(t, e, want); g != w {
		t.Fatalf("%q:\n decodeJSON %s\n JSON.parse %s", doc, g, w)
	}
}

var decodeSamples = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1`, `-1`, `1.5`, `-1.5e-7`, `1E400`, `-1e400`, `1e-400`,
	`123456789012345678901234567890`, `9007199254740993`, `0.1`, `1e21`, `100`, `[1,2,3]`,
	`{"a":1,"b":[true,false,null],"c":{"d":"e"}}`,
	`{"b":1,"a":2,"10":3,"2":4}`,
	`{"a":1,"a":2}`,
	`{"__proto__":{"polluted":true},"x":1}`,
	`{"toString":1,"constructor":2,"hasOwnProperty":3}`,
	`"plain"`, `"é😀"`, `"esc \" \\ \/ \b \f \n \r \t \u0001 \u00e9 \ud83d\ude00"`,
	` [ 1 , { "a" : [ ] } ] `,
	`[1,]`, `{"a":1,}`, `[01]`, `[1.]`, `[.5]`, `[-]`, `[1e]`, `[1e+]`, `{a:1}`, `[tru]`, `["a\x"]`, `[1] 2`, `"unterminated`,
	"[\"tab\tinside\"]", `{"a" 1}`, `[1 2]`, ``, ` `,
}

func TestDecodeJSONMatchesJSONParse(t *testing.T) {
	for _, doc := range decodeSamples {
		t.Run(doc, func(t *testing.T) { compareWithJSONParse(t, []byte(doc)) })
	}
	deep := strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	compareWithJSONParse(t, []byte(deep))
}

func TestDecodeJSONSpecialCases(t *testing.T) {
	e := newEngine()
	v, err := decodeJSON(e, []byte(`{"__proto__":{"polluted":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	obj := v.(*goja.Object)
	if obj.Prototype() == nil || obj.Prototype().Get("polluted") != nil {
		t.Fatalf("__proto__ key changed the prototype")
	}
	if got := encodeValue(t, e, v); got != `{"__proto__":{"polluted":true}}` {
		t.Fatalf("own __proto__ property lost: %s", got)
	}
	// An unpaired surrogate escape keeps its code unit (JSON.parse in the
	// engine replaces it with U+FFFD).
	v, err = decodeJSON(e, []byte(`"a\ud800b"`))
	if err != nil {
		t.Fatal(err)
	}
	if s := v.(goja.String); s.Length() != 3 || s.CharAt(1) != 0xd800 {
		t.Fatalf("lone surrogate decoded as %q", v.String())
	}
	// A key with an unpaired surrogate stays that key, apart from one
	// holding U+FFFD, and is written back as it came.
	v, err = decodeJSON(e, []byte(`{"\ud800":"a","\ufffd":"b","x\udc00":{"\ud800\udc00":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := encodeValue(t, e, v), `{"\ud800":"a","\ufffd":"b","x\udc00":{"𐀀":1}}`; got != strings.ReplaceAll(want, `\ufffd`, "\ufffd") {
		t.Fatalf("keys with unpaired surrogates: %s, want %s", got, want)
	}
	v, err = decodeJSON(e, []byte(`[1e400,-1e400,1e-400]`))
	if err != nil {
		t.Fatal(err)
	}
	arr := v.(*goja.Object)
	if !goja.IsInfinity(arr.Get("0")) || !goja.IsInfinity(arr.Get("1")) || arr.Get("1").ToFloat() > 0 || arr.Get("2").ToFloat() != 0 {
		t.Fatalf("out-of-range numbers: %v %v %v", arr.Get("0"), arr.Get("1"), arr.Get("2"))
	}
	if _, err := decodeJSON(e, []byte(strings.Repeat("[", maxInputDepth+1)+strings.Repeat("]", maxInputDepth+1))); err == nil {
		t.Fatal("nesting beyond the limit was accepted")
	}
}

func FuzzDecodeJSON(f *testing.F) {
	for _, doc := range decodeSamples {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if !utf8.Valid(doc) || strings.Contains(strings.ToLower(string(doc)), `\ud`) {
			// The engine's JSON.parse differs by design on invalid text and
			// on surrogate escapes; both are covered above.
			return
		}
		_, err := decodeJSON(newEngine(), doc)
		if valid := json.Valid(doc); valid != (err == nil) {
			t.Fatalf("%q: json.Valid=%v, decodeJSON error %v", doc, valid, err)
		}
		compareWithJSONParse(t, doc)
	})
}
