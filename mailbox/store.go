package mailbox

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libos/libos/objects"
)

// Key layout, all under "mb/", recipients and seqs as 20-digit decimals so
// byte order is numeric order:
//
//	mb/h/<recipient>        queue header: last seq, total and unread counts, first unread seq
//	mb/m/<recipient>/<seq>  the message (JSON)
//	mb/u/<recipient>/<seq>  present while the message is unread (empty value)
//
// The unread index lets a read of unread messages skip acknowledged history;
// it is maintained in the same transaction as every status change.
const (
	keyHeader = "mb/h/"
	keyMsg    = "mb/m/"
	keyUnread = "mb/u/"
)

func headerKey(recipient int64) []byte {
	return objects.AppendPadded(append(make([]byte, 0, len(keyHeader)+20), keyHeader...), recipient, 20)
}

func queuePrefix(kind string, recipient int64) []byte {
	return append(objects.AppendPadded(append(make([]byte, 0, len(kind)+42), kind...), recipient, 20), '/')
}

func seqKey(kind string, recipient int64, seq uint64) []byte {
	return objects.AppendPaddedUnsigned(queuePrefix(kind, recipient), seq, 20)
}

// seqFromKey returns the seq at the end of a message or unread-index key.
func seqFromKey(key []byte) (uint64, error) {
	const digits = 20
	if len(key) < digits {
		return 0, fmt.Errorf("corrupt key %q", key)
	}
	var seq uint64
	for _, c := range key[len(key)-digits:] {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("corrupt key %q", key)
		}
		seq = seq*10 + uint64(c-'0')
	}
	return seq, nil
}

// header is the per-recipient queue summary.
type header struct {
	lastSeq uint64
	total   uint64
	unread  uint64
	// firstUnread is the lowest unread seq, or lastSeq+1 when none is
	// unread. Walks of the unread index start there, so the deletions left
	// behind by acknowledged messages (which Pebble keeps until compaction)
	// are never iterated over.
	firstUnread uint64
}

const (
	headerFormatV1 = 1
	headerSize     = 1 + 4*8
)

func (h header) encode() []byte {
	b := make([]byte, 1, headerSize)
	b[0] = headerFormatV1
	b = binary.BigEndian.AppendUint64(b, h.lastSeq)
	b = binary.BigEndian.AppendUint64(b, h.total)
	b = binary.BigEndian.AppendUint64(b, h.unread)
	return binary.BigEndian.AppendUint64(b, h.firstUnread)
}

func loadHeader(tx *objects.Txn, recipient int64) (header, error) {
	raw, found, err := tx.Find(headerKey(recipient))
	if err != nil {
		return header{}, fmt.Errorf("queue of %d: %w", recipient, err)
	}
	if !found {
		return header{firstUnread: 1}, nil
	}
	if len(raw) != headerSize || raw[0] != headerFormatV1 {
		return header{}, fmt.Errorf("queue of %d: corrupt header (%d bytes)", recipient, len(raw))
	}
	return header{
		lastSeq:     binary.BigEndian.Uint64(raw[1:9]),
		total:       binary.BigEndian.Uint64(raw[9:17]),
		unread:      binary.BigEndian.Uint64(raw[17:25]),
		firstUnread: binary.BigEndian.Uint64(raw[25:33]),
	}, nil
}

func storeHeader(tx *objects.Txn, recipient int64, h header) error {
	if err := tx.Set(headerKey(recipient), h.encode()); err != nil {
		return fmt.Errorf("queue of %d: %w", recipient, err)
	}
	return nil
}

