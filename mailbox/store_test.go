package mailbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libos/libos/objects"
)

func TestPostReadAckRoundTrip(t *testing.T) {
	s, _ := openStore(t)
	a := post(t, s, Message{Sender: "process:1", Recipient: 7, Body: "hello", Subject: "greeting"})
	b := post(t, s, Message{Sender: "human:ann", Recipient: 7, Body: "stop", Kind: KindInterrupt, Channel: "ops",
		CorrelationID: "c-1", ReplyTo: "msg_1_4", Payload: json.RawMessage(` { "x" : [1, 2] } `)})
	if a.ID != "msg_7_1" || a.Seq != 1 || b.ID != "msg_7_2" || b.Seq != 2 {
		t.Fatalf("ids = %s/%d, %s/%d, want msg_7_1/1, msg_7_2/2", a.ID, a.Seq, b.ID, b.Seq)
	}
	if a.Status != StatusUnread || !a.CreatedAt.Equal(t0) || !a.AckedAt.IsZero() {
		t.Fatalf("posted %+v: want unread, created at %v, not acked", a, t0)
	}
	if a.Kind != KindNormal || a.Channel != DefaultChannel {
		t.Fatalf("defaults: kind %q channel %q, want normal/default", a.Kind, a.Channel)
	}
	if string(b.Payload) != `{"x":[1,2]}` {
		t.Fatalf("payload stored as %s, want compact JSON", b.Payload)
	}
	if !b.FromHuman() || a.FromHuman() {
		t.Fatalf("FromHuman: a=%v b=%v", a.FromHuman(), b.FromHuman())
	}
	if pid, ok := a.SenderPID(); !ok || pid != 1 {
		t.Fatalf("SenderPID = %d, %v", pid, ok)
	}
	checkInvariants(t, s, 7)

	p := readPage(t, s, 7, Filter{Limit: 50}, true, bigBound)
	wantIDs(t, "messages", ids(p.Messages), []string{"msg_7_1", "msg_7_2"})
	wantIDs(t, "acked", p.AckedIDs, []string{"msg_7_1", "msg_7_2"})
	if p.HasMore || p.OmittedCount != 0 || p.Continuation != nil {
		t.Fatalf("page %+v: want complete", p)
	}
	for _, m := range p.Messages {
		if m.Status != StatusAcked || !m.AckedAt.Equal(t0.Add(time.Minute)) {
			t.Fatalf("returned %s: status %s acked_at %v, want acked at +1m", m.ID, m.Status, m.AckedAt)
		}
	}
	// Content survives storage exactly.
	got := p.Messages[1]
	if got.Sender != "human:ann" || got.Kind != KindInterrupt || got.Channel != "ops" || got.CorrelationID != "c-1" ||
		got.ReplyTo != "msg_1_4" || got.Body != "stop" || string(got.Payload) != `{"x":[1,2]}` || got.Recipient != 7 {
		t.Fatalf("stored message changed: %+v", got)
	}
	if got.ContentSHA256() != b.ContentSHA256() {
		t.Fatal("acknowledging changed the content hash")
	}
	checkInvariants(t, s, 7)

	// Nothing unread is left; the empty page encodes as lists, not nulls.
	p = readPage(t, s, 7, Filter{Limit: 50}, true, bigBound)
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"messages":[],"acked_message_ids":[],"has_more":false,"omitted_count":0,"continuation":null}`
	if string(raw) != want {
		t.Fatalf("empty page JSON = %s, want %s", raw, want)
	}
	view(t, s, func(tx *objects.Txn) error {
		m, err := Get(tx, 7, "msg_7_1")
		if err != nil {
			return err
		}
		if m.Status != StatusAcked {
			t.Errorf("Get after ack: status %s", m.Status)
		}
		return nil
	})
}

func TestAckFalseLeavesUnread(t *testing.T) {
	s, _ := openStore(t)
	postN(t, s, 3, 2)
	p := readPage(t, s, 3, Filter{Limit: 10}, false, bigBound)
	wantIDs(t, "messages", ids(p.Messages), []string{"msg_3_1", "msg_3_2"})
	wantIDs(t, "acked", p.AckedIDs, nil)
	for _, m := range p.Messages {
		if m.Status != StatusUnread {
			t.Fatalf("%s returned as %s with ack=false", m.ID, m.Status)
		}
	}
	for id, st := range statuses(t, s, 3) {
		if st != StatusUnread {
			t.Fatalf("%s is %s after ack=false", id, st)
		}
	}
	// A View can read without acking, but not acknowledge.
	view(t, s, func(tx *objects.Txn) error {
		if _, err := Read(tx, 3, Filter{Limit: 10}, false, bigBound, t0); err != nil {
			t.Errorf("Read(ack=false) in View: %v", err)
		}
		_, err := Read(tx, 3, Filter{Limit: 10}, true, bigBound, t0)
		wantErrIs(t, err, objects.ErrReadOnly)
		return nil
	})
	checkInvariants(t, s, 3)
}

func TestIncludeAcked(t *testing.T) {
	s, _ := openStore(t)
	postN(t, s, 4, 4)
	firstAck := t0.Add(time.Second)
	update(t, s, func(tx *objects.Txn) error {
		_, err := Read(tx, 4, Filter{MessageIDs: idsp("msg_4_1", "msg_4_3"), Limit: 10}, true, bigBound, firstAck)
		return err
	})
	update(t, s, func(tx *objects.Txn) error {
		n, err := SupersedeAfter(tx, 4, 3) // supersedes msg_4_4
		if n != 1 {
			t.Errorf("superseded %d, want 1", n)
		}
		return err
	})
	p := readPage(t, s, 4, Filter{Limit: 10}, false, bigBound)
	wantIDs(t, "unread only", ids(p.Messages), []string{"msg_4_2"})

	p = readPage(t, s, 4, Filter{IncludeAcked: true, Limit: 10}, true, bigBound)
	wantIDs(t, "include_acked", ids(p.Messages), []string{"msg_4_1", "msg_4_2", "msg_4_3"})
	wantIDs(t, "acked now", p.AckedIDs, []string{"msg_4_2"})
	// Already acknowledged messages keep their first acknowledgement.
	if !p.Messages[0].AckedAt.Equal(firstAck) || !p.Messages[1].AckedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("acked_at %v, %v; want %v, %v", p.Messages[0].AckedAt, p.Messages[1].AckedAt, firstAck, t0.Add(time.Minute))
	}
	if st := statuses(t, s, 4)["msg_4_1"]; st != StatusAcked {
		t.Fatalf("msg_4_1 is %s", st)
	}
	checkInvariants(t, s, 4)
}

func TestEachFilterField(t *testing.T) {
	s, _ := openStore(t)
	msgs := []Message{
		{Sender: "process:1", Recipient: 9, Body: "a"},
		{Sender: "human:ann", Recipient: 9, Body: "b", Kind: KindInterrupt},
		{Sender: "process:2", Recipient: 9, Body: "c", Channel: "build"},
		{Sender: "process:2", Recipient: 9, Body: "d", CorrelationID: "job-1"},
		{Sender: "process:1", Recipient: 9, Body: "e", ReplyTo: "msg_1_1", Channel: "build", CorrelationID: "job-1"},
	}
	for _, m := range msgs {
		post(t, s, m)
	}
	post(t, s, Message{Sender: "process:1", Recipient: 10, Body: "other queue"})
	cases := []struct {
		name string
		f    Filter
		want []string
	}{
		{"none", Filter{Limit: 10}, []string{"msg_9_1", "msg_9_2", "msg_9_3", "msg_9_4", "msg_9_5"}},
		{"kind normal", Filter{Kind: strp(KindNormal), Limit: 10}, []string{"msg_9_1", "msg_9_3", "msg_9_4", "msg_9_5"}},
		{"kind interrupt", Filter{Kind: strp(KindInterrupt), Limit: 10}, []string{"msg_9_2"}},
		{"sender process", Filter{Sender: strp("process:2"), Limit: 10}, []string{"msg_9_3", "msg_9_4"}},
		{"sender human", Filter{Sender: strp("human:ann"), Limit: 10}, []string{"msg_9_2"}},
		{"sender unknown", Filter{Sender: strp("human:bob"), Limit: 10}, nil},
		{"channel default", Filter{Channel: strp(DefaultChannel), Limit: 10}, []string{"msg_9_1", "msg_9_2", "msg_9_4"}},
		{"channel build", Filter{Channel: strp("build"), Limit: 10}, []string{"msg_9_3", "msg_9_5"}},
		{"correlation", Filter{CorrelationID: strp("job-1"), Limit: 10}, []string{"msg_9_4", "msg_9_5"}},
		{"reply_to", Filter{ReplyTo: strp("msg_1_1"), Limit: 10}, []string{"msg_9_5"}},
		{"combined", Filter{Channel: strp("build"), CorrelationID: strp("job-1"), Sender: strp("process:1"), Limit: 10}, []string{"msg_9_5"}},
		{"empty string is exact", Filter{CorrelationID: strp(""), Limit: 10}, []string{"msg_9_1", "msg_9_2", "msg_9_3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := readPage(t, s, 9, tc.f, false, bigBound)
			wantIDs(t, "Read", ids(p.Messages), tc.want)
			var viaMatches []string
			view(t, s, func(tx *objects.Txn) error {
				return List(tx, 9, func(m *Message) error {
					if tc.f.Matches(m) {
						viaMatches = append(viaMatches, m.ID)
					}
					return nil
				})
			})
			wantIDs(t, "Matches", viaMatches, tc.want)
			var first *Message
			view(t, s, func(tx *objects.Txn) error {
				var err error
				first, err = FirstMatch(tx, 9, tc.f)
				return err
			})
			switch {
			case len(tc.want) == 0 && first != nil:
				t.Fatalf("FirstMatch = %s, want none", first.ID)
			case len(tc.want) > 0 && (first == nil || first.ID != tc.want[0]):
				t.Fatalf("FirstMatch = %v, want %s", first, tc.want[0])
			}
		})
	}
}

func TestExactIDs(t *testing.T) {
	s, _ := openStore(t)
	postN(t, s, 5, 4)
	postN(t, s, 6, 1)
	readPage(t, s, 5, Filter{MessageIDs: idsp("msg_5_2"), Limit: 1}, true, bigBound)
	update(t, s, func(tx *objects.Txn) error { _, err := SupersedeAfter(tx, 5, 3); return err })

	cases := []struct {
		name     string
		ids      *[]string
		acked    bool
		want     []string
		wantMore bool
	}{
		{"queue order whatever the request order", idsp("msg_5_3", "msg_5_1"), false, []string{"msg_5_1", "msg_5_3"}, false},
		{"empty list matches nothing", idsp(), false, nil, false},
		{"empty list matches nothing with include_acked", idsp(), true, nil, false},
		{"unknown ids", idsp("msg_5_99", "msg_6_1", "hello", "msg_5_01", "msg_05_1", "msg_5_0", "msg_5_-1", "msg_5_1_2"), false, nil, false},
		{"unknown mixed with known", idsp("msg_5_99", "msg_5_1"), false, []string{"msg_5_1"}, false},
		{"acked needs include_acked", idsp("msg_5_2"), false, nil, false},
		{"acked with include_acked", idsp("msg_5_2", "msg_5_1"), true, []string{"msg_5_1", "msg_5_2"}, false},
		{"superseded never", idsp("msg_5_4"), true, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := readPage(t, s, 5, Filter{MessageIDs: tc.ids, IncludeAcked: tc.acked, Limit: 10}, false, bigBound)
			wantIDs(t, "messages", ids(p.Messages), tc.want)
			if p.HasMore != tc.wantMore || p.OmittedCount != 0 {
				t.Fatalf("has_more %v omitted %d", p.HasMore, p.OmittedCount)
			}
		})
	}
	// The other queue's message is untouched and still its own.
	if st := statuses(t, s, 6)["msg_6_1"]; st != StatusUnread {
		t.Fatalf("msg_6_1 is %s", st)
	}
	checkInvariants(t, s, 5)
	checkInvariants(t, s, 6)
}

func TestLimitHasMoreAndContinuation(t *testing.T) {
	t.Run("ack=true unread: same filters progress", func(t *testing.T) {
		s, _ := openStore(t)
		postN(t, s, 2, 5)
		p := readPage(t, s, 2, Filter{Channel: strp(DefaultChannel), Limit: 2}, true, bigBound)
		wantIDs(t, "page 1", ids(p.Messages), []string{"msg_2_1", "msg_2_2"})
		if !p.HasMore || p.OmittedCount != 3 || p.Continuation == nil {
			t.Fatalf("page 1: has_more %v omitted %d continuation %v", p.HasMore, p.OmittedCount, p.Continuation)
		}
		c := p.Continuation
		if c.Filter.MessageIDs != nil || c.Filter.Limit != 2 || c.Filter.Channel == nil || *c.Filter.Channel != DefaultChannel || !c.Ack {
			t.Fatalf("continuation %+v: want the same filters", c)
		}
		if !strings.Contains(c.Note, "no cursor") || !strings.Contains(c.Note, "3 matching") {
			t.Fatalf("note %q", c.Note)
		}
		p = readPage(t, s, 2, c.Filter, c.Ack, bigBound)
		wantIDs(t, "page 2", ids(p.Messages), []string{"msg_2_3", "msg_2_4"})
		p = readPage(t, s, 2, p.Continuation.Filter, p.Continuation.Ack, bigBound)
		wantIDs(t, "page 3", ids(p.Messages), []string{"msg_2_5"})
		if p.HasMore || p.Continuation != nil || p.OmittedCount != 0 {
			t.Fatalf("last page %+v", p)
		}
		checkInvariants(t, s, 2)
	})
	t.Run("ack=false: exact ids of the rest", func(t *testing.T) {
		s, _ := openStore(t)
		postN(t, s, 2, 5)
		var pages [][]string
		f, ack := Filter{Limit: 2}, false
		for range 5 {
			p := readPage(t, s, 2, f, ack, bigBound)
			pages = append(pages, ids(p.Messages))
			if !p.HasMore {
				break
			}
			f, ack = p.Continuation.Filter, p.Continuation.Ack
			if ack {
				t.Fatal("continuation turned ack on")
			}
		}
		want := [][]string{{"msg_2_1", "msg_2_2"}, {"msg_2_3", "msg_2_4"}, {"msg_2_5"}}
		if fmt.Sprint(pages) != fmt.Sprint(want) {
			t.Fatalf("pages %v, want %v", pages, want)
		}
		for id, st := range statuses(t, s, 2) {
			if st != StatusUnread {
				t.Fatalf("%s is %s", id, st)
			}
		}
	})
	t.Run("include_acked: exact ids of the rest", func(t *testing.T) {
		s, _ := openStore(t)
		postN(t, s, 2, 3)
		p := readPage(t, s, 2, Filter{IncludeAcked: true, Limit: 1}, true, bigBound)
		wantIDs(t, "page 1", ids(p.Messages), []string{"msg_2_1"})
		c := p.Continuation
		if c == nil || c.Filter.MessageIDs == nil {
			t.Fatalf("continuation %+v: want exact ids", c)
		}
		wantIDs(t, "continuation ids", *c.Filter.MessageIDs, []string{"msg_2_2", "msg_2_3"})
		if !strings.Contains(c.Note, "include_acked") {
			t.Fatalf("note %q does not explain why", c.Note)
		}
	})
	t.Run("exact ids: continuation lists only ids not yet returned", func(t *testing.T) {
		s, _ := openStore(t)
		postN(t, s, 2, 5)
		req := []string{"msg_2_5", "msg_2_9", "msg_2_1", "msg_2_3", "msg_2_2"}
		p := readPage(t, s, 2, Filter{MessageIDs: &req, IncludeAcked: true, Limit: 2}, false, bigBound)
		wantIDs(t, "page 1", ids(p.Messages), []string{"msg_2_1", "msg_2_2"})
		if p.OmittedCount != 2 || !p.HasMore {
			t.Fatalf("omitted %d has_more %v, want 2 true", p.OmittedCount, p.HasMore)
		}
		c := p.Continuation
		wantIDs(t, "continuation ids", *c.Filter.MessageIDs, []string{"msg_2_5", "msg_2_9", "msg_2_3"})
		wantIDs(t, "request untouched", req, []string{"msg_2_5", "msg_2_9", "msg_2_1", "msg_2_3", "msg_2_2"})
		if !c.Filter.IncludeAcked || c.Filter.Limit != 2 || c.Ack {
			t.Fatalf("continuation %+v lost the other arguments", c)
		}
		p = readPage(t, s, 2, c.Filter, c.Ack, bigBound)
		wantIDs(t, "page 2", ids(p.Messages), []string{"msg_2_3", "msg_2_5"})
		if p.HasMore {
			t.Fatalf("page 2 has more: %+v", p)
		}
	})
	t.Run("limit 0 counts without returning", func(t *testing.T) {
		s, _ := openStore(t)
		postN(t, s, 2, 3)
		p := readPage(t, s, 2, Filter{Limit: 0}, true, bigBound)
		if len(p.Messages) != 0 || len(p.AckedIDs) != 0 || p.OmittedCount != 3 || !p.HasMore {
			t.Fatalf("limit 0 page %+v", p)
		}
		if p.Continuation.Filter.Limit != DefaultLimit || !strings.Contains(p.Continuation.Note, "limit is 0") {
			t.Fatalf("continuation %+v", p.Continuation)
		}
		checkInvariants(t, s, 2)
		if u, _ := countOf(t, s, 2); u != 3 {
			t.Fatalf("limit 0 acked something: %d unread", u)
		}
	})
	t.Run("more than 1000 omitted: listed ids capped", func(t *testing.T) {
		s, _ := openStore(t)
		update(t, s, func(tx *objects.Txn) error {
			for i := range 1003 {
				if _, err := Post(tx, Message{Sender: "process:1", Recipient: 2, Body: fmt.Sprint(i)}, t0); err != nil {
					return err
				}
			}
			return nil
		})
		p := readPage(t, s, 2, Filter{Limit: 2}, false, bigBound)
		c := p.Continuation
		if p.OmittedCount != 1001 || len(*c.Filter.MessageIDs) != MaxMessageIDs {
			t.Fatalf("omitted %d, listed %d", p.OmittedCount, len(*c.Filter.MessageIDs))
		}
		if (*c.Filter.MessageIDs)[0] != "msg_2_3" || !strings.Contains(c.Note, "first 1000 of the 1001") {
			t.Fatalf("continuation starts at %s, note %q", (*c.Filter.MessageIDs)[0], c.Note)
		}
		if err := c.Filter.Validate(); err != nil {
			t.Fatalf("continuation filter invalid: %v", err)
		}
	})
}

func countOf(t testing.TB, s *objects.Store, recipient int64) (int, int) {
	t.Helper()
	var u, n int
	view(t, s, func(tx *objects.Txn) error {
		var err error
		u, n, err = Count(tx, recipient)
		return err
	})
	return u, n
}

func TestContinuationJSON(t *testing.T) {
	c := Continuation{Filter: Filter{IncludeAcked: true, MessageIDs: idsp("msg_1_2"), Limit: 5}, Note: "n", Ack: false}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"arguments":{"include_acked":true,"message_ids":["msg_1_2"],"limit":5,"ack":false},"note":"n"}`
	if string(raw) != want {
		t.Fatalf("JSON %s, want %s", raw, want)
	}
	var back Continuation
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if back.Ack || !back.Filter.IncludeAcked || back.Filter.Limit != 5 || (*back.Filter.MessageIDs)[0] != "msg_1_2" || back.Note != "n" {
		t.Fatalf("round trip %+v", back)
	}
	raw, _ = json.Marshal(Page{Messages: []Message{}, AckedIDs: []string{}, HasMore: true, OmittedCount: 1,
		Continuation: &Continuation{Filter: Filter{Limit: 1}, Ack: true}})
	if !strings.Contains(string(raw), `"continuation":{"arguments":{"include_acked":false,"limit":1,"ack":true},"note":""}`) {
		t.Fatalf("page JSON %s", raw)
	}
}

