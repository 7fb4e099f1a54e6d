package mailbox

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/libos/libos/objects"
)

var t0 = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

func openStore(t testing.TB) (*objects.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := objects.Open(dir, objects.Options{})
	if err != nil {
		t.Fatalf("objects.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, dir
}

func update(t testing.TB, s *objects.Store, fn func(tx *objects.Txn) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func view(t testing.TB, s *objects.Store, fn func(tx *objects.Txn) error) {
	t.Helper()
	if err := s.View(fn); err != nil {
		t.Fatalf("View: %v", err)
	}
}

func post(t testing.TB, s *objects.Store, m Message) Message {
	t.Helper()
	var out Message
	update(t, s, func(tx *objects.Txn) error {
		var err error
		out, err = Post(tx, m, t0)
		return err
	})
	return out
}

// postN posts n plain messages from process 1 to recipient, bodies "m1".."mn".
func postN(t testing.TB, s *objects.Store, recipient int64, n int) []Message {
	t.Helper()
	var out []Message
	for i := 1; i <= n; i++ {
		out = append(out, post(t, s, Message{Sender: "process:1", Recipient: recipient, Body: "m" + strconv.Itoa(i)}))
	}
	return out
}

const bigBound = 1 << 30

// readPage runs Read in its own committed Update.
func readPage(t testing.TB, s *objects.Store, recipient int64, f Filter, ack bool, maxBytes int) Page {
	t.Helper()
	var p Page
	update(t, s, func(tx *objects.Txn) error {
		var err error
		p, err = Read(tx, recipient, f, ack, maxBytes, t0.Add(time.Minute))
		return err
	})
	return p
}

func ids(ms []Message) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

func strp(s string) *string { return &s }

func idsp(ids ...string) *[]string {
	if ids == nil {
		ids = []string{}
	}
	return &ids
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func wantIDs(t testing.TB, what string, got, want []string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if !equalStrings(got, want) {
		t.Fatalf("%s = %q, want %q", what, got, want)
	}
}

func wantErrIs(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want one wrapping %v", err, target)
	}
}

// statuses returns id -> status for every message of recipient.
func statuses(t testing.TB, s *objects.Store, recipient int64) map[string]string {
	t.Helper()
	out := map[string]string{}
	view(t, s, func(tx *objects.Txn) error {
		return List(tx, recipient, func(m *Message) error {
			out[m.ID] = m.Status
			return nil
		})
	})
	return out
}

// checkInvariants verifies that the unread index, the header counts and the
// message records of recipient agree.
func checkInvariants(t testing.TB, s *objects.Store, recipient int64) {
	t.Helper()
	view(t, s, func(tx *objects.Txn) error {
		var unread, total int
		var lastSeq uint64
		want := map[uint64]bool{}
		err := List(tx, recipient, func(m *Message) error {
			total++
			if m.Seq != lastSeq+1 {
				t.Errorf("seq %d follows %d: want gap-free", m.Seq, lastSeq)
			}
			lastSeq = m.Seq
			if m.ID != FormatID(recipient, m.Seq) || m.Recipient != recipient {
				t.Errorf("message %+v has the wrong identity", m)
			}
			if m.Status == StatusUnread {
				unread++
				want[m.Seq] = true
			}
			if (m.Status == StatusAcked) == m.AckedAt.IsZero() {
				t.Errorf("%s: status %s with acked_at %v", m.ID, m.Status, m.AckedAt)
			}
			return nil
		})
		if err != nil {
			return err
		}
		got := map[uint64]bool{}
		err = tx.Scan(queuePrefix(keyUnread, recipient), func(k, _ []byte) error {
			seq, err := seqFromKey(k)
			got[seq] = true
			return err
		})
		if err != nil {
			return err
		}
		if len(got) != len(want) {
			t.Errorf("unread index holds %d entries, messages say %d unread", len(got), len(want))
		}
		for seq := range want {
			if !got[seq] {
				t.Errorf("unread message seq %d missing from the index", seq)
			}
		}
		h, err := loadHeader(tx, recipient)
		if err != nil {
			return err
		}
		wantFirst := lastSeq + 1
		for seq := range want {
			wantFirst = min(wantFirst, seq)
		}
		if lastSeq > 0 && h.firstUnread != wantFirst {
			t.Errorf("header first unread = %d, want %d", h.firstUnread, wantFirst)
		}
		u, n, err := Count(tx, recipient)
		if err != nil {
			return err
		}
		if u != unread || n != total {
			t.Errorf("Count = (%d, %d), messages say (%d, %d)", u, n, unread, total)
		}
		last, err := LastSeq(tx, recipient)
		if err != nil {
			return err
		}
		if last != lastSeq {
			t.Errorf("LastSeq = %d, messages end at %d", last, lastSeq)
		}
		return nil
	})
}