// settleUnread updates recipient's header after the unread-index entries of
// removed (no longer unread) were deleted in tx.
func settleUnread(tx *objects.Txn, recipient int64, removed []uint64) error {
	if len(removed) == 0 {
		return nil
	}
	h, err := loadHeader(tx, recipient)
	if err != nil {
		return err
	}
	if h.unread < uint64(len(removed)) {
		return fmt.Errorf("queue of %d: header counts %d unread, fewer than the %d being settled", recipient, h.unread, len(removed))
	}
	h.unread -= uint64(len(removed))
	switch {
	case h.unread == 0:
		h.firstUnread = h.lastSeq + 1
	case slices.Contains(removed, h.firstUnread):
		// The next unread entry is near: the ones just removed are deleted
		// only in this transaction's overlay, which the scan skips in memory.
		next, found := uint64(0), false
		err := tx.ScanRange(seqKey(keyUnread, recipient, h.firstUnread), prefixEnd(queuePrefix(keyUnread, recipient)), false,
			func(key, _ []byte) error {
				seq, err := seqFromKey(key)
				if err != nil {
					return err
				}
				next, found = seq, true
				return objects.ErrStopScan
			})
		if err != nil {
			return fmt.Errorf("queue of %d: %w", recipient, err)
		}
		if !found {
			return fmt.Errorf("queue of %d: header counts %d unread but the unread index is empty", recipient, h.unread)
		}
		h.firstUnread = next
	}
	return storeHeader(tx, recipient, h)
}

func decodeMessage(key, raw []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(raw, &m); err != nil {
		return Message{}, fmt.Errorf("decode %q: %w", key, err)
	}
	if seq, err := seqFromKey(key); err != nil || seq != m.Seq {
		return Message{}, fmt.Errorf("decode %q: record holds seq %d", key, m.Seq)
	}
	return m, nil
}

func putMessage(tx *objects.Txn, m *Message) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", m.ID, err)
	}
	if err := tx.Set(seqKey(keyMsg, m.Recipient, m.Seq), raw); err != nil {
		return fmt.Errorf("store %s: %w", m.ID, err)
	}
	return nil
}

// loadMessage returns the message with seq in recipient's queue, or
// found=false.
func loadMessage(tx *objects.Txn, recipient int64, seq uint64) (Message, bool, error) {
	key := seqKey(keyMsg, recipient, seq)
	raw, found, err := tx.Find(key)
	if err != nil {
		return Message{}, false, fmt.Errorf("load %s: %w", FormatID(recipient, seq), err)
	}
	if !found {
		return Message{}, false, nil
	}
	m, err := decodeMessage(key, raw)
	if err != nil {
		return Message{}, false, err
	}
	return m, true, nil
}

// allOrNothing runs stage, which stages writes in tx, and undoes all of them
// if it fails, so a failed call leaves the transaction as it found it. It is
// called only after a read of tx succeeded, so tx is live.
func allOrNothing(tx *objects.Txn, stage func() error) error {
	sp := tx.Savepoint()
	if err := stage(); err != nil {
		tx.RollbackTo(sp)
		return err
	}
	return nil
}

func checkRecipient(recipient int64) error {
	if recipient <= 0 {
		return invalid("recipient", "must be a positive pid (got %d)", recipient)
	}
	return nil
}

// Post validates m and appends it to m.Recipient's queue in tx. It assigns
// ID, Seq, Status (unread) and CreatedAt (now, in UTC), applies the default
// kind and channel, compacts the payload, and returns the stored message;
// values the caller put in those assigned fields are ignored. A validation
// error wraps ErrInvalid and stages nothing.
func Post(tx *objects.Txn, m Message, now time.Time) (Message, error) {
	if now.IsZero() {
		return Message{}, fmt.Errorf("mailbox: post: %w", invalid("now", "must not be zero"))
	}
	m, err := normalize(m)
	if err != nil {
		return Message{}, fmt.Errorf("mailbox: post: %w", err)
	}
	h, err := loadHeader(tx, m.Recipient)
	if err != nil {
		return Message{}, fmt.Errorf("mailbox: post: %w", err)
	}
	h.lastSeq++
	h.total++
	if h.unread == 0 {
		h.firstUnread = h.lastSeq
	}
	h.unread++
	m.Seq = h.lastSeq
	m.ID = FormatID(m.Recipient, m.Seq)
	m.Status = StatusUnread
	m.CreatedAt = now.UTC()
	m.AckedAt = time.Time{}
	err = allOrNothing(tx, func() error {
		if err := putMessage(tx, &m); err != nil {
			return err
		}
		if err := tx.Set(seqKey(keyUnread, m.Recipient, m.Seq), nil); err != nil {
			return fmt.Errorf("%s: unread index: %w", m.ID, err)
		}
		return storeHeader(tx, m.Recipient, h)
	})
	if err != nil {
		return Message{}, fmt.Errorf("mailbox: post: %w", err)
	}
	return m, nil
}

