package jsrunner

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"sync"
)

// A JSON-array artifact is framed into pages of complete records. The
// framer only finds record boundaries (string, escape and bracket
// structure); each page's records are then validated as JSON as a whole,
// and a page that fails is split again to name the bad record.

// frameError is a framing failure at a byte offset of the artifact.
type frameError struct {
	offset int64
	reason string
	// tooLarge marks a record longer than the room a page had for it.
	tooLarge bool
	// overInput marks a first record within the page's bytes whose call
	// input would not fit (see pageFits); encoded is what the record adds.
	overInput bool
	encoded   int64
}

func (e *frameError) Error() string { return fmt.Sprintf("at byte offset %d: %s", e.offset, e.reason) }

// valueScan is the resumable state of scanning one array element.
type valueScan struct {
	depth int
	inStr bool
	esc   bool
	// last is the offset of the element's last significant byte, -1 before any.
	last int64
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// scan advances over chunk, which starts at file offset off, and returns the
// index in chunk of the byte that ends the element (',' or the array's
// closing ']') or -1 when the element continues past chunk.
func (s *valueScan) scan(chunk []byte, off int64) int {
	for i, c := range chunk {
		if s.inStr {
			switch {
			case s.esc:
				s.esc = false
			case c == '\\':
				s.esc = true
			case c == '"':
				s.inStr = false
			}
			s.last = off + int64(i)
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			s.inStr = true
		case '[', '{':
			s.depth++
		case ']', '}':
			if s.depth == 0 {
				return i
			}
			s.depth--
		case ',':
			if s.depth == 0 {
				return i
			}
		}
		s.last = off + int64(i)
	}
	return -1
}

// arrayFramer reads a top-level JSON array from an immutable snapshot and
// yields consecutive pages of whole records. It keeps only the bytes from
// the current page's first record onward in memory.
type arrayFramer struct {
	r    io.ReaderAt
	size int64

	buf  []byte
	base int64 // file offset of buf[0]

	// next is the offset of the first record of the next page; eof is set
	// once the array's closing bracket has been framed.
	next    int64
	started bool
	eof     bool
	empty   bool
}

const framerReadChunk = 256 << 10

// assignmentPrefix matches a JavaScript assignment of an array to a dotted
// or indexed name, up to and including the array's '['.
// Compiled on first use: compiling at package init taxes every libos start.
var assignmentPrefix = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*(?:\.[A-Za-z_$][A-Za-z0-9_$]*|\[[0-9]+\]|\["[^"\\]{0,64}"\])*[ \t\r\n]*=[ \t\r\n]*\[`)
})

// maxAssignmentPrefix bounds how far the framer looks for the '['.
const maxAssignmentPrefix = 1024

func newArrayFramer(r io.ReaderAt, size int64) *arrayFramer {
	return &arrayFramer{r: r, size: size}
}

// window returns the buffered bytes from off onward, reading more when fewer
// than want bytes are buffered. It never drops bytes at or after keep.
func (f *arrayFramer) window(off, keep int64, want int) ([]byte, error) {
	if off < f.base {
		return nil, fmt.Errorf("framer: offset %d is before the buffer at %d", off, f.base)
	}
	end := f.base + int64(len(f.buf))
	if end-off >= int64(want) || end >= f.size {
		return f.buf[off-f.base:], nil
	}
	// Drop what the current page no longer needs, then append.
	if keep > f.base {
		drop := min(keep-f.base, int64(len(f.buf)))
		n := copy(f.buf, f.buf[drop:])
		f.buf = f.buf[:n]
		f.base += drop
	}
	need := max(int64(want)-(end-off), framerReadChunk)
	need = min(need, f.size-end)
	if int64(cap(f.buf)-len(f.buf)) < need {
		grown := make([]byte, len(f.buf), int64(len(f.buf))+need+framerReadChunk)
		copy(grown, f.buf)
		f.buf = grown
	}
	start := len(f.buf)
	f.buf = f.buf[:start+int(need)]
	n, err := f.r.ReadAt(f.buf[start:], end)
	f.buf = f.buf[:start+n]
	if err != nil && !(errors.Is(err, io.EOF) && int64(n) == need) {
		return nil, fmt.Errorf("read artifact snapshot at %d: %w", end, err)
	}
	return f.buf[off-f.base:], nil
}

