package objects

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEventsBeforeReadsBackFromTheEnd(t *testing.T) {
	s := openTest(t, t.TempDir(), newFakeClock())
	defer closeTest(t, s)
	if evs, err := s.EventsBefore(0, 0); err != nil || len(evs) != 0 {
		t.Fatalf("an empty log: %v %v", evs, err)
	}
	for range 10 {
		mustUpdate(t, s, func(tx *Txn) error {
			_, err := tx.AppendEvent("tick", map[string]int{"n": 1})
			return err
		})
	}
	seqs := func(evs []Event) []uint64 {
		out := make([]uint64, len(evs))
		for i, e := range evs {
			out[i] = e.Seq
		}
		return out
	}
	evs, err := s.EventsBefore(0, 3)
	if got := seqs(evs); err != nil || len(got) != 3 || got[0] != 10 || got[2] != 8 || evs[0].Kind != "tick" {
		t.Fatalf("the newest three: %v %v", got, err)
	}
	evs, err = s.EventsBefore(8, 0)
	if got := seqs(evs); err != nil || len(got) != 7 || got[0] != 7 || got[6] != 1 {
		t.Fatalf("before 8: %v %v", got, err)
	}
	if evs, err := s.EventsBefore(1, 0); err != nil || len(evs) != 0 {
		t.Fatalf("before the first: %v %v", evs, err)
	}
	if _, err := s.EventsBefore(0, -1); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a negative limit: %v", err)
	}
}

func TestObjectEventJSONMatchesMarshal(t *testing.T) {
	idents := []string{"plain", "with space", "a/b.c-d_e:f", `q"uote`, `back\slash`, "<tag>", "a&b",
		"tab\tx", "ctl\x01", "del\x7f", "é", "\u2028", "bad\xffutf8", "~"}
	for _, id := range idents {
		for _, version := range []uint64{0, 1, 1 << 63} {
			sm := storedMeta{Meta: Meta{OID: "oid-" + id, Namespace: id, Name: id + "n", Kind: "k" + id, Version: version}}
			want, err := json.Marshal(ObjectEvent{OID: sm.OID, Namespace: sm.Namespace, Name: sm.Name, Kind: sm.Kind, Version: sm.Version})
			if err != nil {
				t.Fatal(err)
			}
			if got := objectEventJSON(&sm); string(got) != string(want) {
				t.Fatalf("objectEventJSON(%q) = %s, want %s", id, got, want)
			}
		}
	}
}

// logLines returns the event log of s, an event a line: "seq kind data".
func logLines(t *testing.T, s *Store) []string {
	t.Helper()
	evs, err := s.Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	lines := make([]string, 0, len(evs))
	for _, e := range evs {
		lines = append(lines, fmt.Sprintf("%d %s %s", e.Seq, e.Kind, e.Data))
	}
	return lines
}

// TestObjectEventsWrittenWhenTheBatchIsBuilt checks that an object
// operation's event holds no data until its batch is built, out of the
// write lock, and that the log then holds the data json.Marshal makes of it,
// a rolled-back one left out.
func TestObjectEventsWrittenWhenTheBatchIsBuilt(t *testing.T) {
	s := openTest(t, t.TempDir(), newFakeClock())
	defer closeTest(t, s)
	var oid string
	mustUpdate(t, s, func(tx *Txn) error {
		m, err := tx.Create(CreateSpec{Namespace: "ns", Name: "n<1>", Kind: "k", Tier: TierDurable, Payload: []byte("a")})
		if err != nil {
			return err
		}
		oid = m.OID
		sp := tx.Savepoint()
		if _, err := tx.Write(oid, m.Version, WriteSpec{Payload: []byte("dropped")}); err != nil {
			return err
		}
		tx.RollbackTo(sp)
		if _, err := tx.Write(oid, m.Version, WriteSpec{Payload: []byte("b")}); err != nil {
			return err
		}
		for _, e := range tx.events {
			if e.Data != nil || e.object == nil {
				t.Errorf("event %d (%s) holds %q before its batch is built", e.Seq, e.Kind, e.Data)
			}
		}
		return nil
	})
	got := logLines(t, s)
	data := func(version int) string {
		b, err := json.Marshal(ObjectEvent{OID: oid, Namespace: "ns", Name: "n<1>", Kind: "k", Version: uint64(version)})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	want := []string{"1 " + EventObjectCreated + " " + data(1), "2 " + EventObjectWritten + " " + data(2)}
	if !slices.Equal(got, want) {
		t.Fatalf("the log holds %q, want %q", got, want)
	}
}

// TestEventsEncodedWhenTheBatchIsBuilt checks AppendEventFunc: the data is
// written by the encoder, run once after the transaction's function
// returns and with the write lock let go, in its place in the log among
// events appended as they are; a rollback drops it unrun; a nil encoder is
// refused with nothing staged; an encoder's error fails the commit and the
// store.
func TestEventsEncodedWhenTheBatchIsBuilt(t *testing.T) {
	s := openTest(t, t.TempDir(), newFakeClock())
	defer closeTest(t, s)
	var returned bool
	runs := 0
	encode := func(n int) EventEncoder {
		return EventEncoderFunc(func(dst []byte) ([]byte, error) {
			runs++
			if !returned {
				t.Error("an event was encoded before the transaction's function returned")
			}
			if !s.writeMu.TryLock() {
				t.Error("an event was encoded under the write lock")
			} else {
				s.writeMu.Unlock()
			}
			return fmt.Appendf(dst, `{"n":%d}`, n), nil
		})
	}
	mustUpdate(t, s, func(tx *Txn) error {
		if _, err := tx.AppendEvent("now", map[string]int{"n": 1}); err != nil {
			return err
		}
		if _, err := tx.AppendEventFunc("later", encode(2)); err != nil {
			return err
		}
		sp := tx.Savepoint()
		if _, err := tx.AppendEventFunc("dropped", encode(99)); err != nil {
			return err
		}
		tx.RollbackTo(sp)
		if _, err := tx.AppendEventFunc("", encode(0)); !errors.Is(err, ErrInvalid) {
			t.Errorf("an event without a kind: %v", err)
		}
		if _, err := tx.AppendEventFunc("nil", nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("a nil encoder: %v", err)
		}
		if _, err := tx.AppendEventFunc("nil", EventEncoderFunc(nil)); !errors.Is(err, ErrInvalid) {
			t.Errorf("a nil EventEncoderFunc: %v", err)
		}
		if _, err := tx.AppendEvent("now", map[string]int{"n": 3}); err != nil {
			return err
		}
		returned = true
		return nil
	})
	if runs != 1 {
		t.Fatalf("the encoders ran %d times, want once (the rolled-back one not at all)", runs)
	}
	got := logLines(t, s)
	if want := []string{`1 now {"n":1}`, `2 later {"n":2}`, `3 now {"n":3}`}; !slices.Equal(got, want) {
		t.Fatalf("the log holds %q, want %q", got, want)
	}

	returned = false
	err := s.Update(func(tx *Txn) error {
		_, err := tx.AppendEventFunc("broken", EventEncoderFunc(func([]byte) ([]byte, error) { return nil, errors.New("no encoding") }))
		return err
	})
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "no encoding") {
		t.Fatalf("a failing encoder: %v, want the store failed by its error", err)
	}
	if err := s.Update(func(tx *Txn) error { return tx.Set([]byte("k"), []byte("v")) }); !errors.Is(err, ErrFailed) {
		t.Fatalf("an update after a failed encoding: %v, want ErrFailed", err)
	}
}