// Page is the result of Read.
type Page struct {
	Messages     []Message     `json:"messages"`          // queue order; never nil
	AckedIDs     []string      `json:"acked_message_ids"` // the returned messages this read acknowledged; never nil
	HasMore      bool          `json:"has_more"`
	OmittedCount int           `json:"omitted_count"` // matching messages not returned
	Continuation *Continuation `json:"continuation"`  // nil when !HasMore
}

// Continuation says how to ask for the rest of a read. It never holds a
// cursor: it is the same filters, or, where repeating them would return the
// first page again, exact message ids. Filter and Ack together are complete
// read_process_messages arguments; in JSON both sit under "arguments".
type Continuation struct {
	Filter Filter `json:"arguments"`
	Note   string `json:"note"`
	Ack    bool   `json:"-"` // encoded as arguments.ack
}

type continuationArguments struct {
	Filter
	Ack bool `json:"ack"`
}

type continuationJSON struct {
	Arguments continuationArguments `json:"arguments"`
	Note      string                `json:"note"`
}

// MarshalJSON writes {"arguments": {<filter>..., "ack": ...}, "note": ...}.
func (c Continuation) MarshalJSON() ([]byte, error) {
	return json.Marshal(continuationJSON{continuationArguments{c.Filter, c.Ack}, c.Note})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *Continuation) UnmarshalJSON(data []byte) error {
	var v continuationJSON
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*c = Continuation{Filter: v.Arguments.Filter, Note: v.Note, Ack: v.Arguments.Ack}
	return nil
}

