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

// appendFrame appends one frame to dst.
func appendFrame(dst []byte, meta any, body ...[]byte) ([]byte, error) {
	m, err := json.Marshal(meta)
	if err != nil {
		return dst, fmt.Errorf("encode frame meta: %w", err)
	}
	n := 0
	for _, b := range body {
		n += len(b)
	}
	if len(m) > maxMetaBytes || n > maxBodyBytes {
		return dst, errFrameTooLarge
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(m)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = append(dst, m...)
	for _, b := range body {
		dst = append(dst, b...)
	}
	return dst, nil
}

// readFrame reads one frame, decoding the meta into meta and returning the
// body in a fresh slice.
func readFrame(r *bufio.Reader, meta any) ([]byte, error) {
	var prefix [8]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return nil, err
	}
	ml := binary.BigEndian.Uint32(prefix[:4])
	bl := binary.BigEndian.Uint32(prefix[4:])
	if ml > maxMetaBytes || bl > maxBodyBytes {
		return nil, errFrameTooLarge
	}
	buf := make([]byte, int(ml)+int(bl))
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if err := json.Unmarshal(buf[:ml], meta); err != nil {
		return nil, fmt.Errorf("decode frame meta: %w", err)
	}
	return buf[ml:], nil
}
