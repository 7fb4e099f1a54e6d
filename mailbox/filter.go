package mailbox

import (
	"fmt"
	"slices"
	"strings"
)

// Bounds on filters.
const (
	MaxLimit      = 1000
	MaxMessageIDs = 1000
	// DefaultLimit is the page size the read tools default to; a
	// continuation of a limit-0 read asks for this many.
	DefaultLimit = 50
)

// Filter selects messages. nil pointer fields match anything. MessageIDs ==
// nil matches any id; a non-nil empty slice matches nothing. IncludeAcked
// returns unread and acked messages; superseded ones never match.
//
// A Filter is a plain value: decoding it from JSON keeps the difference
// between an absent (or null) message_ids and an empty list.
type Filter struct {
	IncludeAcked  bool      `json:"include_acked"`
	Kind          *string   `json:"kind,omitempty"`
	Sender        *string   `json:"sender,omitempty"`
	Channel       *string   `json:"channel,omitempty"`
	CorrelationID *string   `json:"correlation_id,omitempty"`
	ReplyTo       *string   `json:"reply_to,omitempty"`
	MessageIDs    *[]string `json:"message_ids,omitempty"` // at most MaxMessageIDs
	Limit         int       `json:"limit"`                 // 0..MaxLimit
}

// Validate checks f and returns an error wrapping ErrInvalid (a *FieldError)
// that names the field and the rule: limit in 0..1000, at most 1000
// message_ids, none blank or repeated, kind normal or interrupt. An id that
// is well formed but unknown is not an error; it matches nothing.
func (f Filter) Validate() error {
	if f.Limit < 0 || f.Limit > MaxLimit {
		return invalid("limit", "must be 0..%d (got %d)", MaxLimit, f.Limit)
	}
	if f.Kind != nil {
		if err := validateKind("kind", *f.Kind); err != nil {
			return err
		}
	}
	if f.MessageIDs != nil {
		ids := *f.MessageIDs
		if len(ids) > MaxMessageIDs {
			return invalid("message_ids", "at most %d ids (got %d)", MaxMessageIDs, len(ids))
		}
		first := make(map[string]int, len(ids))
		for i, id := range ids {
			field := fmt.Sprintf("message_ids[%d]", i)
			if strings.TrimSpace(id) == "" {
				return invalid(field, "must not be blank")
			}
			if j, dup := first[id]; dup {
				return invalid(field, "duplicate of message_ids[%d] (%q)", j, id)
			}
			first[id] = i
		}
	}
	return nil
}

// Matches reports whether m passes every condition of f except Limit. It is
// pure and does not validate f.
func (f Filter) Matches(m *Message) bool {
	switch m.Status {
	case StatusUnread:
	case StatusAcked:
		if !f.IncludeAcked {
			return false
		}
	default:
		return false
	}
	if f.Kind != nil && m.Kind != *f.Kind {
		return false
	}
	if f.Sender != nil && m.Sender != *f.Sender {
		return false
	}
	if f.Channel != nil && m.Channel != *f.Channel {
		return false
	}
	if f.CorrelationID != nil && m.CorrelationID != *f.CorrelationID {
		return false
	}
	if f.ReplyTo != nil && m.ReplyTo != *f.ReplyTo {
		return false
	}
	if f.MessageIDs != nil && !slices.Contains(*f.MessageIDs, m.ID) {
		return false
	}
	return true
}

// matchesEveryUnread reports whether every unread message matches f: f reads
// unread messages only and has no other condition, so the queue header's
// unread count is its number of matches and a read need not load the
// messages past its page to count them. A condition added to Filter must be
// added here too (TestMatchesEveryUnreadSeesEveryField checks).
func (f Filter) matchesEveryUnread() bool {
	return !f.IncludeAcked && f.MessageIDs == nil && f.Kind == nil && f.Sender == nil &&
		f.Channel == nil && f.CorrelationID == nil && f.ReplyTo == nil
}

// clone returns a copy of f that shares no memory with it.
func (f Filter) clone() Filter {
	c := f
	dup := func(p *string) *string {
		if p == nil {
			return nil
		}
		v := *p
		return &v
	}
	c.Kind, c.Sender, c.Channel = dup(f.Kind), dup(f.Sender), dup(f.Channel)
	c.CorrelationID, c.ReplyTo = dup(f.CorrelationID), dup(f.ReplyTo)
	if f.MessageIDs != nil {
		ids := slices.Clone(*f.MessageIDs)
		if ids == nil {
			ids = []string{}
		}
		c.MessageIDs = &ids
	}
	return c
}
