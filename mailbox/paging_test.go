package mailbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/objects"
)

// refRead is Read as its contract states it, computed from a full copy of
// the queue in order (every status) rather than from the store's keys: the
// pages Read returned when every read decoded the queue from its start or
// to its end. It returns the page, the indexes into queue of the messages
// the read acknowledges, and Read's error, if any, as a sentinel.
func refRead(queue []Message, f Filter, ack bool, maxBytes int, now time.Time) (Page, []int, error) {
	var (
		returned   []Message
		acked      []int
		omittedIDs []string
		matched    int
		size       = len("[]")
		pageFull   = f.Limit == 0
		cutBySize  bool
	)
	for i := range queue {
		m := queue[i]
		if !f.Matches(&m) {
			continue
		}
		matched++
		if !pageFull {
			wasUnread := m.Status == StatusUnread
			if ack && wasUnread {
				m.Status, m.AckedAt = StatusAcked, now.UTC()
			}
			raw, err := json.Marshal(&m)
			if err != nil {
				return Page{}, nil, err
			}
			need := len(raw)
			if len(returned) > 0 {
				need++
			}
			if size+need <= maxBytes {
				size += need
				if ack && wasUnread {
					acked = append(acked, i)
				}
				returned = append(returned, m)
				pageFull = len(returned) == f.Limit
				continue
			}
			if len(returned) == 0 {
				return Page{}, nil, ErrTooLarge
			}
			pageFull, cutBySize = true, true
		}
		if f.MessageIDs == nil && (f.IncludeAcked || !ack) && len(omittedIDs) <= MaxMessageIDs {
			omittedIDs = append(omittedIDs, m.ID)
		}
	}
	p := Page{Messages: returned, AckedIDs: []string{}}
	if p.Messages == nil {
		p.Messages = []Message{}
	}
	for _, i := range acked {
		p.AckedIDs = append(p.AckedIDs, queue[i].ID)
	}
	p.OmittedCount = matched - len(returned)
	p.HasMore = p.OmittedCount > 0
	if p.HasMore {
		p.Continuation = continuation(f, ack, returned, omittedIDs, p.OmittedCount, cutBySize)
	}
	return p, acked, nil
}

// pagingQueue posts n messages to recipient, varied in kind, channel,
// sender and size, in one commit, and returns them as stored.
func pagingQueue(t *testing.T, s *objects.Store, recipient int64, first, n int) []Message {
	t.Helper()
	var out []Message
	update(t, s, func(tx *objects.Txn) error {
		for i := first; i < first+n; i++ {
			m := Message{Sender: "process:2", Recipient: recipient, Body: fmt.Sprintf("m%d", i) + strings.Repeat("x", i%13*20)}
			if i%5 == 0 {
				m.Kind = KindInterrupt
			}
			if i%3 == 0 {
				m.Channel = "b"
			}
			if i%7 == 0 {
				m.Sender = "human:ann"
			}
			stored, err := Post(tx, m, t0)
			if err != nil {
				return err
			}
			out = append(out, stored)
		}
		return nil
	})
	return out
}

// mixedQueue builds a queue of 1,280 messages holding every status: every
// tenth message of the first 1,200 acknowledged, the unread ones after 1,200
// superseded, and 30 unread ones posted after those: 1,110 unread, more than
// a continuation lists past a page of 100. Seq 1 is acked, so the first
// unread message is not the first message.
func mixedQueue(t *testing.T, s *objects.Store, recipient int64) {
	t.Helper()
	pagingQueue(t, s, recipient, 1, 1250)
	var acks []string
	for seq := uint64(1); seq <= 1200; seq += 10 {
		acks = append(acks, FormatID(recipient, seq))
	}
	p := readPage(t, s, recipient, Filter{MessageIDs: &acks, Limit: MaxLimit}, true, bigBound)
	if len(p.AckedIDs) != len(acks) {
		t.Fatalf("setup acked %d, want %d", len(p.AckedIDs), len(acks))
	}
	update(t, s, func(tx *objects.Txn) error {
		_, err := SupersedeAfter(tx, recipient, 1200)
		return err
	})
	pagingQueue(t, s, recipient, 1251, 30)
	checkInvariants(t, s, recipient)
}

