package objects

import "sync"

// A value or an event encoded late is appended to a scratch buffer and kept
// as an exact copy. An encoder's own first guess at a size either wastes
// room in every value it keeps or grows the value by copies, and what is
// kept lives until its batch is applied, or longer in the caches.
var scratchPool = sync.Pool{New: func() any { b := make([]byte, 0, scratchSize); return &b }}

// scratchSize is the room of a scratch buffer: values and events rarely
// need more.
const scratchSize = 4 << 10

// appendExact runs encode on a scratch buffer holding prefix and returns a
// copy of what encode returned, of exactly its length. The returned bytes
// share nothing with the scratch buffer. Only the buffer lent goes back to
// the pool, never what encode returned: an encoder that returns a buffer of
// its own may still hold it, and one an append grew is left to the
// collector.
func appendExact(prefix []byte, encode func(dst []byte) ([]byte, error)) ([]byte, error) {
	p := scratchPool.Get().(*[]byte)
	dst := append((*p)[:0], prefix...)
	b, err := encode(dst)
	if err != nil {
		// b may be anything encode left; the buffer is not lent again.
		return nil, err
	}
	out := make([]byte, len(b))
	copy(out, b)
	*p = dst[:0]
	scratchPool.Put(p)
	return out, nil
}