// Read returns the messages of recipient's queue that match f, in queue
// order, at most f.Limit of them, and, when ack is true, marks the returned
// unread ones acked (AckedAt = now) in tx; the returned messages show their
// state after this read.
//
// maxBytes bounds the size of the JSON array of the returned messages as
// encoding/json writes it. As many messages as fit are returned, in order;
// the other matching ones are counted in OmittedCount and described by the
// Continuation. If even the first matching message does not fit, Read
// returns an error wrapping ErrTooLarge and stages nothing. Limit 0 returns no
// messages and counts every match as omitted.
//
// Exact ids that do not exist, belong to another queue, do not match the
// other filters or are superseded are simply not returned. Without exact ids
// and with IncludeAcked false, Read walks only the unread index, and with no
// other condition it loads no message past its page: the header counts the
// rest. Reads with IncludeAcked and no exact ids, or with conditions on
// content, still load every candidate to the end of the queue, since each
// must be matched to count the omitted ones.
func Read(tx *objects.Txn, recipient int64, f Filter, ack bool, maxBytes int, now time.Time) (Page, error) {
	if err := checkRecipient(recipient); err != nil {
		return Page{}, fmt.Errorf("mailbox: read: %w", err)
	}
	if err := f.Validate(); err != nil {
		return Page{}, fmt.Errorf("mailbox: read: %w", err)
	}
	if maxBytes <= 0 {
		return Page{}, fmt.Errorf("mailbox: read: %w", invalid("max_bytes", "must be positive (got %d)", maxBytes))
	}
	if ack && now.IsZero() {
		return Page{}, fmt.Errorf("mailbox: read: %w", invalid("now", "must not be zero when acknowledging"))
	}
	ackedAt := now.UTC()

	var (
		returned   []Message
		newlyAcked []int // indexes into returned
		omittedIDs []string
		matched    int
		size       = len("[]")
		pageFull   = f.Limit == 0
		cutBySize  = false
		needIDs    = f.MessageIDs == nil && (f.IncludeAcked || !ack)
	)
	visit := func(m *Message) error {
		if !f.Matches(m) {
			return nil
		}
		matched++
		if !pageFull {
			out := *m
			wasUnread := out.Status == StatusUnread
			if ack && wasUnread {
				out.Status, out.AckedAt = StatusAcked, ackedAt
			}
			raw, err := json.Marshal(&out)
			if err != nil {
				return fmt.Errorf("encode %s: %w", out.ID, err)
			}
			need := len(raw)
			if len(returned) > 0 {
				need++ // the comma
			}
			if size+need <= maxBytes {
				size += need
				if ack && wasUnread {
					newlyAcked = append(newlyAcked, len(returned))
				}
				returned = append(returned, out)
				if len(returned) == f.Limit {
					pageFull = true
				}
				return nil
			}
			if len(returned) == 0 {
				return fmt.Errorf("message %s takes %d bytes of JSON, more than the result bound of %d bytes: %w",
					out.ID, need+len("[]"), maxBytes, ErrTooLarge)
			}
			pageFull, cutBySize = true, true
		}
		// Keep one id past the cap so the note can tell the list is cut.
		if needIDs && len(omittedIDs) <= MaxMessageIDs {
			omittedIDs = append(omittedIDs, m.ID)
		}
		return nil
	}
	var err error
	if f.matchesEveryUnread() {
		matched, err = walkUnreadPage(tx, recipient, visit, func() bool { return pageFull }, func(seq uint64) bool {
			if !needIDs || len(omittedIDs) > MaxMessageIDs {
				return false
			}
			omittedIDs = append(omittedIDs, FormatID(recipient, seq))
			return true
		})
	} else {
		err = walk(tx, recipient, f, visit)
	}
	if err != nil {
		return Page{}, fmt.Errorf("mailbox: read: %w", err)
	}

	page := Page{Messages: returned, AckedIDs: []string{}}
	if page.Messages == nil {
		page.Messages = []Message{}
	}
	if len(newlyAcked) > 0 {
		err := allOrNothing(tx, func() error {
			seqs := make([]uint64, 0, len(newlyAcked))
			for _, i := range newlyAcked {
				m := &returned[i]
				seqs = append(seqs, m.Seq)
				if err := putMessage(tx, m); err != nil {
					return err
				}
				if err := tx.Delete(seqKey(keyUnread, recipient, m.Seq)); err != nil {
					return fmt.Errorf("%s: unread index: %w", m.ID, err)
				}
				page.AckedIDs = append(page.AckedIDs, m.ID)
			}
			return settleUnread(tx, recipient, seqs)
		})
		if err != nil {
			return Page{}, fmt.Errorf("mailbox: read: ack: %w", err)
		}
	}
	page.OmittedCount = matched - len(returned)
	page.HasMore = page.OmittedCount > 0
	if page.HasMore {
		page.Continuation = continuation(f, ack, returned, omittedIDs, page.OmittedCount, cutBySize)
	}
	return page, nil
}