func listAll(t *testing.T, s *objects.Store, recipient int64) []Message {
	t.Helper()
	var out []Message
	view(t, s, func(tx *objects.Txn) error {
		return List(tx, recipient, func(m *Message) error {
			out = append(out, *m)
			return nil
		})
	})
	return out
}

func jsonOf(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// readAndCompare runs one Read in tx and checks it against refRead over
// model, which it then brings up to date with the read's acknowledgements.
func readAndCompare(t *testing.T, tx *objects.Txn, recipient int64, model []Message, f Filter, ack bool, maxBytes int, what string) Page {
	t.Helper()
	now := t0.Add(time.Minute)
	want, acked, wantErr := refRead(model, f, ack, maxBytes, now)
	got, err := Read(tx, recipient, f, ack, maxBytes, now)
	if wantErr != nil || err != nil {
		if !errors.Is(err, wantErr) || wantErr == nil {
			t.Fatalf("%s: error %v, want one wrapping %v", what, err, wantErr)
		}
		return Page{}
	}
	if g, w := jsonOf(t, got), jsonOf(t, want); !bytes.Equal(g, w) {
		t.Fatalf("%s: the page differs from byte %s", what, firstDifference(g, w))
	}
	for _, i := range acked {
		model[i].Status, model[i].AckedAt = StatusAcked, now.UTC()
	}
	return got
}

// TestPagingMatchesFullScan pages through queues of every status with each
// kind of read, following every continuation to the end, and checks every
// page (messages, acknowledgements, has_more, omitted count, continuation
// and its note) and the queue after it against refRead.
func TestPagingMatchesFullScan(t *testing.T) {
	s, _ := openStore(t)
	pagingQueue(t, s, 999, 1, 5) // another queue, whose ids an exact read may name
	// A page of about 40 of these messages, so size bounds cut pages too.
	const cut = 40 * 300

	rng := rand.New(rand.NewPCG(7, 11))
	someIDs := func(recipient int64) *[]string {
		var ids []string
		for seq := uint64(1); seq <= 1300; seq++ {
			if rng.IntN(3) != 0 {
				ids = append(ids, FormatID(recipient, seq))
			}
		}
		ids = ids[:700]
		ids = append(ids, "msg_999_2", FormatID(recipient, 99999), "msg_x", FormatID(recipient, 0)+"1", "msg_01_1")
		rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		return &ids
	}
	type scenario struct {
		name     string
		f        Filter
		ack      bool
		maxBytes int
	}
	scenarios := []scenario{
		{"unread ack", Filter{Limit: 100}, true, bigBound},
		{"unread ack limit 1000", Filter{Limit: MaxLimit}, true, bigBound},
		{"unread ack size-cut", Filter{Limit: 100}, true, cut},
		{"unread ack limit 0", Filter{Limit: 0}, true, bigBound},
		{"unread no ack", Filter{Limit: 100}, false, bigBound},
		{"unread no ack size-cut", Filter{Limit: 100}, false, cut},
		{"unread no ack limit 0", Filter{Limit: 0}, false, bigBound},
		{"unread ack kind", Filter{Kind: strp(KindInterrupt), Limit: 30}, true, bigBound},
		{"unread no ack channel sender", Filter{Channel: strp("b"), Sender: strp("process:2"), Limit: 50}, false, bigBound},
		{"acked too", Filter{IncludeAcked: true, Limit: 100}, false, bigBound},
		{"acked too ack", Filter{IncludeAcked: true, Limit: 100}, true, cut},
		{"acked too channel ack", Filter{IncludeAcked: true, Channel: strp("b"), Limit: 100}, true, bigBound},
		{"ids ack", Filter{Limit: 64}, true, cut},
		{"ids no ack acked too", Filter{IncludeAcked: true, Limit: 64}, false, bigBound},
		{"ids ack kind", Filter{Kind: strp(KindNormal), Limit: 64}, true, bigBound},
		{"too large", Filter{Limit: 10}, true, 20},
	}
	for i, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			recipient := int64(100 + i)
			mixedQueue(t, s, recipient)
			if strings.HasPrefix(sc.name, "ids") {
				sc.f.MessageIDs = someIDs(recipient)
			}
			model := listAll(t, s, recipient)
			f, ack := sc.f, sc.ack
			for page := 1; ; page++ {
				if page > 400 {
					t.Fatal("the continuations never end")
				}
				var p Page
				update(t, s, func(tx *objects.Txn) error {
					p = readAndCompare(t, tx, recipient, model, f, ack, sc.maxBytes, fmt.Sprintf("page %d", page))
					return nil
				})
				if !p.HasMore {
					break
				}
				f, ack = p.Continuation.Filter, p.Continuation.Ack
			}
			if g, w := jsonOf(t, listAll(t, s, recipient)), jsonOf(t, model); !bytes.Equal(g, w) {
				t.Fatal("the queue after paging differs from the model")
			}
			checkInvariants(t, s, recipient)
		})
	}

	// Pages read in the transaction that posts and acknowledges: the header
	// and the unread index a read trusts are then the transaction's own.
	t.Run("one transaction", func(t *testing.T) {
		const recipient = 99
		mixedQueue(t, s, recipient)
		model := listAll(t, s, recipient)
		update(t, s, func(tx *objects.Txn) error {
			for i := range 25 {
				m, err := Post(tx, Message{Sender: "process:3", Recipient: recipient, Body: fmt.Sprint(i)}, t0)
				if err != nil {
					return err
				}
				model = append(model, m)
			}
			for page := 1; page <= 12; page++ {
				p := readAndCompare(t, tx, recipient, model, Filter{Limit: 7}, true, bigBound, fmt.Sprintf("page %d", page))
				readAndCompare(t, tx, recipient, model, Filter{Limit: 3}, false, bigBound, fmt.Sprintf("page %d, no ack", page))
				if !p.HasMore {
					break
				}
			}
			_, err := SupersedeAfter(tx, recipient, model[len(model)-10].Seq)
			if err != nil {
				return err
			}
			model = listAllTx(t, tx, recipient)
			readAndCompare(t, tx, recipient, model, Filter{Limit: 2}, false, bigBound, "after supersede")
			readAndCompare(t, tx, recipient, model, Filter{Limit: 0}, true, bigBound, "after supersede, limit 0")
			return nil
		})
		checkInvariants(t, s, recipient)
	})

	// Malformed filters fail as before, naming the field and the rule.
	view(t, s, func(tx *objects.Txn) error {
		_, err := Read(tx, 100, Filter{MessageIDs: idsp("msg_100_1", "msg_100_1"), Limit: 1}, false, bigBound, t0)
		checkFieldError(t, err, "message_ids[1]", `duplicate of message_ids[0] ("msg_100_1")`)
		_, err = Read(tx, 100, Filter{MessageIDs: idsp(" "), Limit: 1}, false, bigBound, t0)
		checkFieldError(t, err, "message_ids[0]", "must not be blank")
		_, err = Read(tx, 100, Filter{Limit: MaxLimit + 1}, false, bigBound, t0)
		checkFieldError(t, err, "limit", "must be 0..1000 (got 1001)")
		return nil
	})
}