func TestMaxBytesSplitsPage(t *testing.T) {
	s, _ := openStore(t)
	for i := 1; i <= 4; i++ {
		post(t, s, Message{Sender: "process:1", Recipient: 8, Body: strings.Repeat("x", 100*i)})
	}
	// Size of the first two messages as they are returned (acked), measured
	// in a transaction that is then abandoned.
	var all Page
	measureOnly := errors.New("measure only")
	err := s.Update(func(tx *objects.Txn) error {
		var err error
		if all, err = Read(tx, 8, Filter{Limit: 10}, true, bigBound, t0.Add(time.Minute)); err != nil {
			return err
		}
		return measureOnly
	})
	if !errors.Is(err, measureOnly) {
		t.Fatal(err)
	}
	twoJSON, err := json.Marshal(all.Messages[:2])
	if err != nil {
		t.Fatal(err)
	}
	bound := len(twoJSON)

	p := readPage(t, s, 8, Filter{Limit: 10}, true, bound)
	wantIDs(t, "page", ids(p.Messages), []string{"msg_8_1", "msg_8_2"})
	wantIDs(t, "acked", p.AckedIDs, []string{"msg_8_1", "msg_8_2"})
	if raw, _ := json.Marshal(p.Messages); len(raw) > bound {
		t.Fatalf("returned %d bytes over a bound of %d", len(raw), bound)
	}
	if !p.HasMore || p.OmittedCount != 2 || !strings.Contains(p.Continuation.Note, "size bound") {
		t.Fatalf("page %+v", p)
	}
	// One byte less leaves only the first.
	p = readPage(t, s, 8, Filter{IncludeAcked: true, Limit: 10}, false, bound-1)
	wantIDs(t, "page at bound-1", ids(p.Messages), []string{"msg_8_1"})
	wantIDs(t, "continuation ids", *p.Continuation.Filter.MessageIDs, []string{"msg_8_2", "msg_8_3", "msg_8_4"})

	// The first unread message (msg_8_3, 300 bytes of body) does not fit:
	// the read fails and acknowledges nothing, even if the caller commits.
	update(t, s, func(tx *objects.Txn) error {
		_, err := Read(tx, 8, Filter{Limit: 10}, true, 200, t0)
		wantErrIs(t, err, ErrTooLarge)
		if !strings.Contains(err.Error(), "msg_8_3") {
			t.Errorf("error %q does not name the message", err)
		}
		return nil
	})
	if u, _ := countOf(t, s, 8); u != 2 {
		t.Fatalf("ErrTooLarge acked something: %d unread, want 2", u)
	}
	// A later large message does not fail the page: it is left for later.
	p = readPage(t, s, 8, Filter{Limit: 10}, true, 600)
	wantIDs(t, "page", ids(p.Messages), []string{"msg_8_3"})
	if p.OmittedCount != 1 {
		t.Fatalf("omitted %d", p.OmittedCount)
	}
	checkInvariants(t, s, 8)
}

