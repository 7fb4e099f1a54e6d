package jsrunner

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// frameAll frames data into pages of at most budget bytes.
func frameAll(t *testing.T, data []byte, budget int64) ([]framedPage, error) {
	t.Helper()
	fr := newArrayFramer(bytes.NewReader(data), int64(len(data)))
	var pages []framedPage
	for i := 0; i <= len(data)+1; i++ {
		pg, err := fr.nextPage(budget)
		if err != nil {
			return pages, err
		}
		pg.span = bytes.Clone(pg.span)
		pages = append(pages, pg)
		if pg.eof {
			return pages, nil
		}
	}
	t.Fatalf("framing %q did not end", data)
	return nil, nil
}

func checkFraming(t *testing.T, data []byte, budget int64) {
	pages, err := frameAll(t, data, budget)
	prevNext := int64(-1)
	var got []json.RawMessage
	pagesValid := true
	for i, pg := range pages {
		if pg.length > budget || pg.offset < 0 || pg.offset+pg.length > int64(len(data)) || pg.next < pg.offset+pg.length {
			t.Fatalf("%q page %d: bad bounds %+v (budget %d)", data, i, pg, budget)
		}
		if !bytes.Equal(pg.span, data[pg.offset:pg.offset+pg.length]) {
			t.Fatalf("%q page %d: span is not the artifact bytes", data, i)
		}
		if prevNext >= 0 && pg.offset != prevNext {
			t.Fatalf("%q page %d starts at %d, previous next_offset %d", data, i, pg.offset, prevNext)
		}
		prevNext = pg.next
		if pg.eof && pg.next != int64(len(data)) {
			t.Fatalf("%q last page next_offset %d, want %d", data, pg.next, len(data))
		}
		if len(pg.span) > 0 {
			var recs []json.RawMessage
			if json.Unmarshal(append(append([]byte("["), pg.span...), ']'), &recs) == nil {
				got = append(got, recs...)
			} else {
				pagesValid = false
			}
		}
	}
	// Framed pages that each hold valid records make a valid array (a
	// ';' may follow it, as a script's assignment ends): nothing the
	// framer passes over between records is left unchecked.
	if trimmed := bytes.TrimSpace(data); err == nil && pagesValid && len(trimmed) > 0 && trimmed[0] == '[' {
		if body := bytes.TrimSpace(bytes.TrimSuffix(trimmed, []byte(";"))); !json.Valid(body) {
			t.Fatalf("%q (budget %d): framed into valid pages, but is not a JSON array", data, budget)
		}
	}
	// A valid array whose elements each fit the budget frames completely,
	// into exactly its elements.
	var want []json.RawMessage
	if json.Unmarshal(data, &want) != nil || bytes.TrimSpace(data)[0] != '[' {
		return
	}
	for _, r := range want {
		if int64(len(r)) > budget {
			return
		}
	}
	if err != nil {
		t.Fatalf("%q (budget %d): valid array refused: %v", data, budget, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%q (budget %d): framed %d records, want %d", data, budget, len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%q: record %d framed as %s, want %s", data, i, got[i], want[i])
		}
	}
}

var framingSamples = []string{
	`[]`, ` [ ] `, `[1]`, `[1,2,3]`, "[\n 1 ,\n 2\n]\n", `[{"a":"]"},{"b":"\"}"}]`, `[[1,[2]],{"x":[{}]}]`,
	`["\\", "\\\""]`, `[1,]`, `[,1]`, `[1 2]`, `{}`, `[1] x`, `[`, `["abc`, ``, `[null,true,false,-1.5e3]`,
	`[1111}2222]`, `[{"a":1}}{"b":2}]`, `[1,2];`,
}

func TestFraming(t *testing.T) {
	for _, s := range framingSamples {
		for _, budget := range []int64{1, 3, 8, 64, 1 << 20} {
			checkFraming(t, []byte(s), budget)
		}
	}
}

// TestFramingRefusesAStrayCloser: a '}' where an element ends is refused
// whatever the page size (each holding an element), not taken for a comma
// where a page ends.
func TestFramingRefusesAStrayCloser(t *testing.T) {
	for _, data := range []string{`[1111}2222]`, `[{"a":1}}{"b":2}]`, `[1,2}]`} {
		for _, budget := range []int64{8, 9, 16, 64, 1 << 20} {
			if _, err := frameAll(t, []byte(data), budget); err == nil || !strings.Contains(err.Error(), `'}' after an array element`) {
				t.Errorf("%s (budget %d): %v, want the stray '}' refused", data, budget, err)
			}
		}
	}
}

func FuzzFraming(f *testing.F) {
	for _, s := range framingSamples {
		f.Add([]byte(s), uint16(5))
	}
	f.Fuzz(func(t *testing.T, data []byte, budget uint16) {
		checkFraming(t, data, int64(budget%512)+1)
	})
}