// skipSpace returns the offset of the first non-space byte at or after off
// (f.size if none).
func (f *arrayFramer) skipSpace(off, keep int64) (int64, error) {
	for off < f.size {
		w, err := f.window(off, keep, 1)
		if err != nil {
			return 0, err
		}
		for i, c := range w {
			if !isJSONSpace(c) {
				return off + int64(i), nil
			}
		}
		off += int64(len(w))
	}
	return f.size, nil
}

func (f *arrayFramer) byteAt(off, keep int64) (byte, error) {
	w, err := f.window(off, keep, 1)
	if err != nil {
		return 0, err
	}
	if len(w) == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	return w[0], nil
}

// start positions the framer on the first record.
func (f *arrayFramer) start() error {
	f.started = true
	off, err := f.skipSpace(0, 0)
	if err != nil {
		return err
	}
	if off >= f.size {
		return &frameError{offset: off, reason: "the artifact is empty; json_array framing needs a JSON array"}
	}
	if c, err := f.byteAt(off, 0); err != nil {
		return err
	} else if c != '[' {
		// An archive such as Twitter's (window.YTD.tweets.part0 = [...])
		// wraps the array in a JavaScript assignment; runx frames the array.
		w, err := f.window(off, 0, maxAssignmentPrefix)
		if err != nil {
			return err
		}
		m := assignmentPrefix().Find(w[:min(len(w), maxAssignmentPrefix)])
		if m == nil {
			return &frameError{offset: off, reason: "the artifact does not start with a JSON array ('[') or a JavaScript assignment of one (name = [...])"}
		}
		off += int64(len(m)) - 1
	}
	first, err := f.skipSpace(off+1, off)
	if err != nil {
		return err
	}
	if first >= f.size {
		return &frameError{offset: first, reason: "the array is not terminated"}
	}
	if c, _ := f.byteAt(first, off); c == ']' {
		f.empty = true
		f.next = first
		return f.checkTrailer(first + 1)
	}
	f.next = first
	return nil
}

// checkTrailer accepts only whitespace after the array, and one ';' as a
// JavaScript assignment may end with.
func (f *arrayFramer) checkTrailer(off int64) error {
	rest, err := f.skipSpace(off, off)
	if err != nil {
		return err
	}
	if rest < f.size {
		if c, err := f.byteAt(rest, rest); err == nil && c == ';' {
			if rest, err = f.skipSpace(rest+1, rest); err != nil {
				return err
			}
		}
	}
	if rest < f.size {
		return &frameError{offset: rest, reason: "unexpected data after the JSON array"}
	}
	return nil
}

// scanRecord scans the record starting at start and returns its end
// (exclusive) and the offset of its terminator. A record running past
// limit bytes is reported as too large without being read further.
func (f *arrayFramer) scanRecord(start, keep, limit int64) (end, term int64, err error) {
	s := valueScan{last: -1}
	off := start
	for {
		if off-start > limit {
			return 0, 0, &frameError{offset: start, reason: "record too large", tooLarge: true}
		}
		if off >= f.size {
			return 0, 0, &frameError{offset: start, reason: "the record or the array is not terminated before the end of the artifact"}
		}
		w, err := f.window(off, keep, framerReadChunk)
		if err != nil {
			return 0, 0, err
		}
		if i := s.scan(w, off); i >= 0 {
			term = off + int64(i)
			if s.last < 0 {
				return 0, 0, &frameError{offset: start, reason: "an array element is missing (empty element or trailing comma)"}
			}
			end = s.last + 1
			if end-start > limit {
				return 0, 0, &frameError{offset: start, reason: "record too large", tooLarge: true}
			}
			return end, term, nil
		}
		off += int64(len(w))
	}
}

// framedPage is one page of whole records.
type framedPage struct {
	offset, length, next int64
	eof                  bool
	span                 []byte // the artifact bytes [offset, offset+length); valid until the next call
}

// pageFits reports whether the call for a page fits: the page's records
// span [offset, offset+length) and encode to records bytes in the call's
// input, and the page is followed by next (eof at the array's end).
type pageFits func(offset, length, next int64, eof bool, records int64) bool

// nextPage frames the next page so that its span is at most budget bytes.
func (f *arrayFramer) nextPage(budget int64) (framedPage, error) {
	return f.nextPageFitting(budget, nil)
}