// Any message Post accepts fits a read of MaxMessageJSONBytes, however its
// text encodes: a payload of '<' is bounded as the read measures it (6
// bytes each), not by its compact bytes alone.
func TestEveryPostedMessageFitsARead(t *testing.T) {
	s, _ := openStore(t)
	html := func(n int) string { return strings.Repeat("<", n) }
	// 131072 bytes of compact JSON that a read encodes in 786 KB.
	update(t, s, func(tx *objects.Txn) error {
		_, err := Post(tx, Message{Sender: "process:1", Recipient: 3, Payload: bigPayloadOf('<', MaxPayloadBytes-2)}, t0)
		checkFieldError(t, err, "payload", "counted as a read encodes it")
		return nil
	})
	if got := rawMailboxKeys(t, s); len(got) != 0 {
		t.Fatalf("the refused post left keys %q", got)
	}

	// Every field at its limit, in the characters encoding/json writes
	// longest, with the largest pid and times a read can show.
	worst := Message{
		Sender: "human:" + html(MaxHumanNameChars), Recipient: 1<<63 - 1, Kind: KindInterrupt,
		Channel: html(MaxLabelChars), CorrelationID: html(MaxLabelChars), ReplyTo: html(MaxLabelChars),
		Subject: html(MaxSubjectChars), Body: strings.Repeat("\x01", MaxBodyChars),
		Payload: bigPayloadOf('<', (MaxPayloadBytes-2)/6),
	}
	if err := worst.Validate(); err != nil {
		t.Fatalf("the worst message must be valid: %v", err)
	}
	full := worst
	full.ID, full.Seq, full.Status = FormatID(full.Recipient, 1<<64-1), 1<<64-1, StatusSuperseded
	full.CreatedAt = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -(23*3600+59*60)))
	full.AckedAt = full.CreatedAt
	if raw, err := json.Marshal([]Message{full}); err != nil || len(raw) > MaxMessageJSONBytes {
		t.Fatalf("the worst message takes %d bytes of a read, over MaxMessageJSONBytes %d (%v)", len(raw), MaxMessageJSONBytes, err)
	}
	worst.Recipient = 3
	posted := post(t, s, worst)
	p := readPage(t, s, 3, Filter{Limit: 1}, true, MaxMessageJSONBytes)
	wantIDs(t, "page", ids(p.Messages), []string{posted.ID})
}