// TestEventEncodedLaterMustBeJSON checks that a store opened with
// LIBOS_CHECK_CACHES=1 keeps an encoder's JSON as given (no escaping
// redone), and fails the commit of an event whose encoder wrote what is not
// JSON, writing none of it.
func TestEventEncodedLaterMustBeJSON(t *testing.T) {
	t.Setenv("LIBOS_CHECK_CACHES", "1")
	s := openTest(t, t.TempDir(), newFakeClock())
	defer closeTest(t, s)
	mustUpdate(t, s, func(tx *Txn) error {
		_, err := tx.AppendEventFunc("given", EventEncoderFunc(func(dst []byte) ([]byte, error) { return append(dst, `{"a":"<b>"}`...), nil }))
		return err
	})
	err := s.Update(func(tx *Txn) error {
		if err := tx.Set([]byte("k"), []byte("v")); err != nil {
			return err
		}
		_, err := tx.AppendEventFunc("bad", EventEncoderFunc(func(dst []byte) ([]byte, error) { return append(dst, `{"n":`...), nil }))
		return err
	})
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "must be valid JSON") {
		t.Fatalf("an event encoded as %q: %v, want the commit failed", `{"n":`, err)
	}
	if evs, err := s.Events(0, 0); err != nil || len(evs) != 1 || evs[0].Kind != "given" || string(evs[0].Data) != `{"a":"<b>"}` {
		t.Fatalf("the log holds %+v (%v), want only the first event, its data as given", evs, err)
	}
	if err := s.View(func(tx *Txn) error {
		if _, err := tx.Get([]byte("k")); !errors.Is(err, ErrNotFound) {
			t.Errorf("the failed commit's key: %v, want not found", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestEventEncoderPanicFailsTheStore checks that an encoder that panics
// fails the commit and the store, as an encoder's error does, rather than
// stopping the store with the batch's turn held: the next Update returns.
func TestEventEncoderPanicFailsTheStore(t *testing.T) {
	s := openTest(t, t.TempDir(), newFakeClock())
	defer closeTest(t, s)
	err := s.Update(func(tx *Txn) error {
		_, err := tx.AppendEventFunc("boom", EventEncoderFunc(func([]byte) ([]byte, error) { panic("boom") }))
		return err
	})
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "panic: boom") {
		t.Fatalf("a panicking encoder: %v, want the store failed by it", err)
	}
	next := make(chan error, 1)
	go func() { next <- s.Update(func(tx *Txn) error { return tx.Set([]byte("k"), []byte("v")) }) }()
	select {
	case err := <-next:
		if !errors.Is(err, ErrFailed) {
			t.Fatalf("the next update: %v, want ErrFailed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the next update did not return")
	}
}

// TestEventEncoderMustAppendToDst checks that an encoder that replaces dst
// instead of appending to it (its own buffer, or nothing) fails the commit
// and the store with an error that says so, rather than storing an event
// without its header or panicking.
func TestEventEncoderMustAppendToDst(t *testing.T) {
	for name, encode := range map[string]EventEncoderFunc{
		"own buffer": func([]byte) ([]byte, error) { return []byte(`{"a":1}`), nil },
		"nothing":    func([]byte) ([]byte, error) { return nil, nil },
		"cut dst":    func(dst []byte) ([]byte, error) { return append(dst[:1], `{}`...), nil },
	} {
		t.Run(name, func(t *testing.T) {
			s := openTest(t, t.TempDir(), newFakeClock())
			defer closeTest(t, s)
			err := s.Update(func(tx *Txn) error {
				_, err := tx.AppendEventFunc("odd", encode)
				return err
			})
			if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "must append its data to dst") {
				t.Fatalf("an encoder that replaced dst: %v, want the store failed, saying so", err)
			}
		})
	}
}
