package jsrunner

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The host and a worker exchange frames over the worker's stdin and stdout:
// an 8-byte prefix (big-endian meta length, body length), a JSON meta object,
// then the body bytes. Bodies carry module code, inputs and outputs verbatim
// so large payloads are never re-encoded.

const (
	maxMetaBytes = 4 << 20
	// A request body holds at most one bundle plus the inputs; a response
	// body at most the page control plus the output (each bounded by the
	// output limit, with slack for the byte that proves an overrun).
	maxBodyBytes = 64 << 20
)

var errFrameTooLarge = errors.New("frame exceeds the protocol size limit")

// configMsg is the first frame a worker receives.
type configMsg struct {
	Op string `json:"op"` // "config"
	// HeapLimit is the live-heap ceiling the watchdog enforces (bytes).
	HeapLimit int64 `json:"heap_limit"`
	// AddressSpace is the RLIMIT_AS headroom above the worker's mapping at start (bytes); 0 disables it.
	AddressSpace int64 `json:"address_space"`
	// MaxGoStack bounds the Go stack of the engine goroutine (bytes).
	MaxGoStack int64 `json:"max_go_stack"`
}

// readyMsg answers configMsg.
type readyMsg struct {
	Op      string `json:"op"` // "ready" or "error"
	Message string `json:"message,omitempty"`
	PID     int    `json:"pid"`
}

// runMsg asks a worker to call an export once. The body is code (CodeLen
// bytes, only when the worker must compile the bundle) followed by the inputs.
type runMsg struct {
	Op         string            `json:"op"` // "run"
	Bundle     string            `json:"bundle"`
	CodeLen    int               `json:"code_len"`
	Export     string            `json:"export"`
	Env        map[string]string `json:"env"`
	TimeoutNS  int64             `json:"timeout_ns"`
	MaxDepth   int               `json:"max_depth"`
	OutputMax  int               `json:"output_max"`
	Paged      bool              `json:"paged,omitempty"`
	ModuleName string            `json:"module_name"`
}

// Response statuses.
const (
	statusOK           = "ok"
	statusFailed       = "failed"
	statusNeedBundle   = "need_bundle"
	statusProtocolFail = "protocol_error"
)

// resultMsg answers runMsg. For a paged call the body is the runx_page
// control value (ControlLen bytes) followed by the output without it.
type resultMsg struct {
	Status     string `json:"status"`
	Code       string `json:"code,omitempty"`
	Message    string `json:"message,omitempty"`
	ControlLen int    `json:"control_len,omitempty"`
	HasControl bool   `json:"has_control,omitempty"`
	// OtherKeys counts the top-level keys besides runx_page of a paged result.
	OtherKeys int `json:"other_keys,omitempty"`
	// NotObject is set when a paged result is not a plain object.
	NotObject bool `json:"not_object,omitempty"`
}

// binaryMeta is implemented by the per-call messages, whose meta is a
// compact binary record instead of JSON: encoding/json's reflection was the
// largest CPU cost of a warm call's framing on both sides of the pipe.
type binaryMeta interface {
	appendMeta(dst []byte) []byte
	decodeMeta(b []byte) error
}

var errMetaMalformed = errors.New("malformed frame meta")

// metaReader decodes the fields appendMeta wrote, in order; the first
// malformed field sets err and every later read returns a zero value.
type metaReader struct {
	b   []byte
	err error
}

func (r *metaReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errMetaMalformed
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *metaReader) int() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errMetaMalformed
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *metaReader) bool() bool { return r.uvarint() != 0 }

func (r *metaReader) string() string { return r.stringAs("") }

// stringAs is string, returning prev itself when the bytes spell it: a
// worker decodes each request into the previous one, whose names (bundle,
// export, module) usually repeat, so they cost no allocation.
func (r *metaReader) stringAs(prev string) string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = errMetaMalformed
		return ""
	}
	s := prev
	if string(r.b[:n]) != prev {
		s = string(r.b[:n])
	}
	r.b = r.b[n:]
	return s
}

func (r *metaReader) done() error {
	if r.err == nil && len(r.b) != 0 {
		return errMetaMalformed
	}
	return r.err
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

func appendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}