// The payload's measure is what encoding/json writes for it.
func TestPayloadJSONLenMatchesEncodingJSON(t *testing.T) {
	for _, p := range []string{`null`, `{"a":"<b>&amp;</b>"}`, `["\u2028\u2029","  ","…€"]`, `"\u003c<"`, `{"k<":[1,2.5e3,"é"]}`} {
		raw, err := json.Marshal(json.RawMessage(p))
		if err != nil {
			t.Fatal(err)
		}
		if got := payloadJSONLen([]byte(p)); got != len(raw) {
			t.Errorf("%s: measured %d bytes, encoding/json writes %d (%s)", p, got, len(raw), raw)
		}
	}
}

// bigPayloadOf returns a JSON string value of n copies of c.
func bigPayloadOf(c byte, n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat(string(c), n) + `"`)
}

func TestFailedTransactionAcksNothing(t *testing.T) {
	s, _ := openStore(t)
	postN(t, s, 4, 3)
	boom := errors.New("tool result too large")
	err := s.Update(func(tx *objects.Txn) error {
		p, err := Read(tx, 4, Filter{Limit: 10}, true, bigBound, t0)
		if err != nil {
			return err
		}
		if len(p.AckedIDs) != 3 {
			t.Errorf("acked %v", p.AckedIDs)
		}
		// Inside the transaction the acks are visible.
		if u, _, _ := Count(tx, 4); u != 0 {
			t.Errorf("in txn: %d unread", u)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v", err)
	}
	for id, st := range statuses(t, s, 4) {
		if st != StatusUnread {
			t.Fatalf("%s is %s after a failed transaction", id, st)
		}
	}
	checkInvariants(t, s, 4)
}

func TestPostAndReadInOneTransaction(t *testing.T) {
	s, _ := openStore(t)
	update(t, s, func(tx *objects.Txn) error {
		for i := range 3 {
			if _, err := Post(tx, Message{Sender: "process:2", Recipient: 1, Body: fmt.Sprint(i)}, t0); err != nil {
				return err
			}
		}
		p, err := Read(tx, 1, Filter{Limit: 2}, true, bigBound, t0)
		if err != nil {
			return err
		}
		wantIDs(t, "same-txn read", ids(p.Messages), []string{"msg_1_1", "msg_1_2"})
		m, err := FirstMatch(tx, 1, Filter{})
		if err != nil {
			return err
		}
		if m == nil || m.ID != "msg_1_3" {
			t.Errorf("FirstMatch = %v, want msg_1_3", m)
		}
		return nil
	})
	checkInvariants(t, s, 1)
}

func TestSupersedeAfter(t *testing.T) {
	s, _ := openStore(t)
	postN(t, s, 3, 5)
	var last uint64
	view(t, s, func(tx *objects.Txn) error { var err error; last, err = LastSeq(tx, 3); return err })
	if last != 5 {
		t.Fatalf("LastSeq = %d", last)
	}
	readPage(t, s, 3, Filter{MessageIDs: idsp("msg_3_1", "msg_3_4"), Limit: 10}, true, bigBound)
	update(t, s, func(tx *objects.Txn) error {
		n, err := SupersedeAfter(tx, 3, 2)
		if n != 2 {
			t.Errorf("superseded %d, want 2 (msg_3_3 and msg_3_5)", n)
		}
		return err
	})
	want := map[string]string{"msg_3_1": StatusAcked, "msg_3_2": StatusUnread, "msg_3_3": StatusSuperseded,
		"msg_3_4": StatusAcked, "msg_3_5": StatusSuperseded}
	if got := statuses(t, s, 3); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	checkInvariants(t, s, 3)
	p := readPage(t, s, 3, Filter{IncludeAcked: true, Limit: 10}, false, bigBound)
	wantIDs(t, "after restore", ids(p.Messages), []string{"msg_3_1", "msg_3_2", "msg_3_4"})

	// Ids are never reused after a restore.
	m := post(t, s, Message{Sender: "human:ann", Recipient: 3, Body: "after"})
	if m.ID != "msg_3_6" {
		t.Fatalf("post after restore got %s", m.ID)
	}
	update(t, s, func(tx *objects.Txn) error {
		for _, seq := range []uint64{6, ^uint64(0)} {
			n, err := SupersedeAfter(tx, 3, seq)
			if err != nil || n != 0 {
				t.Errorf("SupersedeAfter(%d) = %d, %v", seq, n, err)
			}
		}
		return nil
	})
	// Superseding an empty queue is a no-op.
	update(t, s, func(tx *objects.Txn) error {
		n, err := SupersedeAfter(tx, 99, 0)
		if n != 0 {
			t.Errorf("empty queue superseded %d", n)
		}
		return err
	})
	update(t, s, func(tx *objects.Txn) error {
		n, err := SupersedeAfter(tx, 3, 0)
		if n != 2 {
			t.Errorf("SupersedeAfter(0) superseded %d, want 2 (msg_3_2, msg_3_6)", n)
		}
		return err
	})
	checkInvariants(t, s, 3)
}

func TestRestoreStatuses(t *testing.T) {
	s, _ := openStore(t)
	postN(t, s, 3, 4)
	readPage(t, s, 3, Filter{MessageIDs: idsp("msg_3_1"), Limit: 10}, true, bigBound)
	var captured []Message
	view(t, s, func(tx *objects.Txn) error {
		return List(tx, 3, func(m *Message) error { captured = append(captured, *m); return nil })
	})
	// Since the capture: msg_3_2 and msg_3_3 read, msg_3_4 superseded by an
	// earlier restore.
	readPage(t, s, 3, Filter{MessageIDs: idsp("msg_3_2", "msg_3_3"), Limit: 10}, true, bigBound)
	update(t, s, func(tx *objects.Txn) error { _, err := SupersedeAfter(tx, 3, 3); return err })
	update(t, s, func(tx *objects.Txn) error {
		n, err := RestoreStatuses(tx, 3, captured)
		if n != 3 {
			t.Errorf("restored %d, want 3", n)
		}
		return err
	})
	want := map[string]string{"msg_3_1": StatusAcked, "msg_3_2": StatusUnread, "msg_3_3": StatusUnread, "msg_3_4": StatusUnread}
	if got := statuses(t, s, 3); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	checkInvariants(t, s, 3)
	p := readPage(t, s, 3, Filter{Limit: 10}, true, bigBound)
	wantIDs(t, "unread again", ids(p.Messages), []string{"msg_3_2", "msg_3_3", "msg_3_4"})
	// Back to a capture where they were read: the unread index follows.
	var read []Message
	view(t, s, func(tx *objects.Txn) error {
		return List(tx, 3, func(m *Message) error { read = append(read, *m); return nil })
	})
	update(t, s, func(tx *objects.Txn) error { _, err := RestoreStatuses(tx, 3, captured); return err })
	update(t, s, func(tx *objects.Txn) error { _, err := RestoreStatuses(tx, 3, read[1:3]); return err })
	if got := statuses(t, s, 3); got["msg_3_2"] != StatusAcked || got["msg_3_3"] != StatusAcked || got["msg_3_4"] != StatusUnread {
		t.Fatalf("statuses %v", got)
	}
	checkInvariants(t, s, 3)
	update(t, s, func(tx *objects.Txn) error {
		if _, err := RestoreStatuses(tx, 3, []Message{{Recipient: 3, Seq: 9, Status: StatusUnread}}); !errors.Is(err, objects.ErrNotFound) {
			t.Errorf("a message the queue does not hold: %v", err)
		}
		return nil
	})
}

func TestGetListCount(t *testing.T) {
	s, _ := openStore(t)
	postN(t, s, 12, 3)
	view(t, s, func(tx *objects.Txn) error {
		for _, id := range []string{"msg_12_4", "msg_11_1", "garbage", "", "msg_12_01"} {
			_, err := Get(tx, 12, id)
			wantErrIs(t, err, objects.ErrNotFound)
		}
		m, err := Get(tx, 12, "msg_12_2")
		if err != nil || m.Body != "m2" {
			t.Errorf("Get = %+v, %v", m, err)
		}
		var seen []string
		err = List(tx, 12, func(m *Message) error {
			seen = append(seen, m.ID)
			if m.Seq == 2 {
				return objects.ErrStopScan
			}
			return nil
		})
		if err != nil {
			return err
		}
		wantIDs(t, "List stopped", seen, []string{"msg_12_1", "msg_12_2"})
		stop := errors.New("stop")
		if err := List(tx, 12, func(*Message) error { return stop }); !errors.Is(err, stop) {
			t.Errorf("List error = %v", err)
		}
		u, n, err := Count(tx, 12)
		if u != 3 || n != 3 || err != nil {
			t.Errorf("Count = %d %d %v", u, n, err)
		}
		u, n, err = Count(tx, 13)
		if u != 0 || n != 0 || err != nil {
			t.Errorf("Count(empty) = %d %d %v", u, n, err)
		}
		if last, err := LastSeq(tx, 13); last != 0 || err != nil {
			t.Errorf("LastSeq(empty) = %d %v", last, err)
		}
		return nil
	})
}

func TestReopenKeepsQueues(t *testing.T) {
	dir := t.TempDir()
	s, err := objects.Open(dir, objects.Options{})
	if err != nil {
		t.Fatal(err)
	}
	postN(t, s, 5, 3)
	readPage(t, s, 5, Filter{Limit: 1}, true, bigBound)
	before := statuses(t, s, 5)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = objects.Open(dir, objects.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if after := statuses(t, s, 5); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("after reopen %v, before %v", after, before)
	}
	checkInvariants(t, s, 5)
	if m := post(t, s, Message{Sender: "process:1", Recipient: 5, Body: "x"}); m.ID != "msg_5_4" {
		t.Fatalf("post after reopen got %s", m.ID)
	}
	p := readPage(t, s, 5, Filter{Limit: 10}, true, bigBound)
	wantIDs(t, "unread after reopen", ids(p.Messages), []string{"msg_5_2", "msg_5_3", "msg_5_4"})
}

// Concurrent posts get distinct gap-free seqs; concurrent acking readers
// receive every message exactly once.
func TestConcurrentPostAndAck(t *testing.T) {
	s, _ := openStore(t)
	const writers, perWriter = 4, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				err := s.Update(func(tx *objects.Txn) error {
					_, err := Post(tx, Message{Sender: fmt.Sprintf("process:%d", w+1), Recipient: 50, Body: fmt.Sprint(i)}, t0)
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var mu sync.Mutex
	got := map[string]int{}
	var writersDone atomic.Bool
	var readers sync.WaitGroup
	for range 3 {
		readers.Go(func() {
			for {
				// Read the flag first: an empty page after all posts
				// committed means the queue is drained.
				drained := writersDone.Load()
				var p Page
				err := s.Update(func(tx *objects.Txn) error {
					var err error
					p, err = Read(tx, 50, Filter{Limit: 3}, true, bigBound, t0)
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, id := range p.AckedIDs {
					got[id]++
				}
				n := len(got)
				mu.Unlock()
				if n == writers*perWriter || (drained && len(p.Messages) == 0) {
					return
				}
			}
		})
	}
	wg.Wait()
	writersDone.Store(true)
	readers.Wait()
	if len(got) != writers*perWriter {
		t.Fatalf("received %d distinct messages, want %d", len(got), writers*perWriter)
	}
	for id, n := range got {
		if n != 1 {
			t.Fatalf("%s acked %d times", id, n)
		}
	}
	checkInvariants(t, s, 50)
}

// TestAgainstModel drives random posts, reads and restores against two
// queues and compares every page with a plain in-memory model of the rules.
func TestAgainstModel(t *testing.T) {
	s, _ := openStore(t)
	rng := rand.New(rand.NewPCG(1, 2))
	type modelMsg struct {
		id, status, sender, channel string
		kind                        string
	}
	model := map[int64][]*modelMsg{}
	pick := func(opts ...string) string { return opts[rng.IntN(len(opts))] }
	for step := range 400 {
		r := int64(1 + rng.IntN(2))
		switch op := rng.IntN(10); {
		case op < 5:
			m := Message{Sender: pick("process:1", "human:ann"), Recipient: r, Kind: pick(KindNormal, KindInterrupt),
				Channel: pick(DefaultChannel, "x"), Body: fmt.Sprint(step)}
			got := post(t, s, m)
			model[r] = append(model[r], &modelMsg{got.ID, StatusUnread, m.Sender, m.Channel, m.Kind})
		case op < 9:
			f := Filter{IncludeAcked: rng.IntN(3) == 0, Limit: rng.IntN(4)}
			if rng.IntN(3) == 0 {
				f.Kind = strp(pick(KindNormal, KindInterrupt))
			}
			if rng.IntN(4) == 0 {
				f.Channel = strp(pick(DefaultChannel, "x"))
			}
			if rng.IntN(4) == 0 {
				var ids []string
				for _, m := range model[r] {
					if rng.IntN(2) == 0 {
						ids = append(ids, m.id)
					}
				}
				ids = append(ids, FormatID(r, uint64(len(model[r])+1)))
				rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
				f.MessageIDs = &ids
			}
			ack := rng.IntN(4) != 0
			var want, wantAcked []string
			matched := 0
			for _, m := range model[r] {
				ok := m.status == StatusUnread || (m.status == StatusAcked && f.IncludeAcked)
				ok = ok && (f.Kind == nil || *f.Kind == m.kind) && (f.Channel == nil || *f.Channel == m.channel)
				ok = ok && (f.MessageIDs == nil || slices.Contains(*f.MessageIDs, m.id))
				if !ok {
					continue
				}
				matched++
				if len(want) < f.Limit {
					want = append(want, m.id)
					if ack && m.status == StatusUnread {
						m.status = StatusAcked
						wantAcked = append(wantAcked, m.id)
					}
				}
			}
			p := readPage(t, s, r, f, ack, bigBound)
			wantIDs(t, fmt.Sprintf("step %d messages", step), ids(p.Messages), want)
			wantIDs(t, fmt.Sprintf("step %d acked", step), p.AckedIDs, wantAcked)
			if p.OmittedCount != matched-len(want) || p.HasMore != (p.OmittedCount > 0) || (p.Continuation != nil) != p.HasMore {
				t.Fatalf("step %d: omitted %d has_more %v continuation %v, model omitted %d",
					step, p.OmittedCount, p.HasMore, p.Continuation != nil, matched-len(want))
			}
		default:
			seq := uint64(rng.IntN(len(model[r]) + 1))
			n := 0
			for i, m := range model[r] {
				if uint64(i+1) > seq && m.status == StatusUnread {
					m.status = StatusSuperseded
					n++
				}
			}
			update(t, s, func(tx *objects.Txn) error {
				got, err := SupersedeAfter(tx, r, seq)
				if got != n {
					t.Errorf("step %d: superseded %d, model %d", step, got, n)
				}
				return err
			})
		}
		if step%20 == 0 {
			checkInvariants(t, s, 1)
			checkInvariants(t, s, 2)
		}
	}
	for r, msgs := range model {
		got := statuses(t, s, r)
		for _, m := range msgs {
			if got[m.id] != m.status {
				t.Fatalf("%s is %s, model %s", m.id, got[m.id], m.status)
			}
		}
		checkInvariants(t, s, r)
	}
}

func TestCorruptRecordsAreErrors(t *testing.T) {
	s, _ := openStore(t)
	postN(t, s, 1, 2)
	postN(t, s, 2, 1)
	update(t, s, func(tx *objects.Txn) error {
		if err := tx.Set(seqKey(keyMsg, 1, 2), []byte("{not json")); err != nil {
			return err
		}
		return tx.Set(headerKey(2), []byte{headerFormatV1, 1, 2})
	})
	view(t, s, func(tx *objects.Txn) error {
		if _, err := Read(tx, 1, Filter{Limit: 10}, false, bigBound, t0); err == nil || !strings.Contains(err.Error(), "mailbox: read: decode") {
			t.Errorf("Read over a corrupt record: %v", err)
		}
		if err := List(tx, 1, func(*Message) error { return nil }); err == nil || !strings.Contains(err.Error(), "mailbox: list: decode") {
			t.Errorf("List over a corrupt record: %v", err)
		}
		if _, err := Get(tx, 1, "msg_1_2"); err == nil || errors.Is(err, objects.ErrNotFound) {
			t.Errorf("Get of a corrupt record: %v", err)
		}
		if _, _, err := Count(tx, 2); err == nil || !strings.Contains(err.Error(), "corrupt header") {
			t.Errorf("Count with a corrupt header: %v", err)
		}
		if _, err := Read(tx, 2, Filter{Limit: 10}, false, bigBound, t0); err == nil {
			t.Error("Read with a corrupt header succeeded")
		}
		return nil
	})
	update(t, s, func(tx *objects.Txn) error {
		_, err := Post(tx, Message{Sender: "process:1", Recipient: 2, Body: "x"}, t0)
		if err == nil {
			t.Error("Post onto a corrupt header succeeded")
		}
		return nil
	})
}

func TestUnreadAfter(t *testing.T) {
	s, _ := openStore(t)
	postN(t, s, 6, 6)
	readPage(t, s, 6, Filter{MessageIDs: idsp("msg_6_1", "msg_6_4"), Limit: 10}, true, bigBound)
	update(t, s, func(tx *objects.Txn) error { _, err := SupersedeAfter(tx, 6, 5); return err })
	for _, tc := range []struct {
		after uint64
		want  []string
	}{
		{0, []string{"msg_6_2", "msg_6_3", "msg_6_5"}},
		{2, []string{"msg_6_3", "msg_6_5"}},
		{4, []string{"msg_6_5"}},
		{5, nil},
		{^uint64(0), nil},
	} {
		var got []string
		view(t, s, func(tx *objects.Txn) error {
			return UnreadAfter(tx, 6, tc.after, func(m *Message) error {
				got = append(got, m.ID)
				return nil
			})
		})
		wantIDs(t, fmt.Sprintf("UnreadAfter(%d)", tc.after), got, tc.want)
	}
	view(t, s, func(tx *objects.Txn) error {
		var got []string
		err := UnreadAfter(tx, 6, 0, func(m *Message) error {
			got = append(got, m.ID)
			return objects.ErrStopScan
		})
		wantIDs(t, "stopped", got, []string{"msg_6_2"})
		checkFieldError(t, UnreadAfter(tx, 0, 0, func(*Message) error { return nil }), "recipient", "positive")
		checkFieldError(t, UnreadAfter(tx, 6, 0, nil), "fn", "must not be nil")
		return err
	})
}
