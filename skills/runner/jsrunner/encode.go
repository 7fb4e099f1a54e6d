package jsrunner

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dop251/goja"
)

// maxOutputDepth bounds the nesting of a result; deeper values are refused
// rather than recursed into.
const maxOutputDepth = 1000

// errOutputTooLarge is returned (wrapped) when an encoded result passes its limit.
var errOutputTooLarge = errors.New("output is larger than the limit")

// outputError explains why a value is not JSON-compatible, naming where it sits.
type outputError struct {
	path   string
	reason string
}

func (e *outputError) Error() string { return e.path + ": " + e.reason }

// jsonEncoder writes a goja value as JSON while enforcing the JSON-compatible
// subset: null, booleans, finite numbers, strings, arrays and ordinary
// objects, without cycles. A value JSON.stringify would silently drop or
// mangle (undefined, functions, symbols, BigInt, non-finite numbers, holes,
// Map/Set/Date and other exotic objects) is refused instead, so the output is
// exactly what the module returned. What JSON.stringify never looks at is
// left out as it leaves it out: non-enumerable and symbol-keyed properties,
// and an array's properties other than its elements.
type jsonEncoder struct {
	buf   []byte
	limit int
	seen  map[*goja.Object]struct{}
	// eng is the engine the value lives in, for the built-ins captured
	// before module code ran; it is let go once the call's value is
	// encoded (release), so that the call's heap does not outlive it.
	eng *engine
	// protoIndex caches indexOnPrototypes for each prototype met.
	protoIndex map[*goja.Object]bool
	// path is where the encoder is, kept as keys and indexes and spelled
	// out only when a refusal names it.
	path []pathSeg
}

// pathSeg is one step of a path: an object key, or an array index.
type pathSeg struct {
	key     string
	index   int64
	isIndex bool
}

func newJSONEncoder(limit int, eng *engine) *jsonEncoder {
	return &jsonEncoder{limit: limit, seen: make(map[*goja.Object]struct{}), eng: eng}
}

// release lets go of everything of the engine whose value was encoded: the
// engine and the prototypes met, whose map is dropped, not cleared (a cleared
// map was seen to keep its keys reachable). seen is empty already: object
// removes what it adds, however it returns.
func (e *jsonEncoder) release() {
	e.eng = nil
	e.protoIndex = nil
}

func (e *jsonEncoder) where() string {
	var b strings.Builder
	b.WriteString("result")
	for _, seg := range e.path {
		if seg.isIndex {
			b.WriteByte('[')
			b.WriteString(strconv.FormatInt(seg.index, 10))
			b.WriteByte(']')
		} else {
			b.WriteString(pathKey(seg.key))
		}
	}
	return b.String()
}

func (e *jsonEncoder) refuse(format string, args ...any) error {
	return &outputError{path: e.where(), reason: fmt.Sprintf(format, args...)}
}

func (e *jsonEncoder) checkSize() error {
	if len(e.buf) > e.limit {
		return fmt.Errorf("%w of %d bytes", errOutputTooLarge, e.limit)
	}
	return nil
}

// encode appends v. It may run JavaScript (getters, proxy traps), so it must
// be called from inside a goja call so exceptions and interrupts surface as
// errors of that call.
func (e *jsonEncoder) encode(v goja.Value) error {
	switch {
	case v == nil || goja.IsUndefined(v):
		return e.refuse("undefined is not JSON-compatible")
	case goja.IsNull(v):
		e.buf = append(e.buf, "null"...)
		return e.checkSize()
	case goja.IsBigInt(v):
		return e.refuse("BigInt is not JSON-compatible")
	case goja.IsNumber(v):
		return e.number(v)
	case goja.IsString(v):
		e.str(v)
		return e.checkSize()
	}
	switch t := v.(type) {
	case *goja.Symbol:
		return e.refuse("a symbol is not JSON-compatible")
	case *goja.Object:
		return e.object(t)
	}
	if b, ok := v.Export().(bool); ok {
		if b {
			e.buf = append(e.buf, "true"...)
		} else {
			e.buf = append(e.buf, "false"...)
		}
		return e.checkSize()
	}
	return e.refuse("a value of type %s is not JSON-compatible", v.ExportType())
}

