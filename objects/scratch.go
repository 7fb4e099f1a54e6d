package objects

import "sync"

// A value or an event encoded late is appended to a scratch buffer and kept
// as an exact copy. An encoder's own first guess at a size either wastes
// room in every value it keeps or grows the value by copies, and what is
// kept lives until its batch is applied, or longer in the caches.
var scratchPool = sync.Pool{New: func() any { b := make([]byte, 0, scratchSize); return &b }}

const (
	scratchSize = 4 << 10
	// scratchKeepMax bounds the buffers given back to the pool, so that one
	// large value does not keep its buffer for good.
	scratchKeepMax = 64 << 10
)

// appendExact runs encode on a scratch buffer holding prefix and returns a
// copy of what it appended, prefix included, of exactly that length. The
// returned bytes share nothing with the scratch buffer.
func appendExact(prefix []byte, encode func(dst []byte) ([]byte, error)) ([]byte, error) {
	p := scratchPool.Get().(*[]byte)
	b, err := encode(append((*p)[:0], prefix...))
	if err != nil {
		// b may be anything encode left; the buffer is not lent again.
		return nil, err
	}
	out := make([]byte, len(b))
	copy(out, b)
	if cap(b) <= scratchKeepMax {
		*p = b[:0]
		scratchPool.Put(p)
	}
	return out, nil
}
