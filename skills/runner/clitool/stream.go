package clitool

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"unicode/utf8"
)

// MaxRetainedBytes is the prefix of stdout and of stderr that a call keeps.
const MaxRetainedBytes = 8 << 20

// Stream is what a call observed on one output stream.
type Stream struct {
	// Retained is the kept prefix: the whole stream when it fit, otherwise at
	// most MaxRetainedBytes cut back so that it does not end inside a UTF-8
	// sequence.
	Retained []byte
	// Bytes counts the whole stream.
	Bytes int64
	// SHA256 hashes the whole stream.
	SHA256 [sha256.Size]byte
	// Truncated is true when Retained is shorter than the stream.
	Truncated bool
}

// SHA256Hex returns the stream digest in lowercase hex.
func (s Stream) SHA256Hex() string { return hex.EncodeToString(s.SHA256[:]) }

// capture counts, hashes and keeps a bounded prefix of everything written to
// it. It is used by one draining goroutine at a time.
type capture struct {
	limit int
	buf   []byte
	n     int64
	h     hash.Hash
}

func newCapture(limit int) *capture {
	return &capture{limit: limit, h: sha256.New()}
}

func (c *capture) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	c.h.Write(p)
	if room := c.limit - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (c *capture) stream() Stream {
	s := Stream{Retained: c.buf, Bytes: c.n, Truncated: c.n > int64(len(c.buf))}
	copy(s.SHA256[:], c.h.Sum(nil))
	if s.Truncated {
		s.Retained = trimPartialRune(s.Retained)
	}
	return s
}

// trimPartialRune drops a UTF-8 sequence that the cut at the retention limit
// left incomplete. Bytes that were invalid in the stream itself stay: only
// the cut is the runtime's doing.
func trimPartialRune(b []byte) []byte {
	for back := 1; back <= utf8.UTFMax && back <= len(b); back++ {
		c := b[len(b)-back]
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-back:]) {
				return b[:len(b)-back]
			}
			return b
		}
	}
	return b
}