func (e *jsonEncoder) number(v goja.Value) error {
	f := v.ToFloat()
	switch {
	case math.IsNaN(f):
		return e.refuse("NaN is not JSON-compatible")
	case math.IsInf(f, 0):
		return e.refuse("an infinite number is not JSON-compatible")
	case f == math.Trunc(f) && math.Abs(f) < 1e21:
		// Integers print without exponent below 1e21 in JavaScript; -0 prints as 0.
		if math.Abs(f) < 1<<53 {
			e.buf = strconv.AppendInt(e.buf, int64(f), 10)
		} else {
			e.buf = strconv.AppendFloat(e.buf, f, 'f', -1, 64)
		}
	default:
		// goja formats other numbers exactly as Number.prototype.toString does.
		e.buf = append(e.buf, v.String()...)
	}
	return e.checkSize()
}

// str appends a JSON string with JSON.stringify's escaping: quotes,
// backslashes and control characters are escaped, unpaired surrogates become
// \uXXXX escapes, everything else is written as UTF-8.
func (e *jsonEncoder) str(v goja.Value) {
	s := v.String()
	if strings.ContainsRune(s, utf8.RuneError) {
		if gs, ok := v.(goja.String); ok {
			e.utf16String(gs)
			return
		}
	}
	e.quote(s)
}

func (e *jsonEncoder) quote(s string) {
	e.buf = append(e.buf, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		e.buf = append(e.buf, s[start:i]...)
		e.buf = appendEscape(e.buf, rune(c))
		start = i + 1
	}
	e.buf = append(e.buf, s[start:]...)
	e.buf = append(e.buf, '"')
}