// continuation builds the cursorless description of the rest of a read.
func continuation(f Filter, ack bool, returned []Message, omittedIDs []string, omitted int, cutBySize bool) *Continuation {
	c := &Continuation{Filter: f.clone(), Ack: ack}
	var why string
	switch {
	case f.Limit == 0:
		why = "limit is 0"
		c.Filter.Limit = DefaultLimit
	case cutBySize:
		why = "the result size bound was reached"
	default:
		why = fmt.Sprintf("of the limit of %d", f.Limit)
	}
	note := fmt.Sprintf("%d matching message(s) were not returned because %s. This read has no cursor: ", omitted, why)
	switch {
	case f.MessageIDs != nil:
		got := make(map[string]bool, len(returned))
		for i := range returned {
			got[returned[i].ID] = true
		}
		rest := []string{}
		for _, id := range *f.MessageIDs {
			if !got[id] {
				rest = append(rest, id)
			}
		}
		c.Filter.MessageIDs = &rest
		note += "message_ids now lists only the requested ids that were not returned; read again with these arguments for the rest. Repeating the original arguments would return the first page again."
	case !f.IncludeAcked && ack:
		note += "the returned messages are now acknowledged, so reading again with these same arguments returns the next ones."
	default:
		ids := omittedIDs
		if len(ids) > MaxMessageIDs {
			ids = ids[:MaxMessageIDs]
		}
		ids = slices.Clone(ids)
		c.Filter.MessageIDs = &ids
		note += "message_ids lists the matching messages that were not returned, in queue order; read again with these arguments for the rest. Repeating the original arguments would return the first page again, because "
		if f.IncludeAcked {
			note += "include_acked keeps returned messages matching."
		} else {
			note += "ack=false leaves them unread."
		}
		if omitted > MaxMessageIDs {
			note += fmt.Sprintf(" Only the first %d of the %d are listed; narrow the filters (sender, channel, correlation_id, reply_to, kind) to reach the others.", MaxMessageIDs, omitted)
		}
	}
	c.Note = note
	return c
}

// errFound stops a walk early.
var errFound = errors.New("mailbox: found")

// walk calls visit for the candidates of f in recipient's queue, in queue
// order: the exact ids when f has them, else every message when f includes
// acked ones, else the unread index. visit still applies f.Matches itself.
func walk(tx *objects.Txn, recipient int64, f Filter, visit func(m *Message) error) error {
	switch {
	case f.MessageIDs != nil:
		seqs := make([]uint64, 0, len(*f.MessageIDs))
		for _, id := range *f.MessageIDs {
			if pid, seq, ok := ParseID(id); ok && pid == recipient {
				seqs = append(seqs, seq)
			}
		}
		slices.Sort(seqs)
		seqs = slices.Compact(seqs)
		for _, seq := range seqs {
			m, found, err := loadMessage(tx, recipient, seq)
			if err != nil {
				return err
			}
			if !found {
				continue
			}
			if err := visit(&m); err != nil {
				return err
			}
		}
		return nil
	case f.IncludeAcked:
		return tx.Scan(queuePrefix(keyMsg, recipient), func(key, value []byte) error {
			m, err := decodeMessage(key, value)
			if err != nil {
				return err
			}
			return visit(&m)
		})
	default:
		h, err := loadHeader(tx, recipient)
		if err != nil {
			return err
		}
		start := seqKey(keyUnread, recipient, h.firstUnread)
		end := prefixEnd(queuePrefix(keyUnread, recipient))
		return tx.ScanRange(start, end, false, func(key, _ []byte) error {
			seq, err := seqFromKey(key)
			if err != nil {
				return err
			}
			m, err := loadUnread(tx, recipient, seq)
			if err != nil {
				return err
			}
			return visit(&m)
		})
	}
}

// loadUnread loads the message seq the unread index of recipient names.
func loadUnread(tx *objects.Txn, recipient int64, seq uint64) (Message, error) {
	m, found, err := loadMessage(tx, recipient, seq)
	if err != nil {
		return Message{}, err
	}
	if !found {
		return Message{}, fmt.Errorf("unread index names %s, which does not exist", FormatID(recipient, seq))
	}
	return m, nil
}