// nextPageFitting frames the next page so that its span is at most budget
// bytes and, when fits is set, its call's input fits as well: records are
// measured as they are encoded (encodedStringLen, a comma between two), so
// a page holds fewer records only when their encoding needs it.
func (f *arrayFramer) nextPageFitting(budget int64, fits pageFits) (framedPage, error) {
	if !f.started {
		if err := f.start(); err != nil {
			return framedPage{}, err
		}
	}
	if f.eof {
		return framedPage{}, errors.New("framer: read past the last page")
	}
	pageStart := f.next
	if f.empty {
		f.eof = true
		return framedPage{offset: pageStart, next: f.size, eof: true, span: nil}, nil
	}
	end, term, err := f.scanRecord(pageStart, pageStart, budget)
	if err != nil {
		return framedPage{}, err
	}
	// start is where the last record scanned begins; prevEnd ends the one
	// before it, where the page ends if that record's call does not fit.
	start, prevEnd := pageStart, int64(-1)
	var encoded int64
	for {
		c, err := f.byteAt(term, pageStart)
		if err != nil {
			return framedPage{}, err
		}
		next, eof := f.size, false
		if c == ']' {
			if err := f.checkTrailer(term + 1); err != nil {
				return framedPage{}, err
			}
			eof = true
		} else {
			if c != ',' {
				// A '}' closes a value at the array's own level: nothing
				// but a comma or the array's end may follow a record.
				return framedPage{}, &frameError{offset: term, reason: fmt.Sprintf("%q after an array element, where ',' or ']' must be", c)}
			}
			// The next record starts after any whitespace.
			if next, err = f.skipSpace(term+1, pageStart); err != nil {
				return framedPage{}, err
			}
			if next >= f.size {
				return framedPage{}, &frameError{offset: term, reason: "the array is not terminated"}
			}
			if c, _ := f.byteAt(next, pageStart); c == ']' {
				return framedPage{}, &frameError{offset: term, reason: "an array element is missing (empty element or trailing comma)"}
			}
		}
		if fits != nil {
			w, err := f.window(start, pageStart, int(end-start))
			if err != nil {
				return framedPage{}, err
			}
			cost := encodedStringLen(w[:end-start])
			if start != pageStart {
				cost++ // the comma before it
			}
			if !fits(pageStart, end-pageStart, next, eof, encoded+cost) {
				if start == pageStart {
					return framedPage{}, &frameError{offset: start, reason: "record too large for the call's input", tooLarge: true, overInput: true, encoded: cost}
				}
				// The record opens the next page: f.next is its start.
				end = prevEnd
				break
			}
			encoded += cost
		}
		f.next = next
		if eof {
			f.eof = true
			break
		}
		room := budget - (next - pageStart)
		if room <= 0 {
			break
		}
		e, t, err := f.scanRecord(next, pageStart, room)
		var fe *frameError
		if errors.As(err, &fe) && fe.tooLarge {
			break // the record opens the next page
		}
		if err != nil {
			return framedPage{}, err
		}
		start, prevEnd = next, end
		end, term = e, t
	}
	w, err := f.window(pageStart, pageStart, int(end-pageStart))
	if err != nil {
		return framedPage{}, err
	}
	return framedPage{
		offset: pageStart,
		length: end - pageStart,
		next:   f.next,
		eof:    f.eof,
		span:   w[:end-pageStart],
	}, nil
}

// firstInvalidRecord finds the first record of span (a page starting at file offset
// base) that is not valid JSON according to valid; it is used only to explain
// a page that failed validation.
func firstInvalidRecord(span []byte, base int64, valid func([]byte) bool) (int64, bool) {
	off := 0
	for off < len(span) {
		for off < len(span) && (isJSONSpace(span[off]) || span[off] == ',') {
			off++
		}
		if off >= len(span) {
			break
		}
		s := valueScan{last: -1}
		i := s.scan(span[off:], int64(off))
		stop := len(span)
		if i >= 0 {
			stop = off + i
		}
		end := stop
		if s.last >= 0 {
			end = int(s.last) + 1
		}
		if !valid(span[off:end]) {
			return base + int64(off), true
		}
		off = stop + 1
	}
	return 0, false
}
