// Package mailbox keeps the durable message queue of every process on the
// objects store: posting, filtered reads with acknowledgement, bounded pages
// with cursorless continuations, and supersession on checkpoint restore.
//
// The package holds no state of its own. Every function works inside an
// objects transaction the caller owns, so a post or an acknowledgement
// commits in the same batch as whatever else the caller stages (a tool
// result, a waiter's wake). The transaction rules apply: a Txn belongs to one
// goroutine, and writes (Post, Read with ack, SupersedeAfter) need an Update.
package mailbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Message kinds.
const (
	KindNormal    = "normal"
	KindInterrupt = "interrupt"
)

// Message statuses.
const (
	StatusUnread     = "unread"
	StatusAcked      = "acked"
	StatusSuperseded = "superseded_by_restore"
)

// Sender prefixes.
const (
	SenderProcessPrefix = "process:"
	SenderHumanPrefix   = "human:"
)

// DefaultChannel is the channel of a message posted without one.
const DefaultChannel = "default"

// Bounds on message fields. Character limits count Unicode code points.
const (
	MaxSubjectChars   = 512
	MaxBodyChars      = 32000
	MaxPayloadBytes   = 128 << 10 // of compact JSON, as encoding/json writes it (payloadJSONLen)
	MaxLabelChars     = 256       // channel, correlation_id, reply_to
	MaxHumanNameChars = 128
	maxPayloadDepth   = 10000 // the nesting limit encoding/json applies too
)

// MaxMessageJSONBytes bounds what any message Post accepts takes in Read's
// measure (its encoding/json form, in a page of its own), whatever its
// status: a Read whose maxBytes is at least this returns every message.
// encoding/json writes no code point of a string in more than 6 bytes
// (\u00XX, or \u003c for <), and the fixed part (keys, id, seq, kind,
// status, times) takes well under the kilobyte allowed for it.
const MaxMessageJSONBytes = MaxPayloadBytes + 6*(MaxBodyChars+MaxSubjectChars+3*MaxLabelChars+MaxHumanNameChars) + 1024

// ErrInvalid is wrapped by every validation error, of message fields and of
// filters alike. The error text names the field and the rule; errors.As with
// *FieldError gives both.
var ErrInvalid = errors.New("mailbox: invalid argument")

// ErrTooLarge reports a read whose first matching message alone does not fit
// the caller's result bound. Nothing was acknowledged.
var ErrTooLarge = errors.New("mailbox: message too large for the result bound")

// FieldError is a validation failure: Field names the offending field (as in
// the tool arguments, e.g. "subject" or "message_ids[3]") and Rule the rule it
// broke. It wraps ErrInvalid.
type FieldError struct {
	Field string
	Rule  string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Rule }