// walkUnreadPage is walk for a filter every unread message matches
// (Filter.matchesEveryUnread), which returns the number of matches from the
// queue header instead of loading every unread message to count them: it
// calls visit for the unread messages in queue order until full reports the
// page full, then passes rest the seqs of the next ones, from the unread
// index alone, until rest returns false. A drain of the queue page by page
// then costs what it returns, not the rest of the queue at every page.
func walkUnreadPage(tx *objects.Txn, recipient int64, visit func(m *Message) error, full func() bool, rest func(seq uint64) bool) (int, error) {
	h, err := loadHeader(tx, recipient)
	if err != nil {
		return 0, err
	}
	var seen uint64
	start := seqKey(keyUnread, recipient, h.firstUnread)
	end := prefixEnd(queuePrefix(keyUnread, recipient))
	err = tx.ScanRange(start, end, false, func(key, _ []byte) error {
		seq, err := seqFromKey(key)
		if err != nil {
			return err
		}
		if seen++; seen > h.unread {
			return fmt.Errorf("queue of %d: header counts %d unread, fewer than the unread index holds", recipient, h.unread)
		}
		if full() {
			if !rest(seq) {
				return objects.ErrStopScan
			}
			return nil
		}
		m, err := loadUnread(tx, recipient, seq)
		if err != nil {
			return err
		}
		return visit(&m)
	})
	if err != nil {
		return 0, err
	}
	return int(h.unread), nil
}

// Get returns the message id of recipient's queue, whatever its status. An
// id that does not parse or names another queue is not found: the error
// wraps objects.ErrNotFound.
func Get(tx *objects.Txn, recipient int64, id string) (Message, error) {
	if err := checkRecipient(recipient); err != nil {
		return Message{}, fmt.Errorf("mailbox: get: %w", err)
	}
	pid, seq, ok := ParseID(id)
	if ok && pid == recipient {
		m, found, err := loadMessage(tx, recipient, seq)
		if err != nil {
			return Message{}, fmt.Errorf("mailbox: get: %w", err)
		}
		if found {
			return m, nil
		}
	}
	return Message{}, fmt.Errorf("mailbox: message %q of process %d: %w", id, recipient, objects.ErrNotFound)
}

// List calls fn for every message of recipient's queue in order, whatever
// its status. fn may return objects.ErrStopScan to stop early (List then
// returns nil); any other error stops List and is returned as is. Writes fn
// stages are not seen by the running List.
func List(tx *objects.Txn, recipient int64, fn func(m *Message) error) error {
	if err := checkRecipient(recipient); err != nil {
		return fmt.Errorf("mailbox: list: %w", err)
	}
	if fn == nil {
		return fmt.Errorf("mailbox: list: %w", invalid("fn", "must not be nil"))
	}
	return tx.Scan(queuePrefix(keyMsg, recipient), func(key, value []byte) error {
		m, err := decodeMessage(key, value)
		if err != nil {
			return fmt.Errorf("mailbox: list: %w", err)
		}
		return fn(&m)
	})
}

// ListAfter is List for the messages with Seq > afterSeq: it starts at the
// key of the message after afterSeq, so a caller paging through a queue from
// a watermark decodes only what it reads, not every message before it.
// afterSeq 0 lists the whole queue. fn behaves as in List.
func ListAfter(tx *objects.Txn, recipient int64, afterSeq uint64, fn func(m *Message) error) error {
	if err := checkRecipient(recipient); err != nil {
		return fmt.Errorf("mailbox: list after: %w", err)
	}
	if fn == nil {
		return fmt.Errorf("mailbox: list after: %w", invalid("fn", "must not be nil"))
	}
	if afterSeq == ^uint64(0) {
		return nil
	}
	start := seqKey(keyMsg, recipient, afterSeq+1)
	end := prefixEnd(queuePrefix(keyMsg, recipient))
	return tx.ScanRange(start, end, false, func(key, value []byte) error {
		m, err := decodeMessage(key, value)
		if err != nil {
			return fmt.Errorf("mailbox: list after: %w", err)
		}
		return fn(&m)
	})
}

// Count returns how many messages of recipient's queue are unread and how
// many it holds in all (every status). It reads one record.
func Count(tx *objects.Txn, recipient int64) (unread, total int, err error) {
	if err := checkRecipient(recipient); err != nil {
		return 0, 0, fmt.Errorf("mailbox: count: %w", err)
	}
	h, err := loadHeader(tx, recipient)
	if err != nil {
		return 0, 0, fmt.Errorf("mailbox: count: %w", err)
	}
	return int(h.unread), int(h.total), nil
}

