package objects

import (
	"encoding/json"
	"errors"
	"testing"
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