// Unwrap makes every FieldError match ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// Message is one message in a process's queue. Post assigns ID, Seq, Status
// and CreatedAt; the rest is the sender's content.
type Message struct {
	ID            string          `json:"id"`  // "msg_<recipient pid>_<seq>": unique in the runtime, deterministic
	Seq           uint64          `json:"seq"` // per-recipient order, from 1
	Sender        string          `json:"sender"`
	Recipient     int64           `json:"recipient"`
	Kind          string          `json:"kind"`
	Channel       string          `json:"channel"`
	CorrelationID string          `json:"correlation_id,omitempty"`
	ReplyTo       string          `json:"reply_to,omitempty"`
	Subject       string          `json:"subject,omitempty"`
	Body          string          `json:"body"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	Status        string          `json:"status"`
	CreatedAt     time.Time       `json:"created_at"`
	AckedAt       time.Time       `json:"acked_at,omitzero"`
}

// FromHuman reports whether a Human sent m.
func (m *Message) FromHuman() bool { return strings.HasPrefix(m.Sender, SenderHumanPrefix) }

// SenderPID returns the pid of a process sender and false for a Human one
// (or a malformed sender).
func (m *Message) SenderPID() (int64, bool) {
	rest, ok := strings.CutPrefix(m.Sender, SenderProcessPrefix)
	if !ok {
		return 0, false
	}
	return parsePID(rest)
}

// ContentSHA256 returns the hex SHA-256 of the canonical JSON of m's content:
// an object with the keys body, channel, correlation_id, kind, payload,
// reply_to, sender and subject, in that (sorted) order, every key present
// (empty strings as "", no payload as null), no insignificant whitespace, and
// the payload in canonical form (object keys sorted, numbers as written).
// Identity, recipient, status and times are excluded, so acknowledging a
// message does not change its content hash.
func (m *Message) ContentSHA256() string {
	var buf bytes.Buffer
	field := func(name string, first bool) {
		if !first {
			buf.WriteByte(',')
		}
		writeJSONString(&buf, name)
		buf.WriteByte(':')
	}
	field("body", true)
	writeJSONString(&buf, m.Body)
	field("channel", false)
	writeJSONString(&buf, m.Channel)
	field("correlation_id", false)
	writeJSONString(&buf, m.CorrelationID)
	field("kind", false)
	writeJSONString(&buf, m.Kind)
	field("payload", false)
	switch {
	case len(m.Payload) == 0:
		buf.WriteString("null")
	default:
		canon, err := canonicalJSON(m.Payload)
		if err != nil {
			// A stored payload is always valid; anything else is hashed as
			// the string of its bytes so the hash stays deterministic.
			writeJSONString(&buf, string(m.Payload))
		} else {
			buf.Write(canon)
		}
	}
	field("reply_to", false)
	writeJSONString(&buf, m.ReplyTo)
	field("sender", false)
	writeJSONString(&buf, m.Sender)
	field("subject", false)
	writeJSONString(&buf, m.Subject)
	sum := sha256.Sum256([]byte("{" + buf.String() + "}"))
	return hex.EncodeToString(sum[:])
}

// Validate checks m's content fields as Post would, treating an empty kind
// and channel as their defaults. It does not look at ID, Seq, Status or the
// times, which Post assigns.
func (m *Message) Validate() error {
	_, err := normalize(*m)
	return err
}

// normalize validates the content of m and returns it with defaults applied
// and the payload compacted.
func normalize(m Message) (Message, error) {
	if m.Recipient <= 0 {
		return m, invalid("recipient", "must be a positive pid (got %d)", m.Recipient)
	}
	if err := validateSender(m.Sender); err != nil {
		return m, err
	}
	if m.Kind == "" {
		m.Kind = KindNormal
	}
	if err := validateKind("kind", m.Kind); err != nil {
		return m, err
	}
	if m.Channel == "" {
		m.Channel = DefaultChannel
	}
	for _, f := range []struct{ name, value string }{
		{"channel", m.Channel},
		{"correlation_id", m.CorrelationID},
		{"reply_to", m.ReplyTo},
	} {
		if err := validateText(f.name, f.value, MaxLabelChars); err != nil {
			return m, err
		}
		if i := strings.IndexFunc(f.value, unicode.IsControl); i >= 0 {
			r, _ := utf8.DecodeRuneInString(f.value[i:])
			return m, invalid(f.name, "must not contain control characters (found %U at byte %d)", r, i)
		}
	}
	if err := validateText("subject", m.Subject, MaxSubjectChars); err != nil {
		return m, err
	}
	if err := validateText("body", m.Body, MaxBodyChars); err != nil {
		return m, err
	}
	if len(m.Payload) > 0 {
		p, err := normalizePayload(m.Payload)
		if err != nil {
			return m, err
		}
		m.Payload = p
	} else {
		m.Payload = nil
	}
	return m, nil
}

func validateText(field, s string, maxChars int) error {
	if !utf8.ValidString(s) {
		return invalid(field, "must be valid UTF-8")
	}
	if n := utf8.RuneCountInString(s); n > maxChars {
		return invalid(field, "at most %d characters (got %d)", maxChars, n)
	}
	return nil
}

func validateKind(field, kind string) error {
	if kind != KindNormal && kind != KindInterrupt {
		return invalid(field, "must be normal or interrupt (got %q)", kind)
	}
	return nil
}

func validateSender(s string) error {
	if rest, ok := strings.CutPrefix(s, SenderProcessPrefix); ok {
		if _, ok := parsePID(rest); !ok {
			return invalid("sender", "process sender must be \"process:<pid>\" with a positive decimal pid (got %q)", s)
		}
		return nil
	}
	if name, ok := strings.CutPrefix(s, SenderHumanPrefix); ok {
		if strings.TrimSpace(name) == "" {
			return invalid("sender", "human sender must be \"human:<name>\" with a non-blank name (got %q)", s)
		}
		if err := validateText("sender", name, MaxHumanNameChars); err != nil {
			return err
		}
		if strings.ContainsFunc(name, unicode.IsControl) {
			return invalid("sender", "human name must not contain control characters")
		}
		return nil
	}
	return invalid("sender", "must be \"process:<pid>\" or \"human:<name>\" (got %q)", s)
}

func normalizePayload(p json.RawMessage) (json.RawMessage, error) {
	if !utf8.Valid(p) {
		return nil, invalid("payload", "must be valid UTF-8")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, p); err != nil {
		return nil, invalid("payload", "must be valid JSON (%v)", err)
	}
	// Read measures messages as encoding/json writes them, so the payload
	// is bounded in that measure too: otherwise a payload of HTML could be
	// accepted here and then never fit a read.
	if n := payloadJSONLen(compact.Bytes()); n > MaxPayloadBytes {
		return nil, invalid("payload", "at most %d bytes of compact JSON (got %d), counted as a read encodes it: <, > and & take 6 bytes each, U+2028 and U+2029 6", MaxPayloadBytes, n)
	}
	// Canonicalizing catches duplicate object keys, which would make the
	// content hash ambiguous, and nesting beyond what decoders accept.
	if _, err := canonicalJSON(compact.Bytes()); err != nil {
		return nil, invalid("payload", "%v", err)
	}
	return json.RawMessage(compact.Bytes()), nil
}

// payloadJSONLen returns the length of compact, valid JSON as encoding/json
// writes a json.RawMessage: it escapes <, > and & as \u003c (5 bytes more
// each) and U+2028 and U+2029 as \u2028 (3 bytes more each).
func payloadJSONLen(compact []byte) int {
	n := len(compact)
	for i, c := range compact {
		switch {
		case c == '<' || c == '>' || c == '&':
			n += 5
		case c == 0xE2 && i+2 < len(compact) && compact[i+1] == 0x80 && compact[i+2]&^1 == 0xA8:
			n += 3
		}
	}
	return n
}

// parsePID parses a canonical positive decimal pid: no sign, no leading
// zeros, within int64.
func parsePID(s string) (int64, bool) {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, false
	}
	return v, true
}

// FormatID returns the id of the message with the given seq in recipient's
// queue.
func FormatID(recipient int64, seq uint64) string {
	return "msg_" + strconv.FormatInt(recipient, 10) + "_" + strconv.FormatUint(seq, 10)
}

// ParseID splits a message id into recipient and seq. It accepts only the
// exact form FormatID produces, so every message has one id.
func ParseID(id string) (recipient int64, seq uint64, ok bool) {
	rest, found := strings.CutPrefix(id, "msg_")
	if !found {
		return 0, 0, false
	}
	pidText, seqText, found := strings.Cut(rest, "_")
	if !found {
		return 0, 0, false
	}
	pid, ok := parsePID(pidText)
	if !ok {
		return 0, 0, false
	}
	if seqText == "" || seqText[0] < '1' || seqText[0] > '9' {
		return 0, 0, false
	}
	s, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return pid, s, true
}