// firstDifference shows where got and want part, with some context.
func firstDifference(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(0, i-200)
	return fmt.Sprintf("%d:\n got ...%.400s\nwant ...%.400s", i, got[from:], want[from:])
}

// TestReadRefusesShortHeader: a read that takes its count from the header
// refuses a header counting fewer unread messages than the index holds,
// rather than report a wrong omitted count.
func TestReadRefusesShortHeader(t *testing.T) {
	s, _ := openStore(t)
	postN(t, s, 3, 4)
	update(t, s, func(tx *objects.Txn) error {
		h, err := loadHeader(tx, 3)
		h.unread = 2
		if err == nil {
			err = storeHeader(tx, 3, h)
		}
		return err
	})
	view(t, s, func(tx *objects.Txn) error {
		for _, limit := range []int{0, 1, 10} {
			_, err := Read(tx, 3, Filter{Limit: limit}, false, bigBound, t0)
			if err == nil || !strings.Contains(err.Error(), "header counts 2 unread, fewer than the unread index holds") {
				t.Errorf("limit %d: Read over a short header: %v", limit, err)
			}
		}
		return nil
	})
}

func listAllTx(t *testing.T, tx *objects.Txn, recipient int64) []Message {
	t.Helper()
	var out []Message
	if err := List(tx, recipient, func(m *Message) error {
		out = append(out, *m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMatchesEveryUnreadSeesEveryField sets each field of Filter in turn: a
// field other than Limit that matchesEveryUnread ignores would let Read
// count matches it never checked.
func TestMatchesEveryUnreadSeesEveryField(t *testing.T) {
	if !(Filter{Limit: 5}).matchesEveryUnread() {
		t.Fatal("a filter with only a limit must match every unread message")
	}
	typ := reflect.TypeFor[Filter]()
	for i := range typ.NumField() {
		field := typ.Field(i)
		if field.Name == "Limit" {
			continue
		}
		var f Filter
		v := reflect.ValueOf(&f).Elem().Field(i)
		switch v.Kind() {
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Pointer:
			v.Set(reflect.New(field.Type.Elem()))
		default:
			t.Fatalf("Filter.%s: kind %s, which this test does not know how to set", field.Name, v.Kind())
		}
		if f.matchesEveryUnread() {
			t.Errorf("matchesEveryUnread ignores Filter.%s", field.Name)
		}
	}
}

func TestListAfter(t *testing.T) {
	s, _ := openStore(t)
	mixedQueue(t, s, 5)
	pagingQueue(t, s, 6, 1, 3) // the next queue's keys follow this one's
	all := listAll(t, s, 5)
	view(t, s, func(tx *objects.Txn) error {
		for _, after := range []uint64{0, 1, 2, 9, 10, 11, 999, 1000, 1001, 1279, 1280, 1281, 1 << 40, ^uint64(0) - 1, ^uint64(0)} {
			var want, got []Message
			for _, m := range all {
				if m.Seq > after {
					want = append(want, m)
				}
			}
			if err := ListAfter(tx, 5, after, func(m *Message) error {
				got = append(got, *m)
				return nil
			}); err != nil {
				return err
			}
			if g, w := jsonOf(t, got), jsonOf(t, want); !bytes.Equal(g, w) {
				t.Fatalf("ListAfter(%d) returned %d messages, want %d", after, len(got), len(want))
			}
		}
		var got []string
		err := ListAfter(tx, 5, 7, func(m *Message) error {
			got = append(got, m.ID)
			if len(got) == 2 {
				return objects.ErrStopScan
			}
			return nil
		})
		wantIDs(t, "stopped", got, []string{"msg_5_8", "msg_5_9"})
		stop := errors.New("stop")
		if err := ListAfter(tx, 5, 7, func(*Message) error { return stop }); err != stop {
			t.Errorf("ListAfter returned %v, want fn's error as is", err)
		}
		checkFieldError(t, ListAfter(tx, 0, 0, func(*Message) error { return nil }), "recipient", "positive")
		checkFieldError(t, ListAfter(tx, 5, 0, nil), "fn", "must not be nil")
		return err
	})
	update(t, s, func(tx *objects.Txn) error {
		return tx.Set(seqKey(keyMsg, 5, 1100), []byte("{not json"))
	})
	view(t, s, func(tx *objects.Txn) error {
		if err := ListAfter(tx, 5, 1099, func(*Message) error { return nil }); err == nil || !strings.Contains(err.Error(), "mailbox: list after: decode") {
			t.Errorf("ListAfter over a corrupt record: %v", err)
		}
		// A start past the corrupt record never decodes it.
		return ListAfter(tx, 5, 1100, func(*Message) error { return nil })
	})
}