// FirstMatch returns the first message of recipient's queue, in queue order,
// that matches f (Limit is ignored), or nil when none does. It changes
// nothing, so a caller can check the queue and register a wait in one
// transaction.
func FirstMatch(tx *objects.Txn, recipient int64, f Filter) (*Message, error) {
	if err := checkRecipient(recipient); err != nil {
		return nil, fmt.Errorf("mailbox: first match: %w", err)
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("mailbox: first match: %w", err)
	}
	var first *Message
	err := walk(tx, recipient, f, func(m *Message) error {
		if !f.Matches(m) {
			return nil
		}
		found := *m
		first = &found
		return errFound
	})
	if err != nil && !errors.Is(err, errFound) {
		return nil, fmt.Errorf("mailbox: first match: %w", err)
	}
	return first, nil
}

// SupersedeAfter marks every still-unread message of recipient with Seq >
// seq as superseded_by_restore, as a checkpoint restore to seq requires, and
// returns how many it marked. Acknowledged messages keep their status; later
// posts continue after the last seq ever assigned, so ids are never reused.
func SupersedeAfter(tx *objects.Txn, recipient int64, seq uint64) (int, error) {
	if err := checkRecipient(recipient); err != nil {
		return 0, fmt.Errorf("mailbox: supersede: %w", err)
	}
	if seq == ^uint64(0) {
		return 0, nil
	}
	h, err := loadHeader(tx, recipient)
	if err != nil {
		return 0, fmt.Errorf("mailbox: supersede: %w", err)
	}
	var seqs []uint64
	start := seqKey(keyUnread, recipient, max(seq+1, h.firstUnread))
	end := prefixEnd(queuePrefix(keyUnread, recipient))
	err = tx.ScanRange(start, end, false, func(key, _ []byte) error {
		s, err := seqFromKey(key)
		if err != nil {
			return err
		}
		seqs = append(seqs, s)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("mailbox: supersede: %w", err)
	}
	if len(seqs) == 0 {
		return 0, nil
	}
	err = allOrNothing(tx, func() error {
		for _, s := range seqs {
			m, found, err := loadMessage(tx, recipient, s)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("unread index names %s, which does not exist", FormatID(recipient, s))
			}
			m.Status = StatusSuperseded
			if err := putMessage(tx, &m); err != nil {
				return err
			}
			if err := tx.Delete(seqKey(keyUnread, recipient, s)); err != nil {
				return fmt.Errorf("%s: unread index: %w", m.ID, err)
			}
		}
		return settleUnread(tx, recipient, seqs)
	})
	if err != nil {
		return 0, fmt.Errorf("mailbox: supersede: %w", err)
	}
	return len(seqs), nil
}

