package objects

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"
)

// Key layout. Every subsystem owns a prefix; these three belong to this
// package and are refused by the raw key API.
const (
	prefixObjects  = "o/"
	prefixMeta     = "o/m/"
	prefixPayload  = "o/p/"
	prefixName     = "o/n/"
	prefixEvents   = "ev/"
	prefixSequence = "seq/"
)

var reservedPrefixes = []string{prefixObjects, prefixEvents, prefixSequence}

// reservedPrefixOf returns the reserved prefix key starts with, or "".
func reservedPrefixOf(key []byte) string {
	for _, p := range reservedPrefixes {
		if len(key) >= len(p) && string(key[:len(p)]) == p {
			return p
		}
	}
	return ""
}

// prefixEnd returns the smallest key greater than every key with the prefix,
// or nil when no such key exists (prefix of all 0xff bytes).
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func metaKey(oid string) []byte    { return []byte(prefixMeta + oid) }
func payloadKey(oid string) []byte { return []byte(prefixPayload + oid) }
func nameKey(namespace, name string) []byte {
	return []byte(prefixName + namespace + "\x00" + name)
}
func namespacePrefix(namespace string) []byte {
	return []byte(prefixName + namespace + "\x00")
}
func sequenceKey(name string) []byte { return []byte(prefixSequence + name) }

func eventKey(seq uint64) []byte {
	k := make([]byte, len(prefixEvents)+8)
	copy(k, prefixEvents)
	binary.BigEndian.PutUint64(k[len(prefixEvents):], seq)
	return k
}

func eventSeqFromKey(key []byte) (uint64, error) {
	if len(key) != len(prefixEvents)+8 {
		return 0, fmt.Errorf("objects: corrupt event key %q", key)
	}
	return binary.BigEndian.Uint64(key[len(prefixEvents):]), nil
}

// storedMeta is Meta as persisted, plus the runtime instance that wrote a
// runtime-local payload (lost-ness is derived from it at read time).
type storedMeta struct {
	Meta
	Instance string
}

// The stored meta format is a compact binary record rather than JSON because
// it is decoded and re-encoded on every CAS write, which sits inside the
// store's write lock.
const metaFormatV1 = 1

var errCorrupt = errors.New("corrupt record")

func encodeMeta(m *storedMeta) []byte {
	n := 1 + 10*4 + len(m.OID) + len(m.Namespace) + len(m.Name) + len(m.Kind) +
		len(m.Owner) + len(m.Tier) + len(m.PayloadSHA256) + len(m.Instance) + 40
	for k, v := range m.Labels {
		n += len(k) + len(v) + 10
	}
	b := make([]byte, 0, n)
	b = append(b, metaFormatV1)
	for _, s := range []string{m.OID, m.Namespace, m.Name, m.Kind, m.Owner, string(m.Tier), m.PayloadSHA256, m.Instance} {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, m.Version)
	b = binary.AppendUvarint(b, uint64(m.PayloadBytes))
	b = binary.AppendVarint(b, m.CreatedAt.UnixNano())
	b = binary.AppendVarint(b, m.UpdatedAt.UnixNano())
	b = binary.AppendUvarint(b, uint64(len(m.Labels)))
	if len(m.Labels) > 0 {
		keys := make([]string, 0, len(m.Labels))
		for k := range m.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b = appendString(b, k)
			b = appendString(b, m.Labels[k])
		}
	}
	return b
}

// encodeValue encodes m as a staged value (stageMeta); m is never modified
// once staged.
func (m *storedMeta) encodeValue() ([]byte, error) { return encodeMeta(m), nil }

func decodeMeta(b []byte) (storedMeta, error) {
	var m storedMeta
	d := decoder{b: b}
	if format := d.byte(); format != metaFormatV1 {
		if d.err != nil {
			return m, d.err
		}
		return m, fmt.Errorf("%w: unknown meta format %d", errCorrupt, format)
	}
	m.OID = d.string()
	m.Namespace = d.string()
	m.Name = d.string()
	m.Kind = d.string()
	m.Owner = d.string()
	m.Tier = Tier(d.string())
	m.PayloadSHA256 = d.string()
	m.Instance = d.string()
	m.Version = d.uvarint()
	m.PayloadBytes = int(d.uvarint())
	m.CreatedAt = time.Unix(0, d.varint()).UTC()
	m.UpdatedAt = time.Unix(0, d.varint()).UTC()
	if n := d.uvarint(); n > 0 && d.err == nil {
		if n > uint64(len(d.b)) {
			return m, fmt.Errorf("%w: label count %d exceeds record", errCorrupt, n)
		}
		m.Labels = make(map[string]string, n)
		for i := uint64(0); i < n; i++ {
			k := d.string()
			m.Labels[k] = d.string()
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes", errCorrupt, len(d.b))
	}
	return m, d.err
}

const eventFormatV1 = 1

// encodeEvent returns the stored form of e: the time and kind in binary and
// the data as the JSON the caller supplied (the sequence number is the
// key), which is where its data was written, if it was written late
// (Txn.encodeEvents).
func encodeEvent(e *Event) []byte {
	if e.stored != nil {
		return e.stored
	}
	b := make([]byte, 0, 1+10+len(e.Kind)+2+len(e.Data))
	return append(appendEventHeader(b, e), e.Data...)
}

// appendEventHeader appends what precedes an event's data in its stored
// form.
func appendEventHeader(b []byte, e *Event) []byte {
	b = append(b, eventFormatV1)
	b = binary.AppendVarint(b, e.Time.UnixNano())
	return appendString(b, e.Kind)
}

func decodeEvent(seq uint64, b []byte) (Event, error) {
	d := decoder{b: b}
	if format := d.byte(); format != eventFormatV1 {
		if d.err != nil {
			return Event{}, d.err
		}
		return Event{}, fmt.Errorf("%w: unknown event format %d", errCorrupt, format)
	}
	e := Event{Seq: seq}
	e.Time = time.Unix(0, d.varint()).UTC()
	e.Kind = d.string()
	if d.err != nil {
		return Event{}, d.err
	}
	e.Data = json.RawMessage(append([]byte(nil), d.b...))
	return e, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads the fields appended above; the first error sticks and later
// reads return zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated %s", errCorrupt, what)
	}
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail("header")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail("string")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func encodeUint64(v uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, v)
}

func decodeUint64(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: counter of %d bytes, want 8", errCorrupt, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// AppendPadded appends n in decimal, zero-padded to width digits, exactly as
// fmt's "%0*d" writes it: the raw keys of callers carry numbers this way so
// that they sort as the numbers do. It is the hot path of key building,
// where fmt's formatting cost more than the lookup.
func AppendPadded(b []byte, n int64, width int) []byte {
	if n < 0 {
		return fmt.Appendf(b, "%0*d", width, n)
	}
	return AppendPaddedUnsigned(b, uint64(n), width)
}

// AppendPaddedUnsigned is AppendPadded for an unsigned number.
func AppendPaddedUnsigned(b []byte, n uint64, width int) []byte {
	var digits [20]byte
	i := len(digits)
	for n >= 10 {
		i--
		digits[i] = byte('0' + n%10)
		n /= 10
	}
	i--
	digits[i] = byte('0' + n)
	for pad := width - (len(digits) - i); pad > 0; pad-- {
		b = append(b, '0')
	}
	return append(b, digits[i:]...)
}