func appendEscape(dst []byte, c rune) []byte {
	switch c {
	case '"':
		return append(dst, '\\', '"')
	case '\\':
		return append(dst, '\\', '\\')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	const hex = "0123456789abcdef"
	return append(dst, '\\', 'u', hex[c>>12&0xf], hex[c>>8&0xf], hex[c>>4&0xf], hex[c&0xf])
}

func (e *jsonEncoder) utf16String(s goja.String) {
	e.buf = append(e.buf, '"')
	n := s.Length()
	for i := 0; i < n; i++ {
		c := s.CharAt(i)
		switch {
		case utf16.IsSurrogate(rune(c)):
			if c < 0xdc00 && i+1 < n {
				if d := s.CharAt(i + 1); d >= 0xdc00 && d <= 0xdfff {
					e.buf = utf8.AppendRune(e.buf, utf16.DecodeRune(rune(c), rune(d)))
					i++
					continue
				}
			}
			e.buf = appendEscape(e.buf, rune(c))
		case c < 0x20 || c == '"' || c == '\\':
			e.buf = appendEscape(e.buf, rune(c))
		default:
			e.buf = utf8.AppendRune(e.buf, rune(c))
		}
	}
	e.buf = append(e.buf, '"')
}

func (e *jsonEncoder) object(o *goja.Object) error {
	if _, cyclic := e.seen[o]; cyclic {
		return e.refuse("a cycle is not JSON-compatible (the object contains itself)")
	}
	if len(e.seen) >= maxOutputDepth {
		return e.refuse("nesting is deeper than %d levels", maxOutputDepth)
	}
	if _, ok := goja.AssertFunction(o); ok {
		return e.refuse("a function is not JSON-compatible")
	}
	e.seen[o] = struct{}{}
	defer delete(e.seen, o)
	// The engine reports class "Object" for many built-ins (Map, Promise,
	// ...), so the export type tells ordinary objects and arrays apart, and
	// a Symbol.toStringTag marks the remaining built-ins.
	switch typ := o.ExportType(); {
	case typ == typeOfArray && o.ClassName() == "Array":
		return e.array(o)
	case typ == typeOfObject && o.ClassName() == "Object" && builtinTag(o) == "":
		return e.plainObject(o)
	default:
		kind := builtinTag(o)
		if kind == "" {
			kind = o.ClassName()
		}
		return e.refuse("an object of type %s is not JSON-compatible (only plain objects and arrays are)", kind)
	}
}

var (
	typeOfArray   = reflect.TypeOf([]any{})
	typeOfObject  = reflect.TypeOf(map[string]any{})
	typeOfPromise = reflect.TypeOf((*goja.Promise)(nil))
	typeOfProxy   = reflect.TypeOf(goja.Proxy{})
)

// builtinTag returns the Symbol.toStringTag of o ("Map", "Promise", ...) or "".
func builtinTag(o *goja.Object) string {
	if tag := o.GetSymbol(goja.SymToStringTag); tag != nil && goja.IsString(tag) {
		return tag.String()
	}
	return ""
}

func (e *jsonEncoder) array(o *goja.Object) error {
	n := o.Get("length").ToInteger()
	// A missing element is a hole, even where a prototype has that index.
	// Without an index on the prototype chain (the usual case) an element
	// found is the array's own; otherwise each is checked.
	checkOwn := e.indexOnPrototypes(o)
	e.buf = append(e.buf, '[')
	for i := int64(0); i < n; i++ {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		e.path = append(e.path, pathSeg{index: i, isIndex: true})
		el := o.Get(strconv.FormatInt(i, 10))
		if el != nil && checkOwn {
			own, err := e.eng.ownProperty(o, e.eng.vm.ToValue(i))
			if err != nil {
				return err
			}
			if !own {
				el = nil
			}
		}
		if el == nil {
			return e.refuse("an array hole is not JSON-compatible")
		}
		if err := e.encode(el); err != nil {
			return err
		}
		e.path = e.path[:len(e.path)-1]
	}
	e.buf = append(e.buf, ']')
	return e.checkSize()
}

// indexOnPrototypes reports whether an object on o's prototype chain may
// answer an index: a proxy, or an object with an own property named like
// one. Each prototype is looked at once an encoding: one that gains an index
// while the result is encoded (from a getter) can only change what the
// module itself returns.
func (e *jsonEncoder) indexOnPrototypes(o *goja.Object) bool {
	found := false
	for p := o.Prototype(); p != nil && !found; p = p.Prototype() {
		has, seen := e.protoIndex[p]
		if !seen {
			has = p.ExportType() == typeOfProxy || slices.ContainsFunc(p.GetOwnPropertyNames(), isIndexName)
			if e.protoIndex == nil {
				e.protoIndex = make(map[*goja.Object]bool)
			}
			e.protoIndex[p] = has
		}
		found = has
	}
	return found
}

// isIndexName reports whether name is a canonical array index ("0", "17",
// not "01" or "-1").
func isIndexName(name string) bool {
	if name == "" || len(name) > 1 && name[0] == '0' {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < '0' || name[i] > '9' {
			return false
		}
	}
	return true
}

func (e *jsonEncoder) plainObject(o *goja.Object) error {
	keys, err := e.eng.ownKeys(o)
	if err != nil {
		return err
	}
	e.buf = append(e.buf, '{')
	for i, k := range keys {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		e.path = append(e.path, pathSeg{key: k.name})
		e.key(k)
		e.buf = append(e.buf, ':')
		v, err := e.eng.get(o, k)
		if err != nil {
			return err
		}
		if err := e.encode(v); err != nil {
			return err
		}
		e.path = e.path[:len(e.path)-1]
	}
	e.buf = append(e.buf, '}')
	return e.checkSize()
}

// key writes an object key.
func (e *jsonEncoder) key(k propertyKey) {
	if k.exact != nil {
		e.str(k.exact)
		return
	}
	e.quote(k.name)
}

func pathKey(k string) string {
	ident := k != ""
	for i, r := range k {
		if !(r == '_' || r == '$' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			ident = false
			break
		}
	}
	if ident {
		return "." + k
	}
	return "[" + strconv.Quote(k) + "]"
}