// RestoreStatuses gives each message of recipient's queue the status and
// AckedAt it has in captured, a checkpoint's copy of the queue, as a
// checkpoint restore requires: a message unread at the checkpoint and read
// since is unread again. Nothing else of a message changes; the unread index
// and the counts follow. It returns how many messages changed. A captured
// message the queue does not hold is an error wrapping objects.ErrNotFound.
func RestoreStatuses(tx *objects.Txn, recipient int64, captured []Message) (int, error) {
	if err := checkRecipient(recipient); err != nil {
		return 0, fmt.Errorf("mailbox: restore statuses: %w", err)
	}
	h, err := loadHeader(tx, recipient)
	if err != nil {
		return 0, fmt.Errorf("mailbox: restore statuses: %w", err)
	}
	changed := 0
	err = allOrNothing(tx, func() error {
		var unread, settled []uint64
		for i := range captured {
			c := &captured[i]
			if c.Recipient != recipient {
				return invalid("recipient", "captured message %s is not of process %d", c.ID, recipient)
			}
			if c.Status != StatusUnread && c.Status != StatusAcked && c.Status != StatusSuperseded {
				return invalid("status", "captured message %s has unknown status %q", c.ID, c.Status)
			}
			m, found, err := loadMessage(tx, recipient, c.Seq)
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("%s: %w", FormatID(recipient, c.Seq), objects.ErrNotFound)
			}
			if m.Status == c.Status && m.AckedAt.Equal(c.AckedAt) {
				continue
			}
			wasUnread := m.Status == StatusUnread
			m.Status, m.AckedAt = c.Status, c.AckedAt
			if err := putMessage(tx, &m); err != nil {
				return err
			}
			switch isUnread := m.Status == StatusUnread; {
			case isUnread && !wasUnread:
				if err := tx.Set(seqKey(keyUnread, recipient, m.Seq), nil); err != nil {
					return fmt.Errorf("%s: unread index: %w", m.ID, err)
				}
				unread = append(unread, m.Seq)
			case !isUnread && wasUnread:
				if err := tx.Delete(seqKey(keyUnread, recipient, m.Seq)); err != nil {
					return fmt.Errorf("%s: unread index: %w", m.ID, err)
				}
				settled = append(settled, m.Seq)
			}
			changed++
		}
		if len(unread) > 0 {
			h.unread += uint64(len(unread))
			h.firstUnread = min(h.firstUnread, slices.Min(unread))
			if err := storeHeader(tx, recipient, h); err != nil {
				return err
			}
		}
		return settleUnread(tx, recipient, settled)
	})
	if err != nil {
		return 0, fmt.Errorf("mailbox: restore statuses: %w", err)
	}
	return changed, nil
}

// prefixEnd returns the first key after every key with prefix. The
// prefixes here end in '/', so incrementing the last byte always works.
func prefixEnd(prefix []byte) []byte {
	end := slices.Clone(prefix)
	end[len(end)-1]++
	return end
}

// LastSeq returns the highest seq ever assigned in recipient's queue (0 for
// an empty one). A checkpoint records it to know which messages a restore
// supersedes.
func LastSeq(tx *objects.Txn, recipient int64) (uint64, error) {
	if err := checkRecipient(recipient); err != nil {
		return 0, fmt.Errorf("mailbox: last seq: %w", err)
	}
	h, err := loadHeader(tx, recipient)
	if err != nil {
		return 0, fmt.Errorf("mailbox: last seq: %w", err)
	}
	return h.lastSeq, nil
}

// UnreadAfter calls fn, in queue order, for every unread message of
// recipient with Seq > afterSeq. It walks only the unread index, so its cost
// does not grow with acknowledged history (a caller that tracks which
// messages it has announced passes its watermark). fn behaves as in List.
func UnreadAfter(tx *objects.Txn, recipient int64, afterSeq uint64, fn func(m *Message) error) error {
	if err := checkRecipient(recipient); err != nil {
		return fmt.Errorf("mailbox: unread after: %w", err)
	}
	if fn == nil {
		return fmt.Errorf("mailbox: unread after: %w", invalid("fn", "must not be nil"))
	}
	if afterSeq == ^uint64(0) {
		return nil
	}
	h, err := loadHeader(tx, recipient)
	if err != nil {
		return fmt.Errorf("mailbox: unread after: %w", err)
	}
	start := seqKey(keyUnread, recipient, max(afterSeq+1, h.firstUnread))
	end := prefixEnd(queuePrefix(keyUnread, recipient))
	return tx.ScanRange(start, end, false, func(key, _ []byte) error {
		seq, err := seqFromKey(key)
		if err != nil {
			return fmt.Errorf("mailbox: unread after: %w", err)
		}
		m, found, err := loadMessage(tx, recipient, seq)
		if err != nil {
			return fmt.Errorf("mailbox: unread after: %w", err)
		}
		if !found {
			return fmt.Errorf("mailbox: unread after: unread index names %s, which does not exist", FormatID(recipient, seq))
		}
		return fn(&m)
	})
}
