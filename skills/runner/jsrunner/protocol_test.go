package jsrunner

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
)

// The per-call messages survive a frame round trip field for field, and a
// truncated or padded meta is refused, never misread.
func TestBinaryMetaRoundTrip(t *testing.T) {
	run := runMsg{Op: "run", Bundle: "abc123", CodeLen: 7, Export: "odd \"name\"", Env: map[string]string{"A": "1", "": "é\x00"},
		TimeoutNS: 2e9, MaxDepth: 10000, OutputMax: MaxOutputBytes, Paged: true, ModuleName: "lib/main.mjs"}
	res := resultMsg{Status: statusFailed, Code: CodeExecutionFailed, Message: "line\nbreak", ControlLen: 3, HasControl: true, OtherKeys: 2, NotObject: true}
	for _, tc := range []struct {
		in, out binaryMeta
	}{
		{&run, &runMsg{}},
		{&res, &resultMsg{}},
		{&runMsg{Env: map[string]string{}}, &runMsg{}},
		{&resultMsg{}, &resultMsg{}},
	} {
		frame, err := appendFrame(nil, tc.in, []byte("code"), []byte("{}"))
		if err != nil {
			t.Fatal(err)
		}
		body, err := readFrame(bufio.NewReader(bytes.NewReader(frame)), tc.out)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(tc.in, tc.out) || string(body) != "code{}" {
			t.Fatalf("round trip: %+v -> %+v, body %q", tc.in, tc.out, body)
		}
		meta := tc.in.appendMeta(nil)
		for cut := 0; cut < len(meta); cut++ {
			if err := tc.out.decodeMeta(meta[:cut]); err == nil {
				t.Fatalf("%T: meta cut to %d of %d bytes was accepted", tc.in, cut, len(meta))
			}
		}
		if err := tc.out.decodeMeta(append(meta, 0)); err == nil {
			t.Fatalf("%T: meta with a trailing byte was accepted", tc.in)
		}
	}
	// A claimed environment larger than the meta is refused before allocating.
	bad := appendString(appendString(nil, "run"), "h")
	bad = appendString(binary.AppendVarint(bad, 0), "add")
	bad = binary.AppendUvarint(bad, 1<<40)
	if err := (&runMsg{}).decodeMeta(bad); err == nil {
		t.Fatal("an oversized environment count was accepted")
	}
}