func (m *runMsg) appendMeta(dst []byte) []byte {
	dst = appendString(dst, m.Op)
	dst = appendString(dst, m.Bundle)
	dst = binary.AppendVarint(dst, int64(m.CodeLen))
	dst = appendString(dst, m.Export)
	dst = binary.AppendUvarint(dst, uint64(len(m.Env)))
	for k, v := range m.Env {
		dst = appendString(appendString(dst, k), v)
	}
	dst = binary.AppendVarint(dst, m.TimeoutNS)
	dst = binary.AppendVarint(dst, int64(m.MaxDepth))
	dst = binary.AppendVarint(dst, int64(m.OutputMax))
	dst = appendBool(dst, m.Paged)
	return appendString(dst, m.ModuleName)
}

// decodeMeta overwrites m, reusing m's strings where they repeat and its
// environment map.
func (m *runMsg) decodeMeta(b []byte) error {
	r := metaReader{b: b}
	m.Op = r.stringAs("run")
	m.Bundle = r.stringAs(m.Bundle)
	m.CodeLen = int(r.int())
	m.Export = r.stringAs(m.Export)
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		return errMetaMalformed
	}
	if m.Env == nil {
		m.Env = make(map[string]string, n)
	} else {
		clear(m.Env)
	}
	for ; n > 0 && r.err == nil; n-- {
		k := r.string()
		m.Env[k] = r.string()
	}
	m.TimeoutNS = r.int()
	m.MaxDepth = int(r.int())
	m.OutputMax = int(r.int())
	m.Paged = r.bool()
	m.ModuleName = r.stringAs(m.ModuleName)
	return r.done()
}

func (m *resultMsg) appendMeta(dst []byte) []byte {
	dst = appendString(dst, m.Status)
	dst = appendString(dst, m.Code)
	dst = appendString(dst, m.Message)
	dst = binary.AppendVarint(dst, int64(m.ControlLen))
	dst = appendBool(dst, m.HasControl)
	dst = binary.AppendVarint(dst, int64(m.OtherKeys))
	return appendBool(dst, m.NotObject)
}

func (m *resultMsg) decodeMeta(b []byte) error {
	r := metaReader{b: b}
	m.Status = r.string()
	m.Code = r.string()
	m.Message = r.string()
	m.ControlLen = int(r.int())
	m.HasControl = r.bool()
	m.OtherKeys = int(r.int())
	m.NotObject = r.bool()
	return r.done()
}

// appendFrame appends one frame to dst. The meta is written in place
// behind a prefix patched afterwards, so a frame costs no allocation when
// dst has room. On error dst is returned as it was.
func appendFrame(dst []byte, meta any, body ...[]byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	if bm, ok := meta.(binaryMeta); ok {
		dst = bm.appendMeta(dst)
	} else {
		m, err := json.Marshal(meta)
		if err != nil {
			return dst[:start], fmt.Errorf("encode frame meta: %w", err)
		}
		dst = append(dst, m...)
	}
	ml := len(dst) - start - 8
	n := 0
	for _, b := range body {
		n += len(b)
	}
	if ml > maxMetaBytes || n > maxBodyBytes {
		return dst[:start], errFrameTooLarge
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(ml))
	binary.BigEndian.PutUint32(dst[start+4:], uint32(n))
	for _, b := range body {
		dst = append(dst, b...)
	}
	return dst, nil
}

// readFrame reads one frame, decoding the meta into meta and returning the
// body in a fresh slice.
func readFrame(r *bufio.Reader, meta any) ([]byte, error) {
	body, _, err := readFrameInto(r, meta, nil)
	return body, err
}

// readFrameInto is readFrame reading into buf when it is large enough; it
// returns the body and the buffer to pass next time. The worker uses it for
// requests, whose bytes it copies (compiled code, decoded inputs) before
// the next read.
func readFrameInto(r *bufio.Reader, meta any, buf []byte) (body, next []byte, err error) {
	var prefix [8]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return nil, buf, err
	}
	ml := binary.BigEndian.Uint32(prefix[:4])
	bl := binary.BigEndian.Uint32(prefix[4:])
	if ml > maxMetaBytes || bl > maxBodyBytes {
		return nil, buf, errFrameTooLarge
	}
	size := int(ml) + int(bl)
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, buf, err
	}
	if bm, ok := meta.(binaryMeta); ok {
		err = bm.decodeMeta(buf[:ml])
	} else {
		err = json.Unmarshal(buf[:ml], meta)
	}
	if err != nil {
		return nil, buf, fmt.Errorf("decode frame meta: %w", err)
	}
	return buf[ml:], buf, nil
}
